#include "xdl_ec/parity_applier.h"

#include <stdexcept>
#include <utility>

namespace xdl_ec {

ParityApplier::ParityApplier(ApplyFn apply, size_t max_pending)
    : apply_(std::move(apply)), max_pending_(max_pending == 0 ? 1 : max_pending) {
  if (!apply_) throw std::invalid_argument("ParityApplier: apply function must not be empty");
  thread_ = std::thread([this] { Run(); });
}

ParityApplier::~ParityApplier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  thread_.join();
}

void ParityApplier::Submit(std::vector<ParityUpdate>* batch) {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return queue_.size() < max_pending_; });
  queue_.push_back(std::move(*batch));
  ++submitted_;
  if (!spare_.empty()) {
    *batch = std::move(spare_.back());
    spare_.pop_back();
  } else {
    batch->clear();
  }
  lock.unlock();
  work_.notify_one();
}

void ParityApplier::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = submitted_;
  done_.wait(lock, [&] { return applied_ >= target; });
  if (!error_.empty()) {
    std::string error = std::move(error_);
    error_.clear();
    throw std::runtime_error("ParityApplier: a background parity update failed: " + error);
  }
}

void ParityApplier::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing pending
    std::vector<ParityUpdate> batch = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::string error;
    try {
      for (const ParityUpdate& u : batch)
        if (!u.empty()) apply_(u);
    } catch (const std::exception& e) {
      error = e.what();
    }
    for (ParityUpdate& u : batch) u.clear();
    lock.lock();
    if (!error.empty() && error_.empty()) error_ = std::move(error);
    spare_.push_back(std::move(batch));
    ++applied_;
    done_.notify_all();
  }
}

}  // namespace xdl_ec

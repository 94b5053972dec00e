#include "xdl_ec/parity_applier.h"

#include <stdexcept>
#include <utility>

namespace xdl_ec {

ParityApplier::ParityApplier(ApplyFn apply, size_t max_pending) : ParityApplier(std::move(apply), nullptr, max_pending) {}

ParityApplier::ParityApplier(ApplyFn apply, ApplyDeltasFn apply_deltas, size_t max_pending)
    : apply_(std::move(apply)), apply_deltas_(std::move(apply_deltas)), max_pending_(max_pending == 0 ? 1 : max_pending) {
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

void ParityApplier::Enqueue(Job job, std::unique_lock<std::mutex>& lock) {
  queue_.push_back(std::move(job));
  ++submitted_;
  lock.unlock();
  work_.notify_one();
}

void ParityApplier::Submit(std::vector<ParityUpdate>* batch) {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return queue_.size() < max_pending_; });
  Job job;
  job.updates = std::move(*batch);
  if (!spare_.empty()) {
    *batch = std::move(spare_.back());
    spare_.pop_back();
  } else {
    batch->clear();
  }
  Enqueue(std::move(job), lock);
}

void ParityApplier::SubmitDeltas(int source, DeltaBatch* deltas) {
  if (!apply_deltas_)
    throw std::invalid_argument("ParityApplier::SubmitDeltas: this applier was built without an apply_deltas "
                                "function; pass one to the constructor or Submit routed updates");
  if (source < 0) throw std::invalid_argument("ParityApplier::SubmitDeltas: source must be >= 0, got " +
                                              std::to_string(source));
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return queue_.size() < max_pending_; });
  Job job;
  job.source = source;
  job.deltas = std::move(*deltas);
  if (!spare_deltas_.empty()) {
    *deltas = std::move(spare_deltas_.back());
    spare_deltas_.pop_back();
  } else {
    *deltas = DeltaBatch();
  }
  Enqueue(std::move(job), lock);
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
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::string error;
    try {
      if (job.source >= 0) {
        if (job.deltas.size() != 0) apply_deltas_(job.source, job.deltas);
      } else {
        for (const ParityUpdate& u : job.updates)
          if (!u.empty()) apply_(u);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    for (ParityUpdate& u : job.updates) u.clear();
    job.deltas.clear();
    lock.lock();
    if (!error.empty() && error_.empty()) error_ = std::move(error);
    if (job.source >= 0) {
      spare_deltas_.push_back(std::move(job.deltas));
    } else {
      spare_.push_back(std::move(job.updates));
    }
    ++applied_;
    done_.notify_all();
  }
}

}  // namespace xdl_ec

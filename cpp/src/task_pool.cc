#include "xdl_ec/task_pool.h"

#include <pthread.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace xdl_ec {
namespace {

constexpr uint64_t kIndexMask = 0xffffffffu;
// The caller waits awake this long for the last parts before sleeping. The threads never spin: awake between runs
// they took cores from TF's own pool as its step began (bench_step: 1.02x of one thread with a 50 us spin, 1.12x
// without, at batch 2048).
constexpr int kCallerSpinMicros = 100;

size_t ThreadsWanted() {
  if (const char* env = std::getenv("XDL_EC_CORE_THREADS")) {
    char* end = nullptr;
    const long cores = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && cores >= 1 && cores <= 256) return static_cast<size_t>(cores - 1);
    // A bad value is not worth failing a job over: the default below, as if unset.
  }
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 1 ? cores - 1 : 0;
}

}  // namespace

namespace {

// The process's pool, made on first use. A forked child has none of the parent's threads: its copy is dropped
// (leaked) at the fork and the child makes its own. Leaked at exit too: joining could wait on a thread the
// runtime already stopped.
std::atomic<TaskPool*> g_shared{nullptr};

void DropInChild() { g_shared.store(nullptr, std::memory_order_release); }

}  // namespace

TaskPool& TaskPool::Shared() {
  TaskPool* pool = g_shared.load(std::memory_order_acquire);  // every pull and push asks: no lock, no syscall
  if (pool != nullptr) return *pool;
  static std::mutex made;
  std::lock_guard<std::mutex> lock(made);
  static const int registered = pthread_atfork(nullptr, nullptr, DropInChild);
  (void)registered;
  pool = g_shared.load(std::memory_order_acquire);
  if (pool == nullptr) {
    pool = new TaskPool(ThreadsWanted());
    g_shared.store(pool, std::memory_order_release);
  }
  return *pool;
}

TaskPool::TaskPool(size_t threads) {
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

bool TaskPool::Claim(uint64_t generation, size_t* index) {
  uint64_t v = next_.load(std::memory_order_acquire);
  for (;;) {
    if ((v >> 32) != generation || (v & kIndexMask) >= parts_.load(std::memory_order_relaxed)) return false;
    if (next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) {
      *index = static_cast<size_t>(v & kIndexMask);
      return true;
    }
  }
}

void TaskPool::Finish(const std::exception_ptr& error) {
  if (error) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = error;
  }
  if (unfinished_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard<std::mutex> lock(mutex_);  // the caller checks under it before it sleeps
    done_.notify_one();
  }
}

void TaskPool::Work(uint64_t generation) {
  size_t i;
  while (Claim(generation, &i)) {
    std::exception_ptr error;
    try {
      (*part_.load(std::memory_order_relaxed))(i);
    } catch (...) {
      error = std::current_exception();
    }
    Finish(error);
  }
}

void TaskPool::Loop() {
  uint32_t seen = 0;
  for (;;) {
    uint32_t generation;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      generation = seen = generation_;
    }
    Work(generation);
  }
}

void TaskPool::Run(size_t parts, const std::function<void(size_t)>& part) {
  if (parts == 0) return;
  if (parts >= kIndexMask)
    throw std::invalid_argument("TaskPool::Run: " + std::to_string(parts) + " parts; at most 2^32 - 2");
  bool idle = false;
  if (threads_.empty() || parts == 1 || !busy_.compare_exchange_strong(idle, true, std::memory_order_acquire)) {
    for (size_t i = 0; i < parts; ++i) part(i);  // alone, or the pool is another caller's now
    return;
  }
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (++generation_ == 0) generation_ = 1;
    generation = generation_;
    // First close the old run's word (no claim can succeed on it, nor on the new one before its parts
    // are set), then set the run, then open it.
    next_.store((generation << 32) | kIndexMask, std::memory_order_seq_cst);
    parts_.store(parts, std::memory_order_relaxed);
    part_.store(&part, std::memory_order_relaxed);
    error_ = nullptr;
    unfinished_.store(parts, std::memory_order_relaxed);
    next_.store(generation << 32, std::memory_order_release);
  }
  wake_.notify_all();
  Work(generation);
  // The last parts end within a part's time (tens of microseconds): wait for them awake before sleeping,
  // whose wake-up can cost more than the whole batch.
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kCallerSpinMicros);
  while (unfinished_.load(std::memory_order_acquire) != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return unfinished_.load(std::memory_order_acquire) == 0; });
    part_.store(nullptr, std::memory_order_relaxed);
    error = error_;
    error_ = nullptr;
  }
  busy_.store(false, std::memory_order_release);
  if (error) std::rethrow_exception(error);
}

}  // namespace xdl_ec

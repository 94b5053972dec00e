#include "step_counter.h"

#include <memory>
#include <mutex>
#include <unordered_map>

namespace xdl_ec::tf_ops {
namespace {

struct Counter {
  std::mutex mutex;
  int64_t latest = 0;
};

struct Counters {
  std::mutex mutex;
  std::unordered_map<int64_t, std::unique_ptr<Counter>> by_handle;
};

Counters& TheCounters() {
  static Counters* counters = new Counters();  // never destroyed: kernels may run at interpreter exit
  return *counters;
}

Counter& CounterOf(int64_t handle) {
  Counters& counters = TheCounters();
  std::lock_guard<std::mutex> lock(counters.mutex);
  std::unique_ptr<Counter>& counter = counters.by_handle[handle];
  if (!counter) counter = std::make_unique<Counter>();
  return *counter;
}

}  // namespace

int64_t StepCounter::Apply(int64_t handle, int64_t requested, const std::function<void(int64_t)>& apply) {
  Counter& counter = CounterOf(handle);
  // The shard serialises pushes anyway, so holding this lock across the push costs no parallelism.
  std::lock_guard<std::mutex> lock(counter.mutex);
  const int64_t step = requested >= 1 ? requested : counter.latest + 1;
  apply(step);
  counter.latest = step;
  return step;
}

int64_t StepCounter::Latest(int64_t handle) {
  Counter& counter = CounterOf(handle);
  std::lock_guard<std::mutex> lock(counter.mutex);
  return counter.latest;
}

void StepCounter::Restore(int64_t handle, int64_t latest) {
  Counter& counter = CounterOf(handle);
  std::lock_guard<std::mutex> lock(counter.mutex);
  counter.latest = latest;
}

}  // namespace xdl_ec::tf_ops

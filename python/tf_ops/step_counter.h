// The optimizer step used when the caller passes step = 0 ("auto"): one counter per shard handle,
// kept in this library and advanced by every successful gradient scatter into that shard, so Adam's
// bias correction sees 1, 2, 3, ... without any TF resource or Python state. Handles are never
// reused by ShardRegistry, so a counter never outlives the meaning of its handle.
#pragma once

#include <cstdint>
#include <functional>

namespace xdl_ec::tf_ops {

class StepCounter {
 public:
  // Calls apply(step) with step = `requested` when >= 1, else the latest step of `handle` plus one,
  // and records it as the latest only when apply returns (a push that throws consumes no step).
  // Scatters into one handle are serialised, so two of them never share an auto step.
  static int64_t Apply(int64_t handle, int64_t requested, const std::function<void(int64_t)>& apply);
  // The latest step of `handle` (0 before its first scatter): what a checkpoint of the table saves.
  static int64_t Latest(int64_t handle);
  // Makes `latest` the latest step of `handle`, so a restored table's next automatic step is latest + 1 and
  // Adam's bias correction continues where the saved run stopped. Waits for a scatter in flight on `handle`.
  static void Restore(int64_t handle, int64_t latest);
};

}  // namespace xdl_ec::tf_ops

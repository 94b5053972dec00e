#include "xdl_ec/row_policy.h"

#include <cmath>
#include <stdexcept>

namespace xdl_ec {

EvictPolicy ParseEvictPolicy(const std::string& name, const char* field) {
  if (name == "lfu") return EvictPolicy::kLfu;
  if (name == "lru") return EvictPolicy::kLru;
  throw std::invalid_argument(std::string(field) + " must be \"lfu\" or \"lru\", got \"" + name + "\"");
}

int64_t EpochAfterEvictions(int64_t epoch, uint64_t generations) {
  if (generations == 0) return epoch;
  constexpr uint64_t kMask = (uint64_t{1} << 62) - 1, kStride = 0x9E3779B97F4A7C15ull;  // odd: a full cycle
  const uint64_t moved = (static_cast<uint64_t>(epoch) - 1 + generations * kStride) & kMask;
  return static_cast<int64_t>(moved + 1);
}

const char* EvictPolicyName(EvictPolicy policy) { return policy == EvictPolicy::kLru ? "lru" : "lfu"; }

AdmitCounter ParseAdmitCounter(const std::string& name, const char* field) {
  if (name == "exact") return AdmitCounter::kExact;
  if (name == "sketch") return AdmitCounter::kSketch;
  throw std::invalid_argument(std::string(field) + " must be \"exact\" or \"sketch\", got \"" + name + "\"");
}

const char* AdmitCounterName(AdmitCounter counter) { return counter == AdmitCounter::kSketch ? "sketch" : "exact"; }

void RowPolicyConfig::Validate(uint32_t block_slots) const {
  if (admit_min_count < 1) {
    throw std::invalid_argument("row_policy.admit_min_count must be >= 1 (1: no admission), got " +
                                std::to_string(admit_min_count));
  }
  if (ttl_steps && *ttl_steps < 1) {
    throw std::invalid_argument("row_policy.ttl_steps must be >= 1 (steps a row lives without an update), got " +
                                std::to_string(*ttl_steps) + "; leave it unset for no TTL");
  }
  if (min_l2 && !(std::isfinite(*min_l2) && *min_l2 > 0)) {
    throw std::invalid_argument("row_policy.min_l2 must be finite and > 0, got " + std::to_string(*min_l2) +
                                "; leave it unset for no L2 eviction");
  }
  if (max_rows && *max_rows < static_cast<int64_t>(block_slots)) {
    throw std::invalid_argument("row_policy.max_rows must be at least one block (block_slots = " +
                                std::to_string(block_slots) + ") per shard, got " + std::to_string(*max_rows));
  }
  if (evict_every_steps < 0) {
    throw std::invalid_argument("row_policy.evict_every_steps must be >= 0 (0: passes only when asked), got " +
                                std::to_string(evict_every_steps));
  }
  if (admit_counter != AdmitCounter::kExact && admit_counter != AdmitCounter::kSketch) {
    throw std::invalid_argument("row_policy.admit_counter must be exact or sketch");
  }
  if (admit_counter == AdmitCounter::kSketch) {
    if (admit_min_count < 2 || admit_min_count > kSketchMaxCount) {
      throw std::invalid_argument("row_policy.admit_min_count must be in [2, " + std::to_string(kSketchMaxCount) +
                                  "] with the sketch counter (its cells are 16-bit), got " +
                                  std::to_string(admit_min_count));
    }
    if (sketch_width < 16 || sketch_width > (int64_t{1} << 22)) {
      throw std::invalid_argument("row_policy.sketch_width must be in [16, 4194304] cells, got " +
                                  std::to_string(sketch_width));
    }
    if (sketch_depth < 1 || sketch_depth > 8) {
      throw std::invalid_argument("row_policy.sketch_depth must be in [1, 8] rows, got " +
                                  std::to_string(sketch_depth));
    }
    if (sketch_decay_every_steps < 0) {
      throw std::invalid_argument("row_policy.sketch_decay_every_steps must be >= 0 (0: never halve), got " +
                                  std::to_string(sketch_decay_every_steps));
    }
  }
  if (policy != EvictPolicy::kLfu && policy != EvictPolicy::kLru) {
    throw std::invalid_argument("row_policy.policy must be lfu or lru");
  }
}

}  // namespace xdl_ec

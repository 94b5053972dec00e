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
  if (policy != EvictPolicy::kLfu && policy != EvictPolicy::kLru) {
    throw std::invalid_argument("row_policy.policy must be lfu or lru");
  }
}

}  // namespace xdl_ec

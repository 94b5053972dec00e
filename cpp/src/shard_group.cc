#include "xdl_ec/shard_group.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace xdl_ec {

ShardGroup::ShardGroup(std::vector<EmbeddingShard*> shards) : shards_(std::move(shards)) {
  if (shards_.empty()) throw std::invalid_argument("ShardGroup: needs at least one shard");
  for (size_t t = 0; t < shards_.size(); ++t) {
    if (shards_[t] == nullptr) throw std::invalid_argument("ShardGroup: shard " + std::to_string(t) + " is null");
  }
  dim_ = shards_[0]->dim();
  for (size_t t = 1; t < shards_.size(); ++t) {
    if (shards_[t]->dim() != dim_) {
      throw std::invalid_argument("ShardGroup: shard " + std::to_string(t) + " has dim " +
                                  std::to_string(shards_[t]->dim()) + " where shard 0 has " + std::to_string(dim_) +
                                  "; a group holds tables of one dim");
    }
  }
}

void ShardGroup::CheckOffsets(const int64_t* offsets, size_t n) const {
  if (offsets[0] != 0)
    throw std::invalid_argument("ShardGroup: offsets[0] must be 0, got " + std::to_string(offsets[0]));
  for (size_t t = 0; t < shards_.size(); ++t) {
    if (offsets[t + 1] < offsets[t]) {
      throw std::invalid_argument("ShardGroup: offsets must be non-decreasing, offsets[" + std::to_string(t + 1) +
                                  "] = " + std::to_string(offsets[t + 1]) + " < " + std::to_string(offsets[t]));
    }
  }
  if (static_cast<size_t>(offsets[shards_.size()]) != n) {
    throw std::invalid_argument("ShardGroup: offsets end at " + std::to_string(offsets[shards_.size()]) + ", not at " +
                                std::to_string(n) + " keys");
  }
}

void ShardGroup::Pull(const int64_t* keys, const int64_t* offsets, float* out) const {
  for (size_t t = 0; t < shards_.size(); ++t) {
    const auto begin = static_cast<size_t>(offsets[t]);
    const auto count = static_cast<size_t>(offsets[t + 1]) - begin;
    if (count != 0) shards_[t]->Pull(keys + begin, count, out + begin * static_cast<size_t>(dim_));
  }
}

void ShardGroup::Push(const int64_t* keys, const float* grads, const int64_t* offsets, int64_t step,
                      const int64_t* ttl_before) const {
  // each shard validates its own part, but a bad part found after others were applied would leave the group half
  // pushed: the same checks first, over every part
  if (step < 1) throw std::invalid_argument("ShardGroup::Push: step must be >= 1, got " + std::to_string(step));
  const auto total = static_cast<size_t>(offsets[shards_.size()]) * static_cast<size_t>(dim_);
  for (size_t i = 0; i < total; ++i) {
    if (!std::isfinite(grads[i])) {
      throw std::invalid_argument("ShardGroup::Push: gradient " + std::to_string(i) +
                                  " is not finite; nothing was applied");
    }
  }
  for (size_t t = 0; t < shards_.size(); ++t) {
    const int64_t cutoff = ttl_before == nullptr ? 0 : ttl_before[t];
    if (cutoff < 0 || cutoff > step) {
      throw std::invalid_argument("ShardGroup::Push: ttl_before[" + std::to_string(t) +
                                  "] = " + std::to_string(cutoff) + " is outside [0, step]; nothing was applied");
    }
  }
  for (size_t t = 0; t < shards_.size(); ++t) {
    const auto begin = static_cast<size_t>(offsets[t]);
    const auto count = static_cast<size_t>(offsets[t + 1]) - begin;
    if (count == 0) continue;
    shards_[t]->Push(keys + begin, grads + begin * static_cast<size_t>(dim_), count, step, nullptr, nullptr,
                     ttl_before == nullptr ? 0 : ttl_before[t]);
  }
}

}  // namespace xdl_ec

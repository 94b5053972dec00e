// ShardGroup: one pull and one push over the shards of several tables of one dim (a table group), each table's
// keys a part of one array. A wide model's step pulls and pushes tens to hundreds of tables: one call for all of
// them keeps the step's cost in the ids it moves, not in a per-table call. Each shard applies its own part with its
// own optimizer, rules and seed, exactly as a call of its own would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "xdl_ec/embedding_shard.h"

namespace xdl_ec {

class ShardGroup {
 public:
  // `shards` (not owned, alive while the group is used) must share one dim; std::invalid_argument otherwise.
  explicit ShardGroup(std::vector<EmbeddingShard*> shards);

  size_t size() const { return shards_.size(); }
  int dim() const { return dim_; }

  // Shard t's keys are keys[offsets[t]..offsets[t + 1]) (size() + 1 non-decreasing offsets, offsets[0] = 0): writes
  // their rows to out[offsets[size()] * dim()], as EmbeddingShard::Pull does for each part.
  void Pull(const int64_t* keys, const int64_t* offsets, float* out) const;
  // Pushes each part's grads (rows of `grads` at the same positions) at optimizer `step`, ttl_before[t] its
  // eviction cutoff (nullptr: none), as EmbeddingShard::Push does. Every part is checked (finite gradients, step)
  // before any is applied, so a bad push changes no table.
  void Push(const int64_t* keys, const float* grads, const int64_t* offsets, int64_t step,
            const int64_t* ttl_before) const;

  // std::invalid_argument unless offsets are size() + 1 non-decreasing values from 0 to `n`.
  void CheckOffsets(const int64_t* offsets, size_t n) const;

 private:
  std::vector<EmbeddingShard*> shards_;
  int dim_ = 0;
};

}  // namespace xdl_ec

// Deterministic row initialisers. A row's initial value depends on (table seed, key) alone, never on
// the shard, the slot or the insertion order, so exact replay and resharding see the same rows.
#pragma once

#include <cstdint>
#include <string>

namespace xdl_ec {

enum class InitializerKind { kZeros, kConstant, kUniform, kTruncatedNormal, kNormal };

struct InitializerConfig {
  InitializerKind kind = InitializerKind::kTruncatedNormal;
  float value = 0.0f;                     // kConstant
  float minval = -0.05f, maxval = 0.05f;  // kUniform: [minval, maxval)
  float mean = 0.0f, stddev = 0.05f;      // kTruncatedNormal: limited to 2 stddev, as TF does (by
                                          // inversion of the normal CDF, no redraws); kNormal: untruncated

  // Throws std::invalid_argument naming the bad field (e.g. stddev <= 0, minval >= maxval).
  void Validate() const;
};

// Fills out[0..dim) with the initial row of `key` for a table seeded with `seed`.
void InitializeRow(const InitializerConfig& config, uint64_t seed, int64_t key, float* out, int dim);

}  // namespace xdl_ec

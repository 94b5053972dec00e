// The forward and backward arithmetic of a lookup over already-deduplicated rows, shared by
// XdlEcLookup / XdlEcScatterGradient (rows pulled from a local shard) and XdlEcGather /
// XdlEcGatherGradient (rows fed by a parameter-server client), so both paths perform the SAME float
// operations in the SAME order: a worker's gradients are bit-identical to the single-process trainer's.
#pragma once

#include <cstdint>
#include <cstring>

#include "id_segments.h"

namespace xdl_ec::tf_ops {

// out = rows[inverse] ([n, dim]) for combiner 'none', else the per-segment pooled rows ([batch, dim]):
// summed in position order, then divided by the combiner's divisor.
inline void GatherRows(const IdSegments& segments, Combiner combiner, const float* rows, const int32_t* inverse,
                       int64_t n, int64_t dim, float* out) {
  const size_t row_bytes = sizeof(float) * dim;
  if (combiner == Combiner::kNone) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * dim, rows + static_cast<size_t>(inverse[i]) * dim, row_bytes);
    return;
  }
  std::memset(out, 0, row_bytes * segments.batch());
  for (int64_t b = 0; b < segments.batch(); ++b) {
    float* acc = out + b * dim;
    const int64_t begin = segments.begin(b), end = segments.end(b);
    for (int64_t p = begin; p < end; ++p) {
      const float* row = rows + static_cast<size_t>(inverse[p]) * dim;
      for (int64_t d = 0; d < dim; ++d) acc[d] += row[d];
    }
    const float divisor = IdSegments::Divisor(combiner, end - begin);
    if (divisor != 1.0f) {
      for (int64_t d = 0; d < dim; ++d) acc[d] /= divisor;
    }
  }
}

// summed[num_unique, dim] (zero-filled by the caller) += the gradient of GatherRows' output per unique
// row, in position order (deterministic, and the order TF's segment sums use); each position gets its
// segment's gradient divided as the forward divided.
inline void SumGradientPerUnique(const IdSegments& segments, Combiner combiner, const float* grad,
                                 const int32_t* inverse, int64_t dim, float* summed) {
  for (int64_t b = 0; b < segments.batch(); ++b) {
    const int64_t begin = segments.begin(b), end = segments.end(b);
    const float divisor = IdSegments::Divisor(combiner, end - begin);
    for (int64_t p = begin; p < end; ++p) {
      const float* g = grad + (combiner == Combiner::kNone ? p : b) * dim;
      float* acc = summed + static_cast<size_t>(inverse[p]) * dim;
      if (divisor == 1.0f) {
        for (int64_t d = 0; d < dim; ++d) acc[d] += g[d];
      } else {
        for (int64_t d = 0; d < dim; ++d) acc[d] += g[d] / divisor;
      }
    }
  }
}

}  // namespace xdl_ec::tf_ops

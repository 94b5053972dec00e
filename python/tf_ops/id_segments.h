// How the ids of one lookup are grouped into output rows ("segments"), shared by the lookup kernel
// and its gradient kernel so both read the same layout with the same checks.
//
//   dense   ids [batch, n]: segment b holds positions [b*n, (b+1)*n); row_splits must be empty.
//   ragged  ids [total] with row_splits [batch + 1] (what tf.RaggedTensor and a row-sorted
//           tf.SparseTensor reduce to): segment b holds positions [row_splits[b], row_splits[b+1]).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "op_error.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace xdl_ec::tf_ops {

enum class Combiner { kNone, kSum, kMean, kSqrtn };

// Parses the op's `combiner` attr (the op registration restricts its values).
inline Combiner ParseCombiner(const std::string& name) {
  if (name == "sum") return Combiner::kSum;
  if (name == "mean") return Combiner::kMean;
  if (name == "sqrtn") return Combiner::kSqrtn;
  return Combiner::kNone;
}

class IdSegments {
 public:
  // Validates ids/row_splits; on error sets the context status and returns false.
  bool Parse(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& ids, const tensorflow::Tensor& row_splits,
             Combiner combiner) {
    if (!row_splits_is_vector(ctx, row_splits)) return false;
    if (ids.dims() == 2) {
      if (row_splits.NumElements() != 0) {
        ctx->CtxFailure(InvalidArgument(
            "XdlEcLookup: ids has rank 2 (dense [batch, n]) so row_splits must be empty, got ",
            row_splits.NumElements(), " elements; pass either dense ids or ragged values + row_splits"));
        return false;
      }
      ragged_ = false;
      batch_ = ids.dim_size(0);
      width_ = ids.dim_size(1);
    } else if (ids.dims() == 1) {
      if (combiner == Combiner::kNone) {
        ctx->CtxFailure(InvalidArgument(
            "XdlEcLookup: combiner 'none' needs dense ids [batch, n]; ragged/sparse ids (rank 1 values + "
            "row_splits) need a combiner among 'sum', 'mean', 'sqrtn'"));
        return false;
      }
      if (row_splits.NumElements() < 1) {
        ctx->CtxFailure(InvalidArgument(
            "XdlEcLookup: ragged ids need row_splits of length batch + 1 (>= 1), got an empty row_splits"));
        return false;
      }
      ragged_ = true;
      splits_ = row_splits.flat<int64_t>().data();
      batch_ = row_splits.NumElements() - 1;
      const int64_t total = ids.NumElements();
      if (splits_[0] != 0) {
        ctx->CtxFailure(InvalidArgument("XdlEcLookup: row_splits[0] must be 0, got ", splits_[0]));
        return false;
      }
      for (int64_t b = 0; b < batch_; ++b) {
        if (splits_[b + 1] < splits_[b]) {
          ctx->CtxFailure(InvalidArgument("XdlEcLookup: row_splits must be non-decreasing, but row_splits[", b + 1,
                                          "] = ", splits_[b + 1], " < row_splits[", b, "] = ", splits_[b]));
          return false;
        }
      }
      if (splits_[batch_] != total) {
        ctx->CtxFailure(InvalidArgument("XdlEcLookup: row_splits[-1] = ", splits_[batch_],
                                        " must equal the number of ids (", total, ")"));
        return false;
      }
    } else {
      ctx->CtxFailure(InvalidArgument(
          "XdlEcLookup: ids must be int64 [batch, n] (dense) or rank-1 values with row_splits (ragged), got "
          "shape ",
          ids.shape().DebugString()));
      return false;
    }
    if (ids.NumElements() > INT32_MAX) {
      ctx->CtxFailure(InvalidArgument("XdlEcLookup: at most 2^31 - 1 ids per lookup, got ", ids.NumElements()));
      return false;
    }
    return true;
  }

  // Dense ids [batch, width] known to be valid (a table group's feature, laid out by the group's op).
  static IdSegments Dense(int64_t batch, int64_t width) {
    IdSegments segments;
    segments.batch_ = batch;
    segments.width_ = width;
    return segments;
  }

  int64_t batch() const { return batch_; }
  int64_t width() const { return width_; }  // n of dense ids
  bool ragged() const { return ragged_; }
  int64_t begin(int64_t b) const { return ragged_ ? splits_[b] : b * width_; }
  int64_t end(int64_t b) const { return ragged_ ? splits_[b + 1] : (b + 1) * width_; }

  // What a row's sum is divided by: 1, count or sqrt(count), as tf.nn.embedding_lookup_sparse divides
  // (a division, not a multiplication by the inverse, so results round the same way).
  static float Divisor(Combiner combiner, int64_t count) {
    if (count == 0) return 1.0f;  // an empty row pools to zeros
    if (combiner == Combiner::kMean) return static_cast<float>(count);
    if (combiner == Combiner::kSqrtn) return std::sqrt(static_cast<float>(count));
    return 1.0f;
  }

 private:
  static bool row_splits_is_vector(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& row_splits) {
    if (row_splits.dims() == 1) return true;
    ctx->CtxFailure(
        InvalidArgument("XdlEcLookup: row_splits must be rank 1, got shape ", row_splits.shape().DebugString()));
    return false;
  }

  bool ragged_ = false;
  int64_t batch_ = 0;
  int64_t width_ = 0;
  const int64_t* splits_ = nullptr;
};

}  // namespace xdl_ec::tf_ops

// XdlEcGather / XdlEcGatherGradient: the lookup of XdlEcLookup over rows FED by the caller (a
// parameter-server worker pulls the batch's unique keys itself) instead of pulled from a local shard.
// The gradient returns the per-unique-row summed gradient [U, dim] for the caller to push, computed by
// the same code as XdlEcScatterGradient (row_gather.h), so both paths are bit-identical.
#include <algorithm>
#include <vector>

#include "id_segments.h"
#include "op_error.h"
#include "row_gather.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace xdl_ec::tf_ops {

using absl::Status;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

namespace {

Status GatherShape(InferenceContext* c) {
  ShapeHandle rows;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &rows));
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &unused));  // row_splits
  std::string combiner;
  TF_RETURN_IF_ERROR(c->GetAttr("combiner", &combiner));
  const DimensionHandle dim = c->Dim(rows, 1);
  const ShapeHandle inverse = c->input(1);
  ShapeHandle out;
  if (!c->RankKnown(inverse)) {
    out = combiner == "none" ? c->UnknownShape() : c->Matrix(c->UnknownDim(), dim);
  } else if (c->Rank(inverse) == 2) {
    if (combiner == "none") {
      TF_RETURN_IF_ERROR(c->Concatenate(inverse, c->Vector(dim), &out));
    } else {
      out = c->Matrix(c->Dim(inverse, 0), dim);
    }
  } else if (c->Rank(inverse) == 1 && combiner != "none") {
    DimensionHandle batch;
    TF_RETURN_IF_ERROR(c->Subtract(c->Dim(c->input(2), 0), 1, &batch));
    out = c->Matrix(batch, dim);
  } else {
    return InvalidArgument(
        "XdlEcGather: inverse must be int32 [batch, n] (any combiner) or rank-1 with "
        "row_splits (combiner 'sum', 'mean' or 'sqrtn'), got rank ",
        c->Rank(inverse));
  }
  c->set_output(0, out);
  return Status();
}

Status GatherGradientShape(InferenceContext* c) {
  ShapeHandle rows;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &rows));
  c->set_output(0, rows);
  return Status();
}

// Checks rows [U, dim] and every inverse index in [0, U); sets the context status and returns false otherwise.
bool ValidRowsAndInverse(OpKernelContext* ctx, const char* op, const Tensor& rows, const Tensor& inverse) {
  if (rows.dims() != 2) {
    ctx->CtxFailure(InvalidArgument(op, ": rows must be [num_unique, dim], got shape ", rows.shape().DebugString()));
    return false;
  }
  const int64_t num_unique = rows.dim_size(0);
  const int32_t* data = inverse.flat<int32_t>().data();
  for (int64_t p = 0; p < inverse.NumElements(); ++p) {
    if (data[p] < 0 || data[p] >= num_unique) {
      ctx->CtxFailure(InvalidArgument(op, ": inverse[", p, "] = ", data[p], " is outside [0, ", num_unique,
                                      ") (rows has ", num_unique, " rows)"));
      return false;
    }
  }
  return true;
}

TensorShape OutputShape(const Tensor& inverse, const IdSegments& segments, Combiner combiner, int64_t dim) {
  if (combiner != Combiner::kNone) return TensorShape({segments.batch(), dim});
  TensorShape shape = inverse.shape();
  shape.AddDim(dim);
  return shape;
}

}  // namespace

REGISTER_OP("XdlEcGather")
    .Input("rows: float")
    .Input("inverse: int32")
    .Input("row_splits: int64")
    .Output("embeddings: float")
    .Attr("combiner: {'none', 'sum', 'mean', 'sqrtn'}")
    .SetShapeFn(GatherShape)
    .Doc(R"doc(
Gathers (combiner 'none') or pools rows[inverse] per example, as XdlEcLookup does for pulled rows.
inverse [batch, n] with row_splits = [], or rank 1 with row_splits [batch + 1] (pooling combiners only).
)doc");

REGISTER_OP("XdlEcGatherGradient")
    .Input("grad: float")
    .Input("rows: float")
    .Input("inverse: int32")
    .Input("row_splits: int64")
    .Output("row_grads: float")
    .Attr("combiner: {'none', 'sum', 'mean', 'sqrtn'}")
    .SetShapeFn(GatherGradientShape)
    .Doc(R"doc(
The gradient of XdlEcGather with respect to rows: per unique row, the sum (in position order) of the
gradient at its positions, scaled as the combiner pooled. Same arithmetic as XdlEcScatterGradient.
)doc");

class GatherKernel : public OpKernel {
 public:
  explicit GatherKernel(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string combiner;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("combiner", &combiner));
    combiner_ = ParseCombiner(combiner);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& rows = ctx->input(0);
    const Tensor& inverse = ctx->input(1);
    IdSegments segments;
    if (!segments.Parse(ctx, inverse, ctx->input(2), combiner_)) return;
    if (!ValidRowsAndInverse(ctx, "XdlEcGather", rows, inverse)) return;
    const int64_t dim = rows.dim_size(1);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, OutputShape(inverse, segments, combiner_, dim), &out));
    GatherRows(segments, combiner_, rows.flat<float>().data(), inverse.flat<int32_t>().data(), inverse.NumElements(),
               dim, out->flat<float>().data());
  }

 private:
  Combiner combiner_ = Combiner::kNone;
};

class GatherGradientKernel : public OpKernel {
 public:
  explicit GatherGradientKernel(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string combiner;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("combiner", &combiner));
    combiner_ = ParseCombiner(combiner);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grad = ctx->input(0);
    const Tensor& rows = ctx->input(1);
    const Tensor& inverse = ctx->input(2);
    IdSegments segments;
    if (!segments.Parse(ctx, inverse, ctx->input(3), combiner_)) return;
    if (!ValidRowsAndInverse(ctx, "XdlEcGatherGradient", rows, inverse)) return;
    const int64_t dim = rows.dim_size(1);
    const TensorShape expected = OutputShape(inverse, segments, combiner_, dim);
    OP_REQUIRES(ctx, grad.shape() == expected,
                InvalidArgument("XdlEcGatherGradient: grad must have the gather output's shape ",
                                expected.DebugString(), ", got ", grad.shape().DebugString()));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, rows.shape(), &out));
    float* summed = out->flat<float>().data();
    std::fill(summed, summed + out->NumElements(), 0.0f);
    SumGradientPerUnique(segments, combiner_, grad.flat<float>().data(), inverse.flat<int32_t>().data(), dim, summed);
  }

 private:
  Combiner combiner_ = Combiner::kNone;
};

REGISTER_KERNEL_BUILDER(Name("XdlEcGather").Device(tensorflow::DEVICE_CPU), GatherKernel);
REGISTER_KERNEL_BUILDER(Name("XdlEcGatherGradient").Device(tensorflow::DEVICE_CPU), GatherGradientKernel);

}  // namespace xdl_ec::tf_ops

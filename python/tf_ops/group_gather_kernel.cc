// XdlEcGroupGather / XdlEcGroupGatherGradient: the lookup of every feature of a table group (tables of one dim,
// each serving one feature) over the group's rows in ONE op and its gradient in ONE scatter, instead of an op pair
// per feature: a wide model's step had as many as it has tables. Each feature's arithmetic is XdlEcGather's
// (row_gather.h), and the features write disjoint rows (a table serves one feature), so a grouped step's row
// gradients are bit-identical to the ungrouped step's.
//
// inverse int32 holds the features' row indices into `rows` one after another, feature i's [batch, widths[i]]
// row-major; modes[i] says what feature i gives: 'single' [batch, dim] (one id per example), 'none' [batch,
// widths[i], dim], 'sum' / 'mean' / 'sqrtn' [batch, dim] pooled.
#include <string>
#include <vector>

#include "id_segments.h"
#include "op_error.h"
#include "row_gather.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace xdl_ec::tf_ops {

using absl::Status;
using tensorflow::OpInputList;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::OpOutputList;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;

namespace {

// One feature of the group: its ids per example and what its output is.
struct GroupFeature {
  int64_t width = 1;
  bool single = false;
  Combiner combiner = Combiner::kNone;
};

Status ReadFeatures(const std::vector<int64_t>& widths, const std::vector<std::string>& modes,
                    std::vector<GroupFeature>* features) {
  if (widths.size() != modes.size() || widths.empty()) {
    return InvalidArgument("XdlEcGroupGather: widths and modes must name the same features (at least one), got ",
                           widths.size(), " widths and ", modes.size(), " modes");
  }
  features->clear();
  for (size_t i = 0; i < widths.size(); ++i) {
    GroupFeature f;
    f.width = widths[i];
    f.single = modes[i] == "single";
    if (f.width < 1 || (f.single && f.width != 1)) {
      return InvalidArgument("XdlEcGroupGather: feature ", i, " has width ", f.width, " (mode ", modes[i],
                             "); widths are >= 1, and 1 for mode 'single'");
    }
    f.combiner = ParseCombiner(f.single ? "none" : modes[i]);
    features->push_back(f);
  }
  return Status();
}

Status GroupGatherShape(InferenceContext* c) {
  std::vector<int64_t> widths;
  std::vector<std::string> modes;
  TF_RETURN_IF_ERROR(c->GetAttr("widths", &widths));
  TF_RETURN_IF_ERROR(c->GetAttr("modes", &modes));
  std::vector<GroupFeature> features;
  TF_RETURN_IF_ERROR(ReadFeatures(widths, modes, &features));
  tensorflow::shape_inference::ShapeHandle rows;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &rows));
  const DimensionHandle dim = c->Dim(rows, 1);
  for (size_t i = 0; i < features.size(); ++i) {
    const bool pooled = features[i].single || features[i].combiner != Combiner::kNone;
    c->set_output(static_cast<int>(i), pooled ? c->Matrix(c->UnknownDim(), dim)
                                              : c->MakeShape({c->UnknownDim(), c->MakeDim(features[i].width), dim}));
  }
  return Status();
}

// The examples of a batch whose features' ids fill `inverse` (n ids, sum of widths per example); false and the
// context's status set when n is no multiple of it or an index is outside the rows.
bool BatchOf(OpKernelContext* ctx, const char* op, const std::vector<GroupFeature>& features, const Tensor& rows,
             const Tensor& inverse, int64_t* batch) {
  if (rows.dims() != 2) {
    ctx->CtxFailure(InvalidArgument(op, ": rows must be [num_unique, dim], got ", rows.shape().DebugString()));
    return false;
  }
  int64_t per_example = 0;
  for (const GroupFeature& f : features) per_example += f.width;
  const int64_t n = inverse.NumElements();
  // per_example >= 1 (ReadFeatures refuses no features and widths below 1); checked again for the reader
  if (per_example < 1 || inverse.dims() != 1 || n % per_example != 0) {
    ctx->CtxFailure(InvalidArgument(op, ": inverse must be int32[batch * ", per_example, "] (the features' ids one ",
                                    "after another), got shape ", inverse.shape().DebugString()));
    return false;
  }
  const int64_t num_unique = rows.dim_size(0);
  const int32_t* data = inverse.flat<int32_t>().data();
  for (int64_t p = 0; p < n; ++p) {
    if (data[p] < 0 || data[p] >= num_unique) {
      ctx->CtxFailure(InvalidArgument(op, ": inverse[", p, "] = ", data[p], " is outside [0, ", num_unique, ")"));
      return false;
    }
  }
  *batch = n / per_example;
  return true;
}

TensorShape FeatureShape(const GroupFeature& f, int64_t batch, int64_t dim) {
  if (f.single || f.combiner != Combiner::kNone) return TensorShape({batch, dim});
  return TensorShape({batch, f.width, dim});
}

class GroupGatherBase : public OpKernel {
 public:
  explicit GroupGatherBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::vector<int64_t> widths;
    std::vector<std::string> modes;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("widths", &widths));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("modes", &modes));
    OP_REQUIRES_OK(ctx, ReadFeatures(widths, modes, &features_));
  }

 protected:
  std::vector<GroupFeature> features_;
};

}  // namespace

REGISTER_OP("XdlEcGroupGather")
    .Input("rows: float")
    .Input("inverse: int32")
    .Output("embeddings: N * float")
    .Attr("N: int >= 1")
    .Attr("widths: list(int)")
    .Attr("modes: list({'single', 'none', 'sum', 'mean', 'sqrtn'})")
    .SetShapeFn(GroupGatherShape)
    .Doc(R"doc(
Every feature of a table group gathered (or pooled) from the group's rows in one op; see group_gather_kernel.cc.
)doc");

REGISTER_OP("XdlEcGroupGatherGradient")
    .Input("grads: N * float")
    .Input("rows: float")
    .Input("inverse: int32")
    .Output("row_grads: float")
    .Attr("N: int >= 1")
    .Attr("widths: list(int)")
    .Attr("modes: list({'single', 'none', 'sum', 'mean', 'sqrtn'})")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(c->num_inputs() - 2));
      return Status();
    })
    .Doc(R"doc(
The gradient of XdlEcGroupGather with respect to rows: per row, the sum in position order of its feature's
gradient at its positions, scaled as the feature's combiner pooled (XdlEcGatherGradient's arithmetic).
)doc");

class GroupGatherKernel : public GroupGatherBase {
 public:
  using GroupGatherBase::GroupGatherBase;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& rows = ctx->input(0);
    const Tensor& inverse = ctx->input(1);
    int64_t batch = 0;
    if (!BatchOf(ctx, "XdlEcGroupGather", features_, rows, inverse, &batch)) return;
    const int64_t dim = rows.dim_size(1);
    const int32_t* ids = inverse.flat<int32_t>().data();
    OpOutputList outputs;
    OP_REQUIRES_OK(ctx, ctx->output_list("embeddings", &outputs));
    for (size_t i = 0; i < features_.size(); ++i) {
      const GroupFeature& f = features_[i];
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, outputs.allocate(static_cast<int>(i), FeatureShape(f, batch, dim), &out));
      GatherRows(IdSegments::Dense(batch, f.width), f.combiner, rows.flat<float>().data(), ids, batch * f.width, dim,
                 out->flat<float>().data());
      ids += batch * f.width;
    }
  }
};

class GroupGatherGradientKernel : public GroupGatherBase {
 public:
  using GroupGatherBase::GroupGatherBase;

  void Compute(OpKernelContext* ctx) override {
    OpInputList grads;
    OP_REQUIRES_OK(ctx, ctx->input_list("grads", &grads));
    const Tensor& rows = ctx->input(static_cast<int>(features_.size()));
    const Tensor& inverse = ctx->input(static_cast<int>(features_.size()) + 1);
    int64_t batch = 0;
    if (!BatchOf(ctx, "XdlEcGroupGatherGradient", features_, rows, inverse, &batch)) return;
    const int64_t dim = rows.dim_size(1);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, rows.shape(), &out));
    float* summed = out->flat<float>().data();
    std::fill(summed, summed + out->NumElements(), 0.0f);
    const int32_t* ids = inverse.flat<int32_t>().data();
    for (size_t i = 0; i < features_.size(); ++i) {
      const GroupFeature& f = features_[i];
      const TensorShape expected = FeatureShape(f, batch, dim);
      OP_REQUIRES(ctx, grads[static_cast<int>(i)].shape() == expected,
                  InvalidArgument("XdlEcGroupGatherGradient: grads[", i, "] must have shape ", expected.DebugString(),
                                  ", got ", grads[static_cast<int>(i)].shape().DebugString()));
      SumGradientPerUnique(IdSegments::Dense(batch, f.width), f.combiner,
                           grads[static_cast<int>(i)].flat<float>().data(), ids, dim, summed);
      ids += batch * f.width;
    }
  }
};

REGISTER_KERNEL_BUILDER(Name("XdlEcGroupGather").Device(tensorflow::DEVICE_CPU), GroupGatherKernel);
REGISTER_KERNEL_BUILDER(Name("XdlEcGroupGatherGradient").Device(tensorflow::DEVICE_CPU), GroupGatherGradientKernel);

}  // namespace xdl_ec::tf_ops

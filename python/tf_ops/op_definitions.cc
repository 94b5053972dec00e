// Registration of the two ops (interfaces and shape functions); the kernels live beside this file.
//
// XdlEcLookup is stateful: it pulls from (and inserts missing keys into) a table outside TF's view,
// so TF must never constant-fold, CSE or prune it. XdlEcScatterGradient is stateful because it is
// the table update; inside tf.function automatic control dependencies keep it, and the Python
// gradient also makes the returned gradient depend on its output. XdlEcAutoStep / XdlEcSetAutoStep
// read and set a handle's automatic step counter (checkpoints of the table save and restore it).
#include "op_error.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace xdl_ec::tf_ops {

using absl::Status;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

namespace {

Status LookupShape(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 0, &unused));  // handle
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &unused));  // row_splits
  TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 0, &unused));  // step
  TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 0, &unused));  // trigger
  int64_t dim = 0;
  std::string combiner;
  TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
  TF_RETURN_IF_ERROR(c->GetAttr("combiner", &combiner));
  const ShapeHandle ids = c->input(1);
  ShapeHandle out;
  if (!c->RankKnown(ids)) {
    out = combiner == "none" ? c->UnknownShape() : c->Matrix(c->UnknownDim(), dim);
  } else if (c->Rank(ids) == 2) {
    if (combiner == "none") {
      TF_RETURN_IF_ERROR(c->Concatenate(ids, c->Vector(dim), &out));
    } else {
      out = c->Matrix(c->Dim(ids, 0), dim);
    }
  } else if (c->Rank(ids) == 1) {
    if (combiner == "none") {
      return InvalidArgument(
          "XdlEcLookup: combiner 'none' needs dense ids [batch, n]; ragged/sparse ids need 'sum', 'mean' or 'sqrtn'");
    }
    DimensionHandle batch;
    TF_RETURN_IF_ERROR(c->Subtract(c->Dim(c->input(2), 0), 1, &batch));
    out = c->Matrix(batch, dim);
  } else {
    return InvalidArgument(
        "XdlEcLookup: ids must be int64 [batch, n] (dense) or rank-1 values with row_splits (ragged), got rank ",
        c->Rank(ids));
  }
  c->set_output(0, out);
  c->set_output(1, c->Vector(c->UnknownDim()));
  c->set_output(2, c->Vector(c->NumElements(ids)));
  return Status();
}

Status ScatterGradientShape(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 0, &unused));  // handle
  TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 1, &unused));  // row_splits
  TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 1, &unused));  // unique_keys
  TF_RETURN_IF_ERROR(c->WithRank(c->input(5), 1, &unused));  // inverse
  TF_RETURN_IF_ERROR(c->WithRank(c->input(6), 0, &unused));  // step
  c->set_output(0, c->Scalar());
  return Status();
}

Status AutoStepShape(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 0, &unused));  // handle
  c->set_output(0, c->Scalar());
  return Status();
}

Status SetAutoStepShape(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 0, &unused));  // handle
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));  // latest
  return Status();
}

}  // namespace

REGISTER_OP("XdlEcLookup")
    .Input("handle: int64")
    .Input("ids: int64")
    .Input("row_splits: int64")
    .Input("step: int64")
    .Input("trigger: float")
    .Output("embeddings: float")
    .Output("unique_keys: int64")
    .Output("inverse: int32")
    .Attr("combiner: {'none', 'sum', 'mean', 'sqrtn'}")
    .Attr("dim: int >= 1")
    .Attr("insert_missing: bool = true")
    .SetIsStateful()
    .SetShapeFn(LookupShape)
    .Doc(R"doc(
Looks up the rows of `ids` in the xdl-ec table `handle` and pools them per example. Missing keys are
inserted with their initial row, or with insert_missing = false (inference) read as zero rows and
left out of the table. Dense ids [batch, n] with row_splits = [] give [batch, n, dim] for
combiner 'none', else [batch, dim]; rank-1 ids with row_splits [batch + 1] (ragged) give [batch, dim].
`trigger` is a zero float scalar that only puts this op on the gradient tape; `step` (0 = automatic)
is forwarded to the gradient, which applies the table's optimizer.
unique_keys: the distinct ids in order of first appearance, each pulled once.
inverse: for each id (row-major), its index in unique_keys.
)doc");

REGISTER_OP("XdlEcScatterGradient")
    .Input("handle: int64")
    .Input("grad: float")
    .Input("ids: int64")
    .Input("row_splits: int64")
    .Input("unique_keys: int64")
    .Input("inverse: int32")
    .Input("step: int64")
    .Output("applied_step: int64")
    .Attr("combiner: {'none', 'sum', 'mean', 'sqrtn'}")
    .SetIsStateful()
    .SetShapeFn(ScatterGradientShape)
    .Doc(R"doc(
Sums the gradient of an XdlEcLookup output per unique key (scaled as the combiner pooled) and applies
ONE optimizer step of the table `handle` to those keys. step >= 1 is used as given; 0 takes the table
handle's automatic counter (latest + 1). applied_step: the step used (0 when there was nothing to push).
)doc");

REGISTER_OP("XdlEcAutoStep")
    .Input("handle: int64")
    .Output("latest: int64")
    .SetIsStateful()
    .SetShapeFn(AutoStepShape)
    .Doc(R"doc(
The latest step applied to the table `handle` by XdlEcScatterGradient (0 before the first): the next
automatic step (step = 0) is latest + 1.
)doc");

REGISTER_OP("XdlEcSetAutoStep")
    .Input("handle: int64")
    .Input("latest: int64")
    .SetIsStateful()
    .SetShapeFn(SetAutoStepShape)
    .Doc(R"doc(
Sets the latest step of the table `handle` (>= 0), so its next automatic step is latest + 1: a table
restored from a checkpoint continues the saved step count.
)doc");

}  // namespace xdl_ec::tf_ops

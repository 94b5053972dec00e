// XdlEcAutoStep / XdlEcSetAutoStep CPU kernels: read and set the automatic step counter of a table
// handle (step_counter.h). The counter lives in this library, not in the table, so a checkpoint of the
// table saves it through these ops and a restored table continues Adam's bias correction where the
// saved one stopped. Both resolve the handle first, so a closed table's handle is an error.
#include "shard_handle.h"
#include "step_counter.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace xdl_ec::tf_ops {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

class AutoStepKernel : public OpKernel {
 public:
  explicit AutoStepKernel(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    if (!ResolveShard(ctx, "XdlEcAutoStep", ctx->input(0))) return;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = StepCounter::Latest(ctx->input(0).scalar<int64_t>()());
  }
};

class SetAutoStepKernel : public OpKernel {
 public:
  explicit SetAutoStepKernel(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& latest = ctx->input(1);
    OP_REQUIRES(ctx, latest.dims() == 0 && latest.scalar<int64_t>()() >= 0,
                InvalidArgument("XdlEcSetAutoStep: latest must be an int64 scalar >= 0, got ", latest.DebugString()));
    if (!ResolveShard(ctx, "XdlEcSetAutoStep", ctx->input(0))) return;
    StepCounter::Restore(ctx->input(0).scalar<int64_t>()(), latest.scalar<int64_t>()());
  }
};

REGISTER_KERNEL_BUILDER(Name("XdlEcAutoStep").Device(tensorflow::DEVICE_CPU), AutoStepKernel);
REGISTER_KERNEL_BUILDER(Name("XdlEcSetAutoStep").Device(tensorflow::DEVICE_CPU), SetAutoStepKernel);

}  // namespace xdl_ec::tf_ops

// XdlEcScatterGradient's CPU kernel: the backward of XdlEcLookup. Sums the incoming gradient per
// unique key (each position gets its row's gradient divided as the forward divided), then ONE
// EmbeddingShard::Push into the table's optimizer. Everything is validated before the push, and the
// push itself validates (finite gradients) before changing a byte, so a rejected call changes nothing.
#include <exception>
#include <vector>

#include "id_segments.h"
#include "row_gather.h"
#include "shard_handle.h"
#include "step_counter.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace xdl_ec::tf_ops {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

class ScatterGradientKernel : public OpKernel {
 public:
  explicit ScatterGradientKernel(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string combiner;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("combiner", &combiner));
    combiner_ = ParseCombiner(combiner);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grad = ctx->input(1);
    const Tensor& ids = ctx->input(2);
    const Tensor& row_splits = ctx->input(3);
    const Tensor& unique_keys = ctx->input(4);
    const Tensor& inverse = ctx->input(5);
    const Tensor& step = ctx->input(6);
    OP_REQUIRES(ctx, step.dims() == 0 && step.scalar<int64_t>()() >= 0,
                InvalidArgument("XdlEcScatterGradient: step must be an int64 scalar >= 0 (0 = automatic), got ",
                                step.DebugString()));
    const int64_t handle = ctx->input(0).dims() == 0 ? ctx->input(0).scalar<int64_t>()() : 0;
    std::shared_ptr<EmbeddingShard> shard = ResolveShard(ctx, "XdlEcScatterGradient", ctx->input(0));
    if (!shard) return;
    const int64_t dim = shard->dim();
    IdSegments segments;
    if (!segments.Parse(ctx, ids, row_splits, combiner_)) return;

    const int64_t n = ids.NumElements();
    OP_REQUIRES(
        ctx, unique_keys.dims() == 1 && inverse.dims() == 1 && inverse.NumElements() == n,
        InvalidArgument("XdlEcScatterGradient: unique_keys must be rank 1 and inverse must hold one index per id (", n,
                        "), got shapes ", unique_keys.shape().DebugString(), " and ", inverse.shape().DebugString()));
    TensorShape expected;
    if (combiner_ == Combiner::kNone) {
      expected = ids.shape();
      expected.AddDim(dim);
    } else {
      expected = TensorShape({segments.batch(), dim});
    }
    OP_REQUIRES(ctx, grad.shape() == expected,
                InvalidArgument("XdlEcScatterGradient: grad must have the lookup output's shape ",
                                expected.DebugString(), " (table dim ", dim, "), got ", grad.shape().DebugString()));
    const int64_t num_unique = unique_keys.NumElements();
    const int32_t* inverse_data = inverse.flat<int32_t>().data();
    for (int64_t p = 0; p < n; ++p) {
      OP_REQUIRES(ctx, inverse_data[p] >= 0 && inverse_data[p] < num_unique,
                  InvalidArgument("XdlEcScatterGradient: inverse[", p, "] = ", inverse_data[p], " is outside [0, ",
                                  num_unique, ")"));
    }

    std::vector<float> summed(static_cast<size_t>(num_unique) * dim, 0.0f);
    SumGradientPerUnique(segments, combiner_, grad.flat<float>().data(), inverse_data, dim, summed.data());

    int64_t applied = 0;
    if (num_unique > 0) {
      try {
        const int64_t* keys = unique_keys.flat<int64_t>().data();
        applied = StepCounter::Apply(handle, step.scalar<int64_t>()(), [&](int64_t s) {
          shard->Push(keys, summed.data(), static_cast<size_t>(num_unique), s);
        });
      } catch (const std::exception& e) {
        ctx->CtxFailure(InvalidArgument("XdlEcScatterGradient: push rejected, table unchanged: ", e.what()));
        return;
      }
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = applied;
  }

 private:
  Combiner combiner_ = Combiner::kNone;
};

REGISTER_KERNEL_BUILDER(Name("XdlEcScatterGradient").Device(tensorflow::DEVICE_CPU), ScatterGradientKernel);

}  // namespace xdl_ec::tf_ops

// XdlEcLookup's CPU kernel: dedup ids, ONE EmbeddingShard::Pull of the unique keys, then gather or
// pool into the output. TF kernels run without the Python GIL, so the pull runs in parallel with
// Python threads; the shard's own lock serialises it against pushes.
#include <cstring>
#include <exception>
#include <vector>

#include "id_segments.h"
#include "shard_handle.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "unique_ids.h"

namespace xdl_ec::tf_ops {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;


class LookupKernel : public OpKernel {
 public:
  explicit LookupKernel(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string combiner;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("combiner", &combiner));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim_));
    combiner_ = ParseCombiner(combiner);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(1);
    const Tensor& row_splits = ctx->input(2);
    const Tensor& step = ctx->input(3);
    OP_REQUIRES(ctx, step.dims() == 0 && step.scalar<int64_t>()() >= 0,
                InvalidArgument("XdlEcLookup: step must be an int64 scalar >= 0 (0 = automatic), got ",
                                step.DebugString()));
    std::shared_ptr<EmbeddingShard> shard = ResolveShard(ctx, "XdlEcLookup", ctx->input(0));
    if (!shard) return;
    OP_REQUIRES(ctx, shard->dim() == dim_,
                InvalidArgument("XdlEcLookup: the table's rows have dim ", shard->dim(), " but the op was built with dim ",
                                dim_, "; build the lookup with the table's dim"));
    IdSegments segments;
    if (!segments.Parse(ctx, ids, row_splits, combiner_)) return;

    const int64_t n = ids.NumElements();
    Tensor* inverse = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({n}), &inverse));
    int32_t* inverse_data = inverse->flat<int32_t>().data();
    UniqueIds unique;
    unique.Build(ids.flat<int64_t>().data(), static_cast<size_t>(n), inverse_data);
    const std::vector<int64_t>& keys = unique.keys();
    const int64_t num_unique = static_cast<int64_t>(keys.size());

    Tensor* unique_keys = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({num_unique}), &unique_keys));
    if (num_unique > 0) std::memcpy(unique_keys->flat<int64_t>().data(), keys.data(), keys.size() * sizeof(int64_t));

    std::vector<float> rows(static_cast<size_t>(num_unique) * dim_);
    try {
      shard->Pull(keys.data(), keys.size(), rows.data());
    } catch (const std::exception& e) {
      ctx->CtxFailure(InvalidArgument("XdlEcLookup: pull failed: ", e.what()));
      return;
    }

    const size_t row_bytes = sizeof(float) * dim_;
    if (combiner_ == Combiner::kNone) {
      TensorShape shape = ids.shape();
      shape.AddDim(dim_);
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
      float* out_data = out->flat<float>().data();
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(out_data + i * dim_, rows.data() + static_cast<size_t>(inverse_data[i]) * dim_, row_bytes);
      }
      return;
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({segments.batch(), dim_}), &out));
    float* out_data = out->flat<float>().data();
    std::memset(out_data, 0, row_bytes * segments.batch());
    for (int64_t b = 0; b < segments.batch(); ++b) {
      float* acc = out_data + b * dim_;
      const int64_t begin = segments.begin(b), end = segments.end(b);
      for (int64_t p = begin; p < end; ++p) {
        const float* row = rows.data() + static_cast<size_t>(inverse_data[p]) * dim_;
        for (int64_t d = 0; d < dim_; ++d) acc[d] += row[d];
      }
      const float divisor = IdSegments::Divisor(combiner_, end - begin);
      if (divisor != 1.0f) {
        for (int64_t d = 0; d < dim_; ++d) acc[d] /= divisor;
      }
    }
  }

 private:
  Combiner combiner_ = Combiner::kNone;
  int64_t dim_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("XdlEcLookup").Device(tensorflow::DEVICE_CPU), LookupKernel);

}  // namespace xdl_ec::tf_ops

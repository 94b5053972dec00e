// XdlEcLookup's CPU kernel: dedup ids, ONE EmbeddingShard::Pull (or Find, for inference without
// inserts) of the unique keys, then gather or pool into the output (row_gather.h). TF kernels run
// without the Python GIL, so the pull runs in parallel with Python threads; the shard's own lock
// serialises it against pushes.
#include <cstring>
#include <exception>
#include <vector>

#include "id_segments.h"
#include "row_gather.h"
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
    OP_REQUIRES_OK(ctx, ctx->GetAttr("insert_missing", &insert_missing_));
    combiner_ = ParseCombiner(combiner);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(1);
    const Tensor& row_splits = ctx->input(2);
    const Tensor& step = ctx->input(3);
    OP_REQUIRES(
        ctx, step.dims() == 0 && step.scalar<int64_t>()() >= 0,
        InvalidArgument("XdlEcLookup: step must be an int64 scalar >= 0 (0 = automatic), got ", step.DebugString()));
    std::shared_ptr<EmbeddingShard> shard = ResolveShard(ctx, "XdlEcLookup", ctx->input(0));
    if (!shard) return;
    OP_REQUIRES(ctx, shard->dim() == dim_,
                InvalidArgument("XdlEcLookup: the table's rows have dim ", shard->dim(),
                                " but the op was built with dim ", dim_, "; build the lookup with the table's dim"));
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

    // Zero-filled: with insert_missing = false the rows of keys the table lacks stay zero.
    std::vector<float> rows(static_cast<size_t>(num_unique) * dim_);
    try {
      if (insert_missing_) {
        shard->Pull(keys.data(), keys.size(), rows.data());
      } else {
        std::vector<uint8_t> found(keys.size());
        shard->Find(keys.data(), keys.size(), rows.data(), found.data());
      }
    } catch (const std::exception& e) {
      ctx->CtxFailure(InvalidArgument("XdlEcLookup: pull failed: ", e.what()));
      return;
    }

    TensorShape shape = ids.shape();
    if (combiner_ == Combiner::kNone) {
      shape.AddDim(dim_);
    } else {
      shape = TensorShape({segments.batch(), dim_});
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    GatherRows(segments, combiner_, rows.data(), inverse_data, n, dim_, out->flat<float>().data());
  }

 private:
  Combiner combiner_ = Combiner::kNone;
  int64_t dim_ = 0;
  bool insert_missing_ = true;
};

REGISTER_KERNEL_BUILDER(Name("XdlEcLookup").Device(tensorflow::DEVICE_CPU), LookupKernel);

}  // namespace xdl_ec::tf_ops

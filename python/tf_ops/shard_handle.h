// Resolves the int64 handle input of an op to the live shard registered by the Python table.
#pragma once

#include <memory>
#include <stdexcept>

#include "op_error.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "xdl_ec/shard_registry.h"

namespace xdl_ec::tf_ops {

// Returns the shard or sets an InvalidArgument status (unknown/deleted handle, non-scalar input) and
// returns null. Holding the shared_ptr keeps the shard alive for the whole kernel even if the table
// is closed meanwhile.
inline std::shared_ptr<EmbeddingShard> ResolveShard(tensorflow::OpKernelContext* ctx, const char* op,
                                                    const tensorflow::Tensor& handle) {
  if (handle.dims() != 0) {
    ctx->CtxFailure(InvalidArgument(op, ": handle must be an int64 scalar (EmbeddingTable.handle), got shape ",
                                    handle.shape().DebugString()));
    return nullptr;
  }
  try {
    return ShardRegistry::Get(handle.scalar<int64_t>()());
  } catch (const std::exception& e) {
    ctx->CtxFailure(InvalidArgument(op, ": ", e.what()));
    return nullptr;
  }
}

}  // namespace xdl_ec::tf_ops

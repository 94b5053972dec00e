// Process-wide registry of live shards, so that code in another shared object (the TensorFlow op
// library) can reach a shard created by the Python binding through an int64 handle. A stale or
// unknown handle is an error, never a dangling pointer.
#pragma once

#include <cstdint>
#include <memory>

#include "xdl_ec/embedding_shard.h"

namespace xdl_ec {

class ShardRegistry {
 public:
  static int64_t Register(std::shared_ptr<EmbeddingShard> shard);  // returns a handle > 0
  static void Unregister(int64_t handle);
  // Throws std::invalid_argument("unknown shard handle N ...") when the handle is not registered.
  static std::shared_ptr<EmbeddingShard> Get(int64_t handle);
};

}  // namespace xdl_ec

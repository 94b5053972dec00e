#include "xdl_ec/shard_registry.h"

#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace xdl_ec {
namespace {

struct Registry {
  std::mutex mutex;
  int64_t next = 1;
  std::unordered_map<int64_t, std::shared_ptr<EmbeddingShard>> shards;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry();  // never destroyed: ops may run during interpreter exit
  return *registry;
}

}  // namespace

int64_t ShardRegistry::Register(std::shared_ptr<EmbeddingShard> shard) {
  if (!shard) throw std::invalid_argument("ShardRegistry::Register: shard is null");
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  int64_t handle = registry.next++;
  registry.shards.emplace(handle, std::move(shard));
  return handle;
}

void ShardRegistry::Unregister(int64_t handle) {
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.shards.erase(handle);
}

std::shared_ptr<EmbeddingShard> ShardRegistry::Get(int64_t handle) {
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  auto it = registry.shards.find(handle);
  if (it == registry.shards.end()) {
    throw std::invalid_argument("unknown shard handle " + std::to_string(handle) +
                                ": the table was deleted or never registered in this process");
  }
  return it->second;
}

}  // namespace xdl_ec

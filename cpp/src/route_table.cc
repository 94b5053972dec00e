#include "xdl_ec/route_table.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace xdl_ec {

namespace {

inline uint64_t Fmix64(uint64_t z) {
  z ^= z >> 33;
  z *= 0xff51afd7ed558ccdull;
  z ^= z >> 33;
  z *= 0xc4ceb9fe1a85ec53ull;
  z ^= z >> 33;
  return z;
}

// The rendezvous weight of a server id for a bucket. Another salt than the key's, so a bucket's weights
// are unrelated to which keys it holds.
inline uint64_t Weight(uint32_t bucket, int id) {
  return Fmix64(((static_cast<uint64_t>(bucket) << 32) | static_cast<uint32_t>(id)) ^ 0x9e3779b97f4a7c15ull);
}

// Dense tables of small counts sit in a fixed array so ServerOf(key, n) is an atomic load and a lookup; the
// rest in a map under the same mutex (built once each, never freed: the process routes with them until exit).
constexpr int kFastDense = 1024;
std::array<std::atomic<const RouteTable*>, kFastDense> g_fast_dense{};
std::mutex g_dense_mutex;
std::map<int, std::unique_ptr<const RouteTable>>& DenseTables() {
  static auto* tables = new std::map<int, std::unique_ptr<const RouteTable>>();
  return *tables;
}

}  // namespace

RouteTable::RouteTable(std::vector<int> server_ids) : ids_(std::move(server_ids)), owners_(kBuckets) {
  if (ids_.empty()) throw std::invalid_argument("RouteTable: no server ids (a table needs at least one server)");
  std::sort(ids_.begin(), ids_.end());
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (ids_[i] < 0 || ids_[i] >= kMaxServerId)
      throw std::invalid_argument("RouteTable: server id " + std::to_string(ids_[i]) + " is outside [0, " +
                                  std::to_string(kMaxServerId) + ")");
    if (i > 0 && ids_[i] == ids_[i - 1])
      throw std::invalid_argument("RouteTable: server id " + std::to_string(ids_[i]) + " is given twice");
  }
  for (uint32_t b = 0; b < kBuckets; ++b) {
    int best = ids_[0];
    uint64_t best_weight = Weight(b, best);
    for (size_t i = 1; i < ids_.size(); ++i) {
      const uint64_t w = Weight(b, ids_[i]);
      if (w > best_weight) {  // ids ascend: a tie (never seen in practice) goes to the smaller id everywhere
        best = ids_[i];
        best_weight = w;
      }
    }
    owners_[b] = static_cast<uint16_t>(best);
  }
}

const RouteTable& RouteTable::Dense(int n) {
  if (n < 1 || n > kMaxServerId)
    throw std::invalid_argument("KeyRouter: n (servers) must be in [1, " + std::to_string(kMaxServerId) + "], got " +
                                std::to_string(n));
  if (n < kFastDense) {
    const RouteTable* t = g_fast_dense[n].load(std::memory_order_acquire);
    if (t != nullptr) return *t;
  }
  std::lock_guard<std::mutex> lock(g_dense_mutex);
  auto& tables = DenseTables();
  auto it = tables.find(n);
  if (it == tables.end()) {
    std::vector<int> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
    it = tables.emplace(n, std::make_unique<const RouteTable>(std::move(ids))).first;
    if (n < kFastDense) g_fast_dense[n].store(it->second.get(), std::memory_order_release);
  }
  return *it->second;
}

uint32_t RouteTable::BucketOf(int64_t key) {
  // MurmurHash3's fmix64 on a salted key. Deliberately not splitmix64: the shard's KeyIndex places keys by
  // splitmix64's high bits, and routing by the same bits would pile each server's keys into 1/n of its index.
  return static_cast<uint32_t>(Fmix64(static_cast<uint64_t>(key) ^ 0x5851f42d4c957f2dull) >> (64 - kBucketBits));
}

void RouteTable::ServersOf(const int64_t* keys, size_t count, int32_t* out) const {
  const uint16_t* owners = owners_.data();
  for (size_t i = 0; i < count; ++i) out[i] = owners[BucketOf(keys[i])];
}

}  // namespace xdl_ec

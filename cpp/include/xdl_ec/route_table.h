// Which server owns a key, for any set of live server ids: the salted key hash picks one of kBuckets
// virtual buckets (its high bits), and a table decided by rendezvous (highest random weight) hashing of
// (bucket, server id) over the live ids names each bucket's owner. Routing stays one table lookup per key,
// and a change of the live set moves only what it must: adding a server moves ~1/(N+1) of the buckets (those
// the newcomer now wins), removing server i (a drain) moves only i's buckets.
//
// Server ids are stable names, not slots: a drained server leaves a hole in the id set, and a server added
// later takes the smallest free id (so draining i and adding one server back restores the original table).
// Ids 0..n-1 give KeyRouter::ServerOf(key, n), the table every fixed-count run uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace xdl_ec {

class RouteTable {
 public:
  // 2^16 buckets: each of N servers gets 65536/N of them within ~sqrt(65536/N) (1% at N = 8), so the table
  // adds no visible imbalance to the keys' own spread, and it is 128 KiB (uint16 owners).
  static constexpr int kBucketBits = 16;
  static constexpr size_t kBuckets = size_t{1} << kBucketBits;
  static constexpr int kMaxServerId = 65535;

  // Throws std::invalid_argument when server_ids is empty, has a duplicate, or an id outside [0, kMaxServerId).
  explicit RouteTable(std::vector<int> server_ids);

  // The table of ids 0..n-1, built once per n and kept for the process (thread-safe; the hot path is an
  // atomic load for n < 1024). Throws std::invalid_argument when n < 1 or n > kMaxServerId.
  static const RouteTable& Dense(int n);

  // The key's virtual bucket: the high kBucketBits of the salted fmix64 hash, the same in every process.
  static uint32_t BucketOf(int64_t key);

  int ServerOf(int64_t key) const { return owners_[BucketOf(key)]; }
  void ServersOf(const int64_t* keys, size_t count, int32_t* out) const;
  int OwnerOf(uint32_t bucket) const { return owners_[bucket]; }

  // Live ids, ascending.
  const std::vector<int>& server_ids() const { return ids_; }
  // owners()[b] is bucket b's server id.
  const std::vector<uint16_t>& owners() const { return owners_; }

 private:
  std::vector<int> ids_;
  std::vector<uint16_t> owners_;
};

}  // namespace xdl_ec

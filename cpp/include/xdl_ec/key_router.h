// Which server owns a key when the servers are 0..n-1: RouteTable::Dense(n) (route_table.h), i.e. the key's
// virtual bucket (high bits of a salted MurmurHash3 fmix64, so consecutive or strided ids spread evenly) and
// that bucket's rendezvous-hashing owner among ids 0..n-1. The mapping is the same in every process and every
// run, and going from n to n+1 servers moves only ~1/(n+1) of the keys (what a resize has to move). It must
// stay independent of the shard's KeyIndex hash (splitmix64), or each server's keys would cluster.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xdl_ec {

class KeyRouter {
 public:
  // Throws std::invalid_argument when n < 1 (or n > RouteTable::kMaxServerId).
  static int ServerOf(int64_t key, int n);
  // Routes a batch: out[i] = ServerOf(keys[i], n).
  static void ServersOf(const int64_t* keys, size_t count, int n, int32_t* out);
};

}  // namespace xdl_ec

// Which server owns a key: a mixed 64-bit hash (MurmurHash3's fmix64, salted) mapped onto [0, n) by a
// multiply-shift, so consecutive or strided ids spread evenly (key % n would not) and the mapping is
// the same in every process and every run: workers, servers and recovery all agree on it. It must
// stay independent of the shard's KeyIndex hash (splitmix64), or each server's keys would cluster.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xdl_ec {

class KeyRouter {
 public:
  // Throws std::invalid_argument when n < 1.
  static int ServerOf(int64_t key, int n);
  // Routes a batch: out[i] = ServerOf(keys[i], n).
  static void ServersOf(const int64_t* keys, size_t count, int n, int32_t* out);
};

}  // namespace xdl_ec

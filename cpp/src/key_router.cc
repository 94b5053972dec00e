#include "xdl_ec/key_router.h"

#include <cstddef>
#include <stdexcept>
#include <string>

namespace xdl_ec {

namespace {
void CheckServers(int n) {
  if (n < 1) throw std::invalid_argument("KeyRouter: n (servers) must be >= 1, got " + std::to_string(n));
}

// MurmurHash3's fmix64 on a salted key. Deliberately not splitmix64: the shard's KeyIndex places keys by
// splitmix64's high bits, and routing by the same bits would pile each server's keys into 1/n of its
// index (linear probing then degrades badly).
inline int Route(int64_t key, int n) {
  uint64_t z = static_cast<uint64_t>(key) ^ 0x5851f42d4c957f2dull;
  z ^= z >> 33;
  z *= 0xff51afd7ed558ccdull;
  z ^= z >> 33;
  z *= 0xc4ceb9fe1a85ec53ull;
  z ^= z >> 33;
  // High 32 bits times n: unbiased enough for n << 2^32 and cheaper than a division.
  return static_cast<int>(((z >> 32) * static_cast<uint64_t>(n)) >> 32);
}
}  // namespace

int KeyRouter::ServerOf(int64_t key, int n) {
  CheckServers(n);
  return Route(key, n);
}

void KeyRouter::ServersOf(const int64_t* keys, size_t count, int n, int32_t* out) {
  CheckServers(n);
  for (size_t i = 0; i < count; ++i) out[i] = Route(keys[i], n);
}

}  // namespace xdl_ec

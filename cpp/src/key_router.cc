#include "xdl_ec/key_router.h"

#include <cstddef>
#include <stdexcept>
#include <string>

namespace xdl_ec {

namespace {
void CheckServers(int n) {
  if (n < 1) throw std::invalid_argument("KeyRouter: n (servers) must be >= 1, got " + std::to_string(n));
}

inline int Route(int64_t key, int n) {
  uint64_t z = static_cast<uint64_t>(key) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
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

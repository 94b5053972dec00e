// to ^= from over n bytes, inlined: the parity path XORs records of ~100 bytes one at a time, where a
// call costs about as much as the XOR itself. 8 bytes a step (the compiler widens it further); the
// buffers must not overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace xdl_ec {

inline void XorBytes(uint8_t* __restrict to, const uint8_t* __restrict from, size_t n) {
  size_t b = 0;
  for (; b + 8 <= n; b += 8) {
    uint64_t x, y;
    std::memcpy(&x, to + b, 8);
    std::memcpy(&y, from + b, 8);
    x ^= y;
    std::memcpy(to + b, &x, 8);
  }
  for (; b < n; ++b) to[b] ^= from[b];
}

}  // namespace xdl_ec

// What every fuzz target here shares: the layout its holders belong to, and an abort that names the broken
// invariant (libFuzzer saves the input that triggered it; put it under cpp/fuzz/regressions/<target>/).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace xdl_ec::fuzz {

// The holders under test: server 4 of 7 under a (3, 2) code protects servers 0..3 (not 5, 6), with one table
// "t" of 4-slot blocks of 16-byte records (what fuzz_seeds' batches are made for).
constexpr int kN = 7, kK = 3, kR = 2, kHolder = 4;
constexpr unsigned kSlots = 4, kRecord = 16;

[[noreturn]] inline void Broken(const char* invariant) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", invariant);
  std::abort();
}

}  // namespace xdl_ec::fuzz

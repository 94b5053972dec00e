#include "xdl_ec/sorted_unique.h"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace xdl_ec {
namespace {

constexpr int kDigitBits = 11;  // 2,048 buckets: one pass's counts stay in L1
constexpr int kPasses = 6;      // 6 x 11 >= 64 bits
constexpr size_t kBuckets = size_t{1} << kDigitBits;
constexpr size_t kSmall = 256;  // below this a comparison sort beats clearing 6 x 2,048 counts

// The key with its sign bit flipped: unsigned order of these is the signed order of the keys.
inline uint64_t Biased(int64_t key) { return static_cast<uint64_t>(key) ^ (uint64_t{1} << 63); }

inline size_t Digit(uint64_t biased, int pass) { return (biased >> (pass * kDigitBits)) & (kBuckets - 1); }

// Positions 0..n) ordered by key, ties in position order (stable), as (biased key, position) pairs.
void SortPositions(const int64_t* keys, size_t n, std::vector<uint64_t>* sorted_keys,
                   std::vector<uint32_t>* positions) {
  std::vector<uint64_t>& k = *sorted_keys;
  std::vector<uint32_t>& p = *positions;
  k.resize(n);
  p.resize(n);
  for (size_t i = 0; i < n; ++i) {
    k[i] = Biased(keys[i]);
    p[i] = static_cast<uint32_t>(i);
  }
  if (n < kSmall) {
    std::stable_sort(p.begin(), p.end(), [&](uint32_t a, uint32_t b) { return k[a] < k[b]; });
    for (size_t i = 0; i < n; ++i) k[i] = Biased(keys[p[i]]);
    return;
  }
  // every pass's counts in one read of the keys
  std::vector<std::array<uint32_t, kBuckets>> counts(kPasses);
  for (auto& c : counts) c.fill(0);
  for (size_t i = 0; i < n; ++i) {
    for (int pass = 0; pass < kPasses; ++pass) ++counts[pass][Digit(k[i], pass)];
  }
  std::vector<uint64_t> k2(n);
  std::vector<uint32_t> p2(n);
  for (int pass = 0; pass < kPasses; ++pass) {
    std::array<uint32_t, kBuckets>& c = counts[pass];
    if (c[Digit(k[0], pass)] == n) continue;  // every key has this digit: the pass would not move anything
    uint32_t start = 0;
    for (uint32_t& bucket : c) start += std::exchange(bucket, start);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t to = c[Digit(k[i], pass)]++;
      k2[to] = k[i];
      p2[to] = p[i];
    }
    k.swap(k2);
    p.swap(p2);
  }
}

}  // namespace

void SortedUnique(const int64_t* keys, size_t n, std::vector<int64_t>* unique, int32_t* inverse) {
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw std::invalid_argument("SortedUnique: " + std::to_string(n) +
                                " keys; the int32 inverse indexes at most 2^31 - 1: split the batch");
  }
  unique->clear();
  if (n == 0) return;
  std::vector<uint64_t> sorted;
  std::vector<uint32_t> positions;
  SortPositions(keys, n, &sorted, &positions);
  for (size_t i = 0; i < n; ++i) {
    if (i == 0 || sorted[i] != sorted[i - 1]) unique->push_back(keys[positions[i]]);
    inverse[positions[i]] = static_cast<int32_t>(unique->size() - 1);
  }
}

}  // namespace xdl_ec

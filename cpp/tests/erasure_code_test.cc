// ErasureCode: exact decode of every erasure pattern, delta updates equal re-encoding, ISA-L's
// generator coefficients, and errors that leave every buffer untouched.
#include "xdl_ec/erasure_code.h"

#include <gtest/gtest.h>
#include <isa-l/erasure_code.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace xdl_ec {
namespace {

using Bytes = std::vector<uint8_t>;

// Independent GF(2^8) arithmetic (polynomial 0x11d, ISA-L's field) to check the generator.
uint8_t GfMul(uint8_t a, uint8_t b) {
  uint8_t p = 0;
  while (b) {
    if (b & 1) p ^= a;
    a = static_cast<uint8_t>((a << 1) ^ ((a & 0x80) ? 0x1d : 0));
    b >>= 1;
  }
  return p;
}

uint8_t GfPow(uint8_t a, int e) {
  uint8_t p = 1;
  while (e-- > 0) p = GfMul(p, a);
  return p;
}

enum class Fill { kRandom, kZero, kOnes };

// k + r fragments of len bytes: data filled per `fill`, parity encoded by the code under test.
std::vector<Bytes> MakeStripe(const ErasureCode& code, size_t len, Fill fill, std::mt19937& rng) {
  std::vector<Bytes> frags(code.k() + code.r(), Bytes(len));
  for (int i = 0; i < code.k(); ++i) {
    for (auto& b : frags[i]) {
      b = fill == Fill::kZero ? 0 : fill == Fill::kOnes ? 0xff : static_cast<uint8_t>(rng());
    }
  }
  std::vector<const uint8_t*> data;
  std::vector<uint8_t*> parity;
  for (int i = 0; i < code.k(); ++i) data.push_back(frags[i].data());
  for (int j = 0; j < code.r(); ++j) parity.push_back(frags[code.k() + j].data());
  code.Encode(len, data.data(), parity.data());
  return frags;
}

std::vector<uint8_t*> Pointers(std::vector<Bytes>& fragments) {
  std::vector<uint8_t*> out;
  for (auto& f : fragments) out.push_back(f.data());
  return out;
}

// Reference parity straight from the coefficients, byte by byte.
Bytes ReferenceParity(const ErasureCode& code, const std::vector<Bytes>& frags, int j) {
  Bytes out(frags[0].size(), 0);
  for (int i = 0; i < code.k(); ++i) {
    const uint8_t g = code.coefficient(j, i);
    for (size_t n = 0; n < out.size(); ++n) out[n] ^= GfMul(g, frags[i][n]);
  }
  return out;
}

// Erases `erased` (overwrites them with garbage), decodes, and expects every fragment restored.
void ExpectDecodes(const ErasureCode& code, const std::vector<Bytes>& stripe, const std::vector<int>& erased) {
  std::vector<Bytes> work = stripe;
  for (int idx : erased) std::fill(work[idx].begin(), work[idx].end(), uint8_t{0xa5});
  const std::vector<uint8_t*> ptrs = Pointers(work);
  code.Decode(stripe[0].size(), erased, ptrs.data());
  for (size_t idx = 0; idx < stripe.size(); ++idx) {
    ASSERT_EQ(work[idx], stripe[idx]) << "k=" << code.k() << " r=" << code.r() << " fragment " << idx
                                      << " after erasing " << erased.size() << " fragments";
  }
}

// Calls fn(subset) for every subset of {0..n-1} of size 1..max_size.
template <typename Fn>
void ForEachSubset(int n, int max_size, Fn fn) {
  std::vector<int> subset;
  auto rec = [&](auto&& self, int start) -> void {
    if (!subset.empty()) fn(subset);
    if (static_cast<int>(subset.size()) == max_size) return;
    for (int idx = start; idx < n; ++idx) {
      subset.push_back(idx);
      self(self, idx + 1);
      subset.pop_back();
    }
  };
  rec(rec, 0);
}

TEST(ErasureCodeTest, EveryErasurePatternDecodesExactlyUpToK12R4) {
  std::mt19937 rng(12345);
  for (int k = 1; k <= 12; ++k) {
    for (int r = 1; r <= 4; ++r) {
      for (CodeMatrix matrix : {CodeMatrix::kVandermonde, CodeMatrix::kCauchy}) {
        ErasureCode code(k, r, matrix);
        for (Fill fill : {Fill::kRandom, Fill::kZero, Fill::kOnes}) {
          // 64 bytes runs ISA-L's SIMD kernels; shorter fragments take the padded path (random data).
          const size_t len = fill == Fill::kRandom && (k + r) % 2 ? 37 : 64;
          const auto stripe = MakeStripe(code, len, fill, rng);
          ForEachSubset(k + r, r, [&](const std::vector<int>& erased) { ExpectDecodes(code, stripe, erased); });
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(ErasureCodeTest, LargeCodesSpotChecksUpTo32Fragments) {
  std::mt19937 rng(777);
  for (int r = 1; r <= 4; ++r) {
    for (int k = 13; k + r <= ErasureCode::kMaxFragments; ++k) {
      ErasureCode code(k, r);
      const auto stripe = MakeStripe(code, 100, Fill::kRandom, rng);
      std::vector<int> all(k + r);
      for (int idx = 0; idx < k + r; ++idx) all[idx] = idx;
      for (int trial = 0; trial < 40; ++trial) {
        std::shuffle(all.begin(), all.end(), rng);
        const int lost = 1 + static_cast<int>(rng() % r);
        ExpectDecodes(code, stripe, std::vector<int>(all.begin(), all.begin() + lost));
        if (HasFatalFailure()) return;
      }
      // The hardest pattern for a systematic code: the r highest data fragments lost.
      std::vector<int> last_data;
      for (int i = k - r; i < k; ++i) last_data.push_back(i);
      ExpectDecodes(code, stripe, last_data);
    }
  }
}

TEST(ErasureCodeTest, EncodeMatchesCoefficientsAtSimdAndTailLengths) {
  std::mt19937 rng(5);
  for (size_t len : {size_t{1}, size_t{15}, size_t{31}, size_t{64}, size_t{1000}, size_t{4133}}) {
    for (auto [k, r] : {std::pair{1, 1}, {4, 2}, {10, 4}, {24, 4}, {29, 3}}) {
      ErasureCode code(k, r);
      const auto stripe = MakeStripe(code, len, Fill::kRandom, rng);
      for (int j = 0; j < r; ++j) {
        EXPECT_EQ(stripe[k + j], ReferenceParity(code, stripe, j))
            << "k=" << k << " r=" << r << " j=" << j << " len=" << len;
      }
    }
  }
}

TEST(ErasureCodeTest, VandermondeIsIsalRsMatrixWithAllOnesFirstRow) {
  for (int k = 1; k <= 28; ++k) {
    for (int r = 1; r <= 4 && k + r <= 32; ++r) {
      if (!ErasureCode::VandermondeIsMds(k, r)) continue;
      ErasureCode code(k, r, CodeMatrix::kVandermonde);
      for (int j = 0; j < r; ++j) {
        for (int i = 0; i < k; ++i) {
          // gf_gen_rs_matrix: parity row j, column i holds 2^(i*j); row 0 is all ones.
          ASSERT_EQ(code.coefficient(j, i), GfPow(2, i * j)) << "k=" << k << " r=" << r;
        }
      }
    }
  }
}

TEST(ErasureCodeTest, CauchyCoefficientsAreInversesOfRowXorColumn) {
  ErasureCode code(6, 3, CodeMatrix::kCauchy);
  for (int j = 0; j < 3; ++j) {
    for (int i = 0; i < 6; ++i) {
      // gf_gen_cauchy1_matrix: 1 / ((k + j) XOR i).
      EXPECT_EQ(GfMul(code.coefficient(j, i), static_cast<uint8_t>((6 + j) ^ i)), 1);
    }
  }
}

TEST(ErasureCodeTest, AutomaticMatrixIsVandermondeInIsalSafeRangeElseCauchy) {
  for (int k = 1; k <= 31; ++k) {
    for (int r = 1; r <= 4 && k + r <= 32; ++r) {
      const bool safe = r <= 3 || k <= 21;
      EXPECT_EQ(ErasureCode::VandermondeIsMds(k, r), safe) << "k=" << k << " r=" << r;
      EXPECT_EQ(ErasureCode(k, r).matrix(), safe ? CodeMatrix::kVandermonde : CodeMatrix::kCauchy);
    }
  }
  EXPECT_STREQ(CodeMatrixName(CodeMatrix::kVandermonde), "vandermonde");
  EXPECT_STREQ(CodeMatrixName(CodeMatrix::kCauchy), "cauchy");
}

// Update and UpdateRows from a random change of fragment i equal re-encoding the changed data.
TEST(ErasureCodeTest, UpdateEqualsReencodeForEveryRowAndFragment) {
  std::mt19937 rng(99);
  for (size_t len : {size_t{7}, size_t{40}, size_t{63}, size_t{64}, size_t{1031}}) {
    for (auto [k, r, matrix] : {std::tuple{1, 1, CodeMatrix::kVandermonde},
                                {4, 1, CodeMatrix::kVandermonde},
                                {4, 2, CodeMatrix::kVandermonde},
                                {6, 3, CodeMatrix::kCauchy},
                                {8, 4, CodeMatrix::kVandermonde},
                                {25, 4, CodeMatrix::kCauchy},
                                {12, 4, CodeMatrix::kCauchy}}) {
      ErasureCode code(k, r, matrix);
      for (int i = 0; i < k; ++i) {
        auto stripe = MakeStripe(code, len, Fill::kRandom, rng);
        Bytes delta(len);
        for (size_t n = 0; n < len; ++n) {
          const uint8_t fresh = static_cast<uint8_t>(rng());
          delta[n] = stripe[i][n] ^ fresh;
          stripe[i][n] = fresh;
        }
        auto by_rows = stripe;
        std::vector<uint8_t*> parity;
        for (int j = 0; j < r; ++j) {
          code.Update(len, j, i, delta.data(), stripe[k + j].data());
          parity.push_back(by_rows[k + j].data());
        }
        code.UpdateRows(len, i, delta.data(), parity.data());
        for (int j = 0; j < r; ++j) {
          const Bytes expect = ReferenceParity(code, stripe, j);
          ASSERT_EQ(stripe[k + j], expect) << "Update k=" << k << " r=" << r << " i=" << i << " j=" << j;
          ASSERT_EQ(by_rows[k + j], expect) << "UpdateRows k=" << k << " r=" << r << " i=" << i;
        }
      }
    }
  }
}

TEST(ErasureCodeTest, PartialDecodeRebuildsOnlyWantedFromAnyPresentOrder) {
  std::mt19937 rng(3);
  ErasureCode code(5, 3);
  const auto stripe = MakeStripe(code, 333, Fill::kRandom, rng);
  // Lost 1, 4 and 6 (parity 1); present given shuffled.
  const std::vector<int> present_ok = {7, 3, 0, 5, 2};
  std::vector<const uint8_t*> sources;
  for (int idx : present_ok) sources.push_back(stripe[idx].data());
  Bytes out4(333, 0), out6(333, 0);
  std::vector<int> wanted = {6, 4};
  std::vector<uint8_t*> outputs = {out6.data(), out4.data()};
  code.Decode(333, present_ok, sources.data(), wanted, outputs.data());
  EXPECT_EQ(out6, stripe[6]);
  EXPECT_EQ(out4, stripe[4]);
  // A wanted fragment that is also present is a caller bug, not a decode.
  const std::vector<int> present_and_wanted = {7, 3, 0, 5, 2, 6};
  sources.push_back(stripe[6].data());
  EXPECT_THROW(code.Decode(333, present_and_wanted, sources.data(), wanted, outputs.data()), std::invalid_argument);
  // More present than k: the extra one is ignored.
  std::vector<int> more = {0, 1, 2, 3, 5, 7};
  std::vector<const uint8_t*> more_src;
  for (int idx : more) more_src.push_back(stripe[idx].data());
  std::vector<int> only4 = {4};
  Bytes again(333, 0);
  uint8_t* again_ptr = again.data();
  code.Decode(333, more, more_src.data(), only4, &again_ptr);
  EXPECT_EQ(again, stripe[4]);
}

// Decode plans are cached per erasure pattern and shared by copies: concurrent decodes of many
// patterns (more than the cache holds, so it is also cleared under them) stay exact.
TEST(ErasureCodeTest, ConcurrentDecodesOfManyPatternsShareOneCacheAndStayExact) {
  std::mt19937 rng(8);
  const ErasureCode code(20, 4);
  const auto stripe = MakeStripe(code, 48, Fill::kRandom, rng);
  std::vector<std::vector<int>> patterns;
  ForEachSubset(24, 4, [&](const std::vector<int>& erased) {
    if (erased.size() == 3) patterns.push_back(erased);  // C(24, 3) = 2024 patterns
  });
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const ErasureCode copy = code;  // copies share the cache
      for (size_t n = t; n < patterns.size() * 2; n += 4) {
        const auto& erased = patterns[(n * 7) % patterns.size()];
        std::vector<Bytes> work = stripe;
        const std::vector<uint8_t*> ptrs = Pointers(work);
        for (int idx : erased) std::fill(work[idx].begin(), work[idx].end(), uint8_t{0});
        (t % 2 ? copy : code).Decode(48, erased, ptrs.data());
        if (work != stripe) ++failures[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

// Why the automatic choice leaves Vandermonde at k = 22, r = 4: there ISA-L's gf_gen_rs_matrix really
// has an undecodable pattern (found by enumerating minors): losing data {0, 10, 21} and parity 2.
TEST(ErasureCodeTest, VandermondeOutsideSafeRangeHasAnUndecodablePatternCauchyDecodesIt) {
  const int k = 22, r = 4, m = k + r;
  const std::vector<int> lost = {0, 10, 21, k + 2};
  std::vector<uint8_t> vandermonde(static_cast<size_t>(m) * k);
  gf_gen_rs_matrix(vandermonde.data(), m, k);
  std::vector<uint8_t> b, b_inv(static_cast<size_t>(k) * k);
  for (int idx = 0; idx < m && static_cast<int>(b.size()) < k * k; ++idx) {
    if (std::find(lost.begin(), lost.end(), idx) != lost.end()) continue;
    b.insert(b.end(), &vandermonde[static_cast<size_t>(idx) * k], &vandermonde[static_cast<size_t>(idx + 1) * k]);
  }
  EXPECT_NE(gf_invert_matrix(b.data(), b_inv.data(), k), 0) << "expected a singular decode matrix";

  std::mt19937 rng(4);
  ErasureCode code(k, r);
  ASSERT_EQ(code.matrix(), CodeMatrix::kCauchy);
  ExpectDecodes(code, MakeStripe(code, 64, Fill::kRandom, rng), lost);
}

TEST(ErasureCodeTest, RejectsBadParameters) {
  for (auto [k, r] : {std::pair{0, 1}, {1, 0}, {4, 5}, {-1, 2}, {29, 4}, {31, 2}, {3, -1}}) {
    try {
      ErasureCode code(k, r);
      FAIL() << "accepted k=" << k << " r=" << r;
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("k=" + std::to_string(k)), std::string::npos) << what;
      EXPECT_NE(what.find("r=" + std::to_string(r)), std::string::npos) << what;
      EXPECT_NE(what.find("k + r <= 32"), std::string::npos) << what;
    }
  }
  EXPECT_NO_THROW(ErasureCode(28, 4));
  EXPECT_NO_THROW(ErasureCode(31, 1));
  try {
    ErasureCode code(22, 4, CodeMatrix::kVandermonde);
    FAIL() << "explicit Vandermonde outside ISA-L's safe range accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("safe range"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(ErasureCode(22, 4, CodeMatrix::kCauchy));
  ErasureCode code(3, 2);
  EXPECT_THROW(code.coefficient(2, 0), std::invalid_argument);
  EXPECT_THROW(code.coefficient(0, 3), std::invalid_argument);
  EXPECT_THROW(code.coefficient(-1, 0), std::invalid_argument);
}

TEST(ErasureCodeTest, TooManyErasuresAndBadIndicesThrowAndWriteNothing) {
  std::mt19937 rng(1);
  ErasureCode code(4, 2);
  const auto stripe = MakeStripe(code, 50, Fill::kRandom, rng);
  auto work = stripe;
  const std::vector<uint8_t*> ptrs = Pointers(work);
  try {
    code.Decode(50, {5, 0, 3}, ptrs.data());
    FAIL() << "three erasures accepted with r=2";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unrecoverable: lost fragments {0, 3, 5}, this code tolerates r=2");
  }
  EXPECT_THROW(code.Decode(50, {6}, ptrs.data()), std::invalid_argument);
  EXPECT_THROW(code.Decode(50, {-1}, ptrs.data()), std::invalid_argument);
  EXPECT_THROW(code.Decode(50, {1, 1}, ptrs.data()), std::invalid_argument);
  EXPECT_EQ(work, stripe);  // nothing written, not even the erased buffers

  // General form: fewer than k present.
  std::vector<int> present = {0, 2, 5};
  std::vector<const uint8_t*> sources = {stripe[0].data(), stripe[2].data(), stripe[5].data()};
  std::vector<int> wanted = {1};
  Bytes out(50, 0x11);
  uint8_t* out_ptr = out.data();
  try {
    code.Decode(50, present, sources.data(), wanted, &out_ptr);
    FAIL() << "decode from 3 of k=4 fragments accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("unrecoverable: lost fragments {1, 3, 4}, this code tolerates r=2", 0), 0u)
        << e.what();
  }
  EXPECT_EQ(out, Bytes(50, 0x11));

  Bytes delta(50, 1), parity = stripe[4];
  EXPECT_THROW(code.Update(50, 2, 0, delta.data(), parity.data()), std::invalid_argument);
  EXPECT_THROW(code.Update(50, 0, 4, delta.data(), parity.data()), std::invalid_argument);
  EXPECT_THROW(code.Update(50, 0, 0, nullptr, parity.data()), std::invalid_argument);
  uint8_t* rows[2] = {parity.data(), nullptr};
  EXPECT_THROW(code.UpdateRows(50, 0, delta.data(), rows), std::invalid_argument);
  EXPECT_THROW(code.UpdateRows(50, -1, delta.data(), rows), std::invalid_argument);
  EXPECT_EQ(parity, stripe[4]);
}

TEST(ErasureCodeTest, EmptyErasureListAndZeroLengthAreNoOps) {
  std::mt19937 rng(2);
  ErasureCode code(3, 1);
  const auto stripe = MakeStripe(code, 20, Fill::kRandom, rng);
  auto work = stripe;
  const std::vector<uint8_t*> ptrs = Pointers(work);
  code.Decode(20, {}, ptrs.data());
  code.Decode(0, {1}, ptrs.data());
  code.Update(0, 0, 0, nullptr, nullptr);
  EXPECT_EQ(work, stripe);
}

}  // namespace
}  // namespace xdl_ec

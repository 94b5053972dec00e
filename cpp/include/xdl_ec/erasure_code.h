// A systematic MDS erasure code over GF(2^8) on ISA-L: k data fragments, r parity fragments.
// One verb per operation, as ISA-L's erasure_code.h: Encode, Decode, Update.
//
// The generator is ISA-L's Vandermonde matrix (gf_gen_rs_matrix) wherever ISA-L documents it as
// invertible for every erasure pattern (its first parity row is all ones, so r = 1 is plain XOR and
// ECRM-style XOR parity is a special case); outside that range it is ISA-L's Cauchy matrix
// (gf_gen_cauchy1_matrix), which is MDS for every k + r <= 256. matrix() says which one is in use.
//
// ISA-L's documented safe range (m = k + r rows): k <= 3; k = 4, m <= 25; k = 5, m <= 10;
// k <= 21, m - k = 4; m - k <= 3. Within 1 <= r <= 4, k + r <= 32 that is: r <= 3 for any k, or
// r = 4 with k <= 21. So the automatic choice is Cauchy only for r = 4, 22 <= k <= 28; an explicit
// Vandermonde request outside the range throws, because some erasure patterns do not decode (e.g. at
// k = 22, r = 4 losing data 0, 10, 21 and parity 2 leaves a singular matrix; tested).
// Parity bytes are byte-identical to ISA-L's generator (and so to pyeclib's isa_l_rs_vand /
// isa_l_rs_cauchy backends).
//
// All methods are const and thread-safe; lengths are in bytes and may be any size (fragments under 64
// bytes go through zero-padded copies: ISA-L's SIMD kernels need 64, its scalar fallback is ~10x
// slower). Decode caches its tables per erasure pattern. On any error nothing is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xdl_ec {

enum class CodeMatrix { kVandermonde, kCauchy };

// "vandermonde" / "cauchy".
const char* CodeMatrixName(CodeMatrix matrix);

class ErasureCode {
 public:
  static constexpr int kMaxParity = 4;
  static constexpr int kMaxFragments = 32;

  // Throws std::invalid_argument for k < 1, r < 1, r > kMaxParity or k + r > kMaxFragments.
  ErasureCode(int k, int r);
  // Also throws std::invalid_argument for kVandermonde outside ISA-L's documented safe range.
  ErasureCode(int k, int r, CodeMatrix matrix);

  // True when ISA-L documents gf_gen_rs_matrix(k + r, k) as invertible for every erasure pattern.
  static bool VandermondeIsMds(int k, int r);
  // The matrix ErasureCode(k, r) picks: Vandermonde when VandermondeIsMds(k, r), else Cauchy.
  static CodeMatrix DefaultMatrix(int k, int r);

  int k() const { return k_; }
  int r() const { return r_; }
  CodeMatrix matrix() const { return matrix_; }
  // Coefficient g(j, i) that data fragment i contributes to parity fragment j (0 <= j < r).
  uint8_t coefficient(int j, int i) const;

  // parity[j] (len bytes each, j < r) = sum_i g(j, i) * data[i].
  void Encode(size_t len, const uint8_t* const* data, uint8_t* const* parity) const;
  // Rebuilds the fragments in `erased` (indices 0..k+r-1: data first, then parity) from `present`
  // (exactly the first k available indices are used); `fragments[idx]` points to len bytes for every
  // index, the erased ones being outputs. Throws std::invalid_argument("unrecoverable: lost ... ,
  // tolerate r") when more than r are erased, or on a bad index.
  void Decode(size_t len, const std::vector<int>& erased, uint8_t* const* fragments) const;
  // General form: from the surviving fragments `present` (distinct indices, any order; the k smallest
  // are used, so data is preferred) whose bytes are sources[p] (parallel to `present`), rebuild only the
  // fragments `wanted` into outputs[w] (parallel to `wanted`). For a degraded read of one lost fragment
  // without rebuilding the others. Throws std::invalid_argument("unrecoverable: ...") when fewer than k
  // are present, or on bad/duplicate indices or a wanted index that is also present.
  void Decode(size_t len, const std::vector<int>& present, const uint8_t* const* sources,
              const std::vector<int>& wanted, uint8_t* const* outputs) const;
  // In-place delta update of one parity fragment: parity_j ^= g(j, i) * delta (ISA-L's
  // ec_encode_data_update restricted to row j). delta = old XOR new of data fragment i.
  // For the Vandermonde matrix row 0 is all ones and this is a plain XOR.
  void Update(size_t len, int j, int i, const uint8_t* delta, uint8_t* parity_j) const;
  // All r parity fragments at once (delta read once): parity[j] ^= g(j, i) * delta for every j < r.
  void UpdateRows(size_t len, int i, const uint8_t* delta, uint8_t* const* parity) const;

 private:
  struct PlanCache;  // decode tables per erasure pattern, shared by copies, internally locked
  std::shared_ptr<const std::vector<uint8_t>> DecodeTables(const int* used, const std::vector<int>& wanted) const;

  int k_, r_;
  CodeMatrix matrix_;
  std::vector<uint8_t> matrix_bytes_;  // (k + r) x k, systematic
  std::vector<uint8_t> tables_;        // ec_init_tables of the r parity rows: 32 * k * r bytes
  std::shared_ptr<PlanCache> plans_;
};

}  // namespace xdl_ec

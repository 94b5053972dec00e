// A systematic MDS erasure code over GF(2^8) on ISA-L: k data fragments, r parity fragments.
// One verb per operation, as ISA-L's erasure_code.h: Encode, Decode, Update.
//
// The generator is ISA-L's Vandermonde matrix (gf_gen_rs_matrix) wherever ISA-L documents it as
// invertible for every erasure pattern (its first parity row is all ones, so r = 1 is plain XOR and
// ECRM-style XOR parity is a special case); outside that range it is ISA-L's Cauchy matrix
// (gf_gen_cauchy1_matrix), which is MDS for every k + r <= 256. matrix() says which one is in use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xdl_ec {

enum class CodeMatrix { kVandermonde, kCauchy };

class ErasureCode {
 public:
  static constexpr int kMaxParity = 4;
  static constexpr int kMaxFragments = 32;

  // Throws std::invalid_argument for k < 1, r < 1, r > kMaxParity or k + r > kMaxFragments.
  ErasureCode(int k, int r);
  ErasureCode(int k, int r, CodeMatrix matrix);

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
  // In-place delta update of one parity fragment: parity_j ^= g(j, i) * delta (ISA-L's
  // ec_encode_data_update restricted to row j). delta = old XOR new of data fragment i.
  void Update(size_t len, int j, int i, const uint8_t* delta, uint8_t* parity_j) const;

 private:
  int k_, r_;
  CodeMatrix matrix_;
  std::vector<uint8_t> matrix_bytes_;  // (k + r) x k, systematic
  std::vector<uint8_t> tables_;        // ec_init_tables of the r parity rows: 32 * k * r bytes
};

}  // namespace xdl_ec

// Where every block of a parity group lives: pure arithmetic over (N servers, k data, r parity), no
// storage and no transport, so routing, parity holders, recovery and scrub agree by construction.
//
// Stripes rotate RAID-5/6 style so every server holds data and parity in equal measure:
//   stripe s = q * N + m (q = cycle, m in [0, N)); its members are servers (m + j) mod N for j in
//   [0, k + r): j < k is data member j, j >= k parity member j - k.
//   Server p's local data block b   <->  q = b / k, j = b % k,  m = (p - j) mod N.
//   Server p's local parity block c <->  q = c / r, i = c % r,  m = (p - k - i) mod N.
// Per cycle every server holds exactly k data blocks and r parity blocks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xdl_ec {

// One block of one server: `block` indexes the server's data blocks or its parity blocks.
struct BlockRef {
  int server = -1;
  size_t block = 0;
};

// A block's place in its stripe: `member` is the data member j (0..k-1) or parity member i (0..r-1).
struct StripeSlot {
  size_t stripe = 0;
  int member = 0;
};

class StripeLayout {
 public:
  // Throws std::invalid_argument naming the bad argument: k < 1, r < 1, or n < k + r.
  StripeLayout(int n, int k, int r);

  int n() const { return n_; }
  int k() const { return k_; }
  int r() const { return r_; }
  int width() const { return k_ + r_; }

  // Server p's local data block b -> (stripe, data member j).
  StripeSlot DataSlot(int server, size_t block) const;
  // Server p's local parity block c -> (stripe, parity member i).
  StripeSlot ParitySlot(int server, size_t block) const;
  // Stripe s's data member j -> (server, local data block).
  BlockRef DataMember(size_t stripe, int j) const;
  // Stripe s's parity member i -> (server, local parity block).
  BlockRef ParityMember(size_t stripe, int i) const;
  // Stripe s's member at position t in [0, k + r) (data first, then parity): the server alone.
  int ServerAt(size_t stripe, int position) const;

  // Number of stripes needed to cover `data_blocks` local data blocks or `parity_blocks` local parity
  // blocks on every server: whole cycles, so every block of those cycles is covered.
  size_t StripesForDataBlocks(size_t data_blocks) const;
  size_t StripesForParityBlocks(size_t parity_blocks) const;

 private:
  void CheckServer(int server) const;
  int n_, k_, r_;
};

}  // namespace xdl_ec

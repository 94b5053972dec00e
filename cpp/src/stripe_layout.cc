#include "xdl_ec/stripe_layout.h"

#include <stdexcept>
#include <string>

namespace xdl_ec {

namespace {
int Mod(long long a, int n) {
  long long m = a % n;
  return static_cast<int>(m < 0 ? m + n : m);
}
}  // namespace

StripeLayout::StripeLayout(int n, int k, int r) : n_(n), k_(k), r_(r) {
  if (k < 1)
    throw std::invalid_argument("StripeLayout: k (data blocks per stripe) must be >= 1, got " + std::to_string(k));
  if (r < 1)
    throw std::invalid_argument("StripeLayout: r (parity blocks per stripe) must be >= 1, got " + std::to_string(r));
  if (n < k + r)
    throw std::invalid_argument("StripeLayout: n (servers) must be >= k + r = " + std::to_string(k + r) +
                                ", got n=" + std::to_string(n) + "; add servers or use a narrower code");
}

void StripeLayout::CheckServer(int server) const {
  if (server < 0 || server >= n_)
    throw std::out_of_range("StripeLayout: server " + std::to_string(server) + " is outside [0, " + std::to_string(n_) +
                            ")");
}

StripeSlot StripeLayout::DataSlot(int server, size_t block) const {
  CheckServer(server);
  const size_t q = block / k_;
  const int j = static_cast<int>(block % k_);
  const int m = Mod(static_cast<long long>(server) - j, n_);
  return {q * n_ + m, j};
}

StripeSlot StripeLayout::ParitySlot(int server, size_t block) const {
  CheckServer(server);
  const size_t q = block / r_;
  const int i = static_cast<int>(block % r_);
  const int m = Mod(static_cast<long long>(server) - k_ - i, n_);
  return {q * n_ + m, i};
}

BlockRef StripeLayout::DataMember(size_t stripe, int j) const {
  if (j < 0 || j >= k_)
    throw std::out_of_range("StripeLayout: data member " + std::to_string(j) +
                            " is outside [0, k=" + std::to_string(k_) + ")");
  const size_t q = stripe / n_;
  const int m = static_cast<int>(stripe % n_);
  return {(m + j) % n_, q * k_ + j};
}

BlockRef StripeLayout::ParityMember(size_t stripe, int i) const {
  if (i < 0 || i >= r_)
    throw std::out_of_range("StripeLayout: parity member " + std::to_string(i) +
                            " is outside [0, r=" + std::to_string(r_) + ")");
  const size_t q = stripe / n_;
  const int m = static_cast<int>(stripe % n_);
  return {(m + k_ + i) % n_, q * r_ + i};
}

int StripeLayout::ServerAt(size_t stripe, int position) const {
  if (position < 0 || position >= k_ + r_)
    throw std::out_of_range("StripeLayout: stripe position " + std::to_string(position) +
                            " is outside [0, k+r=" + std::to_string(k_ + r_) + ")");
  return static_cast<int>((stripe % n_ + position) % n_);
}

size_t StripeLayout::StripesForDataBlocks(size_t data_blocks) const { return (data_blocks + k_ - 1) / k_ * n_; }

size_t StripeLayout::StripesForParityBlocks(size_t parity_blocks) const { return (parity_blocks + r_ - 1) / r_ * n_; }

}  // namespace xdl_ec

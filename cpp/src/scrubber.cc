#include "xdl_ec/scrubber.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace xdl_ec {

Scrubber::Scrubber(const StripeLayout& layout, std::shared_ptr<const ErasureCode> code, uint32_t block_slots,
                   size_t record_bytes)
    : layout_(layout), code_(std::move(code)), block_slots_(block_slots), record_bytes_(record_bytes) {
  if (!code_) throw std::invalid_argument("Scrubber: code must not be null");
  if (code_->k() != layout.k() || code_->r() != layout.r())
    throw std::invalid_argument(
        "Scrubber: code (k=" + std::to_string(code_->k()) + ", r=" + std::to_string(code_->r()) +
        ") and stripe layout (k=" + std::to_string(layout.k()) + ", r=" + std::to_string(layout.r()) + ") disagree");
  if (block_slots == 0 || record_bytes == 0)
    throw std::invalid_argument("Scrubber: block_slots and record_bytes must be >= 1, got " +
                                std::to_string(block_slots) + " and " + std::to_string(record_bytes));
}

std::vector<ScrubMismatch> Scrubber::Scrub(size_t stripes, const FragmentReader& reader) const {
  if (!reader.read_data || !reader.read_parity)
    throw std::invalid_argument("Scrubber::Scrub: the reader needs both read_data and read_parity");
  const int k = layout_.k(), r = layout_.r();
  const size_t bytes = block_bytes();
  std::vector<uint8_t> data(static_cast<size_t>(k) * bytes), parity(static_cast<size_t>(r) * bytes), stored(bytes);
  std::vector<const uint8_t*> data_ptrs(k);
  std::vector<uint8_t*> parity_ptrs(r);
  for (int j = 0; j < k; ++j) data_ptrs[j] = data.data() + j * bytes;
  for (int i = 0; i < r; ++i) parity_ptrs[i] = parity.data() + i * bytes;
  std::vector<ScrubMismatch> mismatches;
  for (size_t stripe = 0; stripe < stripes; ++stripe) {
    for (int j = 0; j < k; ++j) {
      const BlockRef ref = layout_.DataMember(stripe, j);
      reader.read_data(ref.server, ref.block, 0, record_bytes_, data.data() + j * bytes);
    }
    code_->Encode(bytes, data_ptrs.data(), parity_ptrs.data());
    for (int i = 0; i < r; ++i) {
      const BlockRef ref = layout_.ParityMember(stripe, i);
      reader.read_parity(ref.server, ref.block, 0, record_bytes_, stored.data());
      if (std::memcmp(stored.data(), parity_ptrs[i], bytes) != 0)
        mismatches.push_back({stripe, i, ref.server, ref.block});
    }
  }
  return mismatches;
}

}  // namespace xdl_ec

#include "xdl_ec/parity_router.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace xdl_ec {

ParityRouter::ParityRouter(const StripeLayout& layout, uint32_t block_slots, size_t record_bytes)
    : layout_(layout), block_slots_(block_slots), record_bytes_(record_bytes) {
  if (block_slots == 0) throw std::invalid_argument("ParityRouter: block_slots must be >= 1, got 0");
  if (record_bytes == 0) throw std::invalid_argument("ParityRouter: record_bytes must be >= 1, got 0");
  if (static_cast<uint64_t>(block_slots) * record_bytes > UINT32_MAX)
    throw std::invalid_argument("ParityRouter: block_slots * record_bytes = " +
                                std::to_string(static_cast<uint64_t>(block_slots) * record_bytes) +
                                " exceeds 4 GiB per block; use smaller blocks");
}

void ParityRouter::Route(int source, const DeltaBatch& deltas, std::vector<ParityUpdate>* out) const {
  if (source < 0 || source >= layout_.n())
    throw std::out_of_range("ParityRouter::Route: source server " + std::to_string(source) + " is outside [0, " +
                            std::to_string(layout_.n()) + ")");
  if (!deltas.slots.empty() && deltas.record_bytes != record_bytes_)
    throw std::invalid_argument("ParityRouter::Route: delta batch has record_bytes=" + std::to_string(deltas.record_bytes) +
                                ", the group's records have " + std::to_string(record_bytes_));
  if (deltas.xor_bytes.size() != deltas.slots.size() * deltas.record_bytes)
    throw std::invalid_argument("ParityRouter::Route: delta batch holds " + std::to_string(deltas.xor_bytes.size()) +
                                " bytes for " + std::to_string(deltas.slots.size()) + " slots of " +
                                std::to_string(deltas.record_bytes) + " bytes");
  const int n = layout_.n(), k = layout_.k(), r = layout_.r();
  out->resize(n);
  for (int h = 0; h < n; ++h) {
    ParityUpdate& u = (*out)[h];
    u.clear();
    u.source = source;
    u.holder = h;
    u.record_bytes = static_cast<uint32_t>(record_bytes_);
  }
  const size_t count = deltas.size();
  // Each holder gets about count * r / (n - 1) entries; reserving avoids regrowth on first use.
  const size_t expect = count * r / (n > 1 ? n - 1 : 1) + 16;
  for (ParityUpdate& u : *out) {
    u.entries.reserve(expect);
    u.deltas.reserve(expect * record_bytes_);
  }
  // StripeLayout::DataSlot inlined (without its checks: source is valid): this loop runs per touched
  // slot on the training path.
  const size_t rb = record_bytes_;
  for (size_t e = 0; e < count; ++e) {
    const uint32_t slot = deltas.slots[e];
    const size_t b = slot / block_slots_;
    const uint32_t offset = static_cast<uint32_t>((slot % block_slots_) * rb);
    const size_t q = b / k;
    const int j = static_cast<int>(b - q * k);
    int m = source - j;  // (source - j) mod n without a division: 0 <= j < k < n
    if (m < 0) m += n;
    const uint8_t* delta = deltas.delta(e);
    for (int i = 0; i < r; ++i) {
      int h = m + k + i;  // < 2n since m < n and k + i < n
      if (h >= n) h -= n;
      ParityUpdate& u = (*out)[h];
      u.entries.push_back({q * r + i, offset, static_cast<uint8_t>(i), static_cast<uint8_t>(j)});
      u.deltas.insert(u.deltas.end(), delta, delta + rb);  // no zero-fill, unlike resize
    }
  }
}

}  // namespace xdl_ec

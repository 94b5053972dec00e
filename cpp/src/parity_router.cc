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
  if ((block_slots & (block_slots - 1)) == 0) block_shift_ = __builtin_ctz(block_slots);
}

void ParityRouter::Check(const char* what, int source, const DeltaBatch& deltas) const {
  if (source < 0 || source >= layout_.n())
    throw std::out_of_range(std::string("ParityRouter::") + what + ": source server " + std::to_string(source) +
                            " is outside [0, " + std::to_string(layout_.n()) + ")");
  if (!deltas.slots.empty() && deltas.record_bytes != record_bytes_)
    throw std::invalid_argument(std::string("ParityRouter::") + what +
                                ": delta batch has record_bytes=" + std::to_string(deltas.record_bytes) +
                                ", the group's records have " + std::to_string(record_bytes_));
  if (deltas.xor_bytes.size() != deltas.slots.size() * deltas.record_bytes)
    throw std::invalid_argument(std::string("ParityRouter::") + what + ": delta batch holds " +
                                std::to_string(deltas.xor_bytes.size()) + " bytes for " +
                                std::to_string(deltas.slots.size()) + " slots of " +
                                std::to_string(deltas.record_bytes) + " bytes");
}

// Calls sink(holder, entry, delta) for every parity target of every delta, in batch order.
// StripeLayout::DataSlot inlined (without its checks: source is valid): this loop runs per touched
// slot on the training path.
template <typename DeltaAt, typename Sink>
void ParityRouter::ForEachEntry(int source, size_t count, const uint32_t* slots, DeltaAt delta_at, Sink sink) const {
  const int n = layout_.n(), k = layout_.k(), r = layout_.r();
  const size_t rb = record_bytes_;
  for (size_t e = 0; e < count; ++e) {
    // 32-bit arithmetic (slots are 32-bit), and no division at all for power-of-two blocks.
    const uint32_t slot = slots[e];
    const uint32_t b = block_shift_ >= 0 ? slot >> block_shift_ : slot / block_slots_;
    const uint32_t offset = static_cast<uint32_t>((slot - b * block_slots_) * rb);
    const uint32_t q = b / static_cast<uint32_t>(k);
    const int j = static_cast<int>(b - q * static_cast<uint32_t>(k));
    int m = source - j;  // (source - j) mod n without a division: 0 <= j < k < n
    if (m < 0) m += n;
    const uint8_t* delta = delta_at(e);
    for (int i = 0; i < r; ++i) {
      int h = m + k + i;  // < 2n since m < n and k + i < n
      if (h >= n) h -= n;
      sink(h,
           ParityUpdate::Entry{static_cast<uint64_t>(q) * r + i, offset, static_cast<uint8_t>(i),
                               static_cast<uint8_t>(j)},
           delta);
    }
  }
}

template <typename DeltaAt>
void ParityRouter::RouteInto(int source, size_t count, const uint32_t* slots, DeltaAt delta_at,
                             std::vector<ParityUpdate>* out) const {
  const int n = layout_.n(), r = layout_.r();
  out->resize(n);
  for (int h = 0; h < n; ++h) {
    ParityUpdate& u = (*out)[h];
    u.clear();
    u.source = source;
    u.holder = h;
    u.record_bytes = static_cast<uint32_t>(record_bytes_);
  }
  // Each holder gets about count * r / (n - 1) entries; reserving avoids regrowth on first use.
  const size_t expect = count * r / (n > 1 ? n - 1 : 1) + 16;
  for (ParityUpdate& u : *out) {
    u.entries.reserve(expect);
    u.deltas.reserve(expect * record_bytes_);
  }
  const size_t rb = record_bytes_;
  ForEachEntry(source, count, slots, delta_at,
               [out, rb](int h, const ParityUpdate::Entry& entry, const uint8_t* delta) {
                 ParityUpdate& u = (*out)[h];
                 u.entries.push_back(entry);
                 u.deltas.insert(u.deltas.end(), delta, delta + rb);  // no zero-fill, unlike resize
               });
}

void ParityRouter::Route(int source, const DeltaBatch& deltas, std::vector<ParityUpdate>* out) const {
  Check("Route", source, deltas);
  const uint8_t* bytes = deltas.xor_bytes.data();
  const size_t rb = record_bytes_;
  RouteInto(
      source, deltas.size(), deltas.slots.data(), [bytes, rb](size_t e) { return bytes + e * rb; }, out);
}

void ParityRouter::Route(int source, const std::vector<uint32_t>& slots, const std::vector<const uint8_t*>& deltas,
                         std::vector<ParityUpdate>* out) const {
  if (source < 0 || source >= layout_.n())
    throw std::out_of_range("ParityRouter::Route: source server " + std::to_string(source) + " is outside [0, " +
                            std::to_string(layout_.n()) + ")");
  if (slots.size() != deltas.size())
    throw std::invalid_argument("ParityRouter::Route: " + std::to_string(slots.size()) + " slots but " +
                                std::to_string(deltas.size()) + " delta pointers");
  for (size_t e = 0; e < deltas.size(); ++e)
    if (deltas[e] == nullptr)
      throw std::invalid_argument("ParityRouter::Route: delta " + std::to_string(e) + " is null");
  const uint8_t* const* at = deltas.data();
  RouteInto(
      source, slots.size(), slots.data(), [at](size_t e) { return at[e]; }, out);
}

void ParityRouter::RouteRefs(int source, const DeltaBatch& deltas,
                             std::vector<std::vector<ParityDeltaRef>>* out) const {
  Check("RouteRefs", source, deltas);
  const int n = layout_.n(), r = layout_.r();
  out->resize(n);
  const size_t expect = deltas.size() * r / (n > 1 ? n - 1 : 1) + 16;
  for (std::vector<ParityDeltaRef>& refs : *out) {
    refs.clear();
    refs.reserve(expect);
  }
  const uint8_t* bytes = deltas.xor_bytes.data();
  const size_t rb = record_bytes_;
  ForEachEntry(
      source, deltas.size(), deltas.slots.data(), [bytes, rb](size_t e) { return bytes + e * rb; },
      [out](int h, const ParityUpdate::Entry& entry, const uint8_t* delta) {
        (*out)[h].push_back(ParityDeltaRef{entry, delta});
      });
}

}  // namespace xdl_ec

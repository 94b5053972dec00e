#include "xdl_ec/parity_update.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace xdl_ec {

namespace {
constexpr uint8_t kMagic[4] = {'X', 'P', 'U', '1'};
constexpr size_t kHeaderBytes = 4 + 4 + 4 + 4 + 8;
constexpr size_t kEntryBytes = 8 + 4 + 1 + 1;

template <typename T>
void Put(std::vector<uint8_t>& out, T value) {
  for (size_t b = 0; b < sizeof(T); ++b) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * b)));
}

template <typename T>
T Get(const uint8_t* p) {
  uint64_t v = 0;
  for (size_t b = 0; b < sizeof(T); ++b) v |= static_cast<uint64_t>(p[b]) << (8 * b);
  return static_cast<T>(v);
}
}  // namespace

std::vector<uint8_t> ParityUpdate::Serialize() const {
  std::vector<uint8_t> out;
  out.reserve(kHeaderBytes + entries.size() * kEntryBytes + deltas.size());
  SerializeTo(&out);
  return out;
}

void ParityUpdate::SerializeTo(std::vector<uint8_t>* to) const {
  if (deltas.size() != entries.size() * static_cast<size_t>(record_bytes))
    throw std::invalid_argument("ParityUpdate::Serialize: deltas hold " + std::to_string(deltas.size()) +
                                " bytes, expected entries (" + std::to_string(entries.size()) + ") * record_bytes (" +
                                std::to_string(record_bytes) + ")");
  std::vector<uint8_t>& out = *to;  // no reserve here: callers appending many updates reserve once for all
  out.insert(out.end(), kMagic, kMagic + 4);
  Put<uint32_t>(out, static_cast<uint32_t>(source));
  Put<uint32_t>(out, static_cast<uint32_t>(holder));
  Put<uint32_t>(out, record_bytes);
  Put<uint64_t>(out, entries.size());
  for (const Entry& e : entries) {
    Put<uint64_t>(out, e.parity_block);
    Put<uint32_t>(out, e.offset);
    out.push_back(e.parity_member);
    out.push_back(e.data_member);
  }
  out.insert(out.end(), deltas.begin(), deltas.end());
}

ParityUpdate ParityUpdate::Parse(const uint8_t* bytes, size_t size) {
  if (size < kHeaderBytes || bytes == nullptr)
    throw std::invalid_argument("ParityUpdate::Parse: " + std::to_string(size) + " bytes is shorter than the " +
                                std::to_string(kHeaderBytes) + "-byte header");
  if (std::memcmp(bytes, kMagic, 4) != 0)
    throw std::invalid_argument("ParityUpdate::Parse: bad magic (expected \"XPU1\"): not a parity update");
  ParityUpdate u;
  u.source = static_cast<int32_t>(Get<uint32_t>(bytes + 4));
  u.holder = static_cast<int32_t>(Get<uint32_t>(bytes + 8));
  u.record_bytes = Get<uint32_t>(bytes + 12);
  const uint64_t count = Get<uint64_t>(bytes + 16);
  const size_t body = size - kHeaderBytes;
  // Checked by division so a hostile count cannot overflow the product.
  const size_t per_entry = kEntryBytes + u.record_bytes;
  if (count > body / per_entry || count * per_entry != body)
    throw std::invalid_argument("ParityUpdate::Parse: " + std::to_string(count) + " entries of " +
                                std::to_string(u.record_bytes) + "-byte records need " +
                                std::to_string(count * per_entry) + " bytes after the header, got " +
                                std::to_string(body));
  const uint8_t* p = bytes + kHeaderBytes;
  u.entries.resize(count);
  for (Entry& e : u.entries) {
    e.parity_block = Get<uint64_t>(p);
    e.offset = Get<uint32_t>(p + 8);
    e.parity_member = p[12];
    e.data_member = p[13];
    p += kEntryBytes;
  }
  u.deltas.assign(p, bytes + size);
  return u;
}

}  // namespace xdl_ec

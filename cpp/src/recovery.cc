#include "xdl_ec/recovery.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "xdl_ec/record_layout.h"

namespace xdl_ec {

std::string Recovery::ServerSet(const std::vector<int>& servers) {
  std::string out = "{";
  for (size_t i = 0; i < servers.size(); ++i) out += (i ? ", " : "") + std::to_string(servers[i]);
  return out + "}";
}

void Recovery::CheckRecoverable(const StripeLayout& layout, const std::vector<int>& lost) {
  std::vector<int> distinct;
  for (int s : lost)
    if (std::find(distinct.begin(), distinct.end(), s) == distinct.end()) distinct.push_back(s);
  if (static_cast<int>(distinct.size()) > layout.r())
    throw std::invalid_argument("unrecoverable: lost servers " + ServerSet(distinct) +
                                ", the code tolerates r=" + std::to_string(layout.r()));
}

Recovery::Recovery(const StripeLayout& layout, std::shared_ptr<const ErasureCode> code, uint32_t block_slots,
                   size_t record_bytes)
    : layout_(layout), code_(std::move(code)), block_slots_(block_slots), record_bytes_(record_bytes) {
  if (!code_) throw std::invalid_argument("Recovery: code must not be null");
  if (code_->k() != layout.k() || code_->r() != layout.r())
    throw std::invalid_argument(
        "Recovery: code (k=" + std::to_string(code_->k()) + ", r=" + std::to_string(code_->r()) +
        ") and stripe layout (k=" + std::to_string(layout.k()) + ", r=" + std::to_string(layout.r()) + ") disagree");
  if (block_slots == 0 || record_bytes < RecordLayout::kValueOffset)
    throw std::invalid_argument("Recovery: block_slots must be >= 1 and record_bytes >= 12, got " +
                                std::to_string(block_slots) + " and " + std::to_string(record_bytes));
}

std::vector<uint8_t> Recovery::DownMask(const std::vector<int>& unavailable) const {
  std::vector<uint8_t> down(layout_.n(), 0);
  for (int s : unavailable) {
    if (s < 0 || s >= layout_.n())
      throw std::out_of_range("Recovery: unavailable server " + std::to_string(s) + " is outside [0, " +
                              std::to_string(layout_.n()) + ")");
    down[s] = 1;
  }
  CheckRecoverable(layout_, unavailable);
  return down;
}

std::vector<int> Recovery::Present(size_t stripe, const std::vector<uint8_t>& down) const {
  std::vector<int> present;
  for (int t = 0; t < layout_.width() && static_cast<int>(present.size()) < layout_.k(); ++t) {
    if (!down[layout_.ServerAt(stripe, t)]) present.push_back(t);
  }
  return present;
}

RecoveredKeyIndex Recovery::RecoverKeyIndex(int server, size_t data_blocks, const std::vector<int>& unavailable,
                                            const FragmentReader& reader) const {
  const std::vector<uint8_t> down = DownMask(unavailable);
  if (server < 0 || server >= layout_.n() || !down[server])
    throw std::invalid_argument("Recovery::RecoverKeyIndex: server " + std::to_string(server) +
                                " must be one of the unavailable servers " + ServerSet(unavailable));
  const int k = layout_.k();
  const size_t width = RecordLayout::kValueOffset;  // key (8) + flags (4)
  const size_t column_bytes = block_slots_ * width;
  std::vector<uint8_t> buffers(static_cast<size_t>(k + 1) * column_bytes);
  std::vector<const uint8_t*> sources(k);
  uint8_t* decoded = buffers.data() + static_cast<size_t>(k) * column_bytes;
  RecoveredKeyIndex index;
  for (size_t b = 0; b < data_blocks; ++b) {
    const StripeSlot where = layout_.DataSlot(server, b);
    const std::vector<int> present = Present(where.stripe, down);
    for (int t = 0; t < k; ++t) {
      uint8_t* buf = buffers.data() + static_cast<size_t>(t) * column_bytes;
      const FragmentRef f = Fragment(where.stripe, present[t]);
      (f.parity ? reader.read_parity : reader.read_data)(f.ref.server, f.ref.block, 0, width, buf);
      sources[t] = buf;
    }
    const std::vector<int> wanted = {where.member};
    uint8_t* outputs[1] = {decoded};
    code_->Decode(column_bytes, present, sources.data(), wanted, outputs);
    for (uint32_t x = 0; x < block_slots_; ++x) {
      const uint8_t* rec = decoded + x * width;
      uint32_t flags;
      std::memcpy(&flags, rec + RecordLayout::kFlagsOffset, sizeof(flags));
      if (!(flags & RecordLayout::kLive)) continue;
      int64_t key;
      std::memcpy(&key, rec + RecordLayout::kKeyOffset, sizeof(key));
      const size_t slot = b * block_slots_ + x;
      index.keys.push_back(key);
      index.slots.push_back(static_cast<uint32_t>(slot));
      index.high_water = slot + 1;
    }
  }
  return index;
}

void Recovery::DecodeStripe(size_t stripe, const std::vector<int>& wanted, uint8_t* const* outputs,
                            const std::vector<int>& unavailable, const FragmentReader& reader) const {
  const std::vector<uint8_t> down = DownMask(unavailable);
  const int k = layout_.k();
  for (int pos : wanted) {
    if (pos < 0 || pos >= layout_.width())
      throw std::out_of_range("Recovery::DecodeStripe: position " + std::to_string(pos) +
                              " is outside [0, k+r=" + std::to_string(layout_.width()) + ")");
    if (!down[layout_.ServerAt(stripe, pos)])
      throw std::invalid_argument("Recovery::DecodeStripe: position " + std::to_string(pos) + " of stripe " +
                                  std::to_string(stripe) + " is on available server " +
                                  std::to_string(layout_.ServerAt(stripe, pos)) + "; read it instead of decoding it");
  }
  if (wanted.empty()) return;
  const std::vector<int> present = Present(stripe, down);
  const size_t bytes = block_bytes();
  // Reused across calls: a fresh multi-block buffer per stripe would be page-faulted in every time.
  thread_local std::vector<uint8_t> buffers;
  if (buffers.size() < static_cast<size_t>(k) * bytes) buffers.resize(static_cast<size_t>(k) * bytes);
  std::vector<const uint8_t*> sources(k);
  for (int t = 0; t < k; ++t) {
    uint8_t* buf = buffers.data() + static_cast<size_t>(t) * bytes;
    const FragmentRef f = Fragment(stripe, present[t]);
    (f.parity ? reader.read_parity : reader.read_data)(f.ref.server, f.ref.block, 0, record_bytes_, buf);
    sources[t] = buf;
  }
  code_->Decode(bytes, present, sources.data(), wanted, outputs);
}

FragmentRef Recovery::Fragment(size_t stripe, int pos) const {
  const int k = layout_.k();
  if (pos < k) return FragmentRef{false, layout_.DataMember(stripe, pos)};
  return FragmentRef{true, layout_.ParityMember(stripe, pos - k)};
}

std::vector<FragmentRef> Recovery::StripeReads(size_t stripe, const std::vector<int>& unavailable) const {
  std::vector<FragmentRef> reads;
  for (int pos : Present(stripe, DownMask(unavailable))) reads.push_back(Fragment(stripe, pos));
  return reads;
}

void Recovery::DecodeDataBlock(int server, size_t block, uint8_t* out, const std::vector<int>& unavailable,
                               const FragmentReader& reader) const {
  const StripeSlot where = layout_.DataSlot(server, block);
  uint8_t* outputs[1] = {out};
  DecodeStripe(where.stripe, {where.member}, outputs, unavailable, reader);
}

}  // namespace xdl_ec

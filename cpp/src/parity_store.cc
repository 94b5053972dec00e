#include "xdl_ec/parity_store.h"

#include <immintrin.h>
#include <isa-l/erasure_code.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "xdl_ec/xor_bytes.h"

namespace xdl_ec {

namespace {
constexpr size_t kTableBytes = 32 + 256;  // nibble tables, then the full product table

inline void MultiplyXorScalar(size_t from, size_t len, const uint8_t* table, const uint8_t* delta, uint8_t* parity) {
  const uint8_t* full = table + 32;
  for (size_t b = from; b < len; ++b) parity[b] ^= full[delta[b]];
}

// parity ^= g * delta, 32 bytes a step by nibble lookups (the method of ISA-L's kernels), tail by table.
__attribute__((target("avx2"))) void MultiplyXorAvx2(size_t len, const uint8_t* table, const uint8_t* delta,
                                                     uint8_t* parity) {
  const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
  const __m256i hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table + 16)));
  const __m256i mask = _mm256_set1_epi8(0x0f);
  size_t b = 0;
  for (; b + 32 <= len; b += 32) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(delta + b));
    const __m256i product = _mm256_xor_si256(_mm256_shuffle_epi8(lo, _mm256_and_si256(x, mask)),
                                             _mm256_shuffle_epi8(hi, _mm256_and_si256(_mm256_srli_epi64(x, 4), mask)));
    __m256i* out = reinterpret_cast<__m256i*>(parity + b);
    _mm256_storeu_si256(out, _mm256_xor_si256(_mm256_loadu_si256(out), product));
  }
  MultiplyXorScalar(b, len, table, delta, parity);
}

bool HaveAvx2() {
  static const bool have = [] {
    __builtin_cpu_init();  // may run before the library's constructors ran the CPU detection
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return have;
}
}  // namespace

ParityStore::ParityStore(std::shared_ptr<const ErasureCode> code, size_t block_bytes, const ParitySpill& spill)
    : code_(std::move(code)), block_bytes_(block_bytes) {
  if (!code_) throw std::invalid_argument("ParityStore: code must not be null");
  if (block_bytes == 0) throw std::invalid_argument("ParityStore: block_bytes must be >= 1, got 0");
  if (spill.budget_bytes > 0) {
    if (spill.record_bytes == 0 || block_bytes % spill.record_bytes != 0)
      throw std::invalid_argument("ParityStore: a tiered store's record_bytes (" + std::to_string(spill.record_bytes) +
                                  ") must divide block_bytes (" + std::to_string(block_bytes) + ")");
    tier_ = std::make_unique<SpillTier>(spill.record_bytes, spill.budget_bytes, spill.dir);
    tier_record_bytes_ = spill.record_bytes;
  }
  const int k = code_->k(), r = code_->r();
  coefficient_is_one_.resize(static_cast<size_t>(k) * r);
  for (int i = 0; i < r; ++i)
    for (int j = 0; j < k; ++j) coefficient_is_one_[static_cast<size_t>(i) * k + j] = code_->coefficient(i, j) == 1;
  multiply_tables_.resize(static_cast<size_t>(k) * r * kTableBytes);
  for (int i = 0; i < r; ++i) {
    for (int j = 0; j < k; ++j) {
      const uint8_t g = code_->coefficient(i, j);
      uint8_t* table = &multiply_tables_[(static_cast<size_t>(i) * k + j) * kTableBytes];
      for (int x = 0; x < 16; ++x) {
        table[x] = gf_mul(g, static_cast<uint8_t>(x));
        table[16 + x] = gf_mul(g, static_cast<uint8_t>(x << 4));
      }
      for (int x = 0; x < 256; ++x) table[32 + x] = gf_mul(g, static_cast<uint8_t>(x));
    }
  }
}

uint8_t* ParityStore::BlockLocked(size_t c) {
  if (c >= blocks_.size()) blocks_.resize(c + 1);
  if (!blocks_[c]) {
    // A new slab (a quarter of what is held, 2 MiB to 64 MiB, whole huge pages) when the last is full.
    if (slabs_.empty() || slab_used_ + block_bytes_ > slabs_.back().size()) {
      constexpr size_t kMinSlab = MappedBuffer::kHugePage, kMaxSlab = size_t{64} << 20;
      size_t bytes = std::max(block_bytes_, std::min(kMaxSlab, std::max(kMinSlab, slab_total_ / 4)));
      bytes = (bytes + MappedBuffer::kHugePage - 1) / MappedBuffer::kHugePage * MappedBuffer::kHugePage;
      slabs_.emplace_back(bytes);  // zeroed; pages cost memory only once touched
      slab_used_ = 0;
      slab_total_ += bytes;
    }
    blocks_[c] = slabs_.back().data() + slab_used_;
    slab_used_ += block_bytes_;
    ++allocated_;
  }
  return blocks_[c];
}

bool ParityStore::AllocatedLocked(size_t c) const {
  if (tier_) return c < tier_base_.size() && tier_base_[c] != kNoBase;
  return c < blocks_.size() && blocks_[c] != nullptr;
}

size_t ParityStore::TierBaseLocked(size_t c) {
  if (c >= tier_base_.size()) tier_base_.resize(c + 1, kNoBase);
  if (tier_base_[c] == kNoBase) {
    const size_t records = block_bytes_ / tier_record_bytes_;
    tier_base_[c] = tier_->slots();
    for (size_t x = 0; x < records; ++x) tier_->Append();  // zeros, resident until the next fetch step
    ++allocated_;
  }
  return tier_base_[c];
}

size_t ParityStore::TierOtherBytesLocked() const { return tier_base_.capacity() * sizeof(size_t); }

void ParityStore::TrimLocked() {
  try {
    tier_->Fetch(nullptr, 0, TierOtherBytesLocked());
  } catch (const std::runtime_error&) {
    // A full disk: the frames stay (the tier gives none up before its write-backs succeed), so no byte is lost;
    // the next fetch step meets the same error before it changes anything, and fails its call there.
  }
}

void ParityStore::CheckEntry(const ParityUpdate::Entry& en, size_t e, size_t rb) const {
  const int k = code_->k(), r = code_->r();
  if (tier_ && (rb != tier_record_bytes_ || en.offset % rb != 0))
    throw std::invalid_argument("ParityStore::Apply: entry " + std::to_string(e) + " covers bytes [" +
                                std::to_string(en.offset) + ", " + std::to_string(en.offset + rb) +
                                "), not one whole record of this tiered store's " + std::to_string(tier_record_bytes_) +
                                "-byte records");
  if (en.parity_member >= r || en.data_member >= k)
    throw std::invalid_argument("ParityStore::Apply: entry " + std::to_string(e) + " has parity_member=" +
                                std::to_string(en.parity_member) + ", data_member=" + std::to_string(en.data_member) +
                                "; this code has r=" + std::to_string(r) + ", k=" + std::to_string(k));
  if (static_cast<size_t>(en.offset) + rb > block_bytes_)
    throw std::invalid_argument("ParityStore::Apply: entry " + std::to_string(e) + " writes bytes [" +
                                std::to_string(en.offset) + ", " + std::to_string(en.offset + rb) + ") outside the " +
                                std::to_string(block_bytes_) + "-byte block");
  if (en.parity_block > (size_t{1} << 40))
    throw std::invalid_argument("ParityStore::Apply: entry " + std::to_string(e) + " names parity block " +
                                std::to_string(en.parity_block) + ", beyond any plausible table");
}

// Validates every entry, then applies them all under the lock: nothing changes when one is bad.
template <typename EntryAt, typename DeltaAt>
void ParityStore::ApplyEntries(size_t count, size_t rb, EntryAt entry_at, DeltaAt delta_at) {
  for (size_t e = 0; e < count; ++e) CheckEntry(entry_at(e), e, rb);
  const int k = code_->k();
  const bool avx2 = HaveAvx2();
  std::lock_guard<std::mutex> lock(mu_);
  // Parity records are scattered like the data they cover: resolve every target first, then apply with
  // the records a few entries ahead prefetched, so the cache misses overlap instead of queueing.
  thread_local std::vector<uint8_t*> targets;
  targets.resize(count);
  bool appended = false;  // tiered: new blocks' records appended resident, a block's worth each
  if (tier_) {
    // The fetch step: every target already on disk read in together (the only call that may fail, so a
    // full disk changes nothing), then new blocks appended as resident zeros; no frame moves until the apply is done.
    thread_local std::vector<uint32_t> slots;
    thread_local std::vector<size_t> new_blocks;  // room is made for their records too: no frames past the budget
    slots.clear();
    new_blocks.clear();
    for (size_t e = 0; e < count; ++e) {
      const ParityUpdate::Entry& en = entry_at(e);
      if (AllocatedLocked(en.parity_block)) {
        slots.push_back(static_cast<uint32_t>(tier_base_[en.parity_block] + en.offset / rb));
      } else {
        new_blocks.push_back(en.parity_block);
      }
    }
    std::sort(new_blocks.begin(), new_blocks.end());
    const size_t fresh = static_cast<size_t>(std::unique(new_blocks.begin(), new_blocks.end()) - new_blocks.begin());
    tier_->Fetch(slots.data(), slots.size(), TierOtherBytesLocked(), nullptr, false, fresh * (block_bytes_ / rb));
    const size_t allocated = allocated_;
    for (size_t e = 0; e < count; ++e) {
      const ParityUpdate::Entry& en = entry_at(e);
      targets[e] = tier_->Frame(TierBaseLocked(en.parity_block) + en.offset / rb);
    }
    appended = allocated_ != allocated;
  } else {
    for (size_t e = 0; e < count; ++e) {
      const ParityUpdate::Entry& en = entry_at(e);
      targets[e] = BlockLocked(en.parity_block) + en.offset;
    }
  }
  constexpr size_t kAhead = 8;
  auto prefetch = [rb](const uint8_t* record) {
    for (size_t line = 0; line < rb; line += 64) __builtin_prefetch(record + line, 1);
    if (rb > 0) __builtin_prefetch(record + rb - 1, 1);  // a record not aligned to lines ends one further
  };
  for (size_t e = 0; e < count && e < kAhead; ++e) prefetch(targets[e]);
  for (size_t e = 0; e < count; ++e) {
    if (e + kAhead < count) prefetch(targets[e + kAhead]);
    const ParityUpdate::Entry& en = entry_at(e);
    const size_t member = static_cast<size_t>(en.parity_member) * k + en.data_member;
    if (coefficient_is_one_[member]) {
      XorBytes(targets[e], delta_at(e), rb);  // g = 1 (the first Vandermonde row): no multiply
    } else if (avx2) {
      MultiplyXorAvx2(rb, &multiply_tables_[member * kTableBytes], delta_at(e), targets[e]);
    } else {
      MultiplyXorScalar(0, rb, &multiply_tables_[member * kTableBytes], delta_at(e), targets[e]);
    }
  }
  delta_bytes_received_ += count * rb;
  updates_received_ += count;
  // New blocks came in whole and resident: back to the budget now rather than at the next Apply, which may
  // not come for a while (the end of a run, a sender's pause).
  if (appended) TrimLocked();
}

void ParityStore::Apply(const ParityUpdate& update) {
  const size_t rb = update.record_bytes;
  const size_t count = update.entries.size();
  if (update.deltas.size() != count * rb)
    throw std::invalid_argument("ParityStore::Apply: update holds " + std::to_string(update.deltas.size()) +
                                " delta bytes for " + std::to_string(count) +
                                " entries of record_bytes=" + std::to_string(rb));
  ApplyEntries(
      count, rb, [&](size_t e) -> const ParityUpdate::Entry& { return update.entries[e]; },
      [&](size_t e) { return update.delta(e); });
}

void ParityStore::Apply(const ParityDeltaRef* refs, size_t count, size_t record_bytes) {
  if (count == 0) return;
  if (refs == nullptr)
    throw std::invalid_argument("ParityStore::Apply: refs is null for " + std::to_string(count) + " entries");
  for (size_t e = 0; e < count; ++e)
    if (refs[e].delta == nullptr)
      throw std::invalid_argument("ParityStore::Apply: entry " + std::to_string(e) + " has a null delta pointer");
  ApplyEntries(
      count, record_bytes, [refs](size_t e) -> const ParityUpdate::Entry& { return refs[e].entry; },
      [refs](size_t e) { return refs[e].delta; });
}

void ParityStore::ReadBlockLocked(size_t c, uint8_t* out) const {
  if (!AllocatedLocked(c)) {
    std::memset(out, 0, block_bytes_);
  } else if (tier_) {
    tier_->Read(tier_base_[c], block_bytes_ / tier_record_bytes_, out);  // frames and file, no frame moved
  } else {
    std::memcpy(out, blocks_[c], block_bytes_);
  }
}

void ParityStore::ReadBlock(size_t c, uint8_t* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  ReadBlockLocked(c, out);
}

void ParityStore::ReadColumns(size_t c, size_t record_bytes, size_t offset, size_t width, uint8_t* out) const {
  if (record_bytes == 0 || block_bytes_ % record_bytes != 0 || offset + width > record_bytes)
    throw std::invalid_argument("ParityStore::ReadColumns: columns [" + std::to_string(offset) + ", " +
                                std::to_string(offset + width) + ") of " + std::to_string(record_bytes) +
                                "-byte records do not fit blocks of " + std::to_string(block_bytes_) + " bytes");
  const size_t records = block_bytes_ / record_bytes;
  std::lock_guard<std::mutex> lock(mu_);
  if (!AllocatedLocked(c)) {
    std::memset(out, 0, records * width);
    return;
  }
  thread_local std::vector<uint8_t> block;
  const uint8_t* src = nullptr;
  if (tier_) {
    block.resize(block_bytes_);
    ReadBlockLocked(c, block.data());
    src = block.data() + offset;
  } else {
    src = blocks_[c] + offset;
  }
  for (size_t x = 0; x < records; ++x) std::memcpy(out + x * width, src + x * record_bytes, width);
}

void ParityStore::WriteBlock(size_t c, const uint8_t* bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!tier_) {
    std::memcpy(BlockLocked(c), bytes, block_bytes_);
    return;
  }
  tier_->Write(TierBaseLocked(c), block_bytes_ / tier_record_bytes_, bytes);
  // A new block's records were appended resident: a rebuild writing every block would hold them all until
  // the next Apply, so the tier is trimmed to its budget now.
  TrimLocked();
}

bool ParityStore::HasBlock(size_t c) const {
  std::lock_guard<std::mutex> lock(mu_);
  return AllocatedLocked(c);
}

size_t ParityStore::num_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = tier_ ? tier_base_.size() : blocks_.size();
  while (n > 0 && !AllocatedLocked(n - 1)) --n;
  return n;
}

SpillStats ParityStore::spill_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tier_ ? tier_->stats() : SpillStats{};
}

size_t ParityStore::allocated_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

size_t ParityStore::bytes() const { return allocated_blocks() * block_bytes_; }

uint64_t ParityStore::delta_bytes_received() const {
  std::lock_guard<std::mutex> lock(mu_);
  return delta_bytes_received_;
}

uint64_t ParityStore::updates_received() const {
  std::lock_guard<std::mutex> lock(mu_);
  return updates_received_;
}

}  // namespace xdl_ec

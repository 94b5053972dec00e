#include "xdl_ec/spill_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

#include "xdl_ec/task_pool.h"

namespace xdl_ec {
namespace {

constexpr size_t kRowsPerPart = 256;  // rows a pool part copies at least

std::string Hint(int err) {
  if (err == ENOSPC || err == EFBIG || err == EDQUOT) {
    return " (its filesystem is full or a file size limit was reached: free space, or pass another spill dir)";
  }
  if (err == ENOENT) return " (it does not exist: create it, or pass another spill dir)";
  if (err == ENOTDIR) return " (it is not a directory: pass a directory)";
  if (err == EACCES || err == EROFS || err == EPERM) return " (it is not writable: pass a writable spill dir)";
  return "";
}

}  // namespace

SpillTier::SpillTier(size_t record_bytes, size_t budget_bytes, const std::string& dir)
    : record_bytes_(record_bytes),
      budget_bytes_(budget_bytes),
      dir_(dir),
      stride_((kFrameHeader + record_bytes + 7) / 8 * 8),
      window_bytes_(budget_bytes / kWindowShare),
      chunks_(new uint8_t*[kMaxChunks]) {
  while ((size_t{1} << chunk_shift_) * stride_ < kChunkBytes) ++chunk_shift_;
  chunk_mask_ = (size_t{1} << chunk_shift_) - 1;
  if (budget_bytes < MinimumBudget(record_bytes)) {
    throw std::invalid_argument("memory budget of " + std::to_string(budget_bytes) + " bytes is below the minimum of " +
                                std::to_string(MinimumBudget(record_bytes)) + " bytes (" + std::to_string(kMinFrames) +
                                " rows of " + std::to_string(record_bytes) + " bytes); raise it");
  }
  std::string path = dir + "/xdl-ec-spill-XXXXXX";
  fd_ = mkstemp(path.data());
  if (fd_ < 0) {
    const int err = errno;
    throw std::runtime_error("spill dir '" + dir_ + "': cannot make a file: " + std::strerror(err) + Hint(err));
  }
  unlink(path.c_str());  // the file goes with the process, however it ends
  // A full filesystem is found now, before training, rather than at the first eviction.
  std::vector<uint8_t> probe(size_t{64} << 10, 0);
  const ssize_t wrote = pwrite(fd_, probe.data(), probe.size(), 0);
  const int err = wrote < 0 ? errno : (static_cast<size_t>(wrote) == probe.size() ? 0 : ENOSPC);
  if (err != 0 || ftruncate(fd_, 0) != 0) {
    close(fd_);
    fd_ = -1;
    throw std::runtime_error("spill dir '" + dir_ + "': cannot write: " + std::strerror(err ? err : errno) + Hint(err));
  }
}

SpillTier::~SpillTier() {
  if (map_) munmap(map_, map_length_);
  if (fd_ >= 0) close(fd_);
}

void SpillTier::Fail(const char* what, size_t slot, int err) const {
  throw std::runtime_error("spill dir '" + dir_ + "': " + what + " of slot " + std::to_string(slot) +
                           " failed: " + std::strerror(err) + Hint(err));
}

void SpillTier::Hold(uint32_t f, size_t slot) {
  uint8_t* frame = FrameAt(f);
  frame[kDirtyAt] = 0;
  held_slot_[f] = static_cast<uint32_t>(slot);
  uses_[f] = 1;
  fetched_in_[f] = epoch_;
  ++held_;
  SetFrameOf(slot, f);
}

void SpillTier::Drop(uint32_t f) {
  SetFrameOf(held_slot_[f], kNone);
  held_slot_[f] = kNone;
  free_.push_back(f);
  --held_;
}

uint32_t SpillTier::NewFrame() {
  if (!free_.empty()) {
    const uint32_t f = free_.back();
    free_.pop_back();
    return f;
  }
  if (carved_ == num_chunks_ << chunk_shift_) {
    // a frame number must stay below kNone (kept as frame + 1 per slot)
    if (num_chunks_ == kMaxChunks || ((num_chunks_ + 1) << chunk_shift_) > kNone) {
      throw std::length_error("SpillTier: more frames than " + std::to_string(carved_));
    }
    // whole huge pages: the tail of a partial one would stay in 4 KiB pages
    const size_t bytes = ((stride_ << chunk_shift_) + MappedBuffer::kHugePage - 1) & ~(MappedBuffer::kHugePage - 1);
    chunk_buffers_.emplace_back(bytes);
    chunks_[num_chunks_++] = chunk_buffers_.back().data();
  }
  held_slot_.push_back(kNone);
  uses_.push_back(0);
  fetched_in_.push_back(0);
  return static_cast<uint32_t>(carved_++);
}

size_t SpillTier::Capacity(size_t other_bytes) const {
  const size_t fixed = other_bytes + slots() * kSlotOverhead + (file_cold_ ? window_bytes_ : 0);
  const size_t room = budget_bytes_ > fixed ? (budget_bytes_ - fixed) / (stride_ + kFrameWords) : 0;
  return std::max(room, kMinFrames);
}

// Copies between frames and the file's mapping, split over the pool's threads (a row not in the page cache
// is a major fault: several are waited for at once). Within the file as covered (Cover); a slot past it reads
// zeros, as a read past the file's end does.
void SpillTier::Transfer(const std::vector<uint32_t>& sorted_slots, const std::vector<uint32_t>& frames, bool write) {
  TaskPool& pool = TaskPool::Shared();
  const size_t n = sorted_slots.size();
  const size_t parts = pool.PartsFor(n, kRowsPerPart);
  pool.ForEachPart(parts, [&](size_t p) {
    const size_t end = TaskPool::PartBegin(n, parts, p + 1);
    for (size_t i = TaskPool::PartBegin(n, parts, p); i < end; ++i) {
      uint8_t* frame = FrameAt(frames[i]) + kFrameHeader;
      const size_t at = size_t{sorted_slots[i]} * record_bytes_;
      if (write) {
        std::memcpy(map_ + at, frame, record_bytes_);  // within the file: Cover ran before any write-back
      } else if (at + record_bytes_ <= map_bytes_) {
        std::memcpy(frame, map_ + at, record_bytes_);
      } else {
        std::memset(frame, 0, record_bytes_);  // never written back: zeros
      }
    }
  });
  (write ? write_bytes_ : read_bytes_) += n * record_bytes_;
  mapped_bytes_ += n * record_bytes_;
  size_t last = SIZE_MAX;  // the pages the copies touched: the slots are sorted
  for (const uint32_t slot : sorted_slots) {
    const size_t page = size_t{slot} * record_bytes_ / kPage;
    if (page != last) ++mapped_pages_;
    last = page;
  }
}

// The file's blocks allocated (so a write through the mapping never meets a full disk: that is this call's
// error, named, before any byte moves) and mapped over `slots` records, grown by a quarter at a time.
void SpillTier::Cover(size_t slots) {
  const size_t need = slots * record_bytes_;
  if (need <= map_bytes_) return;
  const size_t slack = std::max(map_bytes_ / 4, kCoverStep);
  size_t target = need + slack;
  int err = posix_fallocate(fd_, static_cast<off_t>(map_bytes_), static_cast<off_t>(target - map_bytes_));
  if (err != 0) {  // the slack may be what does not fit: the need alone
    target = need;
    err = posix_fallocate(fd_, static_cast<off_t>(map_bytes_), static_cast<off_t>(target - map_bytes_));
  }
  if (err != 0) Fail("allocation", map_bytes_ / record_bytes_, err);
  const size_t length = (target + kPage - 1) / kPage * kPage;
  void* map = map_ ? mremap(map_, map_length_, length, MREMAP_MAYMOVE)
                   : mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map == MAP_FAILED) Fail("mapping", map_bytes_ / record_bytes_, errno);
  map_ = static_cast<uint8_t*>(map);
  map_length_ = length;
  map_bytes_ = target;
}

// The mapping's pages leave this process's resident set once the copies may have touched enough of them (the
// page cache keeps them, dirty ones included). Rows scattered over a warm file (in the page cache): the pages are
// cache the kernel takes back at no I/O, and dropping them often made every miss refault (4x the CPU per sample at
// 20M rows, docs/results/tier-speed-2026-12-07c.md): after a budget's worth of copies. A cold file (past the page
// cache: a miss is a disk read anyway) or dense copies (a bulk load's write-backs: no page is touched again soon):
// once the pages touched fill a window of an eighth of the budget, which a cold file's frames leave to them.
void SpillTier::Unmap() {
  if (!map_) return;
  const size_t touched = mapped_pages_ * kPage;
  const bool dense = touched <= 2 * mapped_bytes_;
  if ((file_cold_ || dense) ? touched < window_bytes_ : mapped_bytes_ < budget_bytes_) return;
  madvise(map_, map_length_, MADV_DONTNEED);
  mapped_bytes_ = mapped_pages_ = 0;
}

uint8_t* SpillTier::Fault(size_t slot) {
  std::lock_guard<std::mutex> lock(fault_mutex_);
  uint32_t f = FrameOf(slot);
  if (f != kNone) return FrameAt(f);
  f = NewFrame();
  try {
    Transfer({static_cast<uint32_t>(slot)}, {f}, /*write=*/false);
  } catch (...) {
    free_.push_back(f);
    throw;
  }
  Hold(f, slot);
  ++misses_;
  return FrameAt(f);
}

void SpillTier::MakeRoom(size_t need, size_t capacity) {
  capacity_ = capacity;
  if (held_ + need <= capacity || held_ == 0) return;
  const size_t excess = held_ + need - capacity;
  std::vector<uint32_t> victims;
  // GCLOCK in place: the hand walks the frames in their order (a freed frame takes the next miss where it is),
  // reading only the dense per-frame words, not the frames (a sweep over frame headers missed the cache on
  // every step). kMaxUses + 1 rounds bring every frame not the batch's own to zero.
  for (size_t step = 0; step < (size_t{kMaxUses} + 1) * carved_ && victims.size() < excess; ++step) {
    if (hand_ >= carved_) hand_ = 0;
    const uint32_t f = static_cast<uint32_t>(hand_++);
    if (held_slot_[f] == kNone || fetched_in_[f] == epoch_) continue;  // free, or the batch's own
    if (uses_[f]) {
      --uses_[f];
      continue;
    }
    fetched_in_[f] = epoch_;  // picked once: the hand may pass it again
    victims.push_back(f);
  }
  // Dirty victims go back to the file in slot order, all before any frame is given up.
  std::vector<std::pair<uint32_t, uint32_t>> dirty;
  for (const uint32_t f : victims) {
    if (FrameAt(f)[kDirtyAt]) dirty.emplace_back(held_slot_[f], f);
  }
  std::sort(dirty.begin(), dirty.end());
  std::vector<uint32_t> slots(dirty.size()), frames(dirty.size());
  for (size_t i = 0; i < dirty.size(); ++i) {
    slots[i] = dirty[i].first;
    frames[i] = dirty[i].second;
  }
  if (cold()) AskAhead(slots);  // a write-back fills its page first: read them all at once
  Transfer(slots, frames, /*write=*/true);
  for (const uint32_t f : victims) Drop(f);
}

namespace {
long MajorFaults() {
  rusage usage{};
  return getrusage(RUSAGE_SELF, &usage) == 0 ? usage.ru_majflt : 0;
}
}  // namespace

void SpillTier::BeginFetch() {
  Cover(slots());                 // every slot a victim may be written back to, before anything changes
  if (++epoch_ == 0) epoch_ = 1;  // 0 is no fetch's
  Shrink();
  faults_at_begin_ = MajorFaults();
}

void SpillTier::WillNeed(size_t slot) const {
  if (FrameOf(slot) == kNone) AskFor(slot);
}

void SpillTier::AskFor(size_t slot) const {
  const size_t at = slot * record_bytes_;
  if (at + record_bytes_ > map_bytes_) return;
  const size_t first = at / kPage * kPage;
  posix_fadvise(fd_, static_cast<off_t>(first), static_cast<off_t>(at + record_bytes_ - first), POSIX_FADV_WILLNEED);
}

void SpillTier::AskAhead(const std::vector<uint32_t>& slots) const {
  TaskPool& pool = TaskPool::Shared();
  const size_t parts = pool.PartsFor(slots.size(), kRowsPerPart);
  pool.ForEachPart(parts, [&](size_t p) {
    const size_t end = TaskPool::PartBegin(slots.size(), parts, p + 1);
    for (size_t i = TaskPool::PartBegin(slots.size(), parts, p); i < end; ++i) AskFor(slots[i]);
  });
}

// The frames' capacity falls as the key index and the slot words grow (they come first in the budget): frames
// carved when the table was small would stay mapped, free, past the budget. At a fetch step's start no operation
// holds a record, so the last chunk's held frames move into free frames below it and the chunk goes back.
void SpillTier::Shrink() {
  while (num_chunks_ > 1) {
    const size_t lo = (num_chunks_ - 1) << chunk_shift_;
    if (lo < std::max(capacity_, held_) || capacity_ == 0) return;  // the frames below hold what is needed
    std::vector<uint32_t> below;
    below.reserve(free_.size());
    for (const uint32_t f : free_) {
      if (f < lo) below.push_back(f);
    }
    for (size_t f = lo; f < carved_; ++f) {
      const uint32_t slot = held_slot_[f];
      if (slot == kNone) continue;
      const uint32_t g = below.back();  // held_ <= lo: a free frame below for each held one above
      below.pop_back();
      std::memcpy(FrameAt(g), FrameAt(static_cast<uint32_t>(f)), stride_);
      held_slot_[g] = slot;
      uses_[g] = uses_[f];
      fetched_in_[g] = fetched_in_[f];
      SetFrameOf(slot, g);
    }
    free_ = std::move(below);
    carved_ = lo;
    held_slot_.resize(lo);
    uses_.resize(lo);
    fetched_in_.resize(lo);
    chunk_buffers_.pop_back();
    chunks_[--num_chunks_] = nullptr;
    if (hand_ >= carved_) hand_ = 0;
  }
}

void SpillTier::Fetch(const uint32_t* slots, size_t n, size_t other_bytes, uint8_t** records, bool for_write,
                      size_t appends) {
  BeginFetch();
  std::vector<uint32_t> miss, miss_at;                // the slots to read, and (with records) where they were asked
  constexpr size_t kWordAhead = 16, kFrameAhead = 8;  // a hit is two dependent misses: overlapped
  size_t hits = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i + kWordAhead < n && slots[i + kWordAhead] != kNone) PrefetchSlot(slots[i + kWordAhead]);
    if (i + kFrameAhead < n && slots[i + kFrameAhead] != kNone) PrefetchKey(slots[i + kFrameAhead]);
    const uint32_t slot = slots[i];
    uint8_t* record = slot == kNone ? nullptr : Touch(slot, for_write);
    if (records) records[i] = record;
    if (record) {
      ++hits;
    } else if (slot != kNone) {
      miss.push_back(slot);
      if (records) miss_at.push_back(static_cast<uint32_t>(i));
    }
  }
  if (cold()) AskAhead(miss);  // the three-call fetch step's owner asks in its own pass, before its key reads
  if (records) {
    FetchMissing(miss, hits, other_bytes, for_write, appends);
    for (size_t m = 0; m < miss.size(); ++m) records[miss_at[m]] = Resident(miss[m]);
  } else {
    FetchMissing(std::move(miss), hits, other_bytes, for_write, appends);
  }
}

void SpillTier::FetchMissing(std::vector<uint32_t> slots, size_t hits, size_t other_bytes, bool for_write,
                             size_t appends) {
  hits_ += hits;
  misses_ += slots.size();  // per row asked for, as hits are (a row asked twice is read once)
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  MakeRoom(slots.size() + appends, Capacity(other_bytes));
  std::vector<uint32_t> frames(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) frames[i] = NewFrame();
  try {
    Transfer(slots, frames, /*write=*/false);
  } catch (...) {
    free_.insert(free_.end(), frames.begin(), frames.end());
    throw;
  }
  const uint8_t dirty = for_write ? 1 : 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    Hold(frames[i], slots[i]);
    FrameAt(frames[i])[kDirtyAt] = dirty;
  }
  Unmap();
  // Cold: a sixteenth of the rows read took a major fault (the disk, one read at a time per thread). Asking
  // ahead hides the faults it prevents, so a cold tier asks for kColdSteps steps and then measures again.
  if (cold_steps_ > 0) {
    --cold_steps_;
  } else if (!slots.empty()) {  // a measuring step: the file stays cold (its window kept) unless it proves warm
    file_cold_ = static_cast<size_t>(MajorFaults() - faults_at_begin_) * 16 > slots.size();
    if (file_cold_) cold_steps_ = kColdSteps;
  }
}

void SpillTier::FetchRange(size_t first, size_t count, size_t other_bytes) {
  const size_t end = std::min(slots(), first + count);
  std::vector<uint32_t> range;
  for (size_t s = first; s < end; ++s) range.push_back(static_cast<uint32_t>(s));
  Fetch(range.data(), range.size(), other_bytes);
}

void SpillTier::ReserveSlots(size_t slots) {
  if (slots <= slot_capacity_) return;
  const size_t capacity = std::max({slots, 2 * slot_capacity_, size_t{1024}});
  MappedBuffer words(capacity * sizeof(uint32_t));  // zeroed: on disk
  if (slots_) std::memcpy(words.data(), frame_of_, slots_ * sizeof(uint32_t));
  slot_words_ = std::move(words);
  frame_of_ = reinterpret_cast<uint32_t*>(slot_words_.data());
  slot_capacity_ = capacity;
}

size_t SpillTier::Append() {
  const size_t slot = slots_;
  if (slot >= kNone) throw std::length_error("SpillTier: more than 2^32 - 1 slots");
  ReserveSlots(slot + 1);
  const uint32_t f = NewFrame();
  std::memset(FrameAt(f), 0, stride_);  // past the file's end: zeros, which the file reads too
  ++slots_;
  Hold(f, slot);
  return slot;
}

void SpillTier::Reset(size_t slots) {
  if (map_) munmap(map_, map_length_);
  map_ = nullptr;
  map_length_ = map_bytes_ = mapped_bytes_ = mapped_pages_ = 0;
  if (ftruncate(fd_, 0) != 0) Fail("truncate", 0, errno);
  free_.clear();
  for (size_t f = carved_; f > 0; --f) free_.push_back(static_cast<uint32_t>(f - 1));
  held_slot_.assign(carved_, kNone);
  hand_ = 0;
  held_ = 0;
  slot_words_ = MappedBuffer();
  frame_of_ = nullptr;
  slots_ = slot_capacity_ = 0;
  ReserveSlots(slots);
  slots_ = slots;
}

void SpillTier::Read(size_t slot, size_t count, uint8_t* out) {
  const size_t want = count * record_bytes_;
  size_t got = 0;
  while (got < want) {
    const ssize_t n = pread(fd_, out + got, want - got, static_cast<off_t>(slot * record_bytes_ + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Fail("read", slot + got / record_bytes_, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  std::memset(out + got, 0, want - got);
  read_bytes_ += got;
  for (size_t i = 0; i < count; ++i) {  // resident records are newer than the file's
    const uint32_t f = FrameOf(slot + i);
    if (f != kNone) std::memcpy(out + i * record_bytes_, FrameAt(f) + kFrameHeader, record_bytes_);
  }
}

void SpillTier::Write(size_t slot, size_t count, const uint8_t* bytes) {
  Cover(slot + count);  // the file never grows but under the mapping (a read past it reads zeros)
  const size_t want = count * record_bytes_;
  size_t put = 0;
  while (put < want) {
    const ssize_t n = pwrite(fd_, bytes + put, want - put, static_cast<off_t>(slot * record_bytes_ + put));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) Fail("write", slot + put / record_bytes_, n < 0 ? errno : ENOSPC);
    put += static_cast<size_t>(n);
  }
  write_bytes_ += want;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* record = bytes + i * record_bytes_;
    const uint32_t f = FrameOf(slot + i);
    if (f == kNone) continue;
    uint8_t* frame = FrameAt(f);
    std::memcpy(frame + kFrameHeader, record, record_bytes_);
    frame[kDirtyAt] = 0;
  }
}

SpillStats SpillTier::stats() const {
  SpillStats s;
  s.budget_bytes = budget_bytes_;
  s.rows_in_memory = held_;
  s.rows_on_disk = slots() - held_;
  s.frame_bytes = frame_bytes();
  struct stat st {};
  if (fstat(fd_, &st) == 0) s.disk_bytes = static_cast<size_t>(st.st_blocks) * 512;
  s.disk_read_bytes = read_bytes_;
  s.disk_write_bytes = write_bytes_;
  s.hits = hits_;
  s.misses = misses_;
  return s;
}

}  // namespace xdl_ec

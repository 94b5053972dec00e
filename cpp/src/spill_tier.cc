#include "xdl_ec/spill_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <stdexcept>

#include "xdl_ec/task_pool.h"

namespace xdl_ec {
namespace {

constexpr size_t kIovMax = IOV_MAX;
constexpr size_t kRunsPerPart = 16;  // runs of I/O a pool part takes at least

std::string Hint(int err) {
  if (err == ENOSPC || err == EFBIG || err == EDQUOT) {
    return " (its filesystem is full or a file size limit was reached: free space, or pass another spill dir)";
  }
  if (err == ENOENT) return " (it does not exist: create it, or pass another spill dir)";
  if (err == ENOTDIR) return " (it is not a directory: pass a directory)";
  if (err == EACCES || err == EROFS || err == EPERM) return " (it is not writable: pass a writable spill dir)";
  return "";
}

// One run of adjacent slots: [slot, slot + count), frames[at .. at + count).
struct Run {
  size_t slot, count, at;
};

std::vector<Run> RunsOf(const std::vector<uint32_t>& sorted_slots) {
  std::vector<Run> runs;
  for (size_t i = 0; i < sorted_slots.size(); ++i) {
    if (!runs.empty() && runs.back().slot + runs.back().count == sorted_slots[i] && runs.back().count < kIovMax) {
      ++runs.back().count;
    } else {
      runs.push_back({sorted_slots[i], 1, i});
    }
  }
  return runs;
}

}  // namespace

SpillTier::SpillTier(size_t record_bytes, size_t budget_bytes, const std::string& dir)
    : record_bytes_(record_bytes),
      budget_bytes_(budget_bytes),
      dir_(dir),
      stride_((kFrameHeader + record_bytes + 7) / 8 * 8),
      chunks_(new std::unique_ptr<uint8_t[]>[kMaxChunks]) {
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
  if (fd_ >= 0) close(fd_);
}

void SpillTier::Fail(const char* what, size_t slot, int err) const {
  throw std::runtime_error("spill dir '" + dir_ + "': " + what + " of slot " + std::to_string(slot) +
                           " failed: " + std::strerror(err) + Hint(err));
}

uint32_t SpillTier::Word(uint32_t f, size_t at) const {
  uint32_t v;
  std::memcpy(&v, FrameAt(f) + at, sizeof(v));
  return v;
}

void SpillTier::SetWord(uint32_t f, size_t at, uint32_t v) { std::memcpy(FrameAt(f) + at, &v, sizeof(v)); }

void SpillTier::Hold(uint32_t f, size_t slot) {
  uint8_t* frame = FrameAt(f);
  SetWord(f, kSlotAt, static_cast<uint32_t>(slot));
  SetWord(f, kRingAt, static_cast<uint32_t>(ring_.size()));
  frame[kDirtyAt] = 0;
  frame[kReferencedAt] = 1;
  SetWord(f, kEpochAt, epoch_);
  ring_.push_back(f);
  ++held_;
  __atomic_store_n(&frame_of_[slot], f, __ATOMIC_RELEASE);
}

void SpillTier::Drop(uint32_t f) {
  const size_t slot = Word(f, kSlotAt);
  std::memcpy(&disk_keys_[slot], FrameAt(f) + kFrameHeader, sizeof(int64_t));  // what the file holds now
  frame_of_[slot] = kNone;
  const uint32_t at = Word(f, kRingAt), last = ring_.back();
  ring_[at] = last;
  SetWord(last, kRingAt, at);
  ring_.pop_back();
  free_.push_back(f);
  --held_;
}

uint32_t SpillTier::NewFrame() {
  if (!free_.empty()) {
    const uint32_t f = free_.back();
    free_.pop_back();
    return f;
  }
  if (carved_ == num_chunks_ * kChunkFrames) {
    if (num_chunks_ == kMaxChunks) throw std::length_error("SpillTier: more frames than " + std::to_string(carved_));
    chunks_[num_chunks_++].reset(new uint8_t[kChunkFrames * stride_]);
  }
  return static_cast<uint32_t>(carved_++);
}

size_t SpillTier::Capacity(size_t other_bytes) const {
  const size_t fixed = other_bytes + slots() * kSlotOverhead;
  const size_t room = budget_bytes_ > fixed ? (budget_bytes_ - fixed) / stride_ : 0;
  return std::max(room, kMinFrames);
}

// Runs of adjacent slots, one preadv / pwritev each, split over the pool's threads; a read past the file's end
// reads zeros.
void SpillTier::Transfer(const std::vector<uint32_t>& sorted_slots, const std::vector<uint32_t>& frames, bool write) {
  const std::vector<Run> runs = RunsOf(sorted_slots);
  TaskPool& pool = TaskPool::Shared();
  const size_t parts = pool.PartsFor(runs.size(), kRunsPerPart);
  pool.ForEachPart(parts, [&](size_t p) {
    std::vector<iovec> iov;
    const size_t end = TaskPool::PartBegin(runs.size(), parts, p + 1);
    for (size_t r = TaskPool::PartBegin(runs.size(), parts, p); r < end; ++r) {
      const Run& run = runs[r];
      iov.clear();
      for (size_t i = 0; i < run.count; ++i) iov.push_back({FrameAt(frames[run.at + i]) + kFrameHeader, record_bytes_});
      const size_t want = run.count * record_bytes_;
      size_t done = 0;
      while (done < want) {  // a short transfer (the file's end, a signal): the rest is asked again
        const size_t first = done / record_bytes_, within = done % record_bytes_;
        iovec* at = iov.data() + first;
        const iovec whole = *at;
        at->iov_base = static_cast<uint8_t*>(at->iov_base) + within;
        at->iov_len -= within;
        const int count = static_cast<int>(run.count - first);
        const auto offset = static_cast<off_t>(run.slot * record_bytes_ + done);
        const ssize_t n = write ? pwritev(fd_, at, count, offset) : preadv(fd_, at, count, offset);
        *at = whole;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || (n == 0 && write)) Fail(write ? "write" : "read", run.slot + first, n < 0 ? errno : ENOSPC);
        if (n == 0) break;  // read past the end: zeros
        done += static_cast<size_t>(n);
      }
      for (size_t i = done / record_bytes_; i < run.count; ++i) {
        const size_t from = i == done / record_bytes_ ? done % record_bytes_ : 0;
        std::memset(FrameAt(frames[run.at + i]) + kFrameHeader + from, 0, record_bytes_ - from);
      }
    }
  });
  (write ? write_bytes_ : read_bytes_) += sorted_slots.size() * record_bytes_;
}

uint8_t* SpillTier::Fault(size_t slot) {
  std::lock_guard<std::mutex> lock(fault_mutex_);
  uint32_t f = __atomic_load_n(&frame_of_[slot], __ATOMIC_ACQUIRE);
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
  if (held_ + need <= capacity || ring_.empty()) return;
  const size_t excess = held_ + need - capacity;
  std::vector<uint32_t> victims;
  // CLOCK over the held frames only (the ring), so a sweep costs the frames held, not every frame ever carved.
  for (size_t step = 0; step < 2 * ring_.size() && victims.size() < excess; ++step) {
    if (hand_ >= ring_.size()) hand_ = 0;
    const uint32_t f = ring_[hand_++];
    uint8_t* frame = FrameAt(f);
    if (Word(f, kEpochAt) == epoch_) continue;  // the batch's own
    if (frame[kReferencedAt]) {
      frame[kReferencedAt] = 0;
      continue;
    }
    SetWord(f, kEpochAt, epoch_);  // picked once: the hand may pass it again
    victims.push_back(f);
  }
  // Dirty victims go back to the file in slot order, all before any frame is given up.
  std::vector<std::pair<uint32_t, uint32_t>> dirty;
  for (const uint32_t f : victims) {
    if (FrameAt(f)[kDirtyAt]) dirty.emplace_back(Word(f, kSlotAt), f);
  }
  std::sort(dirty.begin(), dirty.end());
  std::vector<uint32_t> slots(dirty.size()), frames(dirty.size());
  for (size_t i = 0; i < dirty.size(); ++i) {
    slots[i] = dirty[i].first;
    frames[i] = dirty[i].second;
  }
  Transfer(slots, frames, /*write=*/true);
  for (const uint32_t f : victims) Drop(f);
}

void SpillTier::Fetch(const uint32_t* slots, size_t n, size_t other_bytes) {
  if (++epoch_ == 0) epoch_ = 1;  // 0 is no fetch's
  std::vector<uint32_t> miss;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t slot = slots[i];
    if (slot == kNone) continue;
    const uint32_t f = frame_of_[slot];
    if (f == kNone) {
      miss.push_back(slot);
      continue;
    }
    FrameAt(f)[kReferencedAt] = 1;
    SetWord(f, kEpochAt, epoch_);
    ++hits_;
  }
  misses_ += miss.size();  // per row asked for, as hits are (a row asked twice is read once)
  std::sort(miss.begin(), miss.end());
  miss.erase(std::unique(miss.begin(), miss.end()), miss.end());
  MakeRoom(miss.size(), Capacity(other_bytes));
  std::vector<uint32_t> frames(miss.size());
  for (size_t i = 0; i < miss.size(); ++i) frames[i] = NewFrame();
  try {
    Transfer(miss, frames, /*write=*/false);
  } catch (...) {
    free_.insert(free_.end(), frames.begin(), frames.end());
    throw;
  }
  for (size_t i = 0; i < miss.size(); ++i) Hold(frames[i], miss[i]);
}

void SpillTier::FetchRange(size_t first, size_t count, size_t other_bytes) {
  const size_t end = std::min(slots(), first + count);
  std::vector<uint32_t> range;
  for (size_t s = first; s < end; ++s) range.push_back(static_cast<uint32_t>(s));
  Fetch(range.data(), range.size(), other_bytes);
}

size_t SpillTier::Append() {
  const size_t slot = frame_of_.size();
  if (slot >= kNone) throw std::length_error("SpillTier: more than 2^32 - 1 slots");
  const uint32_t f = NewFrame();
  std::memset(FrameAt(f), 0, stride_);  // past the file's end: zeros, which the file reads too
  frame_of_.push_back(kNone);
  disk_keys_.push_back(0);
  Hold(f, slot);
  return slot;
}

void SpillTier::Reset(size_t slots) {
  if (ftruncate(fd_, 0) != 0) Fail("truncate", 0, errno);
  free_.clear();
  for (size_t f = carved_; f > 0; --f) free_.push_back(static_cast<uint32_t>(f - 1));
  ring_.clear();
  hand_ = 0;
  held_ = 0;
  frame_of_.assign(slots, kNone);
  disk_keys_.assign(slots, 0);
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
    const uint32_t f = frame_of_[slot + i];
    if (f != kNone) std::memcpy(out + i * record_bytes_, FrameAt(f) + kFrameHeader, record_bytes_);
  }
}

void SpillTier::Write(size_t slot, size_t count, const uint8_t* bytes) {
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
    std::memcpy(&disk_keys_[slot + i], record, sizeof(int64_t));
    const uint32_t f = frame_of_[slot + i];
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
  struct stat st {};
  if (fstat(fd_, &st) == 0) s.disk_bytes = static_cast<size_t>(st.st_blocks) * 512;
  s.disk_read_bytes = read_bytes_;
  s.disk_write_bytes = write_bytes_;
  s.hits = hits_;
  s.misses = misses_;
  return s;
}

}  // namespace xdl_ec

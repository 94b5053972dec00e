// The disk tier below a SlotStore (slot_store.h): every record lives in a spill file at slot * record_bytes,
// and RAM holds a bounded set of record frames, the rows used lately. Rows, not pages: Zipf ids scatter the
// hot rows over all slots, so caching the pages they sit on would spend the budget on their cold neighbours.
//
// Frames move only in Fetch (an operation's fetch step, before it holds any record pointer): the batch's
// misses are read together, copied from the file's shared mapping over the core's TaskPool threads; room is
// made first by CLOCK (a referenced bit per frame, the hand skipping the batch's own frames), the dirty
// victims written back the same way. A mapping, not preadv / pwritev: rows are ~100-byte scattered pieces,
// and a syscall per piece (ext4's buffered write path, the inode lock) cost more than the rest of the step
// (docs/results/tier-speed-2026-12-07.md). Frame() on a row the fetch step did not cover (a row an operation
// reaches by its rules, a scan) reads it alone and only adds a frame: nothing is evicted while an operation
// may hold a pointer, so a batch larger than the budget overshoots it until the next fetch step. The owner
// serialises Fetch against every other call (the shard's write lock); Frame may run on several of an
// operation's threads at once.
//
// The file is unlinked as soon as it is made: it goes with the process however the process ends. Its blocks
// are allocated (posix_fallocate) before any write-back that needs them, so a full disk or a size limit
// throws naming the directory before any frame is given up (a write through a mapping onto an unallocated
// block would be a SIGBUS instead), and the bytes stay those of the last completed operation. The mapping's
// pages are dropped from the resident set after each budget's worth of copies (the page cache keeps them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace xdl_ec {

struct SpillStats {
  size_t budget_bytes = 0;
  size_t rows_in_memory = 0;  // frames held
  size_t rows_on_disk = 0;    // slots without a frame
  size_t disk_bytes = 0;      // bytes the spill file takes on its filesystem
  uint64_t disk_read_bytes = 0;
  uint64_t disk_write_bytes = 0;
  uint64_t hits = 0;    // rows a fetch step asked for (each time asked) found in a frame
  uint64_t misses = 0;  // ... and read from the file (a Frame() fault counts here too)
};

class SpillTier {
 public:
  // The fewest frames a tier holds whatever its budget: a batch's working set must fit somewhere.
  static constexpr size_t kMinFrames = 64;
  // Bytes RAM holds per slot beside its frame (where its frame is; its key while on disk).
  static constexpr size_t kSlotOverhead = sizeof(uint32_t) + sizeof(int64_t);
  static size_t MinimumBudget(size_t record_bytes) { return kMinFrames * (record_bytes + kFrameHeader); }

  // Makes the spill file under `dir`. Throws std::invalid_argument when the budget is below MinimumBudget
  // (naming it), std::runtime_error naming `dir` when it is missing or not writable.
  SpillTier(size_t record_bytes, size_t budget_bytes, const std::string& dir);
  ~SpillTier();
  SpillTier(const SpillTier&) = delete;
  SpillTier& operator=(const SpillTier&) = delete;

  size_t slots() const { return frame_of_.size(); }

  // The resident bytes of `slot`, read in alone when it has no frame; marks the frame dirty.
  uint8_t* Frame(size_t slot) {
    const uint32_t f = __atomic_load_n(&frame_of_[slot], __ATOMIC_ACQUIRE);
    uint8_t* frame = f != kNone ? FrameAt(f) : Fault(slot);
    __atomic_store_n(frame + kDirtyAt, uint8_t{1}, __ATOMIC_RELAXED);
    return frame + kFrameHeader;
  }
  // The key bytes of `slot` (its first 8), from its frame or, on disk, the copy kept in RAM: a key index
  // confirms candidates without reading the file.
  int64_t KeyOf(size_t slot) const {
    const uint32_t f = __atomic_load_n(&frame_of_[slot], __ATOMIC_ACQUIRE);
    if (f == kNone) return disk_keys_[slot];
    int64_t key;
    std::memcpy(&key, FrameAt(f) + kFrameHeader, sizeof(key));
    return key;
  }

  // The fetch step: every slot of slots[0..n) (kNone entries skipped, repeats allowed) resident on return.
  // `other_bytes`: what else the budget covers (the key index, the slot lists), taken from it first.
  void Fetch(const uint32_t* slots, size_t n, size_t other_bytes) { Fetch(slots, n, other_bytes, nullptr, false); }
  // The same, handing back records[i], the resident bytes of slots[i] (null for kNone), so the operation
  // reaches its rows without looking their frames up again; `for_write`: they are marked dirty here (an
  // operation writing through these pointers does not pass through Frame()).
  void Fetch(const uint32_t* slots, size_t n, size_t other_bytes, uint8_t** records, bool for_write);

  // Prefetch hints for a batch's key resolution, a few keys apart: the slot's frame word first, then, once
  // it has arrived, the bytes KeyOf reads (its frame's first line, or its key kept while on disk).
  void PrefetchSlot(size_t slot) const { __builtin_prefetch(&frame_of_[slot]); }
  void PrefetchKey(size_t slot) const {
    const uint32_t f = __atomic_load_n(&frame_of_[slot], __ATOMIC_RELAXED);
    if (f != kNone) {
      __builtin_prefetch(FrameAt(f));
    } else {
      __builtin_prefetch(&disk_keys_[slot]);
    }
  }
  // Fetch of [first, first + count) (clipped to slots()): a scan's next block.
  void FetchRange(size_t first, size_t count, size_t other_bytes);

  // One more slot, all zero (past the file's end, which reads zeros), resident.
  size_t Append();
  // `slots` slots, all zero, none resident (a restore writes them).
  void Reset(size_t slots);
  // Records [slot, slot + count) (within slots()) to / from a caller's bytes, frames and file alike.
  void Read(size_t slot, size_t count, uint8_t* out);
  void Write(size_t slot, size_t count, const uint8_t* bytes);

  size_t frame_bytes() const { return held_ * record_bytes_; }
  SpillStats stats() const;

 private:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  // A held frame: [pad (8) | dirty (1) | pad (7)] then the record (the dirty byte shares the key's cache line,
  // which a hit has just read).
  static constexpr size_t kFrameHeader = 16;
  static constexpr size_t kDirtyAt = 8;
  // RAM per frame beside its bytes: held_slot_, referenced_, fetched_in_.
  static constexpr size_t kFrameWords = sizeof(uint32_t) + sizeof(uint8_t) + sizeof(uint32_t);
  static constexpr size_t kChunkFrames = 16384;  // frames are carved in chunks that never move
  static constexpr size_t kMaxChunks = size_t{1} << 14;

  uint8_t* FrameAt(uint32_t f) const { return chunks_[f / kChunkFrames].get() + (f % kChunkFrames) * stride_; }
  // Frame f starts holding `slot` (its record already there): referenced, in the ring, found by Frame().
  void Hold(uint32_t f, size_t slot);
  // Frame f (written back first when dirty) gives its slot up and goes to the free list.
  void Drop(uint32_t f);
  uint8_t* Fault(size_t slot);
  uint32_t NewFrame();  // a free frame, or one more carved
  size_t Capacity(size_t other_bytes) const;
  // Frees frames not fetched in this epoch until `need` more fit under the capacity (dirty ones written
  // back first, all or nothing).
  void MakeRoom(size_t need, size_t capacity);
  // The records of frames[i] from / to the file at sorted_slots[i] through its mapping, over the pool.
  void Transfer(const std::vector<uint32_t>& sorted_slots, const std::vector<uint32_t>& frames, bool write);
  // The file allocated and mapped over at least `slots` records (throws naming the dir: a full disk).
  void Cover(size_t slots);
  // The mapping's pages dropped from the resident set after a budget's worth of copies through them.
  void Unmap();
  [[noreturn]] void Fail(const char* what, size_t slot, int err) const;

  const size_t record_bytes_;
  const size_t budget_bytes_;
  const std::string dir_;
  const size_t stride_;  // header + record, rounded to 8
  int fd_ = -1;
  static constexpr size_t kPage = 4096;
  static constexpr size_t kCoverStep = size_t{1} << 20;  // the file grows by at least this much
  uint8_t* map_ = nullptr;   // the file, mapped shared: rows move by copies, not a syscall each
  size_t map_length_ = 0;    // the mapping's length (whole pages)
  size_t map_bytes_ = 0;     // the file's allocated length, all of it mapped
  size_t mapped_bytes_ = 0;  // copied through the mapping since its pages last left the resident set

  std::vector<uint32_t> frame_of_;  // per slot: its frame, or kNone
  std::vector<int64_t> disk_keys_;  // per slot: the key bytes the file holds for it
  std::unique_ptr<std::unique_ptr<uint8_t[]>[]> chunks_;
  size_t num_chunks_ = 0;
  size_t carved_ = 0;           // frames carved from chunks
  std::vector<uint32_t> free_;  // carved frames holding no slot
  size_t held_ = 0;             // frames holding a slot
  // Per carved frame, dense, so CLOCK's sweep reads a few bytes per frame and no frame: the slot it holds
  // (kNone: free), its referenced bit, the last fetch step that asked for it.
  std::vector<uint32_t> held_slot_;
  std::vector<uint8_t> referenced_;
  std::vector<uint32_t> fetched_in_;
  size_t hand_ = 0;         // CLOCK's hand: a frame
  uint32_t epoch_ = 1;      // a Fetch's number: frames stamped with it are the batch's own
  std::mutex fault_mutex_;  // Frame() faults from an operation's threads
  uint64_t read_bytes_ = 0, write_bytes_ = 0, hits_ = 0, misses_ = 0;
};

}  // namespace xdl_ec

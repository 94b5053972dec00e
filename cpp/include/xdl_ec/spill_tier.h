// The disk tier below a SlotStore (slot_store.h): every record lives in a spill file at slot * record_bytes,
// and RAM holds a bounded set of record frames, the rows used lately. Rows, not pages: Zipf ids scatter the
// hot rows over all slots, so caching the pages they sit on would spend the budget on their cold neighbours.
//
// Frames move only in Fetch (an operation's fetch step, before it holds any record pointer): the batch's
// misses are read together, copied from the file's shared mapping over the core's TaskPool threads; room is
// made first by a counting CLOCK (GCLOCK: a use count per frame, raised once per fetch step that asks for it
// up to kMaxUses, lowered by the hand, which evicts at zero and skips the batch's own frames), the dirty victims
// written back the same way. Counting, not CLOCK's one bit: a row asked for in most steps outlives a burst of
// rows asked for once (docs/results/tier-policy-2026-12-07.md: 4% fewer misses on Zipf 1.1 ids at 5M rows). An owner
// resolving its keys over several threads runs the fetch step in three calls instead (BeginFetch, Touch per row on any
// thread, FetchMissing): a hit is then marked where its key was confirmed, with its frame still in cache, not in a
// second serial pass. A mapping, not preadv / pwritev: rows are ~100-byte scattered pieces, and a syscall per piece
// (ext4's buffered write path, the inode lock) cost more than the rest of the step
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
// pages are dropped from the resident set after a budget's worth of scattered copies while the file is in the page
// cache; once it is not (cold), or when the copies are dense (a bulk load), once they may fill an eighth of the
// budget (Unmap).
//
// RAM per slot beside the frames: its frame number only (4 bytes). A row on disk is confirmed by the key
// bytes of its record in the file, read through the mapping (a tag match on disk is nearly always the row
// the fetch step reads next anyway). The frames and the per-slot words are huge-page buffers, as the
// untiered store's blocks are: a batch reaches them at random, and a 4 KiB page per access missed the TLB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xdl_ec/mapped_buffer.h"

namespace xdl_ec {

struct SpillStats {
  size_t budget_bytes = 0;
  size_t rows_in_memory = 0;  // frames held
  size_t rows_on_disk = 0;    // slots without a frame
  size_t frame_bytes = 0;     // RAM the frames take, free ones included, with their per-frame words
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
  // Bytes RAM holds per slot beside its frame: where its frame is.
  static constexpr size_t kSlotOverhead = sizeof(uint32_t);
  static size_t MinimumBudget(size_t record_bytes) { return kMinFrames * (record_bytes + kFrameHeader); }

  // Makes the spill file under `dir`. Throws std::invalid_argument when the budget is below MinimumBudget
  // (naming it), std::runtime_error naming `dir` when it is missing or not writable.
  SpillTier(size_t record_bytes, size_t budget_bytes, const std::string& dir);
  ~SpillTier();
  SpillTier(const SpillTier&) = delete;
  SpillTier& operator=(const SpillTier&) = delete;

  size_t slots() const { return slots_; }

  // The resident bytes of `slot`, read in alone when it has no frame; marks the frame dirty.
  uint8_t* Frame(size_t slot) {
    const uint32_t f = FrameOf(slot);
    uint8_t* frame = f != kNone ? FrameAt(f) : Fault(slot);
    __atomic_store_n(frame + kDirtyAt, uint8_t{1}, __ATOMIC_RELAXED);
    return frame + kFrameHeader;
  }
  // The key bytes of `slot` (its first 8), from its frame or, on disk, from the file's mapping (zeros past
  // what the file holds, as a read there gives). Not while a fetch step moves frames.
  int64_t KeyOf(size_t slot) const {
    const uint32_t f = FrameOf(slot);
    const uint8_t* bytes = f != kNone ? FrameAt(f) + kFrameHeader : OnDisk(slot);
    int64_t key = 0;
    if (bytes) std::memcpy(&key, bytes, sizeof(key));
    return key;
  }

  // The fetch step: every slot of slots[0..n) (kNone entries skipped, repeats allowed) resident on return.
  // `other_bytes`: what else the budget covers (the key index, the slot lists), taken from it first.
  void Fetch(const uint32_t* slots, size_t n, size_t other_bytes) { Fetch(slots, n, other_bytes, nullptr, false); }
  // The same, handing back records[i], the resident bytes of slots[i] (null for kNone), so the operation
  // reaches its rows without looking their frames up again; `for_write`: they are marked dirty here (an
  // operation writing through these pointers does not pass through Frame()).
  // `appends`: rows the operation adds after it (as FetchMissing's).
  void Fetch(const uint32_t* slots, size_t n, size_t other_bytes, uint8_t** records, bool for_write,
             size_t appends = 0);

  // The same fetch step in three calls. BeginFetch: the file covered (throws naming the dir when it is full,
  // nothing changed) and a new batch begun. Touch(slot): a resident slot becomes the batch's own (one more use,
  // never a victim of this step, dirty when `for_write`) and its record is returned; null when it is on
  // disk. Touch may run on several threads at once (nothing else may). FetchMissing: the slots Touch found
  // on disk (repeats allowed) read in together, room made first, for them and for `appends` rows the
  // operation may add after it (Append then takes a frame this step freed: a batch of new rows does not carve
  // frames past the budget); `hits`: the Touch calls that found a frame (the stats count both per row asked).
  // Then Resident gives their records.
  void BeginFetch();
  uint8_t* Touch(size_t slot, bool for_write) {
    const uint32_t f = FrameOf(slot);
    if (f == kNone) return nullptr;
    uint8_t* frame = FrameAt(f);
    // Relaxed atomics: two threads may touch one frame (a key repeated in a batch); both may then count the
    // step's use, which only makes that frame a little stickier, never changes a byte.
    if (__atomic_load_n(&fetched_in_[f], __ATOMIC_RELAXED) != epoch_) {
      const uint8_t uses = __atomic_load_n(&uses_[f], __ATOMIC_RELAXED);
      if (uses < kMaxUses) __atomic_store_n(&uses_[f], static_cast<uint8_t>(uses + 1), __ATOMIC_RELAXED);
      __atomic_store_n(&fetched_in_[f], epoch_, __ATOMIC_RELAXED);
    }
    if (for_write) __atomic_store_n(frame + kDirtyAt, uint8_t{1}, __ATOMIC_RELAXED);
    return frame + kFrameHeader;
  }
  void FetchMissing(std::vector<uint32_t> slots, size_t hits, size_t other_bytes, bool for_write, size_t appends = 0);
  // The record of a resident slot (null on disk), marking nothing.
  uint8_t* Resident(size_t slot) const {
    const uint32_t f = FrameOf(slot);
    return f == kNone ? nullptr : FrameAt(f) + kFrameHeader;
  }

  // Prefetch hints for a batch's key resolution, a few keys apart: the slot's frame word first, then, once
  // it has arrived, the bytes KeyOf reads (its frame's first line, or its record in the file's mapping).
  void PrefetchSlot(size_t slot) const { __builtin_prefetch(&frame_of_[slot]); }
  void PrefetchKey(size_t slot) const {
    const uint32_t f = FrameOf(slot);
    const uint8_t* bytes = f != kNone ? FrameAt(f) : OnDisk(slot);
    if (bytes) __builtin_prefetch(bytes);  // a prefetch of an unmapped page is dropped, never a fault
  }
  // Whether the file's pages are mostly not in the page cache (the last fetch steps took major faults): a fetch
  // step then asks for its rows' pages ahead (WillNeed), so the disk reads them all at once, not one fault at a
  // time per thread. Re-measured every kColdSteps steps with no asking ahead.
  bool cold() const { return cold_steps_ > 0; }
  // Asks the kernel to start reading the page(s) of `slot`'s record (no wait; nothing when it has a frame).
  void WillNeed(size_t slot) const;
  // Fetch of [first, first + count) (clipped to slots()): a scan's next block.
  void FetchRange(size_t first, size_t count, size_t other_bytes);

  // One more slot, all zero (past the file's end, which reads zeros), resident.
  size_t Append();
  // `slots` slots, all zero, none resident (a restore writes them).
  void Reset(size_t slots);
  // Records [slot, slot + count) (within slots()) to / from a caller's bytes, frames and file alike.
  void Read(size_t slot, size_t count, uint8_t* out);
  void Write(size_t slot, size_t count, const uint8_t* bytes);

  size_t frame_bytes() const { return carved_ * (stride_ + kFrameWords); }
  SpillStats stats() const;

 private:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  // A held frame: [pad (8) | dirty (1) | pad (7)] then the record (the dirty byte shares the key's cache line,
  // which a hit has just read).
  static constexpr size_t kFrameHeader = 16;
  static constexpr size_t kDirtyAt = 8;
  // RAM per frame beside its bytes: held_slot_, uses_, fetched_in_.
  static constexpr size_t kFrameWords = sizeof(uint32_t) + sizeof(uint8_t) + sizeof(uint32_t);
  static constexpr size_t kChunkBytes = size_t{8} << 20;  // frames are carved in chunks of at least this, never moved
  static constexpr size_t kMaxChunks = size_t{1} << 14;
  // The most uses a frame counts: a pull and a push of one step count two, so 3 lets a row asked for again in a
  // later step outlast one that was not; more held no more of benchmark 1's hot rows and makes the hand go round
  // more often.
  static constexpr uint8_t kMaxUses = 3;

  // frame_of_ holds frame + 1 (0: on disk), so a zeroed buffer is a run of slots on disk.
  uint32_t FrameOf(size_t slot) const { return __atomic_load_n(&frame_of_[slot], __ATOMIC_ACQUIRE) - 1; }
  void SetFrameOf(size_t slot, uint32_t f) { __atomic_store_n(&frame_of_[slot], f + 1, __ATOMIC_RELEASE); }
  uint8_t* FrameAt(uint32_t f) const { return chunks_[f >> chunk_shift_] + (f & chunk_mask_) * stride_; }
  // The record of `slot` in the file's mapping, or null past what is mapped.
  const uint8_t* OnDisk(size_t slot) const {
    const size_t at = slot * record_bytes_;
    return at + record_bytes_ <= map_bytes_ ? map_ + at : nullptr;
  }
  // The per-slot words made room for `slots` (doubling; new ones on disk).
  void ReserveSlots(size_t slots);
  // Frame f starts holding `slot` (its record already there): one use, in the ring, found by Frame().
  void Hold(uint32_t f, size_t slot);
  // Frame f (written back first when dirty) gives its slot up and goes to the free list.
  void Drop(uint32_t f);
  uint8_t* Fault(size_t slot);
  uint32_t NewFrame();  // a free frame, or one more carved
  size_t Capacity(size_t other_bytes) const;
  // Frees frames not fetched in this epoch until `need` more fit under the capacity (dirty ones written
  // back first, all or nothing).
  void MakeRoom(size_t need, size_t capacity);
  // Asks the kernel to start reading the page(s) of `slot`'s record in the file / of every slot of `slots`.
  void AskFor(size_t slot) const;
  void AskAhead(const std::vector<uint32_t>& slots) const;
  // Chunks past what the frames need (the capacity MakeRoom last saw, or the held frames) given back, their
  // held frames moved below first. Only where no operation holds a record: a fetch step's start.
  void Shrink();
  // The records of frames[i] from / to the file at sorted_slots[i] through its mapping, over the pool.
  void Transfer(const std::vector<uint32_t>& sorted_slots, const std::vector<uint32_t>& frames, bool write);
  // The file allocated and mapped over at least `slots` records (throws naming the dir: a full disk).
  void Cover(size_t slots);
  // The mapping's pages dropped from the resident set once the copies may have touched enough (see Unmap).
  void Unmap();
  [[noreturn]] void Fail(const char* what, size_t slot, int err) const;

  const size_t record_bytes_;
  const size_t budget_bytes_;
  const std::string dir_;
  const size_t stride_;  // header + record, rounded to 8
  // Cold, the file's pages mapped in at most (copies counted a page each): a share of the budget, not frames.
  static constexpr size_t kWindowShare = 8;
  const size_t window_bytes_;
  int fd_ = -1;
  static constexpr size_t kPage = 4096;
  static constexpr size_t kCoverStep = size_t{1} << 20;  // the file grows by at least this much
  uint8_t* map_ = nullptr;   // the file, mapped shared: rows move by copies, not a syscall each
  size_t map_length_ = 0;    // the mapping's length (whole pages)
  size_t map_bytes_ = 0;     // the file's allocated length, all of it mapped
  size_t mapped_bytes_ = 0;  // bytes copied through since the mapping's pages last left the resident set
  size_t mapped_pages_ = 0;  // ... and the pages those copies touched

  MappedBuffer slot_words_;       // per slot: its frame + 1, or 0 on disk
  uint32_t* frame_of_ = nullptr;  // slot_words_' words
  size_t slots_ = 0;
  size_t slot_capacity_ = 0;
  size_t chunk_shift_ = 0;  // log2 of the frames per chunk
  size_t chunk_mask_ = 0;
  std::vector<MappedBuffer> chunk_buffers_;  // huge-page backed
  std::unique_ptr<uint8_t*[]> chunks_;       // chunk_buffers_' data, read by FrameAt
  size_t num_chunks_ = 0;
  size_t carved_ = 0;           // frames carved from chunks
  std::vector<uint32_t> free_;  // carved frames holding no slot
  size_t held_ = 0;             // frames holding a slot
  size_t capacity_ = 0;         // the frames the budget left at the last MakeRoom (0: none yet)
  // Per carved frame, dense, so the hand's sweep reads a few bytes per frame and no frame: the slot it holds
  // (kNone: free), its use count, the last fetch step that asked for it.
  std::vector<uint32_t> held_slot_;
  std::vector<uint8_t> uses_;
  std::vector<uint32_t> fetched_in_;
  size_t hand_ = 0;         // the hand: a frame
  uint32_t epoch_ = 1;      // a Fetch's number: frames stamped with it are the batch's own
  std::mutex fault_mutex_;  // Frame() faults from an operation's threads
  uint64_t read_bytes_ = 0, write_bytes_ = 0, hits_ = 0, misses_ = 0;
  static constexpr int kColdSteps = 32;
  int cold_steps_ = 0;        // fetch steps left that ask ahead (0: measuring)
  bool file_cold_ = false;    // the last measuring step found the file past the page cache (Unmap's window)
  long faults_at_begin_ = 0;  // the process's major faults when this fetch step began
};

}  // namespace xdl_ec

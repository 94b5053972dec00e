// The parity side of one parameter server: the parity blocks it holds (one ParityStore per table) for
// the stripes the layout makes it a parity member of, and per sender (a data server whose stripes it
// protects) the protocol state of xdl_ec/ft/ec_strategy.py:
// - applied(sender): the sender's delta seq up to which its batches are in the blocks. Batches (seq
//   ranges, see ForwardedBatch) apply strictly in seq order and whole: one ending at or below applied is
//   skipped (a resend), one not starting at applied + 1 is an error;
// - the worker seqs stamped on the last applied batch: after a rollback to W, what the rebuilt sender
//   claims as applied, so workers replay exactly the pushes above it;
// - an undo log of the batches above the sender's durable watermark (applied by every holder, never
//   rolled back). Updates are XOR-ed in over GF(2^8), so applying a batch again removes it.
//
// Every batch is checked against the layout before any byte changes (a holder in another process takes
// batches from the network, see xdl_ec/ft/parity_link.py): the sender must be a data member of a stripe
// this holder protects (never the holder itself), every update must name that sender and this holder, and
// every entry must agree with StripeLayout (its parity block's stripe has the sender at the entry's data
// position and this holder at its parity position; whole records) and stay within the table's extent plus
// the growth the batch itself justifies. The extent of a (sender, table) is the highest stripe cycle
// applied from it, this holder's own parity blocks, and what SetExtent declared; a sender's shard fills
// its slots in order (free slots first, then new ones), so reaching cycle q + 1 means filling every block
// of cycle q, of which this holder protects at least one whole block (block_slots entries): a batch of E
// entries reaches at most cycle extent + 1 + E / block_slots. A refused batch changes
// nothing and throws BatchRefused naming the rule it broke.
//
// Thread safety: every method may be called from any thread (one mutex; reads of a block and of the
// applied seqs are atomic together, which consistent decoding relies on).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "xdl_ec/erasure_code.h"
#include "xdl_ec/forwarded_batch.h"
#include "xdl_ec/inheriting_mutex.h"
#include "xdl_ec/parity_store.h"
#include "xdl_ec/stripe_layout.h"

namespace xdl_ec {

// Thrown by a closed holder: its server is gone (in one process, the object of a killed server).
class HolderClosed : public std::runtime_error {
 public:
  explicit HolderClosed(int index);
  int index() const { return index_; }

 private:
  int index_;
};

// A batch that does not agree with the layout (see above): a std::invalid_argument, so callers that
// treat any bad batch as one keep working.
class BatchRefused : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class ParityHolder {
 public:
  // Server `index` of `n` under a (k, r) code; `tables`: table name -> bytes of one parity block of it
  // (block_slots * record_bytes). Throws std::invalid_argument for a bad layout or code, an index outside
  // [0, n), an empty name or a zero block size. `spills`: the disk tier of a table's parity (ParitySpill;
  // tables absent keep theirs in RAM); a name not in `tables` is an error, as is a bad tier (see ParityStore).
  ParityHolder(int index, int n, int k, int r, const std::map<std::string, size_t>& tables,
               const std::map<std::string, ParitySpill>& spills = {});
  ParityHolder(const ParityHolder&) = delete;
  ParityHolder& operator=(const ParityHolder&) = delete;

  int index() const { return index_; }
  const StripeLayout& layout() const { return layout_; }
  // Whether `sender` is a data member of some stripe this holder is a parity member of: the only servers
  // whose batches it takes ((index - sender) mod n in [1, k + r)).
  bool Protects(int sender) const;

  // Applies `sender`'s batches in order (see above), then drops undo entries at or below `durable`.
  // Returns applied(sender). A gap or an update naming an unknown table throws std::invalid_argument,
  // a batch that does not agree with the layout BatchRefused, both naming sender, seqs and this holder;
  // the batches before it stay applied, it and later ones do not. Throws HolderClosed after Close().
  int64_t Apply(int sender, const std::vector<BatchPtr>& batches, int64_t durable);
  // The table's extent in parity blocks of this holder, as measured elsewhere (a replacement holder is
  // told the stripes being rebuilt before its senders' batches arrive): entries up to it, plus the growth
  // rule's allowance, are accepted from every sender. Never shrinks.
  void SetExtent(const std::string& table, size_t parity_blocks);

  int64_t Applied(int sender) const;              // 0 for a sender never seen
  std::map<int32_t, int64_t> AppliedAll() const;  // sender -> applied
  WorkerSeqs WorkerSeqsOf(int sender) const;      // stamped on the last applied batch

  // Undoes `sender`'s batches above `to_seq`, newest first; returns the worker seqs at `to_seq`. Throws
  // std::invalid_argument (nothing changed) when the undo log does not reach back to to_seq + 1, or when
  // to_seq falls inside a batch's seq range (ranges are undone whole; the forwarder gives every holder
  // of a sender the same ranges, so the least applied seq among them is a boundary for all).
  WorkerSeqs Rollback(int sender, int64_t to_seq);
  // After the blocks were recomputed from data: they hold `sender`'s stream up to `seq`, which
  // included the pushes `worker_seqs`. Clears the sender's undo log.
  void ResetSender(int sender, int64_t seq, const WorkerSeqs& worker_seqs);

  // Copies bytes [offset, offset + width) of every record (record_bytes each) of parity block c of
  // `table` to out (packed; the whole block when offset == 0 and width == record_bytes) and returns
  // AppliedAll() as of the same instant: which version of each sender's data the bytes encode.
  std::map<int32_t, int64_t> ReadBlock(const std::string& table, size_t c, size_t record_bytes, size_t offset,
                                       size_t width, uint8_t* out) const;
  // Bytes ReadBlock writes to out for these arguments; throws std::invalid_argument (unknown table,
  // record_bytes not dividing the block, columns empty or outside a record) as ReadBlock does.
  size_t ReadBlockBytes(const std::string& table, size_t record_bytes, size_t offset, size_t width) const;
  // Overwrites block c of `table` with bytes[block_bytes(table)] (re-encoded from its stripe's data at
  // the versions `expected`) only when this holder applied exactly those versions; false otherwise.
  bool WriteBlockIf(const std::string& table, size_t c, const uint8_t* bytes,
                    const std::map<int32_t, int64_t>& expected);
  void WriteBlock(const std::string& table, size_t c, const uint8_t* bytes);

  size_t block_bytes(const std::string& table) const;
  size_t NumBlocks(const std::string& table) const;         // one past the highest allocated parity block
  size_t Bytes() const;                                     // parity bytes allocated over all tables
  std::map<std::string, SpillStats> SpillStatsAll() const;  // per tiered table, its parity tier's counts

  // The server died: every later Apply throws HolderClosed (reads still work: they are only reached
  // through the server, which is gone).
  void Close();
  bool closed() const;

 private:
  struct Sender {
    int64_t applied = 0;
    std::shared_ptr<const WorkerSeqs> worker_seqs;  // stamped on the last applied batch (null: none)
    std::deque<BatchPtr> undo;                      // applied batches above the durable watermark
    std::shared_ptr<const WorkerSeqs> base;         // worker seqs just before undo.front()
    std::map<std::string, uint64_t> reach;          // table -> 1 + the highest stripe cycle applied from it
  };
  ParityStore& StoreLocked(const std::string& table) const;
  // Throws BatchRefused unless every update of `batch` agrees with the layout (see above).
  void CheckBatchLocked(int sender, const Sender* known, const ForwardedBatch& batch,
                        const std::vector<ParityStore*>& stores, const std::function<std::string()>& at) const;

  int index_;
  StripeLayout layout_;
  std::shared_ptr<const ErasureCode> code_;
  std::map<std::string, std::unique_ptr<ParityStore>> stores_;
  // Applies run in forwarders' idle-policy threads; a rebuild's reads and writes of parity blocks wait here
  mutable InheritingMutex mu_;
  std::map<int32_t, Sender> senders_;
  std::map<std::string, uint64_t> extent_cycles_;  // SetExtent, in stripe cycles
  bool closed_ = false;
};

}  // namespace xdl_ec

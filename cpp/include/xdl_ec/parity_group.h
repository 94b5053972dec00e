// N embedding shards of one table protected by an erasure code over their slot-record bytes, in one
// process: the composition tests and the one-process PS use. Every mutation's slot deltas are routed
// (ParityRouter) to the parity holders and applied in place (ParityStore); up to r lost servers are
// rebuilt bit for bit (Recovery) while traffic continues.
//
// Lifecycle of a server: healthy -> Kill -> lost (shard and parity store dropped) -> BeginRebuild
// (key index decoded, replacement shard installed in restore mode: traffic goes to it and blocks it
// has not got yet are decoded on demand) -> restoring -> RebuildStep ... / FinishRebuild -> healthy.
// Any operation on a lost server starts the rebuild itself, so callers never see a missing server.
//
// Consistency: decoding a stripe must see its data and parity at one version. Mutations of healthy
// servers hold the group lock shared (their parity deltas commute, so they may run concurrently)
// and apply their routed updates (or, with background apply, hand them to a ParityApplier thread);
// everything that decodes - operations on a restoring server (their block faults decode), rebuild
// steps, Kill, Scrub - holds the lock exclusively and first drains the applier, so no mutation is
// half-applied while a stripe is decoded. Every method that reads parity drains first too. The fault handler runs inside the replacement shard's lock and reads only other shards
// and parity stores, which never wait for that lock: no deadlock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <vector>

#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/erasure_code.h"
#include "xdl_ec/parity_applier.h"
#include "xdl_ec/parity_router.h"
#include "xdl_ec/parity_store.h"
#include "xdl_ec/recovery.h"
#include "xdl_ec/stripe_layout.h"

namespace xdl_ec {

enum class ServerState { kHealthy, kLost, kRestoring };

struct ScrubMismatch {
  size_t stripe = 0;
  int parity_member = 0;  // i: which parity block of the stripe disagrees
  int server = 0;         // its holder
  size_t block = 0;       // the holder's local parity block
};

struct ParityGroupStats {
  std::vector<size_t> data_bytes;             // per server: bytes of allocated slot blocks
  std::vector<size_t> parity_bytes;           // per server: bytes of allocated parity blocks
  std::vector<uint64_t> delta_bytes_received; // per server: parity delta bytes applied since it (re)started
  std::vector<size_t> rows;                   // per server: live rows
  size_t total_data_bytes = 0;
  size_t total_parity_bytes = 0;
};

class ParityGroup {
 public:
  // Throws std::invalid_argument naming the bad argument: k/r outside the code's range, n < k + r,
  // or a bad shard config.
  ParityGroup(int n, int k, int r, const ShardConfig& config);
  ~ParityGroup();
  ParityGroup(const ParityGroup&) = delete;
  ParityGroup& operator=(const ParityGroup&) = delete;

  int n() const { return layout_.n(); }
  int k() const { return layout_.k(); }
  int r() const { return layout_.r(); }
  const StripeLayout& layout() const { return layout_; }
  const ErasureCode& code() const { return *code_; }
  const ShardConfig& config() const { return config_; }
  size_t record_bytes() const { return router_->record_bytes(); }
  size_t block_bytes() const { return router_->block_bytes(); }

  // ---- training path (the caller picks the server, e.g. with KeyRouter::ServerOf) --------------
  void Pull(int server, const int64_t* keys, size_t count, float* out);
  void Find(int server, const int64_t* keys, size_t count, float* out, uint8_t* found);
  void Push(int server, const int64_t* keys, const float* grads, size_t count, int64_t step);
  size_t Erase(int server, const int64_t* keys, size_t count);
  void Load(int server, const int64_t* keys, const float* values, const float* state, size_t count);

  // ---- failures and recovery -------------------------------------------------------------------
  // Drops the shards and parity stores of `servers` with everything they held. Throws
  // std::invalid_argument("unrecoverable: lost servers {..}, the code tolerates r=..") and changes
  // nothing when that would leave more than r servers lost or restoring.
  void Kill(const std::vector<int>& servers);
  // Phase 1 for every lost server: decodes its key index, installs a replacement shard in restore
  // mode and an empty parity store, and plans the stripes to rebuild. A no-op when none is lost.
  void BeginRebuild();
  // Rebuilds up to max_stripes planned stripes (data blocks restored, lost parity re-decoded); returns
  // the stripes still to do. Servers become healthy when it reaches 0.
  size_t RebuildStep(size_t max_stripes);
  void FinishRebuild();  // BeginRebuild if needed, then steps to the end
  size_t rebuild_remaining() const;

  ServerState state(int server) const;
  std::vector<int> unavailable_servers() const;  // lost or restoring

  // ---- verification ----------------------------------------------------------------------------
  // Re-encodes every stripe from its data blocks and compares with the stored parity. Throws
  // std::invalid_argument while any server is lost or restoring (finish the rebuild first).
  std::vector<ScrubMismatch> Scrub() const;

  // Background apply (default off): pushes return once their shard is updated and deltas routed,
  // a ParityApplier thread applies them; pays off when a core is free (on the 2-core dev box it
  // measured no faster than applying inline). Off: applied before the call returns.
  void SetBackgroundApply(bool on);
  bool background_apply() const;

  ParityGroupStats stats() const;
  // Blocks covering a server's data (slot high-water) and its parity (highest allocated + 1).
  size_t num_data_blocks(int server) const;
  size_t num_parity_blocks(int server) const;
  // Copies a block (zeros past the end). Reading a restoring server's data block faults it in; a
  // restoring server's parity blocks are only meaningful once the rebuild has passed their stripe.
  // Throws std::invalid_argument for the parity of a lost server (nothing to read until rebuilt).
  void ReadDataBlock(int server, size_t block, uint8_t* out);
  void ReadParityBlock(int server, size_t block, uint8_t* out) const;

  // Direct access for tests and tools. Mutating a shard or store through these bypasses the parity
  // maintenance (that is how tests inject corruption); null when the server is lost. Accessing a
  // restoring shard directly decodes its faults without the group lock: do it only while no other
  // thread uses the group (the group's own methods are always safe).
  std::shared_ptr<EmbeddingShard> shard(int server) const;
  std::shared_ptr<ParityStore> parity_store(int server) const;

 private:
  struct Server;
  template <typename Op>
  auto Mutate(int server, Op op);
  void CheckServer(int server, const char* what) const;
  void ApplyDeltas(int server, DeltaBatch* deltas, bool background);
  void ApplyRouted(int server, const DeltaBatch& deltas);  // route by reference and apply, this thread
  void Drain() const;
  void BeginRebuildLocked();
  size_t RebuildStepLocked(size_t max_stripes);
  void HandleFault(int server, size_t block, uint8_t* out);
  std::vector<int> UnavailableLocked() const;
  FragmentReader Reader() const;
  size_t StripeExtentLocked() const;

  StripeLayout layout_;
  ShardConfig config_;
  std::shared_ptr<const ErasureCode> code_;
  std::unique_ptr<ParityRouter> router_;
  std::unique_ptr<Recovery> recovery_;
  mutable std::shared_mutex mu_;
  std::vector<Server> servers_;
  std::vector<size_t> plan_;  // stripes still to rebuild, in order
  size_t plan_done_ = 0;
  // Declared last: destroyed first, applying what is pending while the stores still exist.
  std::unique_ptr<ParityApplier> applier_;
};

}  // namespace xdl_ec

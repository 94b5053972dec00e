// Test-only: N embedding shards of one table and their parity in one process, driving Recovery and
// the shard's restore protocol. The rebuild tests (parity_group_test.cc) run it against a twin that
// never loses anything. Training does not use it: there a shard records into a DeltaForwarder (a
// DeltaSink), which delivers to the ParityHolders of other servers (delta_forwarder.h).
//
// Every mutation's slot deltas are routed (ParityRouter) and applied in place (ParityStore) before the
// call returns; up to r lost servers are rebuilt bit for bit while traffic continues.
//
// Lifecycle of a server: healthy -> Kill -> lost (shard and parity store dropped) -> BeginRebuild
// (key index decoded, replacement shard installed in restore mode: traffic goes to it and blocks it
// has not got yet are decoded on demand) -> restoring -> RebuildStep ... / FinishRebuild -> healthy.
// Any operation on a lost server starts the rebuild itself.
//
// Consistency: decoding a stripe must see its data and parity at one version. Mutations of healthy
// servers hold the group lock shared (their parity deltas commute); everything that decodes
// (operations on a restoring server, rebuild steps, Kill, Scrub) holds it exclusively. The fault
// handler runs inside the replacement shard's lock and reads only other shards and parity stores.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "xdl_ec/delta_batch_sink.h"
#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/erasure_code.h"
#include "xdl_ec/parity_router.h"
#include "xdl_ec/parity_store.h"
#include "xdl_ec/recovery.h"
#include "xdl_ec/scrubber.h"
#include "xdl_ec/stripe_layout.h"

namespace xdl_ec::testing {

enum class ServerState { kHealthy, kLost, kRestoring };

struct ParityGroupStats {
  std::vector<size_t> data_bytes;              // per server: bytes of allocated slot blocks
  std::vector<size_t> parity_bytes;            // per server: bytes of allocated parity blocks
  std::vector<uint64_t> delta_bytes_received;  // per server: parity delta bytes applied since it (re)started
  std::vector<size_t> rows;                    // per server: live rows
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
  void ApplyRouted(int server, const DeltaBatch& deltas);  // route by reference and apply, this thread
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
};

inline bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

struct ParityGroup::Server {
  ServerState state = ServerState::kHealthy;
  std::shared_ptr<EmbeddingShard> shard;
  std::shared_ptr<ParityStore> parity;
  size_t restore_blocks = 0;  // data blocks BeginRestore marked missing on the replacement
};

inline ParityGroup::ParityGroup(int n, int k, int r, const ShardConfig& config)
    : layout_(n, k, r), config_(config), code_(std::make_shared<ErasureCode>(k, r)) {
  servers_.resize(n);
  for (Server& s : servers_) s.shard = std::make_shared<EmbeddingShard>(config);  // validates the config
  router_ = std::make_unique<ParityRouter>(layout_, config.block_slots, servers_[0].shard->layout().bytes());
  recovery_ = std::make_unique<Recovery>(layout_, code_, config.block_slots, router_->record_bytes());
  for (Server& s : servers_) s.parity = std::make_shared<ParityStore>(code_, router_->block_bytes());
}

inline ParityGroup::~ParityGroup() = default;

inline void ParityGroup::CheckServer(int server, const char* what) const {
  if (server < 0 || server >= layout_.n())
    throw std::out_of_range(std::string("ParityGroup::") + what + ": server " + std::to_string(server) +
                            " is outside [0, n=" + std::to_string(layout_.n()) + ")");
}

// Runs op(shard, exclusive) on `server` under the right lock. Healthy servers share the group lock;
// a lost or restoring one takes it exclusively (its block faults decode).
template <typename Op>
inline auto ParityGroup::Mutate(int server, Op op) {
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (servers_[server].state == ServerState::kHealthy) return op(*servers_[server].shard, false);
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (servers_[server].state == ServerState::kLost) BeginRebuildLocked();
  return op(*servers_[server].shard, true);
}

// The parity stores read the deltas where the shard wrote them (no per-holder copy).
inline void ParityGroup::ApplyRouted(int server, const DeltaBatch& deltas) {
  thread_local std::vector<std::vector<ParityDeltaRef>> refs;
  router_->RouteRefs(server, deltas, &refs);
  const size_t rb = router_->record_bytes();
  for (int h = 0; h < layout_.n(); ++h) {
    // A lost holder's parity is recomputed by its rebuild: deltas to it are dropped.
    const std::shared_ptr<ParityStore>& store = servers_[h].parity;
    if (!refs[h].empty() && store) store->Apply(refs[h].data(), refs[h].size(), rb);
  }
}

inline void ParityGroup::Pull(int server, const int64_t* keys, size_t count, float* out) {
  CheckServer(server, "Pull");
  Mutate(server, [&](EmbeddingShard& shard, bool) {
    thread_local DeltaBatch deltas;
    shard.Pull(keys, count, out, DeltaBatchSink(&deltas).sink());
    if (deltas.size() > 0) ApplyRouted(server, deltas);
  });
}

inline void ParityGroup::Find(int server, const int64_t* keys, size_t count, float* out, uint8_t* found) {
  CheckServer(server, "Find");
  Mutate(server, [&](EmbeddingShard& shard, bool) { shard.Find(keys, count, out, found); });
}

inline void ParityGroup::Push(int server, const int64_t* keys, const float* grads, size_t count, int64_t step) {
  CheckServer(server, "Push");
  Mutate(server, [&](EmbeddingShard& shard, bool) {
    thread_local DeltaBatch deltas;
    shard.Push(keys, grads, count, step, DeltaBatchSink(&deltas).sink());
    if (deltas.size() > 0) ApplyRouted(server, deltas);
  });
}

inline size_t ParityGroup::Erase(int server, const int64_t* keys, size_t count) {
  CheckServer(server, "Erase");
  return Mutate(server, [&](EmbeddingShard& shard, bool) {
    thread_local DeltaBatch deltas;
    const size_t erased = shard.Erase(keys, count, DeltaBatchSink(&deltas).sink());
    if (deltas.size() > 0) ApplyRouted(server, deltas);
    return erased;
  });
}

inline void ParityGroup::Load(int server, const int64_t* keys, const float* values, const float* state, size_t count) {
  CheckServer(server, "Load");
  Mutate(server, [&](EmbeddingShard& shard, bool) {
    thread_local DeltaBatch deltas;
    shard.Load(keys, values, state, count, DeltaBatchSink(&deltas).sink());
    if (deltas.size() > 0) ApplyRouted(server, deltas);
  });
}

inline std::vector<int> ParityGroup::UnavailableLocked() const {
  std::vector<int> out;
  for (int s = 0; s < layout_.n(); ++s)
    if (servers_[s].state != ServerState::kHealthy) out.push_back(s);
  return out;
}

inline void ParityGroup::Kill(const std::vector<int>& servers) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  for (int s : servers) CheckServer(s, "Kill");
  std::vector<int> down = UnavailableLocked();
  for (int s : servers)
    if (std::find(down.begin(), down.end(), s) == down.end()) down.push_back(s);
  std::sort(down.begin(), down.end());
  Recovery::CheckRecoverable(layout_, down);  // throws before anything is dropped
  for (int s : servers) {
    Server& sv = servers_[s];
    sv.shard.reset();
    sv.parity.reset();
    sv.state = ServerState::kLost;
    sv.restore_blocks = 0;
  }
  // Stripes decoded so far stay valid, but the plan must now cover the new losses too.
  plan_.clear();
  plan_done_ = 0;
}

inline FragmentReader ParityGroup::Reader() const {
  FragmentReader reader;
  const size_t record_bytes = router_->record_bytes();
  reader.read_data = [this, record_bytes](int server, size_t block, size_t offset, size_t width, uint8_t* out) {
    const EmbeddingShard& shard = *servers_[server].shard;
    if (offset == 0 && width == record_bytes) {
      shard.ReadBlock(block, out);
      return;
    }
    thread_local std::vector<uint8_t> whole;
    whole.resize(router_->block_bytes());
    shard.ReadBlock(block, whole.data());
    const size_t records = router_->block_slots();
    for (size_t x = 0; x < records; ++x) std::memcpy(out + x * width, whole.data() + x * record_bytes + offset, width);
  };
  reader.read_parity = [this, record_bytes](int server, size_t block, size_t offset, size_t width, uint8_t* out) {
    const ParityStore& store = *servers_[server].parity;
    if (offset == 0 && width == record_bytes) {
      store.ReadBlock(block, out);
    } else {
      store.ReadColumns(block, record_bytes, offset, width, out);
    }
  };
  return reader;
}

inline size_t ParityGroup::StripeExtentLocked() const {
  size_t stripes = 0;
  for (const Server& s : servers_) {
    if (s.shard) stripes = std::max(stripes, layout_.StripesForDataBlocks(s.shard->num_blocks()));
    if (s.parity) stripes = std::max(stripes, layout_.StripesForParityBlocks(s.parity->num_blocks()));
  }
  return stripes;
}

inline void ParityGroup::HandleFault(int server, size_t block, uint8_t* out) {
  // Runs inside the replacement shard's lock, with the group lock held exclusively by the caller.
  recovery_->DecodeDataBlock(server, block, out, UnavailableLocked(), Reader());
}

inline void ParityGroup::BeginRebuild() {
  std::unique_lock<std::shared_mutex> lock(mu_);
  BeginRebuildLocked();
}

inline void ParityGroup::BeginRebuildLocked() {
  std::vector<int> lost;
  for (int s = 0; s < layout_.n(); ++s)
    if (servers_[s].state == ServerState::kLost) lost.push_back(s);
  if (lost.empty() && !plan_.empty()) return;
  const std::vector<int> unavailable = UnavailableLocked();
  // Any stripe holding a lost server's non-zero data has a surviving parity holder that received its
  // deltas (at most r - 1 of its r parity members are down), so the survivors' extents bound it.
  const size_t stripes = StripeExtentLocked();
  const size_t data_blocks = stripes / layout_.n() * layout_.k();
  std::vector<RecoveredKeyIndex> indexes;
  const FragmentReader reader = Reader();
  for (int s : lost) indexes.push_back(recovery_->RecoverKeyIndex(s, data_blocks, unavailable, reader));
  for (size_t i = 0; i < lost.size(); ++i) {
    const int s = lost[i];
    const RecoveredKeyIndex& index = indexes[i];
    auto shard = std::make_shared<EmbeddingShard>(config_);
    shard->BeginRestore(index.keys.data(), index.slots.data(), index.keys.size(), index.high_water,
                        [this, s](size_t block, uint8_t* out) { HandleFault(s, block, out); });
    Server& sv = servers_[s];
    sv.shard = std::move(shard);
    sv.parity = std::make_shared<ParityStore>(code_, router_->block_bytes());
    sv.state = ServerState::kRestoring;
    sv.restore_blocks = (index.high_water + router_->block_slots() - 1) / router_->block_slots();
  }
  plan_.clear();
  plan_done_ = 0;
  for (size_t stripe = 0; stripe < stripes; ++stripe) {
    for (int t = 0; t < layout_.width(); ++t) {
      if (servers_[layout_.ServerAt(stripe, t)].state != ServerState::kHealthy) {
        plan_.push_back(stripe);
        break;
      }
    }
  }
  if (plan_.empty()) RebuildStepLocked(0);  // nothing to decode: the replacements are complete
}

inline size_t ParityGroup::RebuildStep(size_t max_stripes) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  return RebuildStepLocked(max_stripes);
}

inline size_t ParityGroup::RebuildStepLocked(size_t max_stripes) {
  bool any_lost = false;
  for (const Server& s : servers_) any_lost |= s.state == ServerState::kLost;
  if (any_lost) BeginRebuildLocked();
  const std::vector<int> unavailable = UnavailableLocked();
  if (unavailable.empty()) return 0;
  const FragmentReader reader = Reader();
  const int k = layout_.k();
  const size_t bytes = router_->block_bytes();
  std::vector<uint8_t> buffers;
  for (size_t done = 0; done < max_stripes && plan_done_ < plan_.size(); ++done) {
    const size_t stripe = plan_[plan_done_];
    std::vector<int> wanted;
    for (int t = 0; t < layout_.width(); ++t)
      if (servers_[layout_.ServerAt(stripe, t)].state != ServerState::kHealthy) wanted.push_back(t);
    buffers.resize(wanted.size() * bytes);
    std::vector<uint8_t*> outputs(wanted.size());
    for (size_t w = 0; w < wanted.size(); ++w) outputs[w] = buffers.data() + w * bytes;
    recovery_->DecodeStripe(stripe, wanted, outputs.data(), unavailable, reader);
    bool stripe_has_data = false;
    for (int j = 0; j < k; ++j) {
      const BlockRef ref = layout_.DataMember(stripe, j);
      stripe_has_data |= ref.block < servers_[ref.server].shard->num_blocks();
    }
    for (size_t w = 0; w < wanted.size(); ++w) {
      const int t = wanted[w];
      if (t < k) {
        const BlockRef ref = layout_.DataMember(stripe, t);
        Server& sv = servers_[ref.server];
        // A block faulted in earlier already holds these bytes (parity is current): RestoreBlock skips it.
        if (ref.block < sv.restore_blocks) sv.shard->RestoreBlock(ref.block, outputs[w]);
      } else {
        const BlockRef ref = layout_.ParityMember(stripe, t - k);
        ParityStore& store = *servers_[ref.server].parity;
        // Deltas that reached this block before now were applied to garbage: overwrite. Allocate it
        // whenever the stripe holds data, so extents keep bounding every stripe with data.
        if (stripe_has_data || store.HasBlock(ref.block) || !AllZero(outputs[w], bytes))
          store.WriteBlock(ref.block, outputs[w]);
      }
    }
    ++plan_done_;
  }
  if (plan_done_ < plan_.size()) return plan_.size() - plan_done_;
  for (int s : unavailable) {
    Server& sv = servers_[s];
    if (sv.shard->missing_blocks() != 0)
      throw std::logic_error("ParityGroup: rebuild of server " + std::to_string(s) + " ended with " +
                             std::to_string(sv.shard->missing_blocks()) + " blocks missing");
    sv.state = ServerState::kHealthy;
    sv.restore_blocks = 0;
  }
  plan_.clear();
  plan_done_ = 0;
  return 0;
}

inline void ParityGroup::FinishRebuild() {
  std::unique_lock<std::shared_mutex> lock(mu_);
  while (RebuildStepLocked(SIZE_MAX) != 0) {
  }
}

inline size_t ParityGroup::rebuild_remaining() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return plan_.size() - plan_done_;
}

inline ServerState ParityGroup::state(int server) const {
  CheckServer(server, "state");
  std::shared_lock<std::shared_mutex> lock(mu_);
  return servers_[server].state;
}

inline std::vector<int> ParityGroup::unavailable_servers() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return UnavailableLocked();
}

inline std::vector<ScrubMismatch> ParityGroup::Scrub() const {
  std::unique_lock<std::shared_mutex> lock(mu_);
  const std::vector<int> down = UnavailableLocked();
  if (!down.empty())
    throw std::invalid_argument("ParityGroup::Scrub: servers " + Recovery::ServerSet(down) +
                                " are lost or being rebuilt; finish the rebuild first");
  return Scrubber(layout_, code_, router_->block_slots(), router_->record_bytes())
      .Scrub(StripeExtentLocked(), Reader());
}

inline ParityGroupStats ParityGroup::stats() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  ParityGroupStats st;
  for (const Server& s : servers_) {
    const size_t data = s.shard ? s.shard->memory().slot_bytes : 0;
    const size_t parity = s.parity ? s.parity->bytes() : 0;
    st.data_bytes.push_back(data);
    st.parity_bytes.push_back(parity);
    st.delta_bytes_received.push_back(s.parity ? s.parity->delta_bytes_received() : 0);
    st.rows.push_back(s.shard ? s.shard->size() : 0);
    st.total_data_bytes += data;
    st.total_parity_bytes += parity;
  }
  return st;
}

inline size_t ParityGroup::num_data_blocks(int server) const {
  CheckServer(server, "num_data_blocks");
  std::shared_lock<std::shared_mutex> lock(mu_);
  return servers_[server].shard ? servers_[server].shard->num_blocks() : 0;
}

inline size_t ParityGroup::num_parity_blocks(int server) const {
  CheckServer(server, "num_parity_blocks");
  std::shared_lock<std::shared_mutex> lock(mu_);
  return servers_[server].parity ? servers_[server].parity->num_blocks() : 0;
}

inline void ParityGroup::ReadDataBlock(int server, size_t block, uint8_t* out) {
  CheckServer(server, "ReadDataBlock");
  Mutate(server, [&](EmbeddingShard& shard, bool) { shard.ReadBlock(block, out); });
}

inline void ParityGroup::ReadParityBlock(int server, size_t block, uint8_t* out) const {
  CheckServer(server, "ReadParityBlock");
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (!servers_[server].parity)
    throw std::invalid_argument("ParityGroup::ReadParityBlock: server " + std::to_string(server) +
                                " is lost; rebuild it first (BeginRebuild / FinishRebuild)");
  servers_[server].parity->ReadBlock(block, out);
}

inline std::shared_ptr<EmbeddingShard> ParityGroup::shard(int server) const {
  CheckServer(server, "shard");
  std::shared_lock<std::shared_mutex> lock(mu_);
  return servers_[server].shard;
}

inline std::shared_ptr<ParityStore> ParityGroup::parity_store(int server) const {
  CheckServer(server, "parity_store");
  std::shared_lock<std::shared_mutex> lock(mu_);
  return servers_[server].parity;
}

}  // namespace xdl_ec::testing

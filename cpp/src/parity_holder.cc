// A C++ port of xdl_ec/ps/parity_role.py (the protocol is in the docstring of xdl_ec/ft/ec_strategy.py), so
// that a forwarder thread can apply batches without the GIL.
#include "xdl_ec/parity_holder.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace xdl_ec {

HolderClosed::HolderClosed(int index)
    : std::runtime_error("parity holder on server " + std::to_string(index) +
                         " is closed: its server is gone (the replacement's holder takes its place)"),
      index_(index) {}

ParityHolder::ParityHolder(int index, int n, int k, int r, const std::map<std::string, size_t>& tables,
                           const std::map<std::string, ParitySpill>& spills)
    : index_(index), layout_(n, k, r) {  // the layout throws invalid_argument for a bad n, k or r
  if (index < 0 || index >= n)
    throw std::invalid_argument("ParityHolder: index must be a server index in [0, n=" + std::to_string(n) + "), got " +
                                std::to_string(index));
  code_ = std::make_shared<const ErasureCode>(k, r);  // throws invalid_argument for a bad code
  for (const auto& [name, block_bytes] : tables) {
    if (name.empty()) throw std::invalid_argument("ParityHolder: tables: a table name is empty");
    if (block_bytes == 0)
      throw std::invalid_argument("ParityHolder: tables: block bytes of table '" + name + "' must be >= 1, got 0");
    const auto spill = spills.find(name);
    stores_.emplace(
        name, std::make_unique<ParityStore>(code_, block_bytes, spill == spills.end() ? ParitySpill{} : spill->second));
  }
  for (const auto& [name, spill] : spills)
    if (tables.count(name) == 0)
      throw std::invalid_argument("ParityHolder: spills: table '" + name + "' is not one of the tables");
}

bool ParityHolder::Protects(int sender) const {
  if (sender < 0 || sender >= layout_.n()) return false;
  const int d = ((index_ - sender) % layout_.n() + layout_.n()) % layout_.n();
  return d >= 1 && d < layout_.width();
}

void ParityHolder::SetExtent(const std::string& table, size_t parity_blocks) {
  StoreLocked(table);  // throws for an unknown table
  const uint64_t cycles = (parity_blocks + layout_.r() - 1) / layout_.r();
  std::lock_guard<InheritingMutex> lock(mu_);
  uint64_t& at = extent_cycles_[table];
  at = std::max(at, cycles);
}

// Integer checks per entry only: this runs on the forwarder's hot path too, beside the XOR of each record.
void ParityHolder::CheckBatchLocked(int sender, const Sender* known, const ForwardedBatch& batch,
                                    const std::vector<ParityStore*>& stores,
                                    const std::function<std::string()>& at) const {
  const uint64_t n = static_cast<uint64_t>(layout_.n()), k = static_cast<uint64_t>(layout_.k()),
                 r = static_cast<uint64_t>(layout_.r());
  for (size_t u = 0; u < batch.updates.size(); ++u) {
    const std::string& table = batch.updates[u].first;
    const ParityUpdate& update = batch.updates[u].second;
    const auto refuse = [&](const std::string& why) {
      throw BatchRefused("ParityHolder::Apply: refused " + at() + ", table '" + table + "': " + why);
    };
    if (update.source != sender)
      refuse("its update names server " + std::to_string(update.source) +
             " as its source (a batch carries only its "
             "sender's deltas)");
    if (update.holder != index_) refuse("its update is meant for parity holder " + std::to_string(update.holder));
    const size_t block_bytes = stores[u]->block_bytes();
    if (update.record_bytes == 0 || block_bytes % update.record_bytes != 0)
      refuse("records of " + std::to_string(update.record_bytes) + " bytes do not divide its " +
             std::to_string(block_bytes) + "-byte parity blocks");
    const uint64_t block_slots = block_bytes / update.record_bytes;
    // The extent this batch may reach: see the header.
    uint64_t extent = (stores[u]->num_blocks() + r - 1) / r;
    const auto declared = extent_cycles_.find(table);
    if (declared != extent_cycles_.end()) extent = std::max(extent, declared->second);
    if (known != nullptr) {
      const auto reached = known->reach.find(table);
      if (reached != known->reach.end()) extent = std::max(extent, reached->second);
    }
    const uint64_t limit = extent + 2 + update.entries.size() / block_slots;
    for (size_t e = 0; e < update.entries.size(); ++e) {
      const ParityUpdate::Entry& en = update.entries[e];
      const auto entry_refused = [&](const std::string& why) {
        refuse("entry " + std::to_string(e) + " (parity block " + std::to_string(en.parity_block) + ", offset " +
               std::to_string(en.offset) + ", parity member " + std::to_string(en.parity_member) + ", data member " +
               std::to_string(en.data_member) + ") " + why);
      };
      if (en.offset % update.record_bytes != 0) entry_refused("is not at a record boundary");
      const uint64_t cycle = en.parity_block / r;
      if (cycle >= limit)
        entry_refused("is beyond the table's extent: stripe cycle " + std::to_string(cycle) + ", while " +
                      std::to_string(extent) + " cycles are known and this batch's " +
                      std::to_string(update.entries.size()) + " entries justify at most " + std::to_string(limit) +
                      " (a shard fills its blocks in order)");
      const uint64_t i = en.parity_block % r;
      if (en.parity_member != i)
        entry_refused("does not match the layout: this holder's parity block " + std::to_string(en.parity_block) +
                      " is parity member " + std::to_string(i) + " of its stripe");
      if (en.data_member >= k) entry_refused("names a data member outside [0, k=" + std::to_string(k) + ")");
      // StripeLayout::ParitySlot: the stripe's first member m = (holder - k - i) mod n; its data member j is
      // server (m + j) mod n.
      const uint64_t m = (static_cast<uint64_t>(index_) + n * 2 - k - i) % n;
      const uint64_t member = (m + en.data_member) % n;
      if (member != static_cast<uint64_t>(sender))
        entry_refused("does not match the layout: data member " + std::to_string(en.data_member) +
                      " of that stripe "
                      "is server " +
                      std::to_string(member) + ", not the sender");
    }
  }
}

// stores_ is fixed after construction, so looking a table up needs no lock.
ParityStore& ParityHolder::StoreLocked(const std::string& table) const {
  const auto it = stores_.find(table);
  if (it == stores_.end()) {
    std::string names;
    for (const auto& [name, store] : stores_) names += (names.empty() ? "'" : ", '") + name + "'";
    throw std::invalid_argument("table: server " + std::to_string(index_) + " holds no parity of table '" + table +
                                "' (it has " + (names.empty() ? std::string("none") : names) + ")");
  }
  return *it->second;
}

int64_t ParityHolder::Apply(int sender, const std::vector<BatchPtr>& batches, int64_t durable) {
  if (sender < 0)
    throw std::invalid_argument("ParityHolder::Apply: sender must be >= 0, got " + std::to_string(sender));
  if (sender == index_)
    throw BatchRefused("ParityHolder::Apply: parity holder " + std::to_string(index_) +
                       " refused batches from itself "
                       "as sender: a server never holds parity of its own data");
  if (!Protects(sender))
    throw BatchRefused("ParityHolder::Apply: parity holder " + std::to_string(index_) +
                       " refused batches from server " + std::to_string(sender) +
                       ": it protects no stripe of that server (n=" + std::to_string(layout_.n()) +
                       ", k=" + std::to_string(layout_.k()) + ", r=" + std::to_string(layout_.r()) + ")");
  std::lock_guard<InheritingMutex> lock(mu_);
  if (closed_) throw HolderClosed(index_);
  const auto found = senders_.find(sender);
  int64_t applied = found == senders_.end() ? 0 : found->second.applied;
  // Error text is built only on the error path: Apply is the forwarder's hot path.
  const auto who = [&] { return "server " + std::to_string(sender) + " on parity holder " + std::to_string(index_); };
  std::vector<ParityStore*> stores;
  for (size_t b = 0; b < batches.size(); ++b) {
    const BatchPtr& batch = batches[b];
    if (!batch)
      throw std::invalid_argument("ParityHolder::Apply: batch " + std::to_string(b) + " from " + who() + " is null");
    if (batch->seq <= applied) continue;  // a resend: already in the blocks
    const auto at = [&] {
      return (batch->first_seq == batch->seq
                  ? "batch seq " + std::to_string(batch->seq)
                  : "batch seqs " + std::to_string(batch->first_seq) + ".." + std::to_string(batch->seq)) +
             " from " + who();
    };
    if (batch->first_seq != applied + 1)
      throw std::invalid_argument("ParityHolder::Apply: " + at() + " arrived after seq " + std::to_string(applied) +
                                  ": batches must come in sequence order and start right after the last one applied "
                                  "(a gap means lost batches)");
    if (!batch->stamp) throw std::invalid_argument("ParityHolder::Apply: " + at() + " has no worker-seq stamp");
    // Every table first, so a batch naming an unknown one changes nothing.
    stores.clear();
    for (const auto& [table, update] : batch->updates) {
      try {
        stores.push_back(&StoreLocked(table));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("ParityHolder::Apply: " + at() + ": " + e.what());
      }
    }
    {
      const auto known = senders_.find(sender);
      CheckBatchLocked(sender, known == senders_.end() ? nullptr : &known->second, *batch, stores, at);
    }
    // A store refuses a bad update whole; the updates of this batch already in are XOR-ed out again
    // (applying an update twice removes it), so the batch is all or nothing.
    size_t done = 0;
    try {
      for (; done < stores.size(); ++done) stores[done]->Apply(batch->updates[done].second);
    } catch (const std::invalid_argument& e) {
      const std::string table = batch->updates[done].first;
      while (done > 0) {
        --done;
        stores[done]->Apply(batch->updates[done].second);
      }
      throw std::invalid_argument("ParityHolder::Apply: " + at() + ", table '" + table + "': " + e.what());
    }
    Sender& s = senders_[sender];
    s.undo.push_back(batch);
    s.applied = applied = batch->seq;
    s.worker_seqs = batch->stamp;
    for (const auto& [table, update] : batch->updates) {
      uint64_t highest = 0;
      for (const ParityUpdate::Entry& en : update.entries) highest = std::max<uint64_t>(highest, en.parity_block);
      if (!update.entries.empty()) {
        uint64_t& reach = s.reach[table];
        reach = std::max<uint64_t>(reach, highest / static_cast<uint64_t>(layout_.r()) + 1);
      }
    }
  }
  const auto it = senders_.find(sender);
  if (it != senders_.end()) {
    Sender& s = it->second;
    // Batches at or below the durable watermark were applied by every holder: they are never rolled back.
    while (!s.undo.empty() && s.undo.front()->seq <= durable) {
      s.base = s.undo.front()->stamp;
      s.undo.pop_front();
    }
  }
  return applied;
}

int64_t ParityHolder::Applied(int sender) const {
  std::lock_guard<InheritingMutex> lock(mu_);
  const auto it = senders_.find(sender);
  return it == senders_.end() ? 0 : it->second.applied;
}

std::map<int32_t, int64_t> ParityHolder::AppliedAll() const {
  std::lock_guard<InheritingMutex> lock(mu_);
  std::map<int32_t, int64_t> out;
  for (const auto& [sender, s] : senders_) out.emplace(sender, s.applied);
  return out;
}

WorkerSeqs ParityHolder::WorkerSeqsOf(int sender) const {
  std::lock_guard<InheritingMutex> lock(mu_);
  const auto it = senders_.find(sender);
  return it == senders_.end() || !it->second.worker_seqs ? WorkerSeqs{} : *it->second.worker_seqs;
}

WorkerSeqs ParityHolder::Rollback(int sender, int64_t to_seq) {
  if (to_seq < 0)
    throw std::invalid_argument("ParityHolder::Rollback: to_seq must be >= 0 (a delta seq), got " +
                                std::to_string(to_seq));
  std::lock_guard<InheritingMutex> lock(mu_);
  const auto it = senders_.find(sender);
  if (it == senders_.end()) return {};  // nothing applied: already at any seq >= 0
  Sender& s = it->second;
  if (s.applied > to_seq) {
    // The batches to undo are the log's suffix above to_seq; the oldest of them must start at to_seq + 1.
    size_t keep = s.undo.size();
    while (keep > 0 && s.undo[keep - 1]->seq > to_seq) --keep;
    const std::string what = "ParityHolder::Rollback: parity holder " + std::to_string(index_) +
                             " cannot roll server " + std::to_string(sender) + " back from seq " +
                             std::to_string(s.applied) + " to " + std::to_string(to_seq) + ": ";
    if (keep == s.undo.size() || (keep == 0 && s.undo.front()->first_seq > to_seq + 1))
      throw std::invalid_argument(
          what + "its undo log starts at " +
          (s.undo.empty() ? std::string("none (empty)") : "seq " + std::to_string(s.undo.front()->first_seq)) +
          " (batches at or below the durable watermark are never rolled back)");
    if (s.undo[keep]->first_seq != to_seq + 1)
      throw std::invalid_argument(what + "seq " + std::to_string(to_seq) + " is inside the coalesced batch of seqs " +
                                  std::to_string(s.undo[keep]->first_seq) + ".." + std::to_string(s.undo[keep]->seq) +
                                  ", which is applied and undone whole (roll back to a batch boundary)");
  }
  while (!s.undo.empty() && s.undo.back()->seq > to_seq) {
    for (const auto& [table, update] : s.undo.back()->updates) StoreLocked(table).Apply(update);  // XOR: undoes it
    s.undo.pop_back();
  }
  if (s.applied > to_seq) {
    s.applied = to_seq;
    s.worker_seqs = s.undo.empty() ? s.base : s.undo.back()->stamp;
  }
  return s.worker_seqs ? *s.worker_seqs : WorkerSeqs{};
}

void ParityHolder::ResetSender(int sender, int64_t seq, const WorkerSeqs& worker_seqs) {
  if (!Protects(sender))
    throw std::invalid_argument("ParityHolder::ResetSender: parity holder " + std::to_string(index_) +
                                " protects no stripe of server " + std::to_string(sender));
  if (seq < 0) throw std::invalid_argument("ParityHolder::ResetSender: seq must be >= 0, got " + std::to_string(seq));
  auto stamp = std::make_shared<const WorkerSeqs>(worker_seqs);
  std::lock_guard<InheritingMutex> lock(mu_);
  Sender& s = senders_[sender];
  s.applied = seq;
  s.worker_seqs = stamp;
  s.undo.clear();
  s.base = stamp;
}

size_t ParityHolder::ReadBlockBytes(const std::string& table, size_t record_bytes, size_t offset, size_t width) const {
  const size_t block = StoreLocked(table).block_bytes();
  if (record_bytes == 0 || block % record_bytes != 0)
    throw std::invalid_argument("record_bytes: " + std::to_string(record_bytes) + " does not divide the " +
                                std::to_string(block) + "-byte parity blocks of table '" + table + "'");
  if (width == 0 || offset > record_bytes || width > record_bytes - offset)
    throw std::invalid_argument("offset/width: columns [" + std::to_string(offset) + ", " +
                                std::to_string(offset + width) + ") are empty or outside the " +
                                std::to_string(record_bytes) + "-byte records");
  return block / record_bytes * width;
}

std::map<int32_t, int64_t> ParityHolder::ReadBlock(const std::string& table, size_t c, size_t record_bytes,
                                                   size_t offset, size_t width, uint8_t* out) const {
  ReadBlockBytes(table, record_bytes, offset, width);  // validates
  if (out == nullptr) throw std::invalid_argument("ParityHolder::ReadBlock: out is null");
  const ParityStore& store = StoreLocked(table);
  std::map<int32_t, int64_t> applied;
  // Under the holder's lock: no batch lands between the copy and the seqs it is reported with.
  std::lock_guard<InheritingMutex> lock(mu_);
  if (offset == 0 && width == record_bytes) {
    store.ReadBlock(c, out);
  } else {
    store.ReadColumns(c, record_bytes, offset, width, out);
  }
  for (const auto& [sender, s] : senders_) applied.emplace(sender, s.applied);
  return applied;
}

bool ParityHolder::WriteBlockIf(const std::string& table, size_t c, const uint8_t* bytes,
                                const std::map<int32_t, int64_t>& expected) {
  ParityStore& store = StoreLocked(table);
  if (bytes == nullptr) throw std::invalid_argument("ParityHolder::WriteBlockIf: bytes is null");
  std::lock_guard<InheritingMutex> lock(mu_);
  for (const auto& [sender, version] : expected) {
    const auto it = senders_.find(sender);
    if ((it == senders_.end() ? 0 : it->second.applied) != version) return false;
  }
  store.WriteBlock(c, bytes);
  return true;
}

void ParityHolder::WriteBlock(const std::string& table, size_t c, const uint8_t* bytes) {
  ParityStore& store = StoreLocked(table);
  if (bytes == nullptr) throw std::invalid_argument("ParityHolder::WriteBlock: bytes is null");
  std::lock_guard<InheritingMutex> lock(mu_);
  store.WriteBlock(c, bytes);
}

size_t ParityHolder::block_bytes(const std::string& table) const { return StoreLocked(table).block_bytes(); }

size_t ParityHolder::NumBlocks(const std::string& table) const { return StoreLocked(table).num_blocks(); }

size_t ParityHolder::Bytes() const {
  size_t total = 0;
  for (const auto& [name, store] : stores_) total += store->bytes();
  return total;
}

std::map<std::string, SpillStats> ParityHolder::SpillStatsAll() const {
  std::map<std::string, SpillStats> out;
  for (const auto& [name, store] : stores_)
    if (store->tiered()) out.emplace(name, store->spill_stats());
  return out;
}

void ParityHolder::Close() {
  std::lock_guard<InheritingMutex> lock(mu_);
  closed_ = true;
}

bool ParityHolder::closed() const {
  std::lock_guard<InheritingMutex> lock(mu_);
  return closed_;
}

}  // namespace xdl_ec

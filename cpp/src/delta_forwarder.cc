#include "xdl_ec/delta_forwarder.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <set>
#include <stdexcept>

#include "xdl_ec/stripe_layout.h"
#include "xdl_ec/thread_priority.h"

namespace xdl_ec {

namespace {

// Spare buffers kept for TakeSpare: a range's worth (mutations wait for routing in ranges of kRangeTarget),
// within a byte budget, so a bulk load's huge batch is not kept. Without them each mutation of a range would
// allocate (and page-fault in) a fresh buffer.
constexpr size_t kSpares = 24;
constexpr size_t kSpareBytes = size_t{32} << 20;
// While more mutations than this are not yet applied by the in-process holders (the thread fell behind, e.g.
// on a machine with no idle core), Record routes and delivers them itself, at the caller's priority, and waits
// (at most kMaxLagWait) only for work another thread has under way: a bound on memory and on the non-durable
// window that never leaves a push waiting for a starved background thread.
constexpr size_t kMaxLag = 64;
constexpr auto kMaxLagWait = std::chrono::seconds(1);
// Mutations coalesced into one seq range at most: bounds the merge's slot table and a range's size.
constexpr size_t kMaxRange = 256;
// With a holder in this process, the thread routes once this many mutations are recorded, or once the
// oldest waited kMaxDelay, or on Flush: ranges of a few steps' pushes, whose hot rows repeat (16 mutations
// of Criteo-shaped batches keep ~60% of their deltas), and one wake-up per range instead of per push. It
// only delays durability (workers keep their pushes logged that much longer); whoever waits for parity
// flushes. kMaxDelay is about two steps at batch 256: a drain then finds a step's worth to route, not a range
// (1.5 -> 0.7 ms per drain of 5 servers at 100 -> 20 ms), and the window a worker's log covers stays short.
constexpr size_t kRangeTarget = 16;
constexpr auto kMaxDelay = std::chrono::milliseconds(20);

// The servers holding parity of some stripe `index` has data in: (index + d) mod n, d in [1, k + r).
std::vector<int> HoldersOf(int index, int n, int k, int r) {
  std::set<int> holders;
  for (int d = 1; d < k + r; ++d) holders.insert((index + d) % n);
  return {holders.begin(), holders.end()};
}

}  // namespace

DeltaForwarder::DeltaForwarder(int index, int n, int k, int r, const std::vector<Table>& tables, int64_t seq,
                               const WorkerSeqs& worker_seqs)
    : index_(index), seq_(seq) {
  const StripeLayout layout(n, k, r);  // validates n, k, r
  if (index < 0 || index >= n)
    throw std::invalid_argument("DeltaForwarder: index " + std::to_string(index) +
                                " is not a server of n=" + std::to_string(n));
  if (seq < 0) throw std::invalid_argument("DeltaForwarder: seq must be >= 0, got " + std::to_string(seq));
  for (const Table& t : tables) {
    if (t.name.empty()) throw std::invalid_argument("DeltaForwarder: a table needs a name");
    if (routers_.count(t.name)) throw std::invalid_argument("DeltaForwarder: table '" + t.name + "' given twice");
    routers_[t.name] = std::make_unique<ParityRouter>(layout, t.block_slots, t.record_bytes);
  }
  holders_ = HoldersOf(index, n, k, r);
  for (int h : holders_) links_[h].acked = links_[h].base = seq;
  worker_seqs_ = std::make_shared<const WorkerSeqs>(worker_seqs);
  durable_seqs_ = worker_seqs_;
  thread_ = std::thread([this] { Run(); });
}

DeltaForwarder::~DeltaForwarder() {
  Close();
  if (thread_.joinable()) thread_.join();
}

DeltaForwarder::Mutation::Mutation(DeltaForwarder& forwarder, const std::string& table, const WorkerSeqs& pushes)
    : forwarder_(forwarder), pushes_(pushes), route_(forwarder.RouteOf(table, "Mutation")) {}

DeltaBatch DeltaForwarder::Mutation::Begin(size_t record_bytes) {
  if (record_bytes != route_.second->record_bytes())
    throw std::invalid_argument("DeltaForwarder::Mutation: server " + std::to_string(forwarder_.index_) + "'s table '" +
                                route_.first + "' has " + std::to_string(route_.second->record_bytes()) +
                                "-byte records, the shard " + std::to_string(record_bytes) +
                                ": the forwarder was made for another table config");
  return forwarder_.TakeSpare();
}

void DeltaForwarder::Mutation::Record(DeltaBatch deltas) { forwarder_.Record(route_, std::move(deltas), pushes_); }

const DeltaForwarder::Route& DeltaForwarder::RouteOf(const std::string& table, const char* what) const {
  auto it = routers_.find(table);
  if (it == routers_.end())
    throw std::invalid_argument(std::string("DeltaForwarder::") + what + ": server " + std::to_string(index_) +
                                " has no table '" + table + "'");
  return *it;
}

int64_t DeltaForwarder::Record(const std::string& table, DeltaBatch deltas, const WorkerSeqs& pushes) {
  if (deltas.size() == 0 && pushes.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    return seq_;
  }
  return Record(RouteOf(table, "Record"), std::move(deltas), pushes);
}

int64_t DeltaForwarder::Record(const Route& route, DeltaBatch deltas, const WorkerSeqs& pushes) {
  if (deltas.size() == 0 && pushes.empty()) {  // nothing changed: only the buffer goes back
    std::lock_guard<std::mutex> lock(mu_);
    KeepSpareLocked(std::move(deltas));
    return seq_;
  }
  route.second->Check("Record", index_, deltas);  // what Route would refuse, refused now: nothing recorded

  std::unique_lock<std::mutex> lock(mu_);
  if (LagLocked() >= kMaxLag) {
    ++lag_waits_;
    lag_catchups_ += FlushLocked(lock);
    work_.wait_for(lock, kMaxLagWait, [this] { return closed_ || LagLocked() < kMaxLag; });
  }
  ++seq_;
  if (!pushes.empty()) {
    auto seqs = std::make_shared<WorkerSeqs>(*worker_seqs_);
    for (const auto& [worker, s] : pushes) (*seqs)[worker] = std::max((*seqs)[worker], s);
    worker_seqs_ = std::move(seqs);
  }
  if (!closed_) {
    recorded_.push_back(Recorded{seq_, route.second.get(), &route.first, std::move(deltas), worker_seqs_,
                                 std::chrono::steady_clock::now()});
    // Wake the thread when a range starts (it sets its deadline; a remote link's Take may be waiting) and
    // when it is full, not on every mutation.
    if (recorded_.size() == 1 || recorded_.size() == kRangeTarget) work_.notify_all();
  }
  history_.emplace_back(seq_, worker_seqs_);
  return seq_;
}

void DeltaForwarder::RouteLocked(std::unique_lock<std::mutex>& lock) {
  // Routing copies every delta once per holder: done outside the lock, so Record never waits for it. One
  // router at a time (routing_ > 0 marks it), so the links' queues stay in seq order.
  std::deque<Recorded> batch;
  batch.swap(recorded_);
  routing_ = batch.size();
  flush_ = false;
  // The mutations taken are coalesced into seq ranges, the same ranges for every link (so the least seq
  // the holders applied is a range end of each: rollback lands on a boundary). A link (re)connected at
  // base B gets only seqs above B, so no range spans B. A SetHolder while this routes sets a base at or
  // above every seq taken here, which needs no cut.
  std::set<int64_t> cuts;
  for (const auto& [h, link] : links_)
    if (!link.down && link.base >= batch.front().seq && link.base < batch.back().seq) cuts.insert(link.base);
  lock.unlock();
  struct Range {
    size_t begin = 0, end = 0;                                                     // [begin, end) in batch
    std::vector<std::pair<const std::string*, std::vector<ParityUpdate>>> tables;  // routed, per holder
  };
  std::vector<Range> ranges;
  uint64_t coalesced = 0;
  for (size_t e = 0; e < batch.size(); ++e) {
    if (ranges.empty() || e - ranges.back().begin >= kMaxRange || cuts.count(batch[e - 1].seq))
      ranges.push_back({e, e, {}});
    ranges.back().end = e + 1;
  }
  for (Range& range : ranges) {
    // Per table, in order of first appearance: a table's deltas in the range merged (one mutation: as is).
    for (size_t e = range.begin; e < range.end; ++e) {
      const std::string* table = batch[e].table;
      bool seen = false;
      for (const auto& routed : range.tables) seen |= routed.first == table;
      if (seen) continue;
      std::vector<DeltaBatch*> parts;
      for (size_t f = e; f < range.end; ++f)
        if (batch[f].table == table && batch[f].deltas.size() > 0) parts.push_back(&batch[f].deltas);
      range.tables.emplace_back(table, std::vector<ParityUpdate>{});
      if (parts.empty()) continue;
      if (parts.size() == 1) {
        batch[e].router->Route(index_, *parts.front(), &range.tables.back().second);
        continue;
      }
      coalescer_.Coalesce(parts, &merged_);  // merges into the parts' own buffers: no copy
      coalesced += parts.size() - 1;
      batch[e].router->Route(index_, merged_.slots, merged_.deltas, &range.tables.back().second);
    }
  }
  lock.lock();
  routing_ = 0;
  coalesced_ += coalesced;
  for (Range& range : ranges) {
    const int64_t first = batch[range.begin].seq, last = batch[range.end - 1].seq;
    for (auto& [h, link] : links_) {
      // a link (re)connected after these seqs were recorded already reflects them
      if (link.down || closed_ || last <= link.base) continue;
      auto out = std::make_shared<ForwardedBatch>();
      out->first_seq = first;
      out->seq = last;
      out->stamp = batch[range.end - 1].stamp;
      for (auto& [table, routed] : range.tables) {
        if (static_cast<size_t>(h) < routed.size() && !routed[h].empty()) {
          bytes_sent_ += routed[h].delta_bytes();
          out->updates.emplace_back(*table, std::move(routed[h]));
        }
      }
      link.queue.push_back(std::move(out));
    }
  }
  for (Recorded& rec : batch) KeepSpareLocked(std::move(rec.deltas));
  work_.notify_all();  // Take callers of remote links, and waiters on progress
}

bool DeltaForwarder::ServesLocalLocked() const {
  for (const auto& [h, link] : links_)
    if (link.connected && link.local && !link.down) return true;
  return false;
}

bool DeltaForwarder::RoutesNowLocked() const {
  // With a holder in this process the thread routes a range at a time (kRangeTarget, kMaxDelay). With
  // remote holders only, it leaves the mutations to the links' Takes (a link sends about once a second):
  // what accumulated by then becomes one range, unless kMaxRange piled up first.
  if (recorded_.empty() || closed_ || routing_ > 0) return false;
  if (recorded_.size() >= kMaxRange) return true;
  if (!ServesLocalLocked()) return false;
  return flush_ || recorded_.size() >= kRangeTarget ||
         std::chrono::steady_clock::now() >= recorded_.front().at + kMaxDelay;
}

void DeltaForwarder::Flush() {
  // The caller routes and delivers to in-process holders itself, at its own priority: the thread runs only in
  // idle time, and on a busy machine a drain waiting for it would wait for the other processes.
  std::unique_lock<std::mutex> lock(mu_);
  FlushLocked(lock);
  // What the thread has already taken (a range it routes, a delivery it runs) the caller cannot do for it: lift
  // the thread to the normal policy until it next has nothing to do, or the caller waits for the other
  // processes' idle time (measured: a recovery's drain waited 7 s beside two busy loops on 2 cores).
  if (routing_ > 0 || delivering_ > 0) LiftLocked();
  work_.notify_all();
}

void DeltaForwarder::LiftLocked() {
  if (lifted_ || thread_tid_ == 0) return;
  if (LiftToNormal(thread_tid_)) {
    lifted_ = true;
    ++lifts_;
  }
}

void DeltaForwarder::LowerLocked() {
  if (!lifted_) return;
  lifted_ = false;
  LowerToIdle(thread_tid_);  // back to the idle time
}

bool DeltaForwarder::FlushLocked(std::unique_lock<std::mutex>& lock) {
  flush_ = true;  // the range due now, whatever its size
  bool worked = false;
  if (ServesLocalLocked() && RoutesNowLocked()) {
    RouteLocked(lock);
    worked = true;
  }
  while (DeliverLocked(lock)) worked = true;
  return worked;
}

size_t DeltaForwarder::LagLocked() const {
  if (!ServesLocalLocked()) return 0;  // remote links pace themselves (Take); their queues never hold Record back
  size_t local = 0;
  for (const auto& [h, link] : links_)
    if (link.local && !link.down) local = std::max(local, link.queue.size());
  return recorded_.size() + routing_ + local;
}

void DeltaForwarder::KeepSpareLocked(DeltaBatch&& deltas) {
  const size_t bytes = deltas.xor_bytes.capacity() + deltas.slots.capacity() * sizeof(uint32_t);
  if (bytes > 0 && spares_.size() < kSpares && spare_bytes_ + bytes <= kSpareBytes) {
    deltas.clear();
    spares_.push_back(std::move(deltas));
    spare_bytes_ += bytes;
  }
}

DeltaBatch DeltaForwarder::TakeSpare() {
  std::lock_guard<std::mutex> lock(mu_);
  if (spares_.empty()) return {};
  DeltaBatch spare = std::move(spares_.back());
  spares_.pop_back();
  spare_bytes_ -= spare.xor_bytes.capacity() + spare.slots.capacity() * sizeof(uint32_t);
  return spare;
}

int64_t DeltaForwarder::DurableSeq(int worker) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = durable_seqs_->find(worker);
  return it == durable_seqs_->end() ? 0 : it->second;
}

DeltaForwarder::Link& DeltaForwarder::LinkLocked(int holder, const char* what) {
  auto it = links_.find(holder);
  if (it == links_.end())
    throw std::invalid_argument(std::string("DeltaForwarder::") + what + ": server " + std::to_string(holder) +
                                " holds no parity of server " + std::to_string(index_) + "'s stripes");
  return it->second;
}

uint64_t DeltaForwarder::SetHolder(int holder, std::shared_ptr<ParityHolder> local) {
  std::lock_guard<std::mutex> lock(mu_);
  Link& link = LinkLocked(holder, "SetHolder");
  if (local && local->index() != holder)
    throw std::invalid_argument("DeltaForwarder::SetHolder: holder " + std::to_string(holder) +
                                " given the ParityHolder of server " + std::to_string(local->index()));
  link.local = std::move(local);
  link.connected = true;
  link.down = false;
  link.in_flight = false;  // a delivery still running for the old link is ignored by generation
  link.generation = next_generation_++;
  link.queue.clear();
  link.acked = seq_;
  link.base = seq_;
  AdvanceDurableLocked();
  work_.notify_all();
  return link.generation;
}

bool DeltaForwarder::Take(int holder, uint64_t generation, int timeout_ms, Delivery* out) {
  std::unique_lock<std::mutex> lock(mu_);
  Link& link = LinkLocked(holder, "Take");  // links_ never loses an entry: the reference stays valid
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  const auto ready = [&] {
    return closed_ || link.generation != generation || (routing_ == 0 && !recorded_.empty()) ||
           (routing_ == 0 && !link.local && !link.down && !link.in_flight && !link.queue.empty());
  };
  while (true) {
    if (!work_.wait_until(lock, deadline, ready) || closed_ || link.generation != generation) return false;
    if (recorded_.empty()) break;
    RouteLocked(lock);  // hand out everything recorded until now, not just what the thread routed so far
  }
  out->batches.assign(link.queue.begin(), link.queue.end());
  link.queue.clear();
  out->durable = DurableLocked();
  out->link = link.generation;
  link.in_flight = true;
  return true;
}

void DeltaForwarder::Ack(int holder, uint64_t generation, int64_t applied) {
  std::lock_guard<std::mutex> lock(mu_);
  Link& link = LinkLocked(holder, "Ack");
  if (link.generation != generation) return;  // the link was replaced meanwhile
  link.in_flight = false;
  link.acked = std::max(link.acked, applied);
  AdvanceDurableLocked();
  work_.notify_all();
}

void DeltaForwarder::Fail(int holder, uint64_t generation, const std::string& error, bool lost) {
  std::lock_guard<std::mutex> lock(mu_);
  Link& link = LinkLocked(holder, "Fail");
  if (link.generation == generation) FailLocked(link, holder, error, lost);
}

void DeltaForwarder::FailLocked(Link& link, int holder, const std::string& error, bool lost) {
  link.in_flight = false;
  link.down = true;
  link.queue.clear();
  if (!lost) errors_.push_back("holder " + std::to_string(holder) + ": " + error);
  work_.notify_all();
}

void DeltaForwarder::Run() {
  // Background work in the cores' idle time (as RocksDB lowers its compaction threads), never taking turns
  // with the training step; Record does the work itself when this thread lags. SCHED_IDLE, not only nice 19:
  // under EEVDF (Linux 6.6+) a waking step thread need not preempt a running nice-19 task before its slice
  // ends (RUN_TO_PARITY), while an idle-policy task is preempted at once; in bench_ft_ec's one-process runs
  // ec's overhead fell from about +1.7% to about +0.1%. Nice 19 stays where SCHED_IDLE is refused.
  const int tid = CurrentThreadId();
  LowerToIdle(tid);
  std::unique_lock<std::mutex> lock(mu_);
  thread_tid_ = tid;
  while (true) {
    if (RoutesNowLocked()) RouteLocked(lock);
    if (closed_) return;
    if (DeliverLocked(lock)) continue;
    if (RoutesNowLocked()) continue;  // more arrived while routing: route them
    LowerLocked();                    // nothing taken is left: a Flush's lift ends here
    if (!recorded_.empty() && routing_ == 0 && ServesLocalLocked()) {
      work_.wait_until(lock, recorded_.front().at + kMaxDelay);
    } else {
      work_.wait(lock);
    }
  }
}

// Round-robin over local holders with work; the delivery runs outside the lock (the holder takes its own), so
// Record never waits for a holder. One delivery per link at a time (in_flight), whoever runs it.
bool DeltaForwarder::DeliverLocked(std::unique_lock<std::mutex>& lock) {
  int holder = -1;
  for (auto& [h, link] : links_) {
    if (link.connected && link.local && !link.down && !link.in_flight && !link.queue.empty()) {
      holder = h;
      break;
    }
  }
  if (holder < 0 || closed_) return false;
  Link& link = links_[holder];
  std::vector<BatchPtr> batches(link.queue.begin(), link.queue.end());
  link.queue.clear();
  link.in_flight = true;
  const uint64_t generation = link.generation;
  const int64_t durable = DurableLocked();
  std::shared_ptr<ParityHolder> target = link.local;
  ++delivering_;  // Close waits for it: see Close
  lock.unlock();
  int64_t applied = -1;
  std::string error;
  bool lost = false;
  try {
    applied = target->Apply(index_, batches, durable);
  } catch (const HolderClosed& e) {
    lost = true;
    error = e.what();
  } catch (const std::exception& e) {
    error = e.what();
  }
  lock.lock();
  if (--delivering_ == 0 && closed_) work_.notify_all();
  Link& now = links_[holder];
  if (now.generation != generation) return true;  // replaced meanwhile: the old link's outcome is moot
  if (applied < 0) {
    FailLocked(now, holder, error, lost);
    return true;
  }
  now.in_flight = false;
  now.acked = std::max(now.acked, applied);
  AdvanceDurableLocked();
  work_.notify_all();  // waiters on progress, and Take callers of other links
  return true;
}

int64_t DeltaForwarder::DurableLocked() const {
  int64_t durable = std::numeric_limits<int64_t>::max();
  for (const auto& [h, link] : links_) durable = std::min(durable, link.acked);
  return links_.empty() ? seq_ : durable;
}

void DeltaForwarder::AdvanceDurableLocked() {
  const int64_t durable = DurableLocked();
  while (!history_.empty() && history_.front().first <= durable) {
    durable_seqs_ = history_.front().second;
    history_.pop_front();
  }
}

int64_t DeltaForwarder::seq() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_;
}

DeltaForwarder::Progress DeltaForwarder::progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  Progress p;
  p.seq = seq_;
  p.live_applied = std::numeric_limits<int64_t>::max();
  // a mutation recorded but not yet routed is pending for every live holder
  const bool unrouted = !closed_ && (!recorded_.empty() || routing_ > 0);
  for (const auto& [h, link] : links_) {
    if (link.down) {
      p.down.push_back(h);
      continue;
    }
    p.live_applied = std::min(p.live_applied, link.acked);
    p.pending |= unrouted || link.in_flight || !link.queue.empty();
  }
  if (p.live_applied == std::numeric_limits<int64_t>::max()) p.live_applied = seq_;
  p.worker_seqs = *worker_seqs_;
  p.lag_waits = lag_waits_;
  p.lifts = lifts_;
  p.lag_catchups = lag_catchups_;
  p.coalesced = coalesced_;
  return p;
}

uint64_t DeltaForwarder::bytes_sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_sent_;
}

std::vector<std::string> DeltaForwarder::errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_;
}

void DeltaForwarder::DropPending() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [h, link] : links_) link.queue.clear();
  recorded_.clear();
  closed_ = true;
  work_.notify_all();
}

void DeltaForwarder::Close() {
  // Returns once no delivery to a holder is running (none starts after closed_): recovery rolls a lost server's
  // stream back on its holders after closing what is left of it, and a batch landing after that rollback would
  // leave them disagreeing on the server's seq for good (a decode would wait for them forever).
  std::unique_lock<std::mutex> lock(mu_);
  closed_ = true;
  work_.notify_all();
  work_.wait(lock, [this] { return delivering_ == 0; });
}

}  // namespace xdl_ec

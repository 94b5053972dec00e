#include "xdl_ec/delta_forwarder.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "xdl_ec/delta_batch_sink.h"
#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/erasure_code.h"
#include "xdl_ec/parity_holder.h"
#include "xdl_ec/stripe_layout.h"

namespace xdl_ec {
namespace {

ShardConfig Config() {
  ShardConfig c;
  c.dim = 4;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  c.optimizer.learning_rate = 0.05f;
  c.seed = 3;
  c.block_slots = 8;
  return c;
}

// n servers of a (k, r) code in one process: shards, forwarders and holders, wired as the PS wires them.
struct Cluster {
  Cluster(int n, int k, int r) : n(n), k(k), r(r), layout(n, k, r) {
    for (int s = 0; s < n; ++s) shards.push_back(std::make_unique<EmbeddingShard>(Config()));
    block_slots = shards[0]->block_slots();
    record_bytes = shards[0]->layout().bytes();
    for (int s = 0; s < n; ++s) {
      holders.push_back(
          std::make_shared<ParityHolder>(s, n, k, r, std::map<std::string, size_t>{{"t", block_slots * record_bytes}}));
      forwarders.push_back(std::make_unique<DeltaForwarder>(
          s, n, k, r, std::vector<DeltaForwarder::Table>{{"t", block_slots, record_bytes}}));
    }
    for (int s = 0; s < n; ++s)
      for (int h : forwarders[s]->holders()) forwarders[s]->SetHolder(h, holders[h]);
  }

  // One push of `count` random keys on server s (new keys insert rows: deltas from the zero record).
  void Push(int s, int count, int64_t step, int32_t worker, int64_t seq) {
    std::uniform_int_distribution<int64_t> key(0, 200);
    std::normal_distribution<float> grad;
    std::vector<int64_t> keys(count);
    std::vector<float> grads(count * 4);
    for (auto& x : keys) x = key(rng);
    for (auto& g : grads) g = grad(rng);
    const WorkerSeqs pushes{{worker, seq}};
    DeltaForwarder::Mutation sink(*forwarders[s], "t", pushes);  // as the server's push path does
    shards[s]->Push(keys.data(), grads.data(), keys.size(), step, &sink);
  }

  void Drain() {
    for (auto& f : forwarders) {
      f->Flush();  // as a waiter for parity does: no waiting for a fuller range
      while (f->progress().pending) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // Every stripe's stored parity equals the encoding of its data blocks (a block beyond a shard is zeros).
  void ExpectConsistent() {
    const size_t bytes = block_slots * record_bytes;
    size_t stripes = 0;
    for (auto& s : shards) stripes = std::max(stripes, (s->num_blocks() + k - 1) / k * n);
    ErasureCode code(k, r);
    for (size_t stripe = 0; stripe < stripes; ++stripe) {
      std::vector<std::vector<uint8_t>> data(k, std::vector<uint8_t>(bytes, 0)), parity(r, std::vector<uint8_t>(bytes));
      std::vector<const uint8_t*> in;
      std::vector<uint8_t*> out;
      for (int j = 0; j < k; ++j) {
        const BlockRef m = layout.DataMember(stripe, j);
        if (m.block < shards[m.server]->num_blocks()) shards[m.server]->ReadBlock(m.block, data[j].data());
        in.push_back(data[j].data());
      }
      for (auto& p : parity) out.push_back(p.data());
      code.Encode(bytes, in.data(), out.data());
      for (int i = 0; i < r; ++i) {
        const BlockRef m = layout.ParityMember(stripe, i);
        std::vector<uint8_t> stored(bytes);
        holders[m.server]->ReadBlock("t", m.block, record_bytes, 0, record_bytes, stored.data());
        ASSERT_EQ(parity[i], stored) << "stripe " << stripe << " parity member " << i;
      }
    }
  }

  int n, k, r;
  StripeLayout layout;
  uint32_t block_slots = 0;
  size_t record_bytes = 0;
  std::vector<std::unique_ptr<EmbeddingShard>> shards;
  std::vector<std::shared_ptr<ParityHolder>> holders;
  std::vector<std::unique_ptr<DeltaForwarder>> forwarders;
  std::mt19937_64 rng{11};
};

TEST(DeltaForwarder, LocalHoldersEndConsistentWithEveryServersData) {
  for (auto [n, k, r] : {std::tuple{3, 2, 1}, std::tuple{5, 4, 1}, std::tuple{6, 4, 2}}) {
    Cluster c(n, k, r);
    for (int step = 1; step <= 30; ++step)
      for (int s = 0; s < n; ++s) c.Push(s, 12, step, 0, step);
    c.Drain();
    c.ExpectConsistent();
    for (int s = 0; s < n; ++s) {
      EXPECT_EQ(30, c.forwarders[s]->progress().seq);
      EXPECT_EQ(30, c.forwarders[s]->DurableSeq(0)) << "server " << s;
      for (int h : c.forwarders[s]->holders()) EXPECT_EQ(30, c.holders[h]->Applied(s));
    }
  }
}

TEST(DeltaForwarder, NothingRecordedForAMutationWithoutDeltasOrPushes) {
  Cluster c(3, 2, 1);
  EXPECT_EQ(0, c.forwarders[0]->Record("t", DeltaBatch{}, {}));
  EXPECT_EQ(1, c.forwarders[0]->Record("t", DeltaBatch{}, {{2, 9}}));  // a push that changed nothing still counts
  c.Drain();
  EXPECT_EQ(9, c.forwarders[0]->DurableSeq(2));
}

TEST(DeltaForwarder, BadInputIsRefusedWithNothingQueued) {
  Cluster c(3, 2, 1);
  DeltaBatch wrong;
  wrong.record_bytes = c.record_bytes + 1;
  wrong.slots = {0};
  wrong.xor_bytes.assign(wrong.record_bytes, 1);
  EXPECT_THROW(c.forwarders[0]->Record("nope", wrong, {}), std::invalid_argument);
  EXPECT_THROW(c.forwarders[0]->Record("t", wrong, {}), std::invalid_argument);
  EXPECT_EQ(0, c.forwarders[0]->progress().seq);
  EXPECT_FALSE(c.forwarders[0]->progress().pending);
  EXPECT_THROW(c.forwarders[0]->SetHolder(0, nullptr), std::invalid_argument);       // not its own holder
  EXPECT_THROW(c.forwarders[0]->SetHolder(1, c.holders[2]), std::invalid_argument);  // another server's holder
  EXPECT_THROW(DeltaForwarder(3, 3, 2, 1, {}), std::invalid_argument);
  EXPECT_THROW(DeltaForwarder(0, 3, 2, 1, {{"t", 8, 0}}), std::invalid_argument);
}

TEST(DeltaForwarder, AClosedHolderIsDownUntilReplacedAndHoldsBackDurability) {
  Cluster c(3, 2, 1);
  for (int step = 1; step <= 5; ++step) c.Push(0, 8, step, 1, step);
  c.Drain();
  EXPECT_EQ(5, c.forwarders[0]->DurableSeq(1));
  c.holders[1]->Close();  // server 1 died
  for (int step = 6; step <= 9; ++step) c.Push(0, 8, step, 1, step);
  c.Drain();
  DeltaForwarder::Progress p = c.forwarders[0]->progress();
  EXPECT_EQ(std::vector<int>{1}, p.down);
  EXPECT_EQ(9, p.live_applied);                    // server 2 got everything
  EXPECT_EQ(5, c.forwarders[0]->DurableSeq(1));    // not durable: server 1's parity lacks 6..9
  EXPECT_TRUE(c.forwarders[0]->errors().empty());  // a lost holder is not an error
  auto replacement = std::make_shared<ParityHolder>(
      1, c.n, 2, 1, std::map<std::string, size_t>{{"t", c.block_slots * c.record_bytes}});
  replacement->ResetSender(0, 9, {{1, 9}});
  // as the driver does: the replacement learns the extent being rebuilt (the survivors' blocks, whole cycles)
  replacement->SetExtent("t", c.layout.StripesForDataBlocks(c.shards[0]->num_blocks()) / c.n * c.r);
  c.forwarders[0]->SetHolder(1, replacement);
  EXPECT_EQ(9, c.forwarders[0]->DurableSeq(1));
  c.Push(0, 8, 10, 1, 10);
  c.Drain();
  EXPECT_EQ(10, replacement->Applied(0));
  EXPECT_EQ(10, c.forwarders[0]->DurableSeq(1));
}

TEST(DeltaForwarder, RemoteTransportTakesInOrderAndIgnoresStaleLinks) {
  Cluster c(3, 2, 1);
  DeltaForwarder& f = *c.forwarders[0];
  const uint64_t link = f.SetHolder(1, nullptr);  // served through Take/Ack from now on
  for (int step = 1; step <= 3; ++step) c.Push(0, 4, step, 0, step);
  DeltaForwarder::Delivery d;
  ASSERT_TRUE(f.Take(1, link, 1000, &d));
  EXPECT_EQ(link, d.link);
  // seqs 1..3 in order, in as many ranges as the thread had routed separately before Take routed the rest
  ASSERT_FALSE(d.batches.empty());
  int64_t next = 1;
  for (const BatchPtr& b : d.batches) {
    EXPECT_EQ(next, b->first_seq);
    next = b->seq + 1;
  }
  EXPECT_EQ(4, next);
  EXPECT_EQ(0, d.durable);
  DeltaForwarder::Delivery none;
  EXPECT_FALSE(f.Take(1, link, 10, &none));  // in flight: nothing more until acked
  EXPECT_TRUE(f.progress().pending);
  // the wire form carries the same batches
  const std::vector<BatchPtr> parsed = [&] {
    const std::vector<uint8_t> wire = SerializeBatches(d.batches);
    return ParseBatches(wire.data(), wire.size());
  }();
  EXPECT_EQ(3, c.holders[1]->Apply(0, parsed, d.durable));
  f.Ack(1, d.link + 100, 3);  // a stale link: ignored
  EXPECT_TRUE(f.progress().pending);
  f.Ack(1, d.link, 3);
  c.Drain();
  EXPECT_EQ(3, f.DurableSeq(0));
  c.Push(0, 4, 4, 0, 4);
  EXPECT_FALSE(f.Take(1, link + 1, 10, &none));  // a transport of another link gets nothing
  ASSERT_TRUE(f.Take(1, link, 1000, &d));
  f.Fail(1, d.link, "refused", false);
  EXPECT_EQ(std::vector<int>{1}, f.progress().down);
  ASSERT_EQ(1u, f.errors().size());
  EXPECT_NE(std::string::npos, f.errors()[0].find("refused"));
}

TEST(DeltaForwarder, ALinkReconnectedGetsNoSeqItsParityAlreadyReflects) {
  // Record only hands deltas to the forwarder's thread, which routes them later: a holder reconnected in
  // between (its parity recomputed at the current seq) must not get them, whether or not they were routed.
  Cluster c(3, 2, 1);
  DeltaForwarder& f = *c.forwarders[0];
  f.SetHolder(1, nullptr);
  for (int step = 1; step <= 3; ++step) c.Push(0, 4, step, 0, step);
  const uint64_t link = f.SetHolder(1, nullptr);
  DeltaForwarder::Delivery d;
  EXPECT_FALSE(f.Take(1, link, 20, &d));
  c.Push(0, 4, 4, 0, 4);
  ASSERT_TRUE(f.Take(1, link, 1000, &d));
  ASSERT_EQ(1u, d.batches.size());
  EXPECT_EQ(4, d.batches[0]->first_seq);  // a range never spans a link's base
  EXPECT_EQ(4, d.batches[0]->seq);
}

TEST(DeltaForwarder, RemoteTakesSeeEverySeqOnceInOrderWhileTheThreadRoutesToo) {
  // The forwarder's thread and Take both route what Record took; one router at a time keeps queues in order.
  Cluster c(3, 2, 1);
  DeltaForwarder& f = *c.forwarders[0];
  const uint64_t link = f.SetHolder(1, nullptr);
  constexpr int kMutations = 400;
  std::thread producer([&] {
    for (int step = 1; step <= kMutations; ++step) c.Push(0, 3, step, 0, step);
  });
  int64_t last = 0;  // every seq once, in order: each range starts right after the previous one
  while (last < kMutations) {
    DeltaForwarder::Delivery d;
    if (!f.Take(1, link, 2000, &d)) break;
    for (const BatchPtr& b : d.batches) {
      ASSERT_EQ(last + 1, b->first_seq);
      ASSERT_LE(b->first_seq, b->seq);
      last = b->seq;
    }
    f.Ack(1, link, last);
  }
  producer.join();
  ASSERT_EQ(kMutations, last);
  c.Drain();
  EXPECT_EQ(kMutations, f.DurableSeq(0));
}

TEST(DeltaForwarder, WithRemoteHoldersOnlyMutationsWaitForATakeAndArriveAsOneExactCoalescedRange) {
  Cluster c(3, 2, 1);
  DeltaForwarder& f = *c.forwarders[0];
  std::map<int, uint64_t> links;
  for (int h : f.holders()) links[h] = f.SetHolder(h, nullptr);
  for (int step = 1; step <= 10; ++step) c.Push(0, 40, step, 0, step);  // 40 of 201 keys: pushes overlap
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(0u, f.progress().coalesced);  // the thread left them to the links
  EXPECT_TRUE(f.progress().pending);
  uint64_t sent = 0;
  for (const auto& [h, link] : links) {
    DeltaForwarder::Delivery d;
    ASSERT_TRUE(f.Take(h, link, 1000, &d));
    ASSERT_EQ(1u, d.batches.size()) << "holder " << h;  // every link gets the same range
    EXPECT_EQ(1, d.batches[0]->first_seq);
    EXPECT_EQ(10, d.batches[0]->seq);
    const std::vector<uint8_t> wire = SerializeBatches(d.batches);
    EXPECT_EQ(10, c.holders[h]->Apply(0, ParseBatches(wire.data(), wire.size()), d.durable));
    f.Ack(h, link, 10);
    sent += d.batches[0]->delta_bytes();
  }
  EXPECT_EQ(9u, f.progress().coalesced);
  EXPECT_LT(sent, 10u * 40 * c.record_bytes);  // a slot pushed several times went once
  EXPECT_EQ(10, f.DurableSeq(0));
  c.Drain();
  c.ExpectConsistent();  // bit-exact parity from the merged deltas
}

TEST(DeltaForwarder, InProcessPushesWaitForAFullerRangeUntilFlushed) {
  // The thread routes a range once kRangeTarget (16) mutations are recorded, the oldest waited 20 ms, or on
  // Flush: three quick pushes (microseconds apart) become one range.
  Cluster c(3, 2, 1);
  DeltaForwarder& f = *c.forwarders[0];
  for (int step = 1; step <= 3; ++step) c.Push(0, 30, step, 0, step);
  EXPECT_EQ(0, f.DurableSeq(0));
  f.Flush();
  c.Drain();
  EXPECT_EQ(2u, f.progress().coalesced);
  EXPECT_EQ(3, f.DurableSeq(0));
  for (int h : f.holders()) EXPECT_EQ(3, c.holders[h]->Applied(0));
  c.ExpectConsistent();
  c.Push(0, 30, 4, 0, 4);  // and without a flush, within the delay
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (f.DurableSeq(0) < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(4, f.DurableSeq(0));
}

TEST(DeltaForwarder, RoutedBatchesComeBackAsEmptySparesWithTheirCapacity) {
  Cluster c(3, 2, 1);
  DeltaForwarder& f = *c.forwarders[0];
  EXPECT_EQ(0u, f.TakeSpare().size());  // none yet: a fresh batch
  c.Push(0, 6, 1, 0, 1);
  c.Drain();
  DeltaBatch spare = f.TakeSpare();
  EXPECT_EQ(0u, spare.size());
  EXPECT_TRUE(spare.xor_bytes.empty());
  EXPECT_GE(spare.xor_bytes.capacity(), c.record_bytes);  // the routed push's buffer, kept for the next one
}

TEST(DeltaForwarder, AShardRecordsIntoItsMutationSinkOnlyWhatChangedIt) {
  Cluster c(3, 2, 1);
  DeltaForwarder& f = *c.forwarders[0];
  EmbeddingShard& shard = *c.shards[0];
  std::vector<int64_t> keys = {3, 9, 27};
  std::vector<float> rows(keys.size() * 4), grads(keys.size() * 4, 0.5f);
  const WorkerSeqs none;
  DeltaForwarder::Mutation pull(f, "t", none);
  shard.Pull(keys.data(), keys.size(), rows.data(), &pull);  // inserts three rows: one mutation
  EXPECT_EQ(1, f.seq());
  shard.Pull(keys.data(), keys.size(), rows.data(), &pull);  // all present: nothing changed, nothing recorded
  EXPECT_EQ(1, f.seq());
  const WorkerSeqs pushes{{4, 7}};
  DeltaForwarder::Mutation push(f, "t", pushes);
  shard.Push(keys.data(), grads.data(), keys.size(), 1, &push);
  EXPECT_EQ(2, f.seq());
  c.Drain();
  EXPECT_EQ(7, f.DurableSeq(4));
  c.ExpectConsistent();
  EXPECT_THROW(DeltaForwarder::Mutation(f, "other", none), std::invalid_argument);
  // A shard of another record size is refused before it changes a byte.
  ShardConfig wide = Config();
  wide.dim = 8;
  EmbeddingShard other(wide);
  EXPECT_THROW(other.Push(keys.data(), std::vector<float>(keys.size() * 8, 0.5f).data(), keys.size(), 1, &push),
               std::invalid_argument);
  EXPECT_EQ(0u, other.size());
  EXPECT_EQ(0u, other.num_blocks());
  EXPECT_EQ(2, f.seq());
}

#ifdef __linux__
// (nice, scheduling policy) of each of this process's threads, from /proc/self/task/*/stat (fields 19, 41).
std::vector<std::pair<int, int>> ThreadPriorities() {
  std::vector<std::pair<int, int>> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    std::istringstream fields(line.substr(line.rfind(')') + 2));  // after "pid (comm) "
    std::string field;
    int nice = 0;
    for (int i = 3; i <= 41 && fields >> field; ++i) {
      if (i == 19) nice = std::stoi(field);
      if (i == 41) out.emplace_back(nice, std::stoi(field));
    }
  }
  return out;
}

// This process's threads at nice 19 under SCHED_IDLE, polled for up to a second until there are `want`.
int IdleThreads(int want) {
  const std::pair<int, int> idle{19, SCHED_IDLE};
  int lowered = 0;
  for (int attempt = 0; attempt < 200 && lowered < want; ++attempt) {
    const auto threads = ThreadPriorities();
    lowered = static_cast<int>(std::count(threads.begin(), threads.end(), idle));
    if (lowered < want) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return lowered;
}

TEST(DeltaForwarder, ItsThreadRunsInTheIdleTime) {
  Cluster c(3, 2, 1);  // three forwarders, three threads
  EXPECT_EQ(3, IdleThreads(3));
  const auto threads = ThreadPriorities();
  // the caller's own thread is left alone
  EXPECT_GT(std::count(threads.begin(), threads.end(), std::make_pair(0, int{SCHED_OTHER})), 0);
}

// Pins the calling thread (and the threads it makes meanwhile) to its first allowed CPU, for as long as it lives.
struct OneCpu {
  OneCpu() {
    ok = sched_getaffinity(0, sizeof(saved), &saved) == 0;
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int cpu = 0; ok && cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &saved)) {
        CPU_SET(cpu, &one);
        break;
      }
    ok = ok && sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  ~OneCpu() { sched_setaffinity(0, sizeof(saved), &saved); }
  OneCpu(const OneCpu&) = delete;
  OneCpu& operator=(const OneCpu&) = delete;
  cpu_set_t saved{};
  bool ok = false;
};

TEST(DeltaForwarder, ALaggingThreadsWorkIsDoneByRecordItself) {
  // On one CPU beside a spinning thread of normal priority, the forwarder's idle-policy thread gets little
  // time: past the lag bound Record routes and delivers on the caller's thread instead of waiting for it
  // (waiting, these pushes took 60x longer: a few ms of the thread's turn per wait).
  const OneCpu pinned;  // threads made from now on inherit it
  ASSERT_TRUE(pinned.ok);
  std::atomic<bool> spin{true};
  std::thread spinner([&] {
    while (spin.load(std::memory_order_relaxed)) {
    }
  });
  {
    Cluster c(3, 2, 1);
    DeltaForwarder& f = *c.forwarders[0];
    for (int step = 1; step <= 3000; ++step) c.Push(0, 2, step, 0, step);
    const DeltaForwarder::Progress p = f.progress();
    EXPECT_GT(p.lag_waits, 0u);     // the bound was reached
    EXPECT_GT(p.lag_catchups, 0u);  // and the backlog routed and delivered by Record itself
    spin = false;
    spinner.join();
    c.Drain();
    EXPECT_EQ(3000, c.holders[2]->Applied(0));
    c.ExpectConsistent();
  }
}

TEST(DeltaForwarder, AFlushLiftsTheThreadOutOfTheIdleTimeWhileItHoldsWorkTheCallerWaitsFor) {
  // The priority inversion a recovery's drain met beside another job: the idle-policy thread took a range to
  // route, a normal-priority process took the core, and the drain waited for the idle time. A Flush that finds
  // work taken lifts the thread until it has nothing taken, then the thread lowers itself again.
  const OneCpu pinned;  // threads made from now on inherit it
  ASSERT_TRUE(pinned.ok);
  {
    Cluster c(3, 2, 1);
    DeltaForwarder& f = *c.forwarders[0];
    std::vector<int64_t> keys(1 << 18);
    std::vector<float> grads(keys.size() * 4, 0.25f);
    int64_t next_key = 0;
    for (int attempt = 1; attempt <= 10 && f.progress().lifts == 0; ++attempt) {
      for (auto& key : keys) key = next_key++;  // new rows: a large range for the thread to route
      const WorkerSeqs pushes{{0, attempt}};
      DeltaForwarder::Mutation sink(f, "t", pushes);
      c.shards[0]->Push(keys.data(), grads.data(), keys.size(), attempt, &sink);
      // The thread routes a lone mutation once it waited 20 ms (kMaxDelay): wake while it works, then keep the
      // one core busy at normal priority, as another job would, and wait for parity.
      std::this_thread::sleep_for(std::chrono::milliseconds(21 + attempt % 5));
      std::atomic<bool> spin{true};
      std::thread spinner([&] {
        while (spin.load(std::memory_order_relaxed)) {
        }
      });
      c.Drain();
      spin = false;
      spinner.join();
    }
    EXPECT_GT(f.progress().lifts, 0u);
    c.Drain();
    c.ExpectConsistent();
    // Once it had nothing taken, the lifted thread went back to the idle time (every forwarder's thread is idle).
    EXPECT_EQ(3, IdleThreads(3));
  }
}
#endif

TEST(DeltaForwarder, AHolderServedRemotelyNeverHoldsRecordBack) {
  // Backpressure counts only what the forwarder's own thread has to do: a remote transport sending once a
  // second may leave many batches queued without any Record waiting for them.
  Cluster c(3, 2, 1);
  DeltaForwarder& f = *c.forwarders[0];
  f.SetHolder(1, nullptr);  // nobody takes from it
  for (int step = 1; step <= 200; ++step) {
    c.Push(0, 2, step, 0, step);
    f.Flush();  // each push delivered to the local holder before the next: its lag stays 0
    for (int attempt = 0; attempt < 1000 && c.holders[2]->Applied(0) < step; ++attempt)  // local lag stays 0
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  EXPECT_EQ(200, c.holders[2]->Applied(0));
  EXPECT_EQ(0u, f.progress().lag_waits);  // 200 batches queued for the remote holder held nothing back
}

TEST(DeltaForwarder, DropPendingLosesWhatWasNotDelivered) {
  Cluster c(3, 2, 1);
  const uint64_t link = c.forwarders[0]->SetHolder(1, nullptr);  // nobody serves holder 1 yet
  c.Push(0, 4, 1, 0, 1);
  c.forwarders[0]->DropPending();
  DeltaForwarder::Delivery d;
  EXPECT_FALSE(c.forwarders[0]->Take(1, link, 10, &d));
  c.Push(0, 4, 2, 0, 2);  // after the crash nothing goes out
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(0, c.holders[1]->Applied(0));
  EXPECT_LE(c.holders[2]->Applied(0), 1);
}

TEST(DeltaForwarder, ConcurrentSendersToSharedHolders) {
  Cluster c(5, 4, 1);
  std::vector<std::thread> threads;
  std::vector<std::mt19937_64> rngs;
  for (int s = 0; s < 5; ++s) {
    threads.emplace_back([&c, s] {
      std::mt19937_64 rng(100 + s);
      std::uniform_int_distribution<int64_t> key(0, 300);
      std::normal_distribution<float> grad;
      for (int step = 1; step <= 40; ++step) {
        std::vector<int64_t> keys(16);
        std::vector<float> grads(16 * 4);
        for (auto& x : keys) x = key(rng);
        for (auto& g : grads) g = grad(rng);
        DeltaBatch deltas;
        c.shards[s]->Push(keys.data(), grads.data(), keys.size(), step, DeltaBatchSink(&deltas).sink());
        c.forwarders[s]->Record("t", deltas, {{0, step}});
      }
    });
  }
  for (auto& t : threads) t.join();
  c.Drain();
  c.ExpectConsistent();
}

}  // namespace
}  // namespace xdl_ec

// Bounded tables (row_policy.h): admission thresholds, TTL / L2 / cap eviction, deltas that keep parity
// exact across eviction passes, and a restored shard that decides as the lost one would have.
#include "xdl_ec/row_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "xdl_ec/delta_batch_sink.h"
#include "xdl_ec/embedding_shard.h"

namespace xdl_ec {
namespace {

ShardConfig Config(RowPolicyConfig rules, uint32_t block_slots = 8, int dim = 4,
                   OptimizerKind kind = OptimizerKind::kAdagrad) {
  ShardConfig c;
  c.dim = dim;
  c.optimizer.kind = kind;
  c.optimizer.learning_rate = 0.1f;
  c.block_slots = block_slots;
  c.seed = 7;
  c.row_policy = rules;
  return c;
}

RowPolicyConfig Admit(int64_t n) {
  RowPolicyConfig r;
  r.admit_min_count = n;
  return r;
}

std::vector<float> Pull(EmbeddingShard& shard, const std::vector<int64_t>& keys, DeltaBatch* deltas = nullptr) {
  std::vector<float> out(keys.size() * shard.dim(), -1.0f);
  shard.Pull(keys.data(), keys.size(), out.data(), DeltaBatchSink(deltas).sink());
  return out;
}

void Push(EmbeddingShard& shard, const std::vector<int64_t>& keys, int64_t step, DeltaBatch* deltas = nullptr,
          float g = 0.5f) {
  std::vector<float> grads(keys.size() * shard.dim(), g);
  shard.Push(keys.data(), grads.data(), keys.size(), step, DeltaBatchSink(deltas).sink());
}

std::vector<uint8_t> AllBlocks(const EmbeddingShard& shard) {
  std::vector<uint8_t> bytes(shard.num_blocks() * shard.block_bytes());
  for (size_t b = 0; b < shard.num_blocks(); ++b) shard.ReadBlock(b, bytes.data() + b * shard.block_bytes());
  return bytes;
}

// A zero image that follows a shard through its deltas alone, as a parity block does.
struct Mirror {
  std::vector<uint8_t> image;
  void Apply(const DeltaBatch& d) {
    for (size_t i = 0; i < d.size(); ++i) {
      const size_t end = (size_t{d.slots[i]} + 1) * d.record_bytes;
      if (image.size() < end) image.resize(end, 0);
      uint8_t* r = image.data() + size_t{d.slots[i]} * d.record_bytes;
      for (size_t j = 0; j < d.record_bytes; ++j) r[j] ^= d.delta(i)[j];
    }
  }
  bool Matches(const EmbeddingShard& shard) const {
    std::vector<uint8_t> bytes = AllBlocks(shard), mine = image;
    const size_t n = std::max(bytes.size(), mine.size());
    bytes.resize(n, 0);
    mine.resize(n, 0);
    return bytes == mine;
  }
};

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

template <typename F>
void ExpectInvalid(F&& f, const std::string& field) {
  try {
    f();
    ADD_FAILURE() << "no exception, expected one naming " << field;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(RowPolicy, BadSettingsAreClearErrorsNamingTheField) {
  RowPolicyConfig r;
  r.admit_min_count = -2;
  ExpectInvalid([&] { EmbeddingShard s(Config(r)); }, "admit_min_count");
  r = RowPolicyConfig();
  r.admit_min_count = 0;
  ExpectInvalid([&] { EmbeddingShard s(Config(r)); }, "admit_min_count");
  r = RowPolicyConfig();
  r.ttl_steps = 0;
  ExpectInvalid([&] { EmbeddingShard s(Config(r)); }, "ttl_steps");
  r.ttl_steps = -5;
  ExpectInvalid([&] { EmbeddingShard s(Config(r)); }, "ttl_steps");
  r = RowPolicyConfig();
  r.max_rows = 7;  // below one block of 8
  ExpectInvalid([&] { EmbeddingShard s(Config(r, 8)); }, "max_rows");
  r.max_rows = -1;
  ExpectInvalid([&] { EmbeddingShard s(Config(r, 8)); }, "max_rows");
  r = RowPolicyConfig();
  r.min_l2 = 0.0;
  ExpectInvalid([&] { EmbeddingShard s(Config(r)); }, "min_l2");
  r.min_l2 = std::nan("");
  ExpectInvalid([&] { EmbeddingShard s(Config(r)); }, "min_l2");
  r = RowPolicyConfig();
  r.evict_every_steps = -1;
  ExpectInvalid([&] { EmbeddingShard s(Config(r)); }, "evict_every_steps");
  ExpectInvalid([] { ParseEvictPolicy("fifo", "row_policy.policy"); }, "row_policy.policy");
  EXPECT_EQ(ParseEvictPolicy("lru"), EvictPolicy::kLru);
  EXPECT_EQ(ParseEvictPolicy("lfu"), EvictPolicy::kLfu);
  // The boundary values are fine.
  r = RowPolicyConfig();
  r.ttl_steps = 1;
  r.max_rows = 8;
  r.min_l2 = 1e-9;
  EXPECT_NO_THROW(EmbeddingShard s(Config(r, 8)));
}

TEST(RowPolicy, TablesWithoutRulesKeepTheirLayout) {
  EmbeddingShard plain(Config(RowPolicyConfig()));
  EXPECT_EQ(plain.layout().bytes(), 12u + 4u * (4 + 4));  // Adagrad: dim floats of state
  EXPECT_EQ(plain.layout().policy_bytes, 0);
  RowPolicyConfig r;
  r.ttl_steps = 3;
  EmbeddingShard ruled(Config(r));
  EXPECT_EQ(ruled.layout().bytes(), plain.layout().bytes() + RecordLayout::kPolicyBytes);
  // Without rules a pass frees nothing and reports nothing.
  Push(plain, {1, 2, 3}, 1);
  DeltaBatch d;
  EXPECT_EQ(plain.Evict(1000, DeltaBatchSink(&d).sink()).counts.total(), 0u);
  EXPECT_EQ(d.size(), 0u);
  EXPECT_EQ(plain.size(), 3u);
  EXPECT_THROW(plain.Evict(0), std::invalid_argument);
}

TEST(RowPolicy, AdmissionOnTheNthOccurrenceExactly) {
  EmbeddingShard shard(Config(Admit(3)));
  EmbeddingShard reference(Config(RowPolicyConfig()));  // no rules: a row at once
  const std::vector<int64_t> k = {42};
  // A pull of an id never pushed reads zeros and inserts nothing.
  EXPECT_EQ(Pull(shard, k), std::vector<float>(4, 0.0f));
  EXPECT_EQ(shard.size(), 0u);
  Push(shard, {42, 42, 42}, 1);  // duplicates in one batch: one occurrence
  Push(shard, k, 2);
  EXPECT_EQ(shard.size(), 1u);  // a pending record
  EXPECT_EQ(Pull(shard, k), std::vector<float>(4, 0.0f));
  std::vector<float> row(4);
  uint8_t found = 1;
  shard.Find(k.data(), 1, row.data(), &found);
  EXPECT_EQ(found, 0);
  EXPECT_TRUE(shard.Export().keys.empty());
  auto stats = shard.policy_stats();
  EXPECT_EQ(stats.rows, 0u);
  EXPECT_EQ(stats.pending, 1u);
  EXPECT_EQ(stats.counters.admitted, 0u);
  // The third occurrence admits: the initial row with that push's gradient applied, nothing of the earlier two.
  Push(shard, k, 3, nullptr, 0.25f);
  Push(reference, k, 3, nullptr, 0.25f);
  EXPECT_EQ(Pull(shard, k), Pull(reference, k));
  shard.Find(k.data(), 1, row.data(), &found);
  EXPECT_EQ(found, 1);
  stats = shard.policy_stats();
  EXPECT_EQ(stats.rows, 1u);
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.counters.admitted, 1u);
  EXPECT_EQ(stats.counters.not_admitted_lookups, 1u + 2u + 1u);  // 2 pulls and 2 pushes before admission
  auto rows = shard.Export();
  ASSERT_EQ(rows.keys, k);
  EXPECT_EQ(rows.uses, std::vector<uint32_t>{3});
  EXPECT_EQ(rows.last_step, std::vector<int64_t>{3});
  // Later pushes step the row as a table without rules would.
  Push(shard, k, 4);
  Push(reference, k, 4);
  EXPECT_EQ(Pull(shard, k), Pull(reference, k));
}

TEST(RowPolicy, RepeatsCountEveryGradientTheyStandFor) {
  EmbeddingShard shard(Config(Admit(5)));
  std::vector<int64_t> keys = {1, 2};
  std::vector<float> grads(8, 0.5f);
  std::vector<uint32_t> repeats = {4, 5};
  shard.Push(keys.data(), grads.data(), 2, 1, nullptr, repeats.data());
  std::vector<float> rows(8);
  std::vector<uint8_t> found(2);
  shard.Find(keys.data(), 2, rows.data(), found.data());
  EXPECT_EQ(found, (std::vector<uint8_t>{0, 1}));  // 4 < 5 <= 5
  repeats = {1, 1};
  shard.Push(keys.data(), grads.data(), 2, 2, nullptr, repeats.data());
  shard.Find(keys.data(), 2, rows.data(), found.data());
  EXPECT_EQ(found, (std::vector<uint8_t>{1, 1}));
}

TEST(RowPolicy, PendingIdsTickTheirClockAndPullStaleSendsAbsentIdsAsZeros) {
  EmbeddingShard shard(Config(Admit(2)));
  const std::vector<int64_t> k = {9, 10};
  std::vector<int32_t> known = {-1, -1}, clocks(2);
  std::vector<float> rows(8, 1.0f);
  std::vector<uint8_t> sent(2);
  EXPECT_EQ(shard.PullStale(k.data(), 2, known.data(), 0, rows.data(), clocks.data(), sent.data()), 2u);
  EXPECT_EQ(clocks, (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(rows, std::vector<float>(8, 0.0f));
  EXPECT_EQ(shard.size(), 0u);
  Push(shard, {9}, 1);
  shard.Clocks(k.data(), 2, clocks.data());
  const int32_t pending_clock = clocks[0];
  EXPECT_EQ(pending_clock, static_cast<int32_t>(RecordLayout::kInitialClock));
  EXPECT_EQ(clocks[1], -1);
  Push(shard, {9}, 2);  // admitted: a new version, so a cached zero row is stale
  shard.Clocks(k.data(), 1, clocks.data());
  EXPECT_NE(clocks[0], pending_clock);
}

TEST(RowPolicy, TtlEvictsExactlyTheRowsNotUpdatedForMoreThanTtlSteps) {
  RowPolicyConfig r;
  r.ttl_steps = 3;
  EmbeddingShard shard(Config(r));
  Pull(shard, {100});                                                   // inserted by a pull, never pushed: last_step 0
  for (int64_t step = 1; step <= 6; ++step) Push(shard, {step}, step);  // key s last updated at step s
  auto e = shard.Evict(6);
  // 6 - last > 3: keys 1, 2 and the never-pushed 100.
  EXPECT_EQ(Sorted(e.keys), (std::vector<int64_t>{1, 2, 100}));
  EXPECT_EQ(e.counts.ttl, 3u);
  EXPECT_EQ(e.counts.l2 + e.counts.cap, 0u);
  EXPECT_EQ(Sorted(shard.Export().keys), (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(shard.Evict(6).counts.total(), 0u);  // a second pass at the same step frees nothing
  EXPECT_EQ(shard.policy_stats().counters.evicted_ttl, 3u);
  // An evicted key comes back as new: its initial row.
  EmbeddingShard fresh(Config(r));
  EXPECT_EQ(Pull(shard, {1}), Pull(fresh, {1}));
}

TEST(RowPolicy, ABlockAPassEmptiesWholeIsGivenBackAndReused) {
  RowPolicyConfig r;
  r.ttl_steps = 2;
  const uint32_t slots = 1024;  // 1024 records of dim 16: a block spans whole pages
  EmbeddingShard shard(Config(r, slots, 16)), reference(Config(r, slots, 16));
  std::vector<int64_t> first(slots), second(slots);
  std::iota(first.begin(), first.end(), 0);        // block 0
  std::iota(second.begin(), second.end(), 10000);  // block 1
  std::vector<int64_t> one_of_second = {second[5]};
  DeltaBatch deltas;
  for (EmbeddingShard* s : {&shard, &reference}) {
    Push(*s, first, 1);
    Push(*s, second, 1);
  }
  const size_t held = shard.memory().slot_bytes;
  ASSERT_EQ(held, 2 * shard.block_bytes());
  for (int64_t step = 2; step <= 4; ++step) {
    Push(shard, one_of_second, step);
    Push(reference, one_of_second, step);
  }
  // At step 4 every key of block 0 is past its TTL, block 1 keeps one row: block 0 alone is given back.
  shard.Push(one_of_second.data(), std::vector<float>(16, 0.5f).data(), 1, 5, DeltaBatchSink(&deltas).sink());
  const auto e = shard.Evict(5, DeltaBatchSink(&deltas).sink());
  EXPECT_EQ(e.counts.ttl, size_t{2 * slots - 1});
  EXPECT_EQ(shard.memory().slot_bytes, shard.block_bytes());
  EXPECT_EQ(shard.memory().live_rows, 1u);
  // The given-back block reads zeros, as freed slots do (parity sees no difference)...
  std::vector<uint8_t> block(shard.block_bytes(), 1);
  shard.ReadBlock(0, block.data());
  EXPECT_TRUE(std::all_of(block.begin(), block.end(), [](uint8_t v) { return v == 0; }));
  // ...and is reused first (the lowest free slot): held again, and its rows train as in a shard never emptied.
  Push(shard, {7, 8}, 6);
  EXPECT_EQ(shard.memory().slot_bytes, 2 * shard.block_bytes());
  EmbeddingShard fresh(Config(r, slots, 16));
  Push(fresh, {7, 8}, 6);
  EXPECT_EQ(Pull(shard, {7, 8}), Pull(fresh, {7, 8}));
  // The same rows erased one by one (nothing given back) leave the same bytes.
  Push(reference, one_of_second, 5);
  EXPECT_EQ(reference.Erase(e.keys.data(), e.keys.size()), e.keys.size());
  Push(reference, {7, 8}, 6);
  EXPECT_EQ(reference.memory().slot_bytes, 2 * shard.block_bytes());
  EXPECT_EQ(AllBlocks(shard), AllBlocks(reference));
  EXPECT_EQ(shard.Evict(6).counts.total(), 0u);  // a later pass skips the given-back block
}

TEST(RowPolicy, TtlAlsoDropsPendingCounts) {
  RowPolicyConfig r = Admit(2);
  r.ttl_steps = 2;
  EmbeddingShard shard(Config(r));
  Push(shard, {5}, 1);
  EXPECT_EQ(shard.Evict(4).keys, std::vector<int64_t>{5});
  Push(shard, {5}, 5);  // counting starts over: still pending
  EXPECT_EQ(shard.policy_stats().pending, 1u);
  EXPECT_EQ(shard.policy_stats().rows, 0u);
}

TEST(RowPolicy, L2EvictsExactlyTheRowsWithASmallNorm) {
  RowPolicyConfig r;
  r.min_l2 = 0.5;
  EmbeddingShard shard(Config(r));
  const std::vector<int64_t> keys = {1, 2, 3, 4};
  // Norms: 0.2, 0.4999, 0.5, 2.
  std::vector<float> values = {0.2f, 0, 0, 0, 0.4999f, 0, 0, 0, 0.3f, 0.4f, 0, 0, 1, 1, 1, 1};
  shard.Load(keys.data(), values.data(), nullptr, 4);
  auto e = shard.Evict(1);
  EXPECT_EQ(e.keys, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(e.counts.l2, 2u);
  EXPECT_EQ(shard.Export().keys, (std::vector<int64_t>{3, 4}));
}

// Runs a stream of distinct and repeating ids through a capped shard with a pass every `every` steps.
void RunCapped(EvictPolicy policy) {
  RowPolicyConfig r;
  r.max_rows = 16;
  r.policy = policy;
  EmbeddingShard shard(Config(r, 8));
  std::mt19937_64 rng(3);
  int64_t next_new = 1000;
  for (int64_t step = 1; step <= 60; ++step) {
    std::vector<int64_t> batch = {1, 2};  // hot ids: every step
    for (int i = 0; i < 4; ++i) batch.push_back(next_new++);
    batch.push_back(static_cast<int64_t>(1000 + rng() % static_cast<uint64_t>(next_new - 1000)));
    Pull(shard, batch);
    ASSERT_LE(shard.size(), 16u) << "step " << step;
    Push(shard, batch, step);
    ASSERT_LE(shard.size(), 16u) << "step " << step;
    if (step % 3 == 0) {
      const size_t before = shard.size();
      auto e = shard.Evict(step);
      EXPECT_EQ(e.counts.cap, before > 14 ? before - 14 : 0u);
      EXPECT_LE(shard.size(), 16u);
    }
  }
  // The hot ids are never the lowest ranked (most uses; most recent).
  std::vector<float> row(8);
  std::vector<uint8_t> found(2);
  std::vector<int64_t> hot = {1, 2};
  shard.Find(hot.data(), 2, row.data(), found.data());
  EXPECT_EQ(found, (std::vector<uint8_t>{1, 1}));
  EXPECT_GT(shard.policy_stats().counters.evicted_cap, 0u);
  EXPECT_GT(shard.policy_stats().counters.not_admitted_lookups, 0u);  // ids refused while full
}

TEST(RowPolicy, TheCapIsNeverExceededLfu) { RunCapped(EvictPolicy::kLfu); }
TEST(RowPolicy, TheCapIsNeverExceededLru) { RunCapped(EvictPolicy::kLru); }

TEST(RowPolicy, CapPicksTheLowestRanked) {
  for (EvictPolicy policy : {EvictPolicy::kLfu, EvictPolicy::kLru}) {
    RowPolicyConfig r;
    r.max_rows = 8;  // low water 7
    r.policy = policy;
    EmbeddingShard shard(Config(r, 8));
    // Keys 1..8 pushed at step k; key 1 then pushed 3 more times at step 9 (most uses, most recent),
    // key 2 twice at step 9.
    for (int64_t k = 1; k <= 8; ++k) Push(shard, {k}, k);
    Push(shard, {1, 2}, 9);
    Push(shard, {1, 2}, 10);
    Push(shard, {1}, 11);
    ASSERT_EQ(shard.size(), 8u);
    Push(shard, {99}, 12);  // full: refused
    EXPECT_EQ(shard.size(), 8u);
    // Past the cap by a Load (Load does not apply it).
    std::vector<int64_t> extra = {50, 51};
    std::vector<float> values(8, 0.1f);
    shard.Load(extra.data(), values.data(), nullptr, 2);
    ASSERT_EQ(shard.size(), 10u);
    auto e = shard.Evict(12);
    EXPECT_EQ(e.counts.cap, 3u);
    // lfu: uses 0 (the loaded 50, 51), then uses 1 with the oldest step: key 3.
    // lru: last_step 0 (50, 51), then the oldest step: key 3.
    EXPECT_EQ(Sorted(e.keys), (std::vector<int64_t>{3, 50, 51})) << EvictPolicyName(policy);
  }
  // Where lfu and lru differ: an old, often used row against a recent one used once.
  for (EvictPolicy policy : {EvictPolicy::kLfu, EvictPolicy::kLru}) {
    RowPolicyConfig r;
    r.max_rows = 8;
    r.policy = policy;
    EmbeddingShard shard(Config(r, 8));
    for (int64_t step = 1; step <= 5; ++step) Push(shard, {1}, step);  // 5 uses, last at 5
    for (int64_t k = 2; k <= 8; ++k) Push(shard, {k}, 10 + k);         // 1 use each, later
    std::vector<int64_t> extra = {50};
    std::vector<float> values(4, 0.1f);
    shard.Load(extra.data(), values.data(), nullptr, 1);
    std::vector<uint32_t> uses = {3};
    std::vector<int64_t> last = {30};
    shard.LoadPolicyWords(extra.data(), uses.data(), last.data(), 1);
    auto e = shard.Evict(30);  // 9 records, keep 7
    EXPECT_EQ(e.counts.cap, 2u);
    if (policy == EvictPolicy::kLfu) {
      EXPECT_EQ(Sorted(e.keys), (std::vector<int64_t>{2, 3}));  // uses 1, the oldest of them
    } else {
      EXPECT_EQ(Sorted(e.keys), (std::vector<int64_t>{1, 2}));  // the oldest steps: 5, 12
    }
  }
}

// Every mutation's deltas, eviction passes included, applied to a zero image reproduce the shard; a shard
// restored from that image (as recovery from parity would) then makes the same decisions as the original.
TEST(RowPolicy, DeltasKeepParityExactAndARestoredShardDecidesTheSame) {
  RowPolicyConfig r = Admit(2);
  r.ttl_steps = 6;
  r.min_l2 = 0.01;
  r.max_rows = 24;
  r.policy = EvictPolicy::kLfu;
  r.evict_every_steps = 5;  // passes inside pushes (steps 5, 10, ...) besides the explicit ones (4, 8, ...)
  const ShardConfig config = Config(r, 8, 4, OptimizerKind::kAdam);
  EmbeddingShard shard(config);
  Mirror mirror;
  DeltaBatch d;
  std::mt19937_64 rng(11);
  auto traffic = [&](EmbeddingShard& s, int64_t step, Mirror* m, std::mt19937_64& g) {
    std::vector<int64_t> batch;
    for (int i = 0; i < 12; ++i) batch.push_back(static_cast<int64_t>(g() % 60));
    Pull(s, batch, &d);
    if (m) m->Apply(d);
    std::vector<float> grads(batch.size() * 4);
    for (float& x : grads) x = static_cast<float>(static_cast<int64_t>(g() % 200) - 100) / 100.0f;
    s.Push(batch.data(), grads.data(), batch.size(), step, DeltaBatchSink(&d).sink());
    if (m) m->Apply(d);
    if (step % 4 == 0) {
      s.Evict(step, DeltaBatchSink(&d).sink());
      if (m) m->Apply(d);
    }
  };
  size_t evicted = 0;
  for (int64_t step = 1; step <= 40; ++step) {
    const size_t before = shard.policy_stats().counters.evicted_ttl + shard.policy_stats().counters.evicted_cap;
    traffic(shard, step, &mirror, rng);
    evicted += shard.policy_stats().counters.evicted_ttl + shard.policy_stats().counters.evicted_cap - before;
    ASSERT_TRUE(mirror.Matches(shard)) << "step " << step;
    ASSERT_LE(shard.size(), 24u);
  }
  EXPECT_GT(evicted, 0u);
  EXPECT_GT(shard.policy_stats().pending, 0u);

  // Rebuild from the mirror's bytes alone: the key index from key/flag bytes, blocks by fault.
  const size_t rb = shard.layout().bytes();
  const size_t high_water = mirror.image.size() / rb;
  std::vector<int64_t> keys;
  std::vector<uint32_t> slots;
  for (size_t slot = 0; slot < high_water; ++slot) {
    const uint8_t* rec = mirror.image.data() + slot * rb;
    if (!RecordLayout::IsLive(RecordLayout::Flags(rec))) continue;
    int64_t key;
    std::memcpy(&key, rec, 8);
    keys.push_back(key);
    slots.push_back(static_cast<uint32_t>(slot));
  }
  EmbeddingShard restored(config);
  const std::vector<uint8_t> image = mirror.image;
  const size_t block_bytes = restored.block_bytes();
  restored.BeginRestore(keys.data(), slots.data(), keys.size(), high_water, [&](size_t b, uint8_t* out) {
    std::memset(out, 0, block_bytes);
    const size_t from = b * block_bytes;
    if (from < image.size()) std::memcpy(out, image.data() + from, std::min(block_bytes, image.size() - from));
  });
  // Both continue with the same traffic: same bytes, same evictions, every step (the first pass faults
  // every block in).
  std::mt19937_64 rng_a(99), rng_b(99);
  for (int64_t step = 41; step <= 60; ++step) {
    traffic(shard, step, nullptr, rng_a);
    traffic(restored, step, nullptr, rng_b);
    ASSERT_EQ(AllBlocks(shard), AllBlocks(restored)) << "step " << step;
  }
  EXPECT_EQ(Sorted(shard.Export().keys), Sorted(restored.Export().keys));
}

TEST(RowPolicy, ExportLoadAndPolicyWordsResumeTheSameDecisions) {
  RowPolicyConfig r;
  r.ttl_steps = 4;
  r.max_rows = 8;
  EmbeddingShard shard(Config(r, 8));
  for (int64_t step = 1; step <= 8; ++step) Push(shard, {step, 100}, step);
  auto rows = shard.Export();
  ASSERT_EQ(rows.keys.size(), 8u);
  ASSERT_EQ(rows.uses.size(), 8u);
  ASSERT_EQ(rows.last_step.size(), 8u);
  EmbeddingShard resumed(Config(r, 8));
  resumed.Load(rows.keys.data(), rows.values.data(), rows.state.data(), rows.keys.size());
  resumed.LoadPolicyWords(rows.keys.data(), rows.uses.data(), rows.last_step.data(), rows.keys.size());
  auto a = shard.Evict(9), b = resumed.Evict(9);
  EXPECT_EQ(Sorted(a.keys), Sorted(b.keys));
  EXPECT_EQ(Sorted(a.keys), (std::vector<int64_t>{1, 2, 3, 4}));  // 9 - last > 4
  // Bad words change nothing.
  std::vector<int64_t> k = {100, 555};
  std::vector<uint32_t> uses = {1, 1};
  std::vector<int64_t> last = {1, 1};
  const auto before = AllBlocks(resumed);
  ExpectInvalid([&] { resumed.LoadPolicyWords(k.data(), uses.data(), last.data(), 2); }, "555");
  last = {-1, 1};
  ExpectInvalid([&] { resumed.LoadPolicyWords(k.data(), uses.data(), last.data(), 1); }, "last_step");
  EXPECT_EQ(AllBlocks(resumed), before);
  EmbeddingShard plain(Config(RowPolicyConfig()));
  EXPECT_THROW(plain.LoadPolicyWords(k.data(), uses.data(), last.data(), 1), std::invalid_argument);
}

// evict_every_steps: a push whose step is a multiple ends with a pass, inside that push's deltas, one entry per
// slot even where the pass frees a slot the push just wrote; its freed slots wait for the next call.
TEST(RowPolicy, PushStepPassesTravelInThePushDeltas) {
  RowPolicyConfig r;
  r.max_rows = 8;  // low water 7
  r.ttl_steps = 5;
  r.evict_every_steps = 4;
  r.policy = EvictPolicy::kLfu;
  EmbeddingShard shard(Config(r, 8));
  Mirror mirror;
  DeltaBatch d;
  for (int64_t step = 1; step <= 3; ++step) {
    Push(shard, {1, 2, step + 10}, step, &d);  // 1, 2 hot; 11, 12, 13 once
    mirror.Apply(d);
  }
  Push(shard, {1, 2}, 3, &d);  // step 3 again: no pass
  mirror.Apply(d);
  ASSERT_EQ(shard.size(), 5u);
  // Step 4: the push inserts 14..16 (8 records, full), then the pass keeps 7: the lowest ranked is 11 (uses 1,
  // oldest).
  Push(shard, {1, 14, 15, 16}, 4, &d);
  std::set<uint32_t> slots(d.slots.begin(), d.slots.end());
  EXPECT_EQ(slots.size(), d.slots.size()) << "one entry per slot";
  mirror.Apply(d);
  EXPECT_TRUE(mirror.Matches(shard));
  EXPECT_EQ(shard.size(), 7u);
  EXPECT_EQ(shard.policy_stats().counters.evicted_cap, 1u);
  std::vector<float> row(4);
  uint8_t found = 1;
  const std::vector<int64_t> k11 = {11};
  shard.Find(k11.data(), 1, row.data(), &found);
  EXPECT_EQ(found, 0);
  // Step 8: 5 new ids into 7 records: 20 fits (8), 21..24 are refused; ttl frees 12 only (8 - 2 > 5; 13 has
  // 8 - 3 = 5); 7 records are left, nothing for the cap.
  Push(shard, {20, 21, 22, 23, 24}, 8, &d);
  slots = std::set<uint32_t>(d.slots.begin(), d.slots.end());
  EXPECT_EQ(slots.size(), d.slots.size());
  mirror.Apply(d);
  EXPECT_TRUE(mirror.Matches(shard));
  EXPECT_EQ(shard.policy_stats().counters.evicted_ttl, 1u);
  EXPECT_EQ(shard.size(), 7u);
  // Rows written and freed in one push: a cap of 8 where the pass-step push inserts a row ranked lowest.
  RowPolicyConfig c;
  c.max_rows = 8;
  c.evict_every_steps = 2;
  EmbeddingShard capped(Config(c, 8));
  Mirror m2;
  for (int64_t k = 1; k <= 7; ++k) {
    for (int64_t rep = 0; rep < 3; ++rep) {
      Push(capped, {k}, 1, &d);  // uses 3 each, step 1 (odd: no pass)
      m2.Apply(d);
    }
  }
  Push(capped, {50}, 2, &d);  // 8 records, uses 1: the pass frees 50 itself, written in this very push
  EXPECT_EQ(d.size(), 1u);
  EXPECT_TRUE(std::all_of(d.delta(0), d.delta(0) + d.record_bytes, [](uint8_t v) { return v == 0; }));
  m2.Apply(d);
  EXPECT_TRUE(m2.Matches(capped));
  EXPECT_EQ(capped.size(), 7u);
  EXPECT_EQ(capped.memory().free_slots, 1u);
}

TEST(RowPolicy, APassThatFreesSomethingMovesTheCacheEpoch) {
  RowPolicyConfig r;
  r.ttl_steps = 2;
  r.evict_every_steps = 3;
  EmbeddingShard shard(Config(r, 8));
  Push(shard, {1}, 1);
  EXPECT_EQ(shard.Evict(2).counts.total(), 0u);
  EXPECT_EQ(shard.eviction_generation(), 0u);  // nothing freed: copies stay trusted
  Push(shard, {2}, 3);                         // the pass-step push: 3 - 1 <= 2 keeps key 1
  EXPECT_EQ(shard.eviction_generation(), 0u);
  Push(shard, {2}, 6);  // frees key 1
  EXPECT_EQ(shard.eviction_generation(), 1u);
  EXPECT_EQ(EpochAfterEvictions(12345, 0), 12345);
  const int64_t top = int64_t{1} << 62;
  std::set<int64_t> seen;
  for (int64_t epoch : {int64_t{1}, int64_t{12345}, top}) {
    for (uint64_t g = 0; g < 1000; ++g) {
      const int64_t moved = EpochAfterEvictions(epoch, g);
      ASSERT_GE(moved, 1);
      ASSERT_LE(moved, top);
      if (epoch == 12345) seen.insert(moved);
    }
  }
  EXPECT_EQ(seen.size(), 1000u);  // every generation a different epoch
}

// A save's rows with their words and its pending ids, loaded into other slots (reversed order), make a shard that
// goes on deciding exactly as the original: ranks tie on keys, never on slots.
TEST(RowPolicy, ASaveReloadedIntoOtherSlotsDecidesTheSame) {
  RowPolicyConfig r = Admit(2);
  r.ttl_steps = 5;
  r.max_rows = 16;
  r.evict_every_steps = 3;
  const ShardConfig config = Config(r, 8);
  EmbeddingShard shard(config);
  std::mt19937_64 rng(21);
  auto traffic = [](EmbeddingShard& s, int64_t step, std::mt19937_64& g) {
    std::vector<int64_t> batch;
    for (int i = 0; i < 10; ++i) batch.push_back(static_cast<int64_t>(g() % 40));
    Pull(s, batch);
    Push(s, batch, step);
  };
  for (int64_t step = 1; step <= 20; ++step) traffic(shard, step, rng);
  auto rows = shard.Export();
  auto pending = shard.ExportPending();
  ASSERT_FALSE(pending.keys.empty());
  EXPECT_TRUE(pending.values.empty());
  auto reversed = [](auto v) { return decltype(v)(v.rbegin(), v.rend()); };
  EmbeddingShard reloaded(config);
  const size_t n = rows.keys.size(), dim = 4, sf = reloaded.layout().state_floats;
  std::vector<int64_t> keys = reversed(rows.keys);
  std::vector<float> values, state;
  for (size_t i = n; i-- > 0;) {
    values.insert(values.end(), rows.values.begin() + i * dim, rows.values.begin() + (i + 1) * dim);
    state.insert(state.end(), rows.state.begin() + i * sf, rows.state.begin() + (i + 1) * sf);
  }
  std::vector<int64_t> pk = reversed(pending.keys), pl = reversed(pending.last_step);
  std::vector<uint32_t> pu = reversed(pending.uses);
  reloaded.LoadPending(pk.data(), pu.data(), pl.data(), pk.size());  // pending first: other slots again
  reloaded.Load(keys.data(), values.data(), state.data(), n);
  std::vector<uint32_t> uses = reversed(rows.uses);
  std::vector<int64_t> last = reversed(rows.last_step);
  reloaded.LoadPolicyWords(keys.data(), uses.data(), last.data(), n);
  auto by_key = [](const EmbeddingShard::Rows& x) {
    std::map<int64_t, std::vector<float>> m;
    for (size_t i = 0; i < x.keys.size(); ++i) {
      m[x.keys[i]].assign(x.values.begin() + i * 4, x.values.begin() + (i + 1) * 4);
    }
    return m;
  };
  std::mt19937_64 a(5), b(5);
  for (int64_t step = 21; step <= 45; ++step) {
    traffic(shard, step, a);
    traffic(reloaded, step, b);
    ASSERT_EQ(by_key(shard.Export()), by_key(reloaded.Export())) << "step " << step;
    ASSERT_EQ(Sorted(shard.ExportPending().keys), Sorted(reloaded.ExportPending().keys)) << "step " << step;
  }
  EXPECT_GT(shard.policy_stats().counters.evicted_cap + shard.policy_stats().counters.evicted_ttl, 0u);
  // Bad pending ids change nothing.
  const auto before = AllBlocks(reloaded);
  std::vector<int64_t> k = {1000, 1001};
  std::vector<uint32_t> u = {1, 2};  // 2 >= admit_min_count
  std::vector<int64_t> l = {1, 1};
  ExpectInvalid([&] { reloaded.LoadPending(k.data(), u.data(), l.data(), 2); }, "uses[1]");
  k = {1000, reloaded.Export().keys.at(0)};
  u = {1, 1};
  ExpectInvalid([&] { reloaded.LoadPending(k.data(), u.data(), l.data(), 2); }, "already has a record");
  EXPECT_EQ(AllBlocks(reloaded), before);
  EmbeddingShard plain(Config(RowPolicyConfig()));
  ExpectInvalid([&] { plain.LoadPending(k.data(), u.data(), l.data(), 1); }, "admission");
}

// A staged load (a resume through an agent): the words and pending ids travel inside the Load's own deltas.
TEST(RowPolicy, AStagedLoadWritesTheWordsAndPendingIdsInItsOwnDeltas) {
  RowPolicyConfig r = Admit(3);
  r.ttl_steps = 4;
  EmbeddingShard shard(Config(r, 8));
  std::vector<int64_t> keys = {10, 11}, pending = {20};
  std::vector<float> values(8, 0.5f);
  std::vector<uint32_t> uses = {7, 9}, pending_uses = {2};
  std::vector<int64_t> last = {5, 6}, pending_last = {6};
  shard.StageLoadWords(keys.data(), uses.data(), last.data(), 2, pending.data(), pending_uses.data(),
                       pending_last.data(), 1);
  Mirror mirror;
  DeltaBatch d;
  shard.Load(keys.data(), values.data(), nullptr, 2, DeltaBatchSink(&d).sink());
  EXPECT_EQ(d.size(), 3u);
  mirror.Apply(d);
  EXPECT_TRUE(mirror.Matches(shard));
  auto rows = shard.Export();
  EXPECT_EQ(rows.uses, uses);
  EXPECT_EQ(rows.last_step, last);
  EXPECT_EQ(shard.ExportPending().keys, pending);
  // consumed: the next load writes no words
  std::vector<int64_t> more = {12};
  shard.Load(more.data(), values.data(), nullptr, 1);
  EXPECT_EQ(shard.Export().uses.back(), 0u);
  // a staged pending id that the load also holds as a row, or that exists, is refused before any change
  const auto before = AllBlocks(shard);
  shard.StageLoadWords(nullptr, nullptr, nullptr, 0, more.data(), pending_uses.data(), pending_last.data(), 1);
  ExpectInvalid([&] { shard.Load(more.data(), values.data(), nullptr, 1); }, "staged pending id 12");
  EXPECT_EQ(AllBlocks(shard), before);
  std::vector<uint32_t> too_many = {3};
  ExpectInvalid(
      [&] { shard.StageLoadWords(nullptr, nullptr, nullptr, 0, more.data(), too_many.data(), pending_last.data(), 1); },
      "admit_min_count");
}

TEST(RowPolicy, EvictedSlotsAreZeroAndReusedLowestFirst) {
  RowPolicyConfig r;
  r.ttl_steps = 1;
  EmbeddingShard shard(Config(r, 8));
  Push(shard, {1, 2, 3, 4}, 1);
  Push(shard, {2, 4}, 3);
  DeltaBatch d;
  auto e = shard.Evict(3, DeltaBatchSink(&d).sink());
  EXPECT_EQ(e.keys, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(d.slots, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(shard.memory().free_slots, 2u);
  Push(shard, {7}, 4);
  EXPECT_EQ(shard.memory().free_slots, 1u);
  EXPECT_EQ(shard.memory().slots, 4u);  // slot 0 reused
}

// Evict(ttl_seconds): the pass of a push frees the records last updated before the push's ttl_before (the
// driver's cutoff), in the push's deltas; a push that runs no pass ignores it; a bad cutoff changes nothing.
TEST(RowPolicy, APushsTtlBeforeFreesTheRowsLastUpdatedBeforeIt) {
  RowPolicyConfig r;
  r.evict_every_steps = 4;  // no ttl_steps: only the cutoff frees rows by age
  EmbeddingShard shard(Config(r));
  Mirror mirror;
  DeltaBatch d;
  Pull(shard, {100}, &d);  // inserted by a pull, never pushed: last_step 0
  mirror.Apply(d);
  for (int64_t step = 1; step <= 3; ++step) {
    Push(shard, {step}, step, &d);  // key s last updated at step s
    mirror.Apply(d);
  }
  std::vector<float> g(shard.dim(), 0.5f);
  const int64_t five = 5;
  shard.Push(&five, g.data(), 1, 5, DeltaBatchSink(&d).sink(), nullptr,
             5);  // step 5 runs no pass: the cutoff is ignored
  mirror.Apply(d);
  EXPECT_EQ(shard.size(), 5u);
  const int64_t seven = 7;
  ExpectInvalid([&] { shard.Push(&seven, g.data(), 1, 8, DeltaBatchSink(&d).sink(), nullptr, 9); }, "ttl_before");
  ExpectInvalid([&] { shard.Push(&seven, g.data(), 1, 8, DeltaBatchSink(&d).sink(), nullptr, -1); }, "ttl_before");
  EXPECT_EQ(shard.size(), 5u);
  EXPECT_TRUE(mirror.Matches(shard));
  // Step 8 with cutoff 3: keys 1, 2 and the never-pushed 100 go; 3 (step 3), 5 and the pushed 7 stay.
  shard.Push(&seven, g.data(), 1, 8, DeltaBatchSink(&d).sink(), nullptr, 3);
  mirror.Apply(d);
  EXPECT_TRUE(mirror.Matches(shard));
  EXPECT_EQ(Sorted(shard.Export().keys), (std::vector<int64_t>{3, 5, 7}));
  EXPECT_EQ(shard.policy_stats().counters.evicted_ttl, 3u);
  // Step 12 without a cutoff frees nothing: the table has no ttl_steps.
  Push(shard, {7}, 12, &d);
  EXPECT_EQ(shard.size(), 3u);
}

}  // namespace
}  // namespace xdl_ec

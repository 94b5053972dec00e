// The sketch counter of bounded tables (row_policy.h): a count-min sketch in reserved slots counts the ids
// without a row, admits none later than the exact counter and few early, costs no record per id, ages by
// halving, and is carried exactly by deltas (parity), a rebuild from parity and saves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "parity_group.h"
#include "xdl_ec/delta_batch_sink.h"
#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/key_router.h"
#include "xdl_ec/row_policy.h"

namespace xdl_ec {
namespace {

RowPolicyConfig Sketch(int64_t min_count, int64_t width = 256, int64_t depth = 4, int64_t decay = 0) {
  RowPolicyConfig r;
  r.admit_min_count = min_count;
  r.admit_counter = AdmitCounter::kSketch;
  r.sketch_width = width;
  r.sketch_depth = depth;
  r.sketch_decay_every_steps = decay;
  return r;
}

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

void Push(EmbeddingShard& shard, const std::vector<int64_t>& keys, int64_t step, DeltaBatch* deltas = nullptr) {
  std::vector<float> grads(keys.size() * shard.dim(), 0.25f);
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

// Zipf(1.1) ids in [0, n): batches of `batch` draws, each a push of its unique ids.
std::vector<std::vector<int64_t>> ZipfStream(size_t steps, size_t batch, size_t n, uint64_t seed) {
  std::vector<double> weights(n);
  for (size_t i = 0; i < n; ++i) weights[i] = 1.0 / std::pow(static_cast<double>(i + 1), 1.1);
  std::discrete_distribution<size_t> draw(weights.begin(), weights.end());
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int64_t>> out(steps);
  for (auto& keys : out) {
    std::set<int64_t> unique;
    for (size_t i = 0; i < batch; ++i) unique.insert(static_cast<int64_t>(draw(rng) * 7919 + 13));
    keys.assign(unique.begin(), unique.end());
  }
  return out;
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

TEST(SketchCounter, BadSettingsAreClearErrorsThatChangeNothing) {
  ExpectInvalid([] { ParseAdmitCounter("bloom"); }, "admit_counter");
  EXPECT_EQ(ParseAdmitCounter("sketch"), AdmitCounter::kSketch);
  ExpectInvalid([] { EmbeddingShard s(Config(Sketch(1))); }, "admit_min_count");
  ExpectInvalid([] { EmbeddingShard s(Config(Sketch(65536))); }, "admit_min_count");
  ExpectInvalid([] { EmbeddingShard s(Config(Sketch(2, 15))); }, "sketch_width");
  ExpectInvalid([] { EmbeddingShard s(Config(Sketch(2, (int64_t{1} << 22) + 1))); }, "sketch_width");
  ExpectInvalid([] { EmbeddingShard s(Config(Sketch(2, 64, 0))); }, "sketch_depth");
  ExpectInvalid([] { EmbeddingShard s(Config(Sketch(2, 64, 9))); }, "sketch_depth");
  ExpectInvalid([] { EmbeddingShard s(Config(Sketch(2, 64, 2, -1))); }, "sketch_decay_every_steps");

  EmbeddingShard shard(Config(Sketch(3, 64, 2)));
  Push(shard, {1, 2, 3}, 1);
  const std::vector<uint8_t> before = AllBlocks(shard);
  const std::vector<uint16_t> wrong(64 * 2 + 1, 1);
  ExpectInvalid([&] { shard.LoadSketch(wrong.data(), wrong.size()); }, "sketch_width * sketch_depth");
  ExpectInvalid([&] { shard.StageSketch(wrong.data(), wrong.size()); }, "sketch_width * sketch_depth");
  const int64_t key = 9;
  const uint32_t uses = 1;
  const int64_t step = 1;
  ExpectInvalid([&] { shard.LoadPending(&key, &uses, &step, 1); }, "sketch");
  EXPECT_EQ(AllBlocks(shard), before);
  EmbeddingShard exact(Config(RowPolicyConfig{}));
  const std::vector<uint16_t> cells(64 * 2, 1);
  ExpectInvalid([&] { exact.LoadSketch(cells.data(), cells.size()); }, "no sketch counter");
}

// An id gets its row on the push where its estimate reaches min_count; before that it reads zeros, its
// gradient is dropped and it has no record (the cells alone count it).
TEST(SketchCounter, AdmitsOnTheMinCountThOccurrenceWithoutAnyRecordBefore) {
  EmbeddingShard shard(Config(Sketch(3, 1024, 4)));
  for (int64_t step = 1; step <= 2; ++step) Push(shard, {42}, step);
  EXPECT_EQ(shard.size(), 0u);
  uint32_t estimate = 0;
  const int64_t key = 42;
  shard.SketchEstimate(&key, 1, &estimate);
  EXPECT_EQ(estimate, 2u);
  std::vector<float> row(4, -1.0f);
  uint8_t found = 1;
  shard.Find(&key, 1, row.data(), &found);
  EXPECT_EQ(found, 0);
  shard.Pull(&key, 1, row.data());
  EXPECT_EQ(row, std::vector<float>(4, 0.0f));
  EXPECT_EQ(shard.size(), 0u);  // a pull inserts nothing
  Push(shard, {42}, 3);
  ASSERT_EQ(shard.size(), 1u);
  const auto rows = shard.Export();
  ASSERT_EQ(rows.keys, std::vector<int64_t>{42});
  EXPECT_EQ(rows.uses[0], 3u);  // a row's uses start at the estimate
  EXPECT_EQ(rows.last_step[0], 3);
  EXPECT_EQ(shard.policy_stats().counters.admitted, 1u);
  EXPECT_EQ(shard.policy_stats().counters.not_admitted_lookups, 3u);  // two dropped pushes, one zero pull
}

// On a Zipf stream the sketch admits every id no later than the exact counter (count-min never under-counts)
// and only a small fraction earlier, each early estimate within count-min's bound e * N / width but for a
// fraction below exp(-depth).
TEST(SketchCounter, OnAZipfStreamNoIdIsAdmittedLaterAndFewEarly) {
  constexpr int64_t kMin = 3, kWidth = 1 << 16, kDepth = 4;
  RowPolicyConfig by_record;
  by_record.admit_min_count = kMin;
  EmbeddingShard exact(Config(by_record, 256));
  EmbeddingShard sketch(Config(Sketch(kMin, kWidth, kDepth), 256));
  const auto stream = ZipfStream(200, 256, 20000, 3);
  std::map<int64_t, int64_t> exact_at, sketch_at;  // step of admission
  std::map<int64_t, uint32_t> seen;                // true occurrences so far
  uint64_t counted = 0;                            // occurrences of ids without a row (the sketch's N)
  size_t early = 0, beyond_bound = 0;
  for (size_t i = 0; i < stream.size(); ++i) {
    const int64_t step = static_cast<int64_t>(i + 1);
    const std::vector<int64_t>& keys = stream[i];
    std::vector<uint32_t> before(keys.size());
    sketch.SketchEstimate(keys.data(), keys.size(), before.data());
    Push(exact, keys, step);
    Push(sketch, keys, step);
    std::vector<float> rows(keys.size() * 4);
    std::vector<uint8_t> in_exact(keys.size()), in_sketch(keys.size());
    exact.Find(keys.data(), keys.size(), rows.data(), in_exact.data());
    sketch.Find(keys.data(), keys.size(), rows.data(), in_sketch.data());
    for (size_t j = 0; j < keys.size(); ++j) {
      const int64_t key = keys[j];
      const uint32_t truth = ++seen[key];
      if (in_exact[j] && !exact_at.count(key)) exact_at[key] = step;
      if (in_sketch[j] && !sketch_at.count(key)) {
        sketch_at[key] = step;
        if (truth < kMin) {
          ++early;
          const double bound = std::exp(1.0) * static_cast<double>(counted) / kWidth;
          if (before[j] + 1 - truth > bound) ++beyond_bound;
        }
      }
      if (!sketch_at.count(key) || sketch_at[key] == step) ++counted;
    }
  }
  ASSERT_GT(exact_at.size(), 500u);
  for (const auto& [key, step] : exact_at) {
    ASSERT_TRUE(sketch_at.count(key)) << "id " << key << " admitted by the exact counter only";
    EXPECT_LE(sketch_at[key], step) << "id " << key;
  }
  const double early_fraction = static_cast<double>(early) / static_cast<double>(sketch_at.size());
  EXPECT_LT(early_fraction, 0.05) << early << " of " << sketch_at.size();
  EXPECT_LE(static_cast<double>(beyond_bound), std::exp(-static_cast<double>(kDepth)) * sketch_at.size() + 1);
  // Every id the exact counter holds a pending record for costs the sketch nothing.
  EXPECT_GT(exact.policy_stats().pending, 3000u);
  EXPECT_EQ(sketch.policy_stats().pending, 0u);
  EXPECT_EQ(sketch.size(), sketch_at.size());
}

// Sized for them (20,000 ids in 2^18 cells a row), ids seen once cost no record: an id's four cells are all
// taken by others with probability about (20000 / 2^18)^4 = 3e-5, so at most a stray one is admitted.
TEST(SketchCounter, DistinctOnceSeenIdsCostNoRecord) {
  EmbeddingShard shard(Config(Sketch(2, 1 << 18, 4), 1024));
  const ShardMemoryStats empty = shard.memory();
  EXPECT_EQ(empty.slots, shard.sketch_slots());
  EXPECT_GT(shard.sketch_slots(), 0u);
  std::vector<int64_t> keys(20000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i) * 1000003 + 1;
  for (size_t at = 0; at < keys.size(); at += 1000) {
    std::vector<int64_t> batch(keys.begin() + static_cast<std::ptrdiff_t>(at),
                               keys.begin() + static_cast<std::ptrdiff_t>(at + 1000));
    Push(shard, batch, static_cast<int64_t>(at / 1000 + 1));
  }
  const ShardMemoryStats after = shard.memory();
  EXPECT_LE(after.live_rows, 3u);
  EXPECT_LE(after.slots, empty.slots + 3);
  EXPECT_EQ(after.slot_bytes, empty.slot_bytes);
  EXPECT_LE(after.index_bytes, 4096u);
  EXPECT_EQ(shard.policy_stats().counters.not_admitted_lookups, keys.size() - shard.size());
}

// Aging: the push of a step that is a multiple of sketch_decay_every_steps halves every cell after counting,
// in its own deltas.
TEST(SketchCounter, DecayHalvesEveryCellAtItsStepsInThePushDeltas) {
  EmbeddingShard shard(Config(Sketch(100, 64, 2, 4)));
  Mirror mirror;
  DeltaBatch d;
  for (int64_t step = 1; step <= 3; ++step) {
    Push(shard, {1, 2, 3, 4, 5, 6, 7}, step, &d);
    mirror.Apply(d);
  }
  const std::vector<uint16_t> before = shard.ExportSketch();
  EXPECT_GE(*std::max_element(before.begin(), before.end()), 3);
  Push(shard, {1}, 4, &d);
  mirror.Apply(d);
  EXPECT_TRUE(mirror.Matches(shard));
  const std::vector<uint16_t> after = shard.ExportSketch();
  const int64_t one = 1;
  uint32_t estimate = 0;
  shard.SketchEstimate(&one, 1, &estimate);
  EXPECT_EQ(estimate, 2u);  // (3 + 1) / 2
  size_t changed = 0;
  for (size_t c = 0; c < after.size(); ++c) {
    if (after[c] != before[c]) ++changed;
    EXPECT_LE(after[c], (before[c] + 1) / 2 + 1) << c;
  }
  EXPECT_GT(changed, 0u);
  // Ids seen once per halving never reach 100 (without the halving they would by step 400).
  for (int64_t step = 5; step <= 800; ++step) {
    if (step % 4 == 1) Push(shard, {1, 2, 3}, step);
    if (step % 4 == 0) Push(shard, {50}, step);  // the halving rides on a push of its step
  }
  EXPECT_EQ(shard.size(), 0u);
  shard.SketchEstimate(&one, 1, &estimate);
  EXPECT_LE(estimate, 2u);
}

// Every cell change is a slot delta: a mirror fed only deltas (what parity sees) holds the sketch; a shard
// restored from those bytes (key index from live records only) keeps the reserved slots and decides the same.
TEST(SketchCounter, DeltasCarryTheCellsAndARestoredShardDecidesTheSame) {
  RowPolicyConfig r = Sketch(3, 128, 3, 5);
  r.ttl_steps = 6;
  r.max_rows = 16;
  r.evict_every_steps = 4;
  const ShardConfig config = Config(r, 8, 4, OptimizerKind::kAdam);
  EmbeddingShard shard(config);
  ASSERT_GT(shard.sketch_slots(), 8u);  // the cells span several blocks
  Mirror mirror;
  DeltaBatch d;
  auto traffic = [&](EmbeddingShard& s, int64_t step, Mirror* m, std::mt19937_64& g) {
    std::vector<int64_t> batch;
    for (int i = 0; i < 14; ++i) batch.push_back(static_cast<int64_t>(g() % 50));
    std::vector<float> out(batch.size() * 4);
    s.Pull(batch.data(), batch.size(), out.data(), DeltaBatchSink(&d).sink());
    if (m) m->Apply(d);
    std::vector<float> grads(batch.size() * 4);
    for (float& x : grads) x = static_cast<float>(static_cast<int64_t>(g() % 200) - 100) / 100.0f;
    s.Push(batch.data(), grads.data(), batch.size(), step, DeltaBatchSink(&d).sink());
    if (m) m->Apply(d);
  };
  std::mt19937_64 rng(5);
  for (int64_t step = 1; step <= 30; ++step) {
    traffic(shard, step, &mirror, rng);
    ASSERT_TRUE(mirror.Matches(shard)) << "step " << step;
  }
  EXPECT_GT(shard.size(), 0u);
  EXPECT_GT(shard.policy_stats().counters.evicted_ttl + shard.policy_stats().counters.evicted_cap, 0u);

  const size_t rb = shard.layout().bytes();
  size_t high_water = 0;  // as recovery reports it: one past the highest live slot
  std::vector<int64_t> keys;
  std::vector<uint32_t> slots;
  for (size_t slot = 0; slot < mirror.image.size() / rb; ++slot) {
    const uint8_t* rec = mirror.image.data() + slot * rb;
    if (!RecordLayout::IsLive(RecordLayout::Flags(rec))) continue;
    int64_t key;
    std::memcpy(&key, rec, 8);
    keys.push_back(key);
    slots.push_back(static_cast<uint32_t>(slot));
    high_water = slot + 1;
  }
  EmbeddingShard restored(config);
  const std::vector<uint8_t> image = mirror.image;
  const size_t block_bytes = restored.block_bytes();
  restored.BeginRestore(keys.data(), slots.data(), keys.size(), high_water, [&](size_t b, uint8_t* out) {
    std::memset(out, 0, block_bytes);
    const size_t from = b * block_bytes;
    if (from < image.size()) std::memcpy(out, image.data() + from, std::min(block_bytes, image.size() - from));
  });
  EXPECT_EQ(restored.ExportSketch(), shard.ExportSketch());
  std::mt19937_64 rng_a(77), rng_b(77);
  for (int64_t step = 31; step <= 50; ++step) {
    traffic(shard, step, nullptr, rng_a);
    traffic(restored, step, nullptr, rng_b);
    ASSERT_EQ(AllBlocks(shard), AllBlocks(restored)) << "step " << step;
  }
}

// A pass that empties the block holding sketch cells (beside rows) does not give its pages back: the cells stay.
TEST(SketchCounter, APassNeverReleasesTheSketchsBlocks) {
  RowPolicyConfig r = Sketch(2, 16, 1);
  r.ttl_steps = 1;
  EmbeddingShard shard(Config(r, 256, 4));  // a block of several pages, which a pass could give back
  ASSERT_LT(shard.sketch_slots(), 256u);    // rows share block 0 with the cells
  Push(shard, {1, 2, 3}, 1);
  Push(shard, {1, 2, 3}, 2);
  ASSERT_EQ(shard.size(), 3u);
  Push(shard, {9}, 3);
  const std::vector<uint16_t> cells = shard.ExportSketch();
  EXPECT_EQ(shard.Evict(10).counts.ttl, 3u);
  EXPECT_EQ(shard.ExportSketch(), cells);
  EXPECT_EQ(shard.memory().slot_bytes, shard.block_bytes());
}

// A save's cells (ExportSketch) loaded into a fresh shard with its rows continue exactly; at another server count
// the cells of several shards add up (an over-estimate: never below any of them).
TEST(SketchCounter, SavedCellsResumeTheSameDecisionsAndAddUpAcrossShards) {
  const ShardConfig config = Config(Sketch(3, 64, 2, 7), 8);
  EmbeddingShard shard(config);
  std::mt19937_64 rng(9);
  auto traffic = [](EmbeddingShard& s, int64_t step, std::mt19937_64& g) {
    std::vector<int64_t> batch;
    for (int i = 0; i < 10; ++i) batch.push_back(static_cast<int64_t>(g() % 40));
    Push(s, batch, step);
  };
  for (int64_t step = 1; step <= 12; ++step) traffic(shard, step, rng);
  const auto rows = shard.Export();
  const std::vector<uint16_t> cells = shard.ExportSketch();
  EmbeddingShard resumed(config);
  resumed.Load(rows.keys.data(), rows.values.data(), rows.state.data(), rows.keys.size());
  resumed.LoadPolicyWords(rows.keys.data(), rows.uses.data(), rows.last_step.data(), rows.keys.size());
  resumed.LoadSketch(cells.data(), cells.size());
  EXPECT_EQ(resumed.ExportSketch(), cells);
  std::mt19937_64 rng_a(21), rng_b(21);
  for (int64_t step = 13; step <= 30; ++step) {
    traffic(shard, step, rng_a);
    traffic(resumed, step, rng_b);
  }
  EXPECT_EQ(Sorted(resumed.Export().keys), Sorted(shard.Export().keys));
  EXPECT_EQ(resumed.ExportSketch(), shard.ExportSketch());

  // The staged form writes the cells within the load's own deltas.
  EmbeddingShard staged(config);
  Mirror mirror;
  DeltaBatch d;
  staged.StageSketch(cells.data(), cells.size());
  staged.Load(rows.keys.data(), rows.values.data(), rows.state.data(), rows.keys.size(), DeltaBatchSink(&d).sink());
  mirror.Apply(d);
  EXPECT_TRUE(mirror.Matches(staged));
  EXPECT_EQ(staged.ExportSketch(), cells);

  // Two shards' cells into one: the cell-wise saturating sum, so no estimate falls below either's.
  EmbeddingShard other(config);
  for (int64_t step = 1; step <= 12; ++step) traffic(other, step, rng);
  EmbeddingShard merged(config);
  const std::vector<uint16_t> theirs = other.ExportSketch();
  merged.LoadSketch(cells.data(), cells.size());
  merged.LoadSketch(theirs.data(), theirs.size());
  const std::vector<uint16_t> sum = merged.ExportSketch();
  for (size_t c = 0; c < sum.size(); ++c) ASSERT_EQ(sum[c], std::min(65535, cells[c] + theirs[c]));
  std::vector<int64_t> probe(40);
  for (size_t i = 0; i < probe.size(); ++i) probe[i] = static_cast<int64_t>(i);
  std::vector<uint32_t> a(40), b(40), m(40);
  EmbeddingShard again(config);  // the first shard as saved, for its estimates
  again.LoadSketch(cells.data(), cells.size());
  again.SketchEstimate(probe.data(), probe.size(), a.data());
  other.SketchEstimate(probe.data(), probe.size(), b.data());
  merged.SketchEstimate(probe.data(), probe.size(), m.data());
  for (size_t i = 0; i < probe.size(); ++i) EXPECT_GE(m[i], std::max(a[i], b[i])) << probe[i];
}

// Under a real erasure code: servers killed mid-run (r = 1 and r = 2) are rebuilt from parity while traffic
// continues (degraded reads of the sketch's blocks included) and end bit for bit where a group that lost
// nothing ends, with parity consistent.
void KillAndRebuild(int n, int k, int r, const std::vector<int>& lost) {
  RowPolicyConfig rules = Sketch(3, 256, 3, 6);
  rules.ttl_steps = 8;
  rules.evict_every_steps = 5;
  const ShardConfig config = Config(rules, 16, 4, OptimizerKind::kAdam);
  testing::ParityGroup group(n, k, r, config), twin(n, k, r, config);
  std::mt19937_64 rng(1234);
  auto step_both = [&](int64_t step) {
    std::vector<std::vector<int64_t>> per(n);
    for (int i = 0; i < 60; ++i) {
      const int64_t key = static_cast<int64_t>(rng() % 300);
      per[KeyRouter::ServerOf(key, n)].push_back(key);
    }
    for (int s = 0; s < n; ++s) {
      std::vector<float> grads(per[s].size() * 4, 0.125f * static_cast<float>(step % 5));
      group.Push(s, per[s].data(), grads.data(), per[s].size(), step);
      twin.Push(s, per[s].data(), grads.data(), per[s].size(), step);
    }
  };
  for (int64_t step = 1; step <= 14; ++step) step_both(step);
  group.Kill(lost);
  for (int64_t step = 15; step <= 20; ++step) step_both(step);  // the replacements fault their blocks in
  group.FinishRebuild();
  for (int64_t step = 21; step <= 26; ++step) step_both(step);
  EXPECT_TRUE(group.Scrub().empty());
  for (int s = 0; s < n; ++s) {
    EXPECT_EQ(AllBlocks(*group.shard(s)), AllBlocks(*twin.shard(s))) << "server " << s;
    EXPECT_EQ(group.shard(s)->ExportSketch(), twin.shard(s)->ExportSketch()) << "server " << s;
  }
  size_t rows = 0;
  for (int s = 0; s < n; ++s) rows += twin.shard(s)->size();
  EXPECT_GT(rows, 0u);
}

TEST(SketchCounter, AKilledServerIsRebuiltExactlyR1) { KillAndRebuild(3, 2, 1, {1}); }
TEST(SketchCounter, KilledServersAreRebuiltExactlyR2) { KillAndRebuild(4, 2, 2, {0, 3}); }

}  // namespace
}  // namespace xdl_ec

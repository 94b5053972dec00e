// The disk tier (spill_tier.h) under a shard: a tiered shard is the untiered one, byte for byte, in every
// result, delta, export and block, whatever its budget; its bad dirs and a full filesystem are clear errors
// that change nothing.
#include "xdl_ec/spill_tier.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "xdl_ec/delta_batch_sink.h"
#include "xdl_ec/embedding_shard.h"

namespace xdl_ec {
namespace {

// Two threads' worth of parts whatever the machine (set before the process's pool is made): the tier's
// reads and writes and the shard's split loops run over the pool as they do in a server.
const int kPoolThreads = setenv("XDL_EC_CORE_THREADS", "2", 1);

std::string TempDir() {
  std::string path = testing::TempDir() + "xdl-ec-spill-test-XXXXXX";
  if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
  return path;
}

ShardConfig Plain(int dim = 4, uint32_t block_slots = 16) {
  ShardConfig c;
  c.dim = dim;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  c.optimizer.learning_rate = 0.1f;
  c.block_slots = block_slots;
  c.seed = 7;
  c.split_min_keys = 64;  // the split paths too
  return c;
}

ShardConfig WithRules() {
  ShardConfig c = Plain();
  c.split_min_keys = SIZE_MAX;
  c.row_policy.admit_min_count = 2;
  c.row_policy.admit_counter = AdmitCounter::kSketch;
  c.row_policy.sketch_width = 64;
  c.row_policy.sketch_depth = 2;
  c.row_policy.ttl_steps = 40;
  c.row_policy.max_rows = 600;
  c.row_policy.evict_every_steps = 10;
  return c;
}

ShardConfig Tiered(ShardConfig c, const std::string& dir, size_t budget = 0) {
  c.spill_dir = dir;
  c.memory_budget = budget;
  return c;
}

size_t RecordBytes(const ShardConfig& c) { return EmbeddingShard(c).layout().bytes(); }

std::vector<uint8_t> AllBlocks(const EmbeddingShard& shard) {
  std::vector<uint8_t> bytes(shard.num_blocks() * shard.block_bytes());
  for (size_t b = 0; b < shard.num_blocks(); ++b) shard.ReadBlock(b, bytes.data() + b * shard.block_bytes());
  return bytes;
}

void ExpectSameRows(const EmbeddingShard::Rows& a, const EmbeddingShard::Rows& b) {
  EXPECT_EQ(a.keys, b.keys);
  ASSERT_EQ(a.values.size(), b.values.size());
  ASSERT_EQ(a.state.size(), b.state.size());
  // bytes, not floats (NaN != NaN); an empty vector's data() may be null, which memcmp must not get
  if (!a.values.empty()) {
    EXPECT_EQ(0, std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)));
  }
  if (!a.state.empty()) {
    EXPECT_EQ(0, std::memcmp(a.state.data(), b.state.data(), a.state.size() * sizeof(float)));
  }
  EXPECT_EQ(a.uses, b.uses);
  EXPECT_EQ(a.last_step, b.last_step);
}

void ExpectSameDeltas(const DeltaBatch& a, const DeltaBatch& b, int op) {
  EXPECT_EQ(a.slots, b.slots) << "op " << op;
  EXPECT_EQ(a.xor_bytes, b.xor_bytes) << "op " << op;
}

// Random pulls, pushes, stale pulls, finds, clocks, erases, loads and reads on both shards, compared as
// they go; Zipf-like ids (a few hot, many cold) over more rows than the tiered one holds.
void RunTwin(const ShardConfig& config, size_t budget, uint64_t seed, int ops) {
  const std::string dir = TempDir();
  EmbeddingShard plain(config), tiered(Tiered(config, dir, budget));
  std::mt19937_64 rng(seed);
  const size_t dim = static_cast<size_t>(config.dim);
  auto ids = [&](size_t n) {
    std::vector<int64_t> keys(n);
    for (auto& k : keys) {
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      k = static_cast<int64_t>(std::pow(3000.0, u)) * 7919 % 100003 - 50000;  // hot small, long tail
    }
    return keys;
  };
  int64_t step = 0;
  for (int op = 0; op < ops; ++op) {
    const size_t n = 1 + rng() % 300;
    std::vector<int64_t> keys = ids(n);
    DeltaBatch da, db;
    switch (rng() % 9) {
      case 0:
      case 1: {
        std::vector<float> a(n * dim), b(n * dim);
        plain.Pull(keys.data(), n, a.data(), DeltaBatchSink(&da).sink());
        tiered.Pull(keys.data(), n, b.data(), DeltaBatchSink(&db).sink());
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "op " << op;
        break;
      }
      case 2:
      case 3: {
        std::vector<float> grads(n * dim);
        for (auto& g : grads) g = std::uniform_real_distribution<float>(-1, 1)(rng);
        ++step;
        plain.Push(keys.data(), grads.data(), n, step, DeltaBatchSink(&da).sink());
        tiered.Push(keys.data(), grads.data(), n, step, DeltaBatchSink(&db).sink());
        break;
      }
      case 4: {
        std::vector<int32_t> known(n), ca(n), cb(n);
        for (auto& k : known) k = static_cast<int32_t>(rng() % 4) - 1;
        std::vector<float> ra(n * dim), rb(n * dim);
        std::vector<uint8_t> sa(n), sb(n);
        const size_t ma = plain.PullStale(keys.data(), n, known.data(), 1, ra.data(), ca.data(), sa.data(),
                                          DeltaBatchSink(&da).sink());
        const size_t mb = tiered.PullStale(keys.data(), n, known.data(), 1, rb.data(), cb.data(), sb.data(),
                                           DeltaBatchSink(&db).sink());
        EXPECT_EQ(ma, mb);
        EXPECT_EQ(ca, cb);
        EXPECT_EQ(sa, sb);
        EXPECT_EQ(0, std::memcmp(ra.data(), rb.data(), ma * dim * sizeof(float)));
        break;
      }
      case 5: {
        std::vector<float> a(n * dim, 0.f), b(n * dim, 0.f);
        std::vector<uint8_t> fa(n), fb(n);
        std::vector<int32_t> ca(n), cb(n);
        plain.Find(keys.data(), n, a.data(), fa.data());
        tiered.Find(keys.data(), n, b.data(), fb.data());
        plain.Clocks(keys.data(), n, ca.data());
        tiered.Clocks(keys.data(), n, cb.data());
        EXPECT_EQ(fa, fb);
        EXPECT_EQ(ca, cb);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
        break;
      }
      case 6: {
        keys.resize(std::min<size_t>(n, 5));
        EXPECT_EQ(plain.Erase(keys.data(), keys.size(), DeltaBatchSink(&da).sink()),
                  tiered.Erase(keys.data(), keys.size(), DeltaBatchSink(&db).sink()));
        break;
      }
      case 7: {  // a load of unique keys, some new, some overwritten
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        const size_t m = keys.size();
        std::vector<float> values(m * dim), state(m * plain.layout().state_floats);
        for (auto& v : values) v = std::uniform_real_distribution<float>(-1, 1)(rng);
        for (auto& v : state) v = std::uniform_real_distribution<float>(0, 1)(rng);
        plain.Load(keys.data(), values.data(), state.data(), m, DeltaBatchSink(&da).sink());
        tiered.Load(keys.data(), values.data(), state.data(), m, DeltaBatchSink(&db).sink());
        break;
      }
      default: {  // raw reads of a random range, as parity and recovery do
        const size_t slot = rng() % (plain.memory().slots + 10), count = 1 + rng() % 40;
        std::vector<uint8_t> a(count * plain.layout().bytes()), b(a.size());
        plain.ReadSlots(slot, count, a.data());
        tiered.ReadSlots(slot, count, b.data());
        EXPECT_EQ(a, b) << "op " << op;
        break;
      }
    }
    ExpectSameDeltas(da, db, op);
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_EQ(plain.size(), tiered.size());
  EXPECT_EQ(AllBlocks(plain), AllBlocks(tiered));
  ExpectSameRows(plain.Export(), tiered.Export());
  ExpectSameRows(plain.ExportPending(), tiered.ExportPending());
  EXPECT_EQ(plain.ExportSketch(), tiered.ExportSketch());
  const ShardMemoryStats m = tiered.memory();
  EXPECT_GT(m.spill.rows_on_disk, 0u);  // the budget was exceeded: rows did go to disk and come back
  EXPECT_GT(m.spill.disk_write_bytes, 0u);
  EXPECT_GT(m.spill.disk_read_bytes, 0u);
  EXPECT_EQ(m.spill.rows_in_memory + m.spill.rows_on_disk, m.slots);
  EXPECT_EQ(plain.memory().spill.budget_bytes, 0u);
}

TEST(SpillTier, TieredShardIsByteIdenticalAtTheMinimumBudget) {
  const ShardConfig c = Plain();
  RunTwin(c, SpillTier::MinimumBudget(RecordBytes(c)), 1, 1500);
}

TEST(SpillTier, TieredShardIsByteIdenticalWithRoomForSomeRows) {
  const ShardConfig c = Plain(8, 64);
  RunTwin(c, 40 * 1024, 2, 1500);
}

TEST(SpillTier, TieredShardWithRowRulesIsByteIdentical) {
  const ShardConfig c = WithRules();
  RunTwin(c, SpillTier::MinimumBudget(RecordBytes(c)), 3, 1500);
}

// A lost shard rebuilt into a tiered one, by faults and background blocks, reads as the original.
TEST(SpillTier, RestoreIntoTieredShard) {
  const ShardConfig c = Plain();
  EmbeddingShard original(c);
  std::vector<int64_t> keys(3000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i * 31 + 5);
  std::vector<float> out(keys.size() * 4), grads(keys.size() * 4, 0.25f);
  original.Pull(keys.data(), keys.size(), out.data());
  original.Push(keys.data(), grads.data(), keys.size(), 1);
  std::vector<int64_t> gone = {5, 36, 67};
  original.Erase(gone.data(), gone.size());
  std::vector<int64_t> live;
  std::vector<uint32_t> slots;
  const std::vector<uint8_t> blocks = AllBlocks(original);
  const size_t rb = original.layout().bytes();
  for (size_t s = 0; s * rb < blocks.size(); ++s) {
    if (!RecordLayout::IsLive(RecordLayout::Flags(blocks.data() + s * rb))) continue;
    int64_t key;
    std::memcpy(&key, blocks.data() + s * rb, 8);
    live.push_back(key);
    slots.push_back(static_cast<uint32_t>(s));
  }
  const std::string dir = TempDir();
  EmbeddingShard restored(Tiered(c, dir, SpillTier::MinimumBudget(rb)));
  restored.BeginRestore(live.data(), slots.data(), live.size(), original.memory().slots,
                        [&original](size_t b, uint8_t* bytes) { original.ReadBlock(b, bytes); });
  std::vector<float> a(4 * 10), b(4 * 10);
  std::vector<int64_t> some(keys.begin() + 100, keys.begin() + 110);
  original.Pull(some.data(), some.size(), a.data());
  restored.Pull(some.data(), some.size(), b.data());  // degraded reads through the tier
  EXPECT_EQ(a, b);
  std::vector<uint8_t> block(original.block_bytes());
  for (size_t blk = 0; blk < original.num_blocks(); ++blk) {
    original.ReadBlock(blk, block.data());
    restored.RestoreBlock(blk, block.data());
  }
  EXPECT_EQ(restored.missing_blocks(), 0u);
  EXPECT_EQ(AllBlocks(original), AllBlocks(restored));
  ExpectSameRows(original.Export(), restored.Export());
  // And it trains on as the original does.
  original.Push(keys.data(), grads.data(), keys.size(), 2);
  restored.Push(keys.data(), grads.data(), keys.size(), 2);
  EXPECT_EQ(AllBlocks(original), AllBlocks(restored));
}

// As a table grows, its key index and slot words take more of the budget and the frames less: frames carved while
// it was small go back (their rows moved below), and a batch of new rows takes frames its fetch step freed instead of
// carving more. The rows stay the untiered shard's.
TEST(SpillTier, FramesStayWithinTheBudgetAsTheTableGrows) {
  const std::string dir = TempDir();
  const ShardConfig c = Plain(4, 64);
  const size_t budget = size_t{18} << 20;
  EmbeddingShard plain(c), tiered(Tiered(c, dir, budget));
  const size_t dim = static_cast<size_t>(c.dim);
  const size_t batch = 50000;
  size_t most = 0;
  for (int round = 0; round < 12; ++round) {
    std::vector<int64_t> keys(batch);
    for (size_t i = 0; i < batch; ++i) keys[i] = static_cast<int64_t>((round * batch + i) * 2654435761u % 1000003);
    std::vector<float> a(batch * dim), b(batch * dim);
    DeltaBatch da, db;
    plain.Pull(keys.data(), batch, a.data(), DeltaBatchSink(&da).sink());
    tiered.Pull(keys.data(), batch, b.data(), DeltaBatchSink(&db).sink());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "round " << round;
    ExpectSameDeltas(da, db, round);
    const ShardMemoryStats m = tiered.memory();
    most = std::max(most, m.spill.frame_bytes);
    // the budget: frames, key index and slot words (the file is in the page cache: no window); a chunk's slack
    const size_t held = m.spill.frame_bytes + m.index_bytes + m.slots * SpillTier::kSlotOverhead;
    EXPECT_LE(held, budget + (size_t{10} << 20)) << "round " << round;
  }
  const ShardMemoryStats m = tiered.memory();
  EXPECT_GT(most, size_t{10} << 20);                        // it once needed more than one chunk of frames ...
  EXPECT_LE(m.spill.frame_bytes, size_t{10} << 20);         // ... and gave them back as the index grew
  EXPECT_GT(m.spill.rows_on_disk, m.spill.rows_in_memory);  // most rows went to disk
  ExpectSameRows(plain.Export(), tiered.Export());
  EXPECT_EQ(AllBlocks(plain), AllBlocks(tiered));
}

// Frames go to the rows asked for often: rows asked for in three steps running keep their frames through two
// bursts of rows asked for once that each take about all the other frames (one CLOCK bit let the second burst
// take them: the first cleared it).
TEST(SpillTier, RowsAskedForOftenOutlastRowsAskedForOnce) {
  const std::string dir = TempDir();
  constexpr size_t kRecord = 64, kSlots = 20000, kHot = 32;
  // about 270 frames: the per-slot words, then ~96 bytes a frame (its header and words included)
  SpillTier tier(kRecord, kSlots * SpillTier::kSlotOverhead + 270 * 96, dir);
  tier.Reset(kSlots);
  uint32_t next_cold = kHot;  // slots [0, kHot) are the hot rows, the rest each asked for once
  size_t hot_asked = 0, hot_found = 0;
  for (int step = 0; step < 60; ++step) {
    std::vector<uint32_t> batch;
    const bool hot = step % 5 < 3;  // three steps with the hot rows, then two bursts without
    if (hot) {
      if (step % 5 == 0 && step >= 10) {
        for (uint32_t s = 0; s < kHot; ++s) hot_found += tier.Resident(s) != nullptr;
        hot_asked += kHot;
      }
      for (uint32_t s = 0; s < kHot; ++s) batch.push_back(s);
    }
    for (size_t i = 0; i < (hot ? 8 : 120); ++i) batch.push_back(next_cold++);
    tier.Fetch(batch.data(), batch.size(), 0, nullptr, /*for_write=*/true);
    for (const uint32_t s : batch) ASSERT_NE(tier.Resident(s), nullptr) << "step " << step;
  }
  ASSERT_LE(next_cold, kSlots);
  EXPECT_EQ(hot_found, hot_asked);
  EXPECT_LE(tier.stats().rows_in_memory, size_t{300});  // within the budget's frames
}

TEST(SpillTier, BadConfigIsAClearError) {
  ShardConfig c = Plain();
  const size_t minimum = SpillTier::MinimumBudget(RecordBytes(c));
  try {
    EmbeddingShard s(Tiered(c, TempDir(), minimum - 1));
    FAIL() << "a budget below the minimum was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("minimum of " + std::to_string(minimum)), std::string::npos) << e.what();
  }
  const std::string missing = TempDir() + "/not-here";
  try {
    EmbeddingShard s(Tiered(c, missing, minimum));
    FAIL() << "a missing spill dir was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  c.memory_budget = minimum;  // no dir
  EXPECT_THROW(EmbeddingShard s(c), std::invalid_argument);
  c.memory_budget = 0;
  c.spill_dir = "/tmp";  // no budget
  EXPECT_THROW(EmbeddingShard s(c), std::invalid_argument);
}

// A dir no file can be made in: a regular file's path (any user), a dir without write permission (not root).
TEST(SpillTier, UnwritableDirIsAClearError) {
  const ShardConfig c = Plain();
  const size_t budget = SpillTier::MinimumBudget(RecordBytes(c));
  const std::string file = TempDir() + "/a-file";
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  try {
    EmbeddingShard s(Tiered(c, file, budget));
    FAIL() << "a file was taken as the spill dir";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a directory"), std::string::npos) << e.what();
  }
  if (geteuid() == 0) return;  // root writes into any dir
  const std::string dir = TempDir();
  chmod(dir.c_str(), 0500);
  try {
    EmbeddingShard s(Tiered(c, dir, budget));
    FAIL() << "an unwritable spill dir was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not writable"), std::string::npos) << e.what();
  }
}

// A file size limit (RLIMIT_FSIZE, what a full filesystem looks like to a writer): the push whose evictions
// cannot be written throws naming the dir and changes no byte; the shard goes on once there is room.
TEST(SpillTier, FullDiskFailsTheOperationAndChangesNothing) {
  const ShardConfig c = Plain();
  const std::string dir = TempDir();
  const size_t rb = RecordBytes(c);
  EmbeddingShard plain(c), tiered(Tiered(c, dir, SpillTier::MinimumBudget(rb)));
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ignore, &old);  // the write fails with EFBIG instead of killing the process
  rlimit saved{};
  getrlimit(RLIMIT_FSIZE, &saved);
  rlimit limit = saved;
  limit.rlim_cur = 200 * rb;  // room for 200 records
  ASSERT_EQ(0, setrlimit(RLIMIT_FSIZE, &limit));
  std::vector<int64_t> keys(150);
  std::vector<float> out(keys.size() * 4), grads(keys.size() * 4, 0.5f);
  int64_t step = 0, next = 0;
  bool failed = false;
  for (int round = 0; round < 40 && !failed; ++round) {
    for (auto& k : keys) k = next++;
    const std::vector<uint8_t> before = AllBlocks(tiered);
    ++step;
    plain.Push(keys.data(), grads.data(), keys.size(), step);
    try {
      tiered.Push(keys.data(), grads.data(), keys.size(), step);
    } catch (const std::runtime_error& e) {
      failed = true;
      EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("full"), std::string::npos) << e.what();
      setrlimit(RLIMIT_FSIZE, &saved);
      EXPECT_EQ(before, AllBlocks(tiered));                       // nothing of the failed push
      tiered.Push(keys.data(), grads.data(), keys.size(), step);  // room again: the same push goes through
    }
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  sigaction(SIGXFSZ, &old, nullptr);
  EXPECT_TRUE(failed) << "the limit was never reached";
  EXPECT_EQ(AllBlocks(plain), AllBlocks(tiered));
}

}  // namespace
}  // namespace xdl_ec

// The parity holder's disk tier (ParityStore with a ParitySpill): a tiered store is the untiered one, byte for
// byte, in every block, column read and count, whatever its budget; a full filesystem fails an Apply with no
// byte changed, and a bad tier is a clear error.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "xdl_ec/erasure_code.h"
#include "xdl_ec/parity_holder.h"
#include "xdl_ec/parity_store.h"
#include "xdl_ec/parity_update.h"
#include "xdl_ec/spill_tier.h"

namespace xdl_ec {
namespace {

const int kPoolThreads = setenv("XDL_EC_CORE_THREADS", "2", 1);  // the tier's I/O over the pool, as in a server

constexpr size_t kRecordBytes = 40;
constexpr size_t kRecordsPerBlock = 16;
constexpr size_t kBlockBytes = kRecordBytes * kRecordsPerBlock;

std::string TempDir() {
  std::string path = testing::TempDir() + "xdl-ec-parity-tier-test-XXXXXX";
  if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
  return path;
}

std::vector<uint8_t> Blocks(const ParityStore& store) {
  std::vector<uint8_t> out(store.num_blocks() * store.block_bytes());
  for (size_t c = 0; c < store.num_blocks(); ++c) store.ReadBlock(c, out.data() + c * store.block_bytes());
  return out;
}

// `count` entries at random records of blocks [0, max_block), random members and deltas.
ParityUpdate RandomUpdate(std::mt19937_64& rng, const ErasureCode& code, size_t count, size_t max_block) {
  ParityUpdate u;
  u.record_bytes = kRecordBytes;
  for (size_t e = 0; e < count; ++e) {
    ParityUpdate::Entry en;
    en.parity_block = rng() % max_block;
    en.offset = static_cast<uint32_t>(rng() % kRecordsPerBlock * kRecordBytes);
    en.parity_member = static_cast<uint8_t>(rng() % code.r());
    en.data_member = static_cast<uint8_t>(rng() % code.k());
    u.entries.push_back(en);
  }
  u.deltas.resize(count * kRecordBytes);
  for (uint8_t& b : u.deltas) b = static_cast<uint8_t>(rng());
  return u;
}

void ExpectSame(const ParityStore& plain, const ParityStore& tiered, std::mt19937_64& rng) {
  ASSERT_EQ(plain.num_blocks(), tiered.num_blocks());
  ASSERT_EQ(plain.allocated_blocks(), tiered.allocated_blocks());
  ASSERT_EQ(Blocks(plain), Blocks(tiered));
  const size_t c = rng() % (plain.num_blocks() + 2);  // now and then a block never written
  EXPECT_EQ(plain.HasBlock(c), tiered.HasBlock(c));
  const size_t offset = rng() % kRecordBytes, width = 1 + rng() % (kRecordBytes - offset);
  std::vector<uint8_t> a(kRecordsPerBlock * width), b(a.size());
  plain.ReadColumns(c, kRecordBytes, offset, width, a.data());
  tiered.ReadColumns(c, kRecordBytes, offset, width, b.data());
  EXPECT_EQ(a, b);
}

class ParityStoreTier : public ::testing::TestWithParam<size_t> {};

// Random applies (both paths), block reads, column reads and block writes (a rebuild's recomputed parity),
// under the minimum budget and under one with room for a third of the records.
TEST_P(ParityStoreTier, TieredIsByteIdenticalToUntiered) {
  auto code = std::make_shared<const ErasureCode>(3, 2);
  const std::string dir = TempDir();
  const size_t budget = GetParam();
  ParityStore plain(code, kBlockBytes), tiered(code, kBlockBytes, ParitySpill{kRecordBytes, budget, dir});
  ASSERT_TRUE(tiered.tiered());
  std::mt19937_64 rng(5);
  constexpr size_t kBlocks = 60;  // 960 records: 15x the minimum's 64 frames
  for (int round = 0; round < 400; ++round) {
    const int op = static_cast<int>(rng() % 10);
    if (op < 6) {
      const ParityUpdate u = RandomUpdate(rng, *code, 1 + rng() % 120, 1 + rng() % kBlocks);
      if (op < 3) {
        plain.Apply(u);
        tiered.Apply(u);
      } else {  // the in-process path: the deltas by reference
        std::vector<ParityDeltaRef> refs(u.size());
        for (size_t e = 0; e < u.size(); ++e) refs[e] = {u.entries[e], u.delta(e)};
        plain.Apply(refs.data(), refs.size(), kRecordBytes);
        tiered.Apply(refs.data(), refs.size(), kRecordBytes);
      }
    } else if (op < 8) {
      std::vector<uint8_t> block(kBlockBytes);
      for (uint8_t& b : block) b = static_cast<uint8_t>(rng());
      const size_t c = rng() % (kBlocks + 10);
      plain.WriteBlock(c, block.data());
      tiered.WriteBlock(c, block.data());
    }
    ExpectSame(plain, tiered, rng);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(plain.updates_received(), tiered.updates_received());
  EXPECT_EQ(plain.bytes(), tiered.bytes());
  const SpillStats st = tiered.spill_stats();
  EXPECT_GT(st.rows_on_disk, 0u) << "the test never put parity on disk";
  EXPECT_EQ(st.rows_in_memory + st.rows_on_disk, tiered.allocated_blocks() * kRecordsPerBlock);
  EXPECT_GT(st.disk_write_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Budgets, ParityStoreTier,
                         ::testing::Values(SpillTier::MinimumBudget(kRecordBytes),
                                           SpillTier::MinimumBudget(kRecordBytes) * 5));

TEST(ParityStoreTierErrors, BadTiersAreClearErrors) {
  auto code = std::make_shared<const ErasureCode>(2, 1);
  const std::string dir = TempDir();
  try {
    ParityStore s(code, kBlockBytes, ParitySpill{kRecordBytes, 100, dir});
    FAIL() << "a budget below the minimum was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(SpillTier::MinimumBudget(kRecordBytes))), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ParityStore(code, kBlockBytes, ParitySpill{kRecordBytes + 1, 1 << 20, dir}), std::invalid_argument);
  try {
    ParityStore s(code, kBlockBytes, ParitySpill{kRecordBytes, 1 << 20, dir + "/missing"});
    FAIL() << "a missing spill dir was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/missing"), std::string::npos) << e.what();
  }
  // A tiered store takes whole records of its size: anything else is refused before any byte changes.
  ParityStore tiered(code, kBlockBytes, ParitySpill{kRecordBytes, 1 << 20, dir});
  ParityUpdate u;
  u.record_bytes = kRecordBytes;
  u.entries.push_back({0, 4, 0, 0});
  u.deltas.assign(kRecordBytes, 1);
  EXPECT_THROW(tiered.Apply(u), std::invalid_argument);
  EXPECT_EQ(tiered.num_blocks(), 0u);
  // A holder's spills name its tables.
  EXPECT_THROW(ParityHolder(0, 3, 2, 1, {{"a", kBlockBytes}}, {{"b", ParitySpill{kRecordBytes, 1 << 20, dir}}}),
               std::invalid_argument);
}

// A file size limit (what a full filesystem looks like to a writer): the Apply whose write-backs cannot be
// written throws naming the dir with every block unchanged, and goes through once there is room.
TEST(ParityStoreTierErrors, FullDiskFailsTheApplyAndChangesNothing) {
  auto code = std::make_shared<const ErasureCode>(2, 1);
  const std::string dir = TempDir();
  ParityStore plain(code, kBlockBytes),
      tiered(code, kBlockBytes, ParitySpill{kRecordBytes, SpillTier::MinimumBudget(kRecordBytes), dir});
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ignore, &old);  // the write fails with EFBIG instead of killing the process
  rlimit saved{};
  getrlimit(RLIMIT_FSIZE, &saved);
  rlimit limit = saved;
  limit.rlim_cur = 200 * kRecordBytes;
  ASSERT_EQ(0, setrlimit(RLIMIT_FSIZE, &limit));
  std::mt19937_64 rng(3);
  bool failed = false;
  for (size_t round = 0; round < 60 && !failed; ++round) {
    // Each round writes new blocks, so the file grows until the limit is reached.
    ParityUpdate u = RandomUpdate(rng, *code, 40, 2);
    for (auto& en : u.entries) en.parity_block += 2 * round;
    const std::vector<uint8_t> before = Blocks(tiered);
    plain.Apply(u);
    try {
      tiered.Apply(u);
    } catch (const std::runtime_error& e) {
      failed = true;
      EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("full"), std::string::npos) << e.what();
      setrlimit(RLIMIT_FSIZE, &saved);
      EXPECT_EQ(before, Blocks(tiered));  // nothing of the failed Apply
      tiered.Apply(u);                    // room again: the same batch goes through
    }
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  sigaction(SIGXFSZ, &old, nullptr);
  EXPECT_TRUE(failed) << "the limit was never reached";
  EXPECT_EQ(Blocks(plain), Blocks(tiered));
}

}  // namespace
}  // namespace xdl_ec

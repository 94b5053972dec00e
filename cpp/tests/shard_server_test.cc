#include "xdl_ec/shard_server.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "xdl_ec/delta_forwarder.h"
#include "xdl_ec/embedding_shard.h"

namespace xdl_ec {
namespace {

ShardConfig Config() {
  ShardConfig c;
  c.dim = 2;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  c.optimizer.learning_rate = 0.1f;
  c.seed = 5;
  c.block_slots = 4;
  return c;
}

struct Step {
  std::vector<int64_t> keys{1, 2, 1};
  std::vector<float> grads{0.5f, -1, 2, 3, 0.25f, 1};
  std::vector<int64_t> pull_keys{2, 8};
  PushPullRequest request;

  explicit Step(int64_t seq, int64_t step = 1) {
    request.step = step;
    request.worker = 3;
    request.parts.push_back({"t", seq, keys.data(), keys.size(), grads.data(), 2, nullptr});
    request.pulls.push_back({"t", pull_keys.data(), pull_keys.size()});
  }
};

std::vector<float> Rows(EmbeddingShard& shard, const std::vector<int64_t>& keys) {
  std::vector<float> out(keys.size() * shard.dim());
  shard.Find(keys.data(), keys.size(), out.data(), std::vector<uint8_t>(keys.size()).data());
  return out;
}

struct Served : ::testing::Test {
  std::shared_ptr<EmbeddingShard> shard = std::make_shared<EmbeddingShard>(Config());
  EmbeddingShard twin{Config()};  // the same step applied directly
  ShardServer server{7};

  void SetUp() override {
    server.SetTable("t", shard);
    server.SetNative(true, nullptr);
  }
};

TEST_F(Served, AppliesThePushThenPullsAsTheShardWould) {
  Step s(5);
  PushPullAnswer answer;
  ASSERT_TRUE(server.Serve(s.request, &answer));
  twin.Push(s.keys.data(), s.grads.data(), s.keys.size(), 1);
  std::vector<float> expected(4);
  twin.Pull(s.pull_keys.data(), 2, expected.data());
  EXPECT_TRUE(answer.has_ack && answer.applied && answer.has_rows);
  EXPECT_EQ(answer.server, 7);
  EXPECT_EQ(answer.worker, 3);
  EXPECT_EQ(answer.seq, 5);
  EXPECT_EQ(answer.step, 1);
  EXPECT_EQ(answer.durable, 0);
  ASSERT_EQ(answer.rows.size(), 1u);
  ASSERT_EQ(answer.rows[0].floats, 4u);
  EXPECT_EQ(answer.rows[0].dim, 2u);
  EXPECT_EQ(std::vector<float>(answer.rows[0].data.get(), answer.rows[0].data.get() + 4), expected);
  EXPECT_EQ(Rows(*shard, {1, 2, 8}), Rows(twin, {1, 2, 8}));
  EXPECT_EQ(server.LastSeq(3), 5);
  const ShardServer::Counters c = server.counters();
  EXPECT_EQ(c.requests, 1u);
  EXPECT_EQ(c.pushes, 1u);
  EXPECT_EQ(c.keys_pushed, 3u);
  EXPECT_EQ(c.steps_applied, 1u);
  EXPECT_EQ(c.pulls, 1u);
  EXPECT_EQ(c.keys_pulled, 2u);
  EXPECT_EQ(c.bytes_in, 3u * 8 + 6 * 4 + 2 * 8);
  EXPECT_EQ(c.bytes_out, 4u * 4);
}

TEST_F(Served, AReplayedPartIsAppliedOnce) {
  Step s(5);
  PushPullAnswer answer;
  ASSERT_TRUE(server.Serve(s.request, &answer));
  const std::vector<float> once = Rows(*shard, {1, 2});
  ASSERT_TRUE(server.Serve(s.request, &answer));  // the same seq again: skipped, still acknowledged
  EXPECT_EQ(Rows(*shard, {1, 2}), once);
  EXPECT_EQ(answer.seq, 5);
  EXPECT_EQ(server.counters().pushes, 1u);
}

TEST_F(Served, DeclinesWhatTheGeneralPathServesAndChangesNothing) {
  std::vector<std::pair<std::string, Step>> cases;
  auto with = [&](const std::string& why, auto change) {
    Step s(5);
    change(s);
    cases.emplace_back(why, std::move(s));
  };
  with("two participants", [](Step& s) { s.request.participants = 2; });
  with("step 0", [](Step& s) { s.request.step = 0; });
  with("negative worker", [](Step& s) { s.request.worker = -1; });
  with("negative seq", [](Step& s) { s.request.parts[0].seq = -1; });
  with("unknown table", [](Step& s) { s.request.parts[0].table = "u"; });
  with("unknown pulled table", [](Step& s) { s.request.pulls[0].table = "u"; });
  with("another dim", [](Step& s) {
    s.request.parts[0].dim = 1;
    s.request.parts[0].n = 6;
  });
  with("NaN", [](Step& s) { s.grads[3] = std::numeric_limits<float>::quiet_NaN(); });
  with("Inf", [](Step& s) { s.grads[5] = std::numeric_limits<float>::infinity(); });
  std::vector<uint32_t> zero_repeats{1, 0, 1};
  with("repeats 0", [&](Step& s) { s.request.parts[0].repeats = zero_repeats.data(); });
  for (auto& [why, s] : cases) {
    // Step's arrays moved with it: point the request at them again
    s.request.parts[0].keys = s.keys.data();
    s.request.parts[0].grads = s.grads.data();
    s.request.pulls[0].keys = s.pull_keys.data();
    PushPullAnswer answer;
    EXPECT_FALSE(server.Serve(s.request, &answer)) << why;
  }
  EXPECT_EQ(shard->size(), 0u);
  EXPECT_EQ(server.Seqs().size(), 0u);
  EXPECT_EQ(server.counters().requests, 0u);
  server.SetNative(false, nullptr);
  Step s(5);
  PushPullAnswer answer;
  EXPECT_FALSE(server.Serve(s.request, &answer));
  EXPECT_EQ(shard->size(), 0u);
}

TEST_F(Served, DeclinesWhileAShardIsUnderRestore) {
  const std::vector<int64_t> keys{1};
  const std::vector<uint32_t> slots{0};
  shard->BeginRestore(keys.data(), slots.data(), 1, 1, [](size_t, uint8_t*) {});
  Step s(5);
  PushPullAnswer answer;
  EXPECT_FALSE(server.Serve(s.request, &answer));
  EXPECT_EQ(shard->missing_blocks(), 1u);  // untouched: no fault was taken
}

TEST_F(Served, APushOnlyOrPullOnlyRequestAnswersOnlyThat) {
  Step push(1);
  push.request.pulls.clear();
  PushPullAnswer answer;
  ASSERT_TRUE(server.Serve(push.request, &answer));
  EXPECT_TRUE(answer.has_ack);
  EXPECT_FALSE(answer.has_rows);
  Step pull(2);
  pull.request.parts.clear();
  ASSERT_TRUE(server.Serve(pull.request, &answer));
  EXPECT_FALSE(answer.has_ack);
  EXPECT_TRUE(answer.has_rows);
  EXPECT_EQ(server.LastSeq(3), 1);
}

TEST(ShardServer, MutationsReachTheForwarderWithTheWorkersSeq) {
  auto shard = std::make_shared<EmbeddingShard>(Config());
  // server 0 of a (2, 1) code over 3 servers; its holders are never connected, so nothing is durable
  auto forwarder = std::make_shared<DeltaForwarder>(
      0, 3, 2, 1, std::vector<DeltaForwarder::Table>{{"t", shard->block_slots(), shard->layout().bytes()}});
  ShardServer server(0);
  server.SetTable("t", shard);
  server.SetNative(true, forwarder);
  Step s(9);
  PushPullAnswer answer;
  ASSERT_TRUE(server.Serve(s.request, &answer));
  const DeltaForwarder::Progress p = forwarder->progress();
  EXPECT_EQ(p.seq, 2);  // the push, then the pull's insert of key 8
  EXPECT_EQ(p.worker_seqs.at(3), 9);
  EXPECT_EQ(answer.durable, forwarder->DurableSeq(3));
  EXPECT_EQ(answer.durable, 0);
  forwarder->Close();
}

TEST_F(Served, StalePullsSendWhatTheCopiesLackAndEverythingFromAnotherEpoch) {
  server.SetEpoch(41);
  std::vector<int64_t> cached{1, 2, 9};
  Step first(1);
  PushPullAnswer answer;
  ASSERT_TRUE(server.Serve(first.request, &answer));  // rows 1, 2 pushed once, 2 and 8 pulled
  std::vector<int32_t> clocks(3);
  shard->Clocks(cached.data(), 3, clocks.data());  // 9 is missing: -1
  std::vector<int32_t> known{clocks[0], clocks[1], -1};
  Step second(2, 2);
  second.request.pulls.clear();
  second.request.parts.clear();
  second.request.stale_call = true;
  second.request.epoch = 41;
  second.request.stale.push_back({"t", cached.data(), cached.size(), known.data(), 0});
  ASSERT_TRUE(server.Serve(second.request, &answer));
  ASSERT_TRUE(answer.has_stale);
  EXPECT_EQ(answer.epoch, 41);
  ASSERT_EQ(answer.stale.size(), 1u);
  const PushPullAnswer::StaleRows& got = answer.stale[0];
  EXPECT_EQ(got.sent, 1u);  // only key 9 (inserted now): the copies of 1 and 2 are current
  EXPECT_EQ(std::vector<uint8_t>(got.sent_mask.get(), got.sent_mask.get() + 3), (std::vector<uint8_t>{0, 0, 1}));
  EXPECT_EQ(got.table_rows, shard->size());
  EXPECT_EQ(got.rows.floats, 2u);
  second.request.epoch = 40;  // copies from another epoch: all sent
  ASSERT_TRUE(server.Serve(second.request, &answer));
  EXPECT_EQ(answer.stale[0].sent, 3u);
}

// Two tables of dim 2 with their own optimizers and seeds, and a group part and pull over both.
struct Grouped : ::testing::Test {
  static ShardConfig Sgd() {
    ShardConfig c = Config();
    c.optimizer.kind = OptimizerKind::kSGD;
    c.seed = 11;
    return c;
  }
  std::shared_ptr<EmbeddingShard> a = std::make_shared<EmbeddingShard>(Config());
  std::shared_ptr<EmbeddingShard> b = std::make_shared<EmbeddingShard>(Sgd());
  std::shared_ptr<EmbeddingShard> twin_a = std::make_shared<EmbeddingShard>(Config());
  std::shared_ptr<EmbeddingShard> twin_b = std::make_shared<EmbeddingShard>(Sgd());
  ShardServer server{0};
  ShardServer twin{0};                       // the same step as the tables' own parts and pulls
  std::vector<int64_t> keys{1, 4, 9, 1, 2};  // a: 1, 4, 9; b: 1, 2 (the same key in two tables: two rows)
  std::vector<float> grads{0.5f, -1, 2, 3, 0.25f, 1, -2, 0.5f, 1.5f, 1};
  std::vector<int64_t> offsets{0, 3, 5};

  void SetUp() override {
    server.SetTable("a", a);
    server.SetTable("b", b);
    twin.SetTable("a", twin_a);
    twin.SetTable("b", twin_b);
    server.SetNative(true, nullptr);
    twin.SetNative(true, nullptr);
  }

  PushPullRequest Group(int64_t first_seq, int64_t step) {
    PushPullRequest r;
    r.step = step;
    r.worker = 1;
    PushPullGroupPart part;
    part.tables = {"a", "b"};
    part.first_seq = first_seq;
    part.dim = 2;
    part.offsets = offsets.data();
    part.keys = keys.data();
    part.n = keys.size();
    part.grads = grads.data();
    r.group_parts.push_back(part);
    PushPullGroupPull pull;
    pull.tables = {"a", "b"};
    pull.dim = 2;
    pull.offsets = offsets.data();
    pull.keys = keys.data();
    pull.n = keys.size();
    r.group_pulls.push_back(pull);
    return r;
  }

  PushPullRequest Parts(int64_t first_seq, int64_t step) {
    PushPullRequest r;
    r.step = step;
    r.worker = 1;
    r.parts.push_back({"a", first_seq, keys.data(), 3, grads.data(), 2, nullptr});
    r.parts.push_back({"b", first_seq + 1, keys.data() + 3, 2, grads.data() + 6, 2, nullptr});
    r.pulls.push_back({"a", keys.data(), 3});
    r.pulls.push_back({"b", keys.data() + 3, 2});
    return r;
  }
};

TEST_F(Grouped, AGroupPartIsEachTablesOwnPartAndAGroupPullOneArray) {
  for (int64_t step = 1; step <= 3; ++step) {
    PushPullAnswer got, expected;
    ASSERT_TRUE(server.Serve(Group(2 * step - 1, step), &got));
    ASSERT_TRUE(twin.Serve(Parts(2 * step - 1, step), &expected));
    EXPECT_EQ(got.seq, 2 * step);  // the group's last table's seq
    EXPECT_EQ(got.seq, expected.seq);
    ASSERT_EQ(got.rows.size(), 1u);  // one array for the group
    ASSERT_EQ(got.rows[0].floats, 10u);
    EXPECT_EQ(got.rows[0].dim, 2u);
    std::vector<float> concatenated(expected.rows[0].data.get(), expected.rows[0].data.get() + 6);
    concatenated.insert(concatenated.end(), expected.rows[1].data.get(), expected.rows[1].data.get() + 4);
    EXPECT_EQ(std::vector<float>(got.rows[0].data.get(), got.rows[0].data.get() + 10), concatenated);
  }
  EXPECT_EQ(Rows(*a, {1, 4, 9}), Rows(*twin_a, {1, 4, 9}));
  EXPECT_EQ(Rows(*b, {1, 2}), Rows(*twin_b, {1, 2}));
  EXPECT_NE(Rows(*a, {1}), Rows(*b, {1}));  // their own optimizers and seeds
  EXPECT_EQ(server.LastSeq(1), 6);
  const ShardServer::Counters c = server.counters(), e = twin.counters();
  EXPECT_EQ(c.pushes, e.pushes);
  EXPECT_EQ(c.keys_pushed, e.keys_pushed);
  EXPECT_EQ(c.keys_pulled, e.keys_pulled);
  EXPECT_EQ(c.bytes_in, e.bytes_in);
  EXPECT_EQ(c.bytes_out, e.bytes_out);
}

TEST_F(Grouped, AReplayedGroupAppliesOnlyTheTablesNotAppliedYet) {
  PushPullAnswer answer;
  PushPullRequest only_a = Parts(1, 1);
  only_a.parts.pop_back();  // table a's part (seq 1) arrived before, b's (seq 2) did not
  only_a.pulls.clear();
  ASSERT_TRUE(server.Serve(only_a, &answer));
  ASSERT_TRUE(server.Serve(Group(1, 1), &answer));  // the group's replay: a skipped, b applied
  ASSERT_TRUE(twin.Serve(Parts(1, 1), &answer));
  EXPECT_EQ(Rows(*a, {1, 4, 9}), Rows(*twin_a, {1, 4, 9}));
  EXPECT_EQ(Rows(*b, {1, 2}), Rows(*twin_b, {1, 2}));
  EXPECT_EQ(server.counters().pushes, 2u);
  EXPECT_EQ(server.LastSeq(1), 2);
}

TEST_F(Grouped, DeclinesAGroupTheGeneralPathServesAndChangesNothing) {
  std::vector<std::pair<std::string, PushPullRequest>> cases;
  PushPullRequest r = Group(1, 1);
  r.group_parts[0].tables[1] = "u";
  cases.emplace_back("unknown table in a part", r);
  r = Group(1, 1);
  r.group_pulls[0].tables[0] = "u";
  cases.emplace_back("unknown table in a pull", r);
  r = Group(1, 1);
  r.group_parts[0].dim = 1;
  r.group_parts[0].n = 10;
  cases.emplace_back("another dim", r);
  r = Group(1, 1);
  r.group_pulls[0].dim = 1;
  cases.emplace_back("another dim in a pull", r);
  r = Group(-1, 1);
  cases.emplace_back("negative seq", r);
  std::vector<float> nan = grads;
  nan[9] = std::numeric_limits<float>::quiet_NaN();
  r = Group(1, 1);
  r.group_parts[0].grads = nan.data();
  cases.emplace_back("NaN in b's part", r);
  for (const auto& [why, request] : cases) {
    PushPullAnswer answer;
    EXPECT_FALSE(server.Serve(request, &answer)) << why;
  }
  EXPECT_EQ(a->size() + b->size(), 0u);
  EXPECT_EQ(server.counters().requests, 0u);
}

TEST(ShardServer, AGroupsMutationsReachTheForwarderWithEachTablesSeq) {
  auto a = std::make_shared<EmbeddingShard>(Config());
  auto b = std::make_shared<EmbeddingShard>(Config());
  auto forwarder = std::make_shared<DeltaForwarder>(
      0, 3, 2, 1,
      std::vector<DeltaForwarder::Table>{{"a", a->block_slots(), a->layout().bytes()},
                                         {"b", b->block_slots(), b->layout().bytes()}});
  ShardServer server(0);
  server.SetTable("a", a);
  server.SetTable("b", b);
  server.SetNative(true, forwarder);
  std::vector<int64_t> keys{1, 2}, offsets{0, 1, 2};
  std::vector<float> grads{1, 2, 3, 4};
  PushPullRequest r;
  r.step = 1;
  r.worker = 4;
  r.group_parts.push_back({{"a", "b"}, 7, 2, offsets.data(), keys.data(), keys.size(), grads.data()});
  PushPullAnswer answer;
  ASSERT_TRUE(server.Serve(r, &answer));
  const DeltaForwarder::Progress p = forwarder->progress();
  EXPECT_EQ(p.seq, 2);                // one mutation per table
  EXPECT_EQ(p.worker_seqs.at(4), 8);  // b's seq: the group's first + 1
  EXPECT_EQ(answer.seq, 8);
  forwarder->Close();
}

TEST(ShardServer, SeqsOnlyRise) {
  ShardServer server(0);
  server.NoteSeq(1, 4);
  server.NoteSeq(1, 2);
  server.NoteSeq(2, 0);
  EXPECT_EQ(server.LastSeq(1), 4);
  EXPECT_EQ(server.LastSeq(5), 0);
  EXPECT_EQ(server.Seqs(), (WorkerSeqs{{1, 4}, {2, 0}}));
}

}  // namespace
}  // namespace xdl_ec

#include "xdl_ec/push_pull_message.h"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace xdl_ec {
namespace {

MessagePart Part(const std::string& bytes) { return {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}; }

template <typename T>
MessagePart Part(const std::vector<T>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(T)};
}

struct Sample {
  std::vector<int64_t> keys{3, 7, 3};
  std::vector<float> grads{1, 2, 3, 4, 5, 6};
  std::vector<uint32_t> repeats{1, 2, 1};
  std::vector<int64_t> pull_keys{9, 10};
  PushPullRequest request;
  std::vector<MessagePart> buffers;

  Sample() {
    request.step = 12;
    request.worker = 2;
    request.participants = 1;
    request.parts.push_back({"emb", 41, keys.data(), keys.size(), grads.data(), 2, repeats.data()});
    request.parts.push_back({"wide", 42, keys.data(), keys.size(), grads.data(), 2, nullptr});
    request.pulls.push_back({"emb", pull_keys.data(), pull_keys.size()});
    buffers = {Part(keys), Part(grads), Part(repeats), Part(keys), Part(grads), Part(pull_keys)};
  }
};

TEST(PushPullMessage, RequestRoundTrips) {
  Sample s;
  const std::string head = PushPullMessage::RequestHead(s.request);
  ASSERT_TRUE(PushPullMessage::IsRequest(Part(head)));
  EXPECT_FALSE(PushPullMessage::IsAnswer(Part(head)));
  const PushPullRequest got = PushPullMessage::ParseRequest(Part(head), s.buffers);
  EXPECT_EQ(got.step, 12);
  EXPECT_EQ(got.worker, 2);
  EXPECT_EQ(got.participants, 1);
  ASSERT_EQ(got.parts.size(), 2u);
  EXPECT_EQ(got.parts[0].table, "emb");
  EXPECT_EQ(got.parts[0].seq, 41);
  EXPECT_EQ(got.parts[0].n, 3u);
  EXPECT_EQ(got.parts[0].dim, 2u);
  EXPECT_EQ(got.parts[0].keys, s.keys.data());  // in place: no copy
  EXPECT_EQ(got.parts[0].grads, s.grads.data());
  EXPECT_EQ(got.parts[0].repeats, s.repeats.data());
  EXPECT_EQ(got.parts[1].table, "wide");
  EXPECT_EQ(got.parts[1].repeats, nullptr);
  ASSERT_EQ(got.pulls.size(), 1u);
  EXPECT_EQ(got.pulls[0].table, "emb");
  EXPECT_EQ(got.pulls[0].n, 2u);
  EXPECT_EQ(got.pulls[0].keys, s.pull_keys.data());
}

TEST(PushPullMessage, AStaleCallRoundTrips) {
  Sample s;
  std::vector<int64_t> cached{4, 5, 6};
  std::vector<int32_t> known{-1, 7, 2};
  s.request.stale_call = true;
  s.request.epoch = 1234567;
  s.request.stale.push_back({"emb", cached.data(), cached.size(), known.data(), 3});
  s.buffers.push_back(Part(cached));
  s.buffers.push_back(Part(known));
  const std::string head = PushPullMessage::RequestHead(s.request);
  const PushPullRequest got = PushPullMessage::ParseRequest(Part(head), s.buffers);
  EXPECT_TRUE(got.stale_call);
  EXPECT_EQ(got.epoch, 1234567);
  ASSERT_EQ(got.stale.size(), 1u);
  EXPECT_EQ(got.stale[0].table, "emb");
  EXPECT_EQ(got.stale[0].n, 3u);
  EXPECT_EQ(got.stale[0].keys, cached.data());
  EXPECT_EQ(got.stale[0].known, known.data());
  EXPECT_EQ(got.stale[0].staleness, 3u);
  std::vector<MessagePart> short_known = s.buffers;
  short_known.back().size -= 4;
  EXPECT_THROW(PushPullMessage::ParseRequest(Part(head), short_known), std::invalid_argument);
  PushPullRequest plain = s.request;
  plain.stale_call = false;  // stale pulls only in a push_pull_stale call
  EXPECT_THROW(PushPullMessage::RequestHead(plain), std::invalid_argument);
}

TEST(PushPullMessage, APickleIsNeitherForm) {
  const std::string pickle("\x80\x05\x95\x10", 4);
  EXPECT_FALSE(PushPullMessage::IsRequest(Part(pickle)));
  EXPECT_FALSE(PushPullMessage::IsAnswer(Part(pickle)));
  EXPECT_FALSE(PushPullMessage::IsRequest(Part(std::string("XP"))));
}

TEST(PushPullMessage, MalformedRequestsAreRefusedWithTheirReason) {
  Sample s;
  const std::string head = PushPullMessage::RequestHead(s.request);
  auto fails = [&](const std::string& h, const std::vector<MessagePart>& b, const std::string& why) {
    try {
      PushPullMessage::ParseRequest(Part(h), b);
      ADD_FAILURE() << "parsed: " << why;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  // a head cut anywhere, or with a byte more
  for (size_t cut = 4; cut < head.size(); ++cut) {
    EXPECT_THROW(PushPullMessage::ParseRequest(Part(head.substr(0, cut)), s.buffers), std::invalid_argument);
  }
  fails(head + "x", s.buffers, "bytes after its last field");
  fails("XPQ1" + head.substr(4), s.buffers, "magic");
  // buffers missing, or one of the wrong size
  fails(head, {s.buffers.begin(), s.buffers.end() - 1}, "5 buffers where its head announces 6");
  std::vector<MessagePart> short_grads = s.buffers;
  short_grads[1].size -= 4;
  fails(head, short_grads, "the grads of part 0 (table 'emb') has 20 bytes, not 24");
  std::vector<MessagePart> odd_keys = s.buffers;
  odd_keys[5].size -= 1;
  fails(head, odd_keys, "are not whole int64s");
  std::vector<MessagePart> misaligned = s.buffers;
  std::vector<uint8_t> shifted(s.keys.size() * 8 + 1);
  misaligned[3] = {shifted.data() + 1, s.keys.size() * 8};
  fails(head, misaligned, "not aligned");
  // counts and names over their limits
  std::string many = head;
  const uint32_t huge = 1u << 20;
  std::memcpy(&many[4 + 8 + 4 + 4], &huge, 4);
  fails(many, s.buffers, "1048576 parts, over 1024");
  // magic, step, worker, participants, parts, pulls, flags, epoch, stale pulls; then the first part's seq, dim
  constexpr size_t kCallFlags = 4 + 8 + 4 + 4 + 4 + 4, kStale = kCallFlags + 4 + 8, kFirstPart = kStale + 4;
  std::string flags = head;
  const uint32_t bad_flags = 6;
  std::memcpy(&flags[kFirstPart + 8 + 4], &bad_flags, 4);
  fails(flags, s.buffers, "flags 6");
  std::string call = head;
  std::memcpy(&call[kCallFlags], &bad_flags, 4);
  fails(call, s.buffers, "flags 6");
  std::string stray = head;
  const uint32_t one = 1;
  std::memcpy(&stray[kStale], &one, 4);
  fails(stray, s.buffers, "stale pulls in a push_pull call");
  PushPullRequest long_name = s.request;
  long_name.pulls[0].table = std::string(PushPullMessage::kMaxNameBytes + 1, 'n');
  EXPECT_THROW(PushPullMessage::RequestHead(long_name), std::invalid_argument);
}

// Sample's request with a group part over tables "a" and "b" (offsets 0, 2, 3) and a group pull over "a" alone.
struct GroupSample : Sample {
  std::vector<int64_t> offsets{0, 2, 3};
  std::vector<int64_t> pull_offsets{0, 2};

  GroupSample() {
    PushPullGroupPart part;
    part.tables = {"a", "b"};
    part.first_seq = 43;
    part.dim = 2;
    part.offsets = offsets.data();
    part.keys = keys.data();
    part.n = keys.size();
    part.grads = grads.data();
    request.group_parts.push_back(part);
    PushPullGroupPull pull;
    pull.tables = {"a"};
    pull.dim = 2;
    pull.offsets = pull_offsets.data();
    pull.keys = pull_keys.data();
    pull.n = pull_keys.size();
    request.group_pulls.push_back(pull);
    for (const MessagePart& b : {Part(offsets), Part(keys), Part(grads), Part(pull_offsets), Part(pull_keys)})
      buffers.push_back(b);
  }
};

TEST(PushPullMessage, GroupPartsAndPullsRoundTrip) {
  GroupSample s;
  const std::string head = PushPullMessage::RequestHead(s.request);
  const PushPullRequest got = PushPullMessage::ParseRequest(Part(head), s.buffers);
  ASSERT_EQ(got.parts.size(), 2u);  // the plain parts and pulls as before
  ASSERT_EQ(got.pulls.size(), 1u);
  ASSERT_EQ(got.group_parts.size(), 1u);
  const PushPullGroupPart& part = got.group_parts[0];
  EXPECT_EQ(part.tables, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(part.first_seq, 43);
  EXPECT_EQ(part.dim, 2u);
  EXPECT_EQ(part.n, 3u);
  EXPECT_EQ(part.offsets, s.offsets.data());  // in place
  EXPECT_EQ(part.keys, s.keys.data());
  EXPECT_EQ(part.grads, s.grads.data());
  ASSERT_EQ(got.group_pulls.size(), 1u);
  EXPECT_EQ(got.group_pulls[0].tables, (std::vector<std::string>{"a"}));
  EXPECT_EQ(got.group_pulls[0].dim, 2u);
  EXPECT_EQ(got.group_pulls[0].n, 2u);
  EXPECT_EQ(got.group_pulls[0].keys, s.pull_keys.data());
  // a request without groups keeps its old head, byte for byte (no group counts)
  Sample plain;
  // + the group counts, the group part (first seq, dim, tables, two names of one byte), the pull (dim, tables, a name)
  EXPECT_EQ(PushPullMessage::RequestHead(plain.request).size() + 8 + (8 + 4 + 4 + 5 + 5) + (4 + 4 + 5), head.size());
}

TEST(PushPullMessage, MalformedGroupsAreRefusedWithTheirReason) {
  auto fails = [](GroupSample& s, const std::string& why) {
    try {
      const std::string head = PushPullMessage::RequestHead(s.request);
      PushPullMessage::ParseRequest(Part(head), s.buffers);
      ADD_FAILURE() << "parsed: " << why;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  {
    GroupSample s;
    s.offsets = {0, 3, 2};
    fails(s, "the offsets of group part 0 (table 'a' and 1 more) decrease at table 2");
  }
  {
    GroupSample s;
    s.offsets = {0, 1, 2};
    fails(s, "end at 2, not at its 3 keys");
  }
  {
    GroupSample s;
    s.offsets = {1, 2, 3};
    fails(s, "do not start at 0");
  }
  {
    GroupSample s;
    s.pull_offsets = {0, 1, 2};  // a table more than the pull names
    s.buffers[9] = Part(s.pull_offsets);
    fails(s, "the offsets of group pull 0 (table 'a' and 0 more) has 24 bytes, not 16");
  }
  {
    GroupSample s;
    s.request.group_parts[0].tables.clear();
    fails(s, "a group of 0 tables");
  }
  {
    GroupSample s;
    s.buffers.pop_back();
    fails(s, "10 buffers where its head announces 11");
  }
}

TEST(PushPullMessage, AnswerRoundTrips) {
  PushPullAnswer a;
  a.has_ack = true;
  a.server = 4;
  a.worker = 1;
  a.seq = 77;
  a.step = 9;
  a.applied = true;
  a.durable = 70;
  a.has_rows = true;
  a.rows.resize(3);
  a.rows[1].dim = 16;
  const std::string head = PushPullMessage::AnswerHead(a);
  ASSERT_TRUE(PushPullMessage::IsAnswer(Part(head)));
  const PushPullAnswer got = PushPullMessage::ParseAnswer(Part(head), 3);
  EXPECT_TRUE(got.has_ack && got.applied && got.has_rows);
  EXPECT_EQ(got.server, 4);
  EXPECT_EQ(got.worker, 1);
  EXPECT_EQ(got.seq, 77);
  EXPECT_EQ(got.step, 9);
  EXPECT_EQ(got.durable, 70);
  ASSERT_EQ(got.rows.size(), 3u);
  EXPECT_EQ(got.rows[1].dim, 16u);
  EXPECT_THROW(PushPullMessage::ParseAnswer(Part(head), 2), std::invalid_argument);
  PushPullAnswer stale;  // a push_pull_stale answer: three buffers per stale pull
  stale.has_stale = true;
  stale.epoch = 99;
  stale.stale.resize(2);
  stale.stale[1].rows.dim = 8;
  stale.stale[1].sent = 5;
  stale.stale[1].table_rows = uint64_t{1} << 40;
  const PushPullAnswer stale_got = PushPullMessage::ParseAnswer(Part(PushPullMessage::AnswerHead(stale)), 6);
  EXPECT_TRUE(stale_got.has_stale);
  EXPECT_EQ(stale_got.epoch, 99);
  ASSERT_EQ(stale_got.stale.size(), 2u);
  EXPECT_EQ(stale_got.stale[1].rows.dim, 8u);
  EXPECT_EQ(stale_got.stale[1].sent, 5u);
  EXPECT_EQ(stale_got.stale[1].table_rows, uint64_t{1} << 40);
  EXPECT_THROW(PushPullMessage::ParseAnswer(Part(PushPullMessage::AnswerHead(stale)), 5), std::invalid_argument);
  PushPullAnswer bare;  // no push, no pull
  const PushPullAnswer none = PushPullMessage::ParseAnswer(Part(PushPullMessage::AnswerHead(bare)), 0);
  EXPECT_FALSE(none.has_ack || none.applied || none.has_rows);
  EXPECT_THROW(PushPullMessage::ParseAnswer(Part(head.substr(0, head.size() - 1)), 3), std::invalid_argument);
}

}  // namespace
}  // namespace xdl_ec

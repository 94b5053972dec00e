// The native wire form of a worker's step request to one server (ParameterServer.push_pull: the push of step t
// and the pull of step t + 1's keys; push_pull_stale: also a caching worker's pulls of the rows its copies lack)
// and of its answer, so a server can serve it without the interpreter
// (ShardServer::Serve). Either travels as one LinkSession message whose first part is the head below where a
// pickle would be (a pickle starts with 0x80, these with their magic) and whose buffers are the arrays.
//
// Request head, little-endian:
//   "XPP1" | step i64 | worker i32 | participants i32 | parts u32 | pulls u32 | flags u32 | epoch i64 | stale u32
//   flags: bit 0 a push_pull_stale call (then epoch: the server epoch the worker's copies came from), bit 1 group
//   parts and group pulls follow (then: group parts u32 | group pulls u32 after the stale pulls' count)
//   per part: seq i64 | dim u32 | flags u32 (bit 0: repeats) | name bytes u32 | name
//   per pull: name bytes u32 | name
//   per stale pull: staleness u32 | name bytes u32 | name
//   per group part: first seq i64 | dim u32 | tables u32 | per table: name bytes u32 | name
//   per group pull: dim u32 | tables u32 | per table: name bytes u32 | name
// Request buffers: per part its keys (int64[n]), grads (float32[n * dim]) and, when flagged, repeats
// (uint32[n]); then per pull its keys (int64[n]); then per stale pull its keys (int64[n]) and the clocks of the
// worker's copies (int32[n], -1: none); then per group part its offsets (int64[tables + 1]), keys (int64[n]) and
// grads (float32[n * dim]); then per group pull its offsets and keys.
//
// A group part (issue #49) is the push of several tables of one dim (a table group) in one array: table t's keys
// are keys[offsets[t]..offsets[t + 1]) and its seq is first seq + t (first seq 0: every table's is 0, none), so each
// table keeps the seq, the replay check and the forwarded mutations its own part would have; the server loops over the
// tables natively. A group pull answers with ONE rows buffer (its tables' rows in its keys' order), after the plain
// pulls' buffers.
//
// Answer head:
//   "XPA1" | server i32 | worker i32 | seq i64 | step i64 | durable i64 | flags u32 | pulls u32 | epoch i64 |
//   stale u32
//   flags: bit 0 an ack (the request pushed), bit 1 applied, bit 2 rows (the request pulled), bit 3 stale
//   answers (a push_pull_stale call; epoch: the server's)
//   per pull: dim u32
//   per stale pull: dim u32 | rows sent u32 | rows the table holds here u64
// Answer buffers: per pull its rows (float32[n * dim]); per stale pull the rows sent (float32[sent * dim]), every
// key's clock (int32[n]) and which keys were sent (uint8[n], 0 or 1).
//
// Parsing checks sizes and alignment only; what the values mean (known tables, dims, finite gradients) is
// the server's to check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xdl_ec {

struct PushPullPart {
  std::string table;
  int64_t seq = 0;
  const int64_t* keys = nullptr;
  size_t n = 0;
  const float* grads = nullptr;  // n * dim
  uint32_t dim = 0;
  const uint32_t* repeats = nullptr;  // n, or null
};

struct PushPullPull {
  std::string table;
  const int64_t* keys = nullptr;
  size_t n = 0;
};

// A caching worker's pull (EmbeddingShard::PullStale): the rows of keys whose copy is more than `staleness`
// versions behind its clock in `known`.
struct PushPullStalePull {
  std::string table;
  const int64_t* keys = nullptr;
  size_t n = 0;
  const int32_t* known = nullptr;  // n
  uint32_t staleness = 0;
};

// A table group's push: table t's keys are keys[offsets[t]..offsets[t + 1]), its seq first_seq + t (0 when
// first_seq is 0).
struct PushPullGroupPart {
  std::vector<std::string> tables;
  int64_t first_seq = 0;
  uint32_t dim = 0;
  const int64_t* offsets = nullptr;  // tables.size() + 1, from 0 to n, non-decreasing
  const int64_t* keys = nullptr;
  size_t n = 0;
  const float* grads = nullptr;  // n * dim
};

// A table group's pull: its rows come back as one array, [n, dim], in the keys' order.
struct PushPullGroupPull {
  std::vector<std::string> tables;
  uint32_t dim = 0;
  const int64_t* offsets = nullptr;  // tables.size() + 1
  const int64_t* keys = nullptr;
  size_t n = 0;
};

// A request; the arrays point into the message it was parsed from (or the caller's arrays it is encoded from).
struct PushPullRequest {
  int64_t step = 0;
  int32_t worker = 0;
  int32_t participants = 1;
  std::vector<PushPullPart> parts;
  std::vector<PushPullPull> pulls;
  bool stale_call = false;  // push_pull_stale: the answer carries `stale`'s answers and the server's epoch
  int64_t epoch = 0;
  std::vector<PushPullStalePull> stale;
  std::vector<PushPullGroupPart> group_parts;  // applied after `parts` (their seqs follow theirs)
  std::vector<PushPullGroupPull> group_pulls;  // answered after `pulls`
};

struct PushPullAnswer {
  bool has_ack = false;  // the request pushed (PushAck's fields below)
  int32_t server = 0;
  int32_t worker = 0;
  int64_t seq = 0;
  int64_t step = 0;
  bool applied = false;
  int64_t durable = 0;
  bool has_rows = false;  // the request pulled
  struct Rows {
    std::unique_ptr<float[]> data;
    size_t floats = 0;
    uint32_t dim = 0;
  };
  std::vector<Rows> rows;  // per pull, then per group pull
  bool has_stale = false;  // answers a push_pull_stale call
  int64_t epoch = 0;       // the server's
  struct StaleRows {
    Rows rows;  // of the keys sent, rows.floats = sent * dim
    uint32_t sent = 0;
    std::unique_ptr<int32_t[]> clocks;     // n
    std::unique_ptr<uint8_t[]> sent_mask;  // n
    size_t n = 0;
    uint64_t table_rows = 0;
  };
  std::vector<StaleRows> stale;
};

// A byte range of a message (its head, or one of its buffers).
struct MessagePart {
  const uint8_t* data;
  size_t size;
};

class PushPullMessage {
 public:
  static constexpr size_t kMagicBytes = 4;
  static constexpr size_t kMaxNameBytes = 1024;
  static constexpr size_t kMaxParts = 1024;  // per request, parts, pulls and stale pulls each (and group parts,
                                             // group pulls, and the tables of each)

  // Whether a message's first part is a request (or an answer) head: its magic.
  static bool IsRequest(MessagePart head);
  static bool IsAnswer(MessagePart head);

  // The head of `request` (its arrays go as the buffers, in the order above). Throws std::invalid_argument
  // for more than kMaxParts parts or pulls, or a table name over kMaxNameBytes.
  static std::string RequestHead(const PushPullRequest& request);
  // The request a head and its buffers carry, its arrays pointing into `buffers` (which must outlive it).
  // Throws std::invalid_argument naming what is malformed: the magic, a count or a name over its limit, a
  // head of another length than its fields, a buffer count or size that does not match, an array not
  // aligned to its type.
  static PushPullRequest ParseRequest(MessagePart head, const std::vector<MessagePart>& buffers);

  static std::string AnswerHead(const PushPullAnswer& answer);
  // An answer's fields; its rows have their dims (and its stale answers their dims, sent and table rows) but no
  // data, their buffers being the message's (ParseAnswer checks their count: one per pull when the answer has
  // rows, three per stale pull). Throws std::invalid_argument.
  static PushPullAnswer ParseAnswer(MessagePart head, size_t buffers);
};

}  // namespace xdl_ec

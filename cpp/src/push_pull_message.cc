#include "xdl_ec/push_pull_message.h"

#include <cstring>
#include <stdexcept>

namespace xdl_ec {
namespace {

constexpr char kRequestMagic[] = "XPP1";
constexpr char kAnswerMagic[] = "XPA1";
constexpr uint32_t kPartRepeats = 1;
constexpr uint32_t kRequestStale = 1, kRequestGroups = 2;
constexpr uint32_t kAnswerAck = 1, kAnswerApplied = 2, kAnswerRows = 4, kAnswerStale = 8;

template <typename T>
void Put(std::string& out, T value) {  // little-endian hosts only (x86-64, aarch64), as the rest of the wire
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void PutName(std::string& out, const std::string& name) {
  if (name.size() > PushPullMessage::kMaxNameBytes) {
    throw std::invalid_argument("push_pull: a table name of " + std::to_string(name.size()) + " bytes, over " +
                                std::to_string(PushPullMessage::kMaxNameBytes));
  }
  Put<uint32_t>(out, static_cast<uint32_t>(name.size()));
  out.append(name);
}

// Reads a head front to back; every read checks the bytes left.
class Reader {
 public:
  Reader(MessagePart head, const char* what) : at_(head.data), end_(head.data + head.size), what_(what) {}

  template <typename T>
  T Get() {
    T value;
    Need(sizeof(T));
    std::memcpy(&value, at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string Name() {
    const uint32_t size = Get<uint32_t>();
    if (size > PushPullMessage::kMaxNameBytes) Fail("a table name of " + std::to_string(size) + " bytes");
    Need(size);
    std::string name(reinterpret_cast<const char*>(at_), size);
    at_ += size;
    return name;
  }
  void End() const {
    if (at_ != end_) Fail(std::to_string(end_ - at_) + " bytes after its last field");
  }
  [[noreturn]] void Fail(const std::string& why) const {
    throw std::invalid_argument(std::string("push_pull ") + what_ + " head: " + why);
  }

 private:
  void Need(size_t bytes) const {
    if (static_cast<size_t>(end_ - at_) < bytes) Fail("it ends inside a field");
  }
  const uint8_t* at_;
  const uint8_t* end_;
  const char* what_;
};

uint32_t Count(Reader& reader, const char* what) {
  const uint32_t count = reader.Get<uint32_t>();
  if (count > PushPullMessage::kMaxParts) {
    reader.Fail(std::to_string(count) + " " + what + ", over " + std::to_string(PushPullMessage::kMaxParts));
  }
  return count;
}

template <typename T>
const T* Array(const MessagePart& buffer, size_t count, const std::string& what) {
  if (buffer.size != count * sizeof(T)) {
    throw std::invalid_argument("push_pull request: " + what + " has " + std::to_string(buffer.size) + " bytes, not " +
                                std::to_string(count * sizeof(T)));
  }
  if (reinterpret_cast<uintptr_t>(buffer.data) % alignof(T) != 0) {
    throw std::invalid_argument("push_pull request: " + what + " is not aligned to its type");
  }
  return reinterpret_cast<const T*>(buffer.data);
}

// The keys of `which` (e.g. "pull 0 (table 't')"): the whole buffer, as int64s; their count into *n.
const int64_t* KeysOf(const MessagePart& buffer, const std::string& which, size_t* n) {
  if (buffer.size % sizeof(int64_t) != 0) {
    throw std::invalid_argument("push_pull request: the keys of " + which + " are not whole int64s");
  }
  *n = buffer.size / sizeof(int64_t);
  return Array<int64_t>(buffer, *n, "the keys of " + which);
}

// A group's offsets: tables + 1 int64s from 0 to n, non-decreasing.
const int64_t* OffsetsOf(const MessagePart& buffer, size_t tables, const std::string& which) {
  const int64_t* offsets = Array<int64_t>(buffer, tables + 1, "the offsets of " + which);
  if (offsets[0] != 0) throw std::invalid_argument("push_pull request: the offsets of " + which + " do not start at 0");
  for (size_t t = 0; t < tables; ++t) {
    if (offsets[t + 1] < offsets[t]) {
      throw std::invalid_argument("push_pull request: the offsets of " + which + " decrease at table " +
                                  std::to_string(t + 1));
    }
  }
  return offsets;
}

void CheckGroupEnd(const int64_t* offsets, size_t tables, size_t n, const std::string& which) {
  if (static_cast<size_t>(offsets[tables]) != n) {
    throw std::invalid_argument("push_pull request: the offsets of " + which + " end at " +
                                std::to_string(offsets[tables]) + ", not at its " + std::to_string(n) + " keys");
  }
}

void PutTables(std::string& out, const std::vector<std::string>& tables) {
  if (tables.empty() || tables.size() > PushPullMessage::kMaxParts) {
    throw std::invalid_argument("push_pull: a group of " + std::to_string(tables.size()) + " tables (1 to " +
                                std::to_string(PushPullMessage::kMaxParts) + ")");
  }
  Put<uint32_t>(out, static_cast<uint32_t>(tables.size()));
  for (const std::string& name : tables) PutName(out, name);
}

std::vector<std::string> TablesOf(Reader& reader) {
  const uint32_t count = Count(reader, "tables in a group");
  if (count == 0) reader.Fail("a group of no tables");
  std::vector<std::string> tables(count);
  for (std::string& name : tables) name = reader.Name();
  return tables;
}

}  // namespace

bool PushPullMessage::IsRequest(MessagePart head) {
  return head.size >= kMagicBytes && std::memcmp(head.data, kRequestMagic, kMagicBytes) == 0;
}

bool PushPullMessage::IsAnswer(MessagePart head) {
  return head.size >= kMagicBytes && std::memcmp(head.data, kAnswerMagic, kMagicBytes) == 0;
}

std::string PushPullMessage::RequestHead(const PushPullRequest& request) {
  if (request.parts.size() > kMaxParts || request.pulls.size() > kMaxParts || request.stale.size() > kMaxParts) {
    throw std::invalid_argument("push_pull: " + std::to_string(request.parts.size()) + " parts, " +
                                std::to_string(request.pulls.size()) + " pulls and " +
                                std::to_string(request.stale.size()) + " stale pulls, over " +
                                std::to_string(kMaxParts) + " of one");
  }
  if (!request.stale_call && !request.stale.empty()) {
    throw std::invalid_argument("push_pull: stale pulls belong to a push_pull_stale call");
  }
  if (request.group_parts.size() > kMaxParts || request.group_pulls.size() > kMaxParts) {
    throw std::invalid_argument("push_pull: " + std::to_string(request.group_parts.size()) + " group parts and " +
                                std::to_string(request.group_pulls.size()) + " group pulls, over " +
                                std::to_string(kMaxParts) + " of one");
  }
  const bool groups = !request.group_parts.empty() || !request.group_pulls.empty();
  std::string out(kRequestMagic, kMagicBytes);
  Put<int64_t>(out, request.step);
  Put<int32_t>(out, request.worker);
  Put<int32_t>(out, request.participants);
  Put<uint32_t>(out, static_cast<uint32_t>(request.parts.size()));
  Put<uint32_t>(out, static_cast<uint32_t>(request.pulls.size()));
  Put<uint32_t>(out, (request.stale_call ? kRequestStale : 0) | (groups ? kRequestGroups : 0));
  Put<int64_t>(out, request.epoch);
  Put<uint32_t>(out, static_cast<uint32_t>(request.stale.size()));
  if (groups) {
    Put<uint32_t>(out, static_cast<uint32_t>(request.group_parts.size()));
    Put<uint32_t>(out, static_cast<uint32_t>(request.group_pulls.size()));
  }
  for (const PushPullPart& part : request.parts) {
    Put<int64_t>(out, part.seq);
    Put<uint32_t>(out, part.dim);
    Put<uint32_t>(out, part.repeats != nullptr ? kPartRepeats : 0);
    PutName(out, part.table);
  }
  for (const PushPullPull& pull : request.pulls) PutName(out, pull.table);
  for (const PushPullStalePull& pull : request.stale) {
    Put<uint32_t>(out, pull.staleness);
    PutName(out, pull.table);
  }
  for (const PushPullGroupPart& part : request.group_parts) {
    Put<int64_t>(out, part.first_seq);
    Put<uint32_t>(out, part.dim);
    PutTables(out, part.tables);
  }
  for (const PushPullGroupPull& pull : request.group_pulls) {
    Put<uint32_t>(out, pull.dim);
    PutTables(out, pull.tables);
  }
  return out;
}

PushPullRequest PushPullMessage::ParseRequest(MessagePart head, const std::vector<MessagePart>& buffers) {
  if (!IsRequest(head)) throw std::invalid_argument("push_pull request head: no XPP1 magic");
  Reader reader({head.data + kMagicBytes, head.size - kMagicBytes}, "request");
  PushPullRequest request;
  request.step = reader.Get<int64_t>();
  request.worker = reader.Get<int32_t>();
  request.participants = reader.Get<int32_t>();
  const uint32_t parts = Count(reader, "parts");
  const uint32_t pulls = Count(reader, "pulls");
  const uint32_t call = reader.Get<uint32_t>();
  if (call & ~(kRequestStale | kRequestGroups)) reader.Fail("flags " + std::to_string(call));
  request.stale_call = call & kRequestStale;
  request.epoch = reader.Get<int64_t>();
  const uint32_t stale = Count(reader, "stale pulls");
  if (stale != 0 && !request.stale_call) reader.Fail("stale pulls in a push_pull call");
  const uint32_t group_parts = (call & kRequestGroups) ? Count(reader, "group parts") : 0;
  const uint32_t group_pulls = (call & kRequestGroups) ? Count(reader, "group pulls") : 0;
  request.parts.resize(parts);
  std::vector<bool> repeats(parts);
  size_t arrays = 0;
  for (size_t i = 0; i < parts; ++i) {
    PushPullPart& part = request.parts[i];
    part.seq = reader.Get<int64_t>();
    part.dim = reader.Get<uint32_t>();
    const uint32_t flags = reader.Get<uint32_t>();
    if (flags & ~kPartRepeats) reader.Fail("a part's flags " + std::to_string(flags) + " are not 0 or 1");
    repeats[i] = flags & kPartRepeats;
    part.table = reader.Name();
    arrays += repeats[i] ? 3 : 2;
  }
  request.pulls.resize(pulls);
  for (PushPullPull& pull : request.pulls) pull.table = reader.Name();
  request.stale.resize(stale);
  for (PushPullStalePull& pull : request.stale) {
    pull.staleness = reader.Get<uint32_t>();
    pull.table = reader.Name();
  }
  request.group_parts.resize(group_parts);
  for (PushPullGroupPart& part : request.group_parts) {
    part.first_seq = reader.Get<int64_t>();
    part.dim = reader.Get<uint32_t>();
    part.tables = TablesOf(reader);
  }
  request.group_pulls.resize(group_pulls);
  for (PushPullGroupPull& pull : request.group_pulls) {
    pull.dim = reader.Get<uint32_t>();
    pull.tables = TablesOf(reader);
  }
  reader.End();
  arrays += pulls + 2 * static_cast<size_t>(stale) + 3 * static_cast<size_t>(group_parts) +
            2 * static_cast<size_t>(group_pulls);
  if (buffers.size() != arrays) {
    throw std::invalid_argument("push_pull request: " + std::to_string(buffers.size()) +
                                " buffers where its head "
                                "announces " +
                                std::to_string(arrays));
  }
  size_t b = 0;
  for (size_t i = 0; i < request.parts.size(); ++i) {
    PushPullPart& part = request.parts[i];
    const std::string which = "part " + std::to_string(i) + " (table '" + part.table + "')";
    part.keys = KeysOf(buffers[b++], which, &part.n);
    if (part.dim == 0 && part.n != 0) throw std::invalid_argument("push_pull request: " + which + " has dim 0");
    part.grads = Array<float>(buffers[b++], part.n * part.dim, "the grads of " + which);
    if (repeats[i]) part.repeats = Array<uint32_t>(buffers[b++], part.n, "the repeats of " + which);
  }
  for (size_t i = 0; i < request.pulls.size(); ++i) {
    PushPullPull& pull = request.pulls[i];
    pull.keys = KeysOf(buffers[b++], "pull " + std::to_string(i) + " (table '" + pull.table + "')", &pull.n);
  }
  for (size_t i = 0; i < request.stale.size(); ++i) {
    PushPullStalePull& pull = request.stale[i];
    const std::string which = "stale pull " + std::to_string(i) + " (table '" + pull.table + "')";
    pull.keys = KeysOf(buffers[b++], which, &pull.n);
    pull.known = Array<int32_t>(buffers[b++], pull.n, "the known clocks of " + which);
  }
  for (size_t i = 0; i < request.group_parts.size(); ++i) {
    PushPullGroupPart& part = request.group_parts[i];
    const std::string which = "group part " + std::to_string(i) + " (table '" + part.tables[0] + "' and " +
                              std::to_string(part.tables.size() - 1) + " more)";
    part.offsets = OffsetsOf(buffers[b++], part.tables.size(), which);
    part.keys = KeysOf(buffers[b++], which, &part.n);
    CheckGroupEnd(part.offsets, part.tables.size(), part.n, which);
    if (part.dim == 0 && part.n != 0) throw std::invalid_argument("push_pull request: " + which + " has dim 0");
    part.grads = Array<float>(buffers[b++], part.n * part.dim, "the grads of " + which);
  }
  for (size_t i = 0; i < request.group_pulls.size(); ++i) {
    PushPullGroupPull& pull = request.group_pulls[i];
    const std::string which = "group pull " + std::to_string(i) + " (table '" + pull.tables[0] + "' and " +
                              std::to_string(pull.tables.size() - 1) + " more)";
    pull.offsets = OffsetsOf(buffers[b++], pull.tables.size(), which);
    pull.keys = KeysOf(buffers[b++], which, &pull.n);
    CheckGroupEnd(pull.offsets, pull.tables.size(), pull.n, which);
  }
  return request;
}

std::string PushPullMessage::AnswerHead(const PushPullAnswer& answer) {
  std::string out(kAnswerMagic, kMagicBytes);
  Put<int32_t>(out, answer.server);
  Put<int32_t>(out, answer.worker);
  Put<int64_t>(out, answer.seq);
  Put<int64_t>(out, answer.step);
  Put<int64_t>(out, answer.durable);
  Put<uint32_t>(out, (answer.has_ack ? kAnswerAck : 0) | (answer.applied ? kAnswerApplied : 0) |
                         (answer.has_rows ? kAnswerRows : 0) | (answer.has_stale ? kAnswerStale : 0));
  Put<uint32_t>(out, static_cast<uint32_t>(answer.rows.size()));
  Put<int64_t>(out, answer.epoch);
  Put<uint32_t>(out, static_cast<uint32_t>(answer.stale.size()));
  for (const PushPullAnswer::Rows& rows : answer.rows) Put<uint32_t>(out, rows.dim);
  for (const PushPullAnswer::StaleRows& stale : answer.stale) {
    Put<uint32_t>(out, stale.rows.dim);
    Put<uint32_t>(out, stale.sent);
    Put<uint64_t>(out, stale.table_rows);
  }
  return out;
}

PushPullAnswer PushPullMessage::ParseAnswer(MessagePart head, size_t buffers) {
  if (!IsAnswer(head)) throw std::invalid_argument("push_pull answer head: no XPA1 magic");
  Reader reader({head.data + kMagicBytes, head.size - kMagicBytes}, "answer");
  PushPullAnswer answer;
  answer.server = reader.Get<int32_t>();
  answer.worker = reader.Get<int32_t>();
  answer.seq = reader.Get<int64_t>();
  answer.step = reader.Get<int64_t>();
  answer.durable = reader.Get<int64_t>();
  const uint32_t flags = reader.Get<uint32_t>();
  const uint32_t pulls = Count(reader, "pulls");
  answer.epoch = reader.Get<int64_t>();
  const uint32_t stale = Count(reader, "stale pulls");
  answer.rows.resize(pulls);
  for (PushPullAnswer::Rows& rows : answer.rows) rows.dim = reader.Get<uint32_t>();
  answer.stale.resize(stale);
  for (PushPullAnswer::StaleRows& s : answer.stale) {
    s.rows.dim = reader.Get<uint32_t>();
    s.sent = reader.Get<uint32_t>();
    s.table_rows = reader.Get<uint64_t>();
  }
  reader.End();
  if (flags & ~(kAnswerAck | kAnswerApplied | kAnswerRows | kAnswerStale))
    reader.Fail("flags " + std::to_string(flags));
  answer.has_ack = flags & kAnswerAck;
  answer.applied = flags & kAnswerApplied;
  answer.has_rows = flags & kAnswerRows;
  answer.has_stale = flags & kAnswerStale;
  if ((!answer.has_rows && pulls != 0) || (!answer.has_stale && stale != 0)) {
    reader.Fail("pulls or stale pulls its flags do not announce");
  }
  const size_t expected = pulls + 3 * static_cast<size_t>(stale);
  if (buffers != expected) {
    throw std::invalid_argument("push_pull answer: " + std::to_string(buffers) + " buffers where its head announces " +
                                std::to_string(expected));
  }
  return answer;
}

}  // namespace xdl_ec

#include "xdl_ec/forwarded_batch.h"

#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace xdl_ec {

// Wire layout (little-endian):
//   "XFB2", u64 batch count, then per batch:
//     i64 first_seq, i64 seq, u32 stamp count, (i32 worker, i64 seq) * count,
//     u32 update count, (u32 name length, name bytes, u64 update length, ParityUpdate::Serialize bytes) * count.
namespace {
constexpr uint8_t kMagic[4] = {'X', 'F', 'B', '2'};

template <typename T>
void Put(std::vector<uint8_t>& out, T value) {
  for (size_t b = 0; b < sizeof(T); ++b) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * b)));
}

// A bounds-checked cursor: every read names what it was reading when the bytes run out.
class Reader {
 public:
  Reader(const uint8_t* bytes, size_t size) : p_(bytes), end_(bytes + size), begin_(bytes) {}

  template <typename T>
  T Get(const std::string& what) {
    Need(sizeof(T), what);
    uint64_t v = 0;
    for (size_t b = 0; b < sizeof(T); ++b) v |= static_cast<uint64_t>(p_[b]) << (8 * b);
    p_ += sizeof(T);
    return static_cast<T>(v);
  }
  const uint8_t* Take(size_t n, const std::string& what) {
    Need(n, what);
    const uint8_t* at = p_;
    p_ += n;
    return at;
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  size_t position() const { return static_cast<size_t>(p_ - begin_); }

 private:
  void Need(size_t n, const std::string& what) const {
    if (n > left())
      throw std::invalid_argument("ParseBatches: truncated at byte " + std::to_string(position()) + ": " + what +
                                  " needs " + std::to_string(n) + " bytes, " + std::to_string(left()) + " left");
  }
  const uint8_t* p_;
  const uint8_t* end_;
  const uint8_t* begin_;
};

// Smallest encodings, so a hostile count is refused before anything is reserved for it.
constexpr size_t kMinBatchBytes = 8 + 8 + 4 + 4;
constexpr size_t kStampEntryBytes = 4 + 8;
constexpr size_t kMinUpdateBytes = 4 + 8;
}  // namespace

size_t ForwardedBatch::delta_bytes() const {
  size_t total = 0;
  for (const auto& [table, update] : updates) total += update.delta_bytes();
  return total;
}

std::vector<uint8_t> SerializeBatches(const std::vector<BatchPtr>& batches) {
  std::vector<uint8_t> out;
  size_t estimate = 4 + 8;
  for (size_t b = 0; b < batches.size(); ++b) {
    if (!batches[b]) throw std::invalid_argument("SerializeBatches: batch " + std::to_string(b) + " is null");
    if (batches[b]->first_seq < 1 || batches[b]->first_seq > batches[b]->seq)  // ParseBatches refuses it: fail here
      throw std::invalid_argument("SerializeBatches: batch " + std::to_string(b) + " covers seqs [" +
                                  std::to_string(batches[b]->first_seq) + ", " + std::to_string(batches[b]->seq) +
                                  "]; seqs start at 1 and a range must not be empty");
    estimate += kMinBatchBytes + (batches[b]->stamp ? batches[b]->stamp->size() * kStampEntryBytes : 0);
    for (const auto& [table, update] : batches[b]->updates) {
      if (table.empty())
        throw std::invalid_argument("SerializeBatches: batch " + std::to_string(b) +
                                    " has an update with an empty table name");
      estimate += kMinUpdateBytes + table.size() + 24 + update.entries.size() * 14 + update.delta_bytes();
    }
  }
  out.reserve(estimate);
  for (uint8_t b : kMagic) out.push_back(b);  // (vector::insert here trips a GCC 12 -Wstringop-overflow false positive)
  Put<uint64_t>(out, batches.size());
  for (const BatchPtr& batch : batches) {
    Put<int64_t>(out, batch->first_seq);
    Put<int64_t>(out, batch->seq);
    const WorkerSeqs empty;
    const WorkerSeqs& stamp = batch->stamp ? *batch->stamp : empty;
    Put<uint32_t>(out, static_cast<uint32_t>(stamp.size()));
    for (const auto& [worker, seq] : stamp) {
      Put<int32_t>(out, worker);
      Put<int64_t>(out, seq);
    }
    Put<uint32_t>(out, static_cast<uint32_t>(batch->updates.size()));
    for (const auto& [table, update] : batch->updates) {
      Put<uint32_t>(out, static_cast<uint32_t>(table.size()));
      out.insert(out.end(), table.begin(), table.end());
      // the length goes before the bytes: written as a placeholder, filled in once they are appended
      const size_t length_at = out.size();
      Put<uint64_t>(out, 0);
      update.SerializeTo(&out);
      const uint64_t length = out.size() - length_at - 8;
      for (size_t b = 0; b < 8; ++b) out[length_at + b] = static_cast<uint8_t>(length >> (8 * b));
    }
  }
  return out;
}

std::vector<BatchPtr> ParseBatches(const uint8_t* bytes, size_t size) {
  if (bytes == nullptr && size != 0)
    throw std::invalid_argument("ParseBatches: bytes is null for size " + std::to_string(size));
  if (size < 4 || std::memcmp(bytes, kMagic, 4) != 0)
    throw std::invalid_argument(
        "ParseBatches: bad magic (expected \"XFB2\"): not a list of forwarded batches "
        "(or one from an older version)");
  Reader in(bytes, size);
  in.Take(4, "the magic");
  const uint64_t count = in.Get<uint64_t>("the batch count");
  if (count > in.left() / kMinBatchBytes)
    throw std::invalid_argument("ParseBatches: " + std::to_string(count) + " batches cannot fit in the " +
                                std::to_string(in.left()) + " bytes after the header (truncated or corrupt)");
  std::vector<BatchPtr> batches;
  batches.reserve(count);
  for (uint64_t b = 0; b < count; ++b) {
    auto batch = std::make_shared<ForwardedBatch>();
    const std::string where = "batch " + std::to_string(b);
    batch->first_seq = in.Get<int64_t>(where + " first seq");
    batch->seq = in.Get<int64_t>(where + " seq");
    const std::string at = where + (batch->first_seq == batch->seq ? " (seq " + std::to_string(batch->seq) + ")"
                                                                   : " (seqs " + std::to_string(batch->first_seq) +
                                                                         ".." + std::to_string(batch->seq) + ")");
    if (batch->first_seq < 1 || batch->first_seq > batch->seq)
      throw std::invalid_argument("ParseBatches: " + at + ": seqs start at 1 and a range must not be empty");
    const uint32_t workers = in.Get<uint32_t>(at + " stamp count");
    if (workers > in.left() / kStampEntryBytes)
      throw std::invalid_argument("ParseBatches: " + at + " stamps " + std::to_string(workers) +
                                  " workers, more than the " + std::to_string(in.left()) + " bytes left can hold");
    auto stamp = std::make_shared<WorkerSeqs>();
    for (uint32_t w = 0; w < workers; ++w) {
      const int32_t worker = in.Get<int32_t>(at + " stamp worker");
      const int64_t seq = in.Get<int64_t>(at + " stamp seq");
      if (!stamp->emplace(worker, seq).second)
        throw std::invalid_argument("ParseBatches: " + at + " stamps worker " + std::to_string(worker) + " twice");
    }
    batch->stamp = std::move(stamp);
    const uint32_t updates = in.Get<uint32_t>(at + " update count");
    if (updates > in.left() / kMinUpdateBytes)
      throw std::invalid_argument("ParseBatches: " + at + " claims " + std::to_string(updates) +
                                  " updates, more than the " + std::to_string(in.left()) + " bytes left can hold");
    batch->updates.reserve(updates);
    for (uint32_t u = 0; u < updates; ++u) {
      const std::string which = at + " update " + std::to_string(u);
      const uint32_t name_length = in.Get<uint32_t>(which + " table name length");
      if (name_length == 0) throw std::invalid_argument("ParseBatches: " + which + " has an empty table name");
      const uint8_t* name = in.Take(name_length, which + " table name");
      std::string table(reinterpret_cast<const char*>(name), name_length);
      const std::string named = which + " (table '" + table + "')";
      const uint64_t length = in.Get<uint64_t>(named + " length");
      if (length > in.left())
        throw std::invalid_argument("ParseBatches: truncated at byte " + std::to_string(in.position()) + ": " + named +
                                    " needs " + std::to_string(length) + " bytes, " + std::to_string(in.left()) +
                                    " left");
      const uint8_t* wire = in.Take(static_cast<size_t>(length), named);
      try {
        batch->updates.emplace_back(std::move(table), ParityUpdate::Parse(wire, static_cast<size_t>(length)));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("ParseBatches: " + named + ": " + e.what());
      }
    }
    batches.push_back(std::move(batch));
  }
  if (in.left() != 0)
    throw std::invalid_argument("ParseBatches: " + std::to_string(in.left()) + " trailing bytes after the " +
                                std::to_string(count) + " batches (a corrupt or concatenated message)");
  return batches;
}

}  // namespace xdl_ec

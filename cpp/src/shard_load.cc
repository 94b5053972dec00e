// EmbeddingShard's export and import: every row in slot order or, a chunk at a time, in key order, the rows changed
// since the last cut (dirty tracking, for incremental backstops), and loads of rows with the policy words and pending
// ids staged for them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "embedding_shard_impl.h"

namespace xdl_ec {

namespace {

// Every live, admitted record in slot order, `reserve(live rows)` first, under the lock a scan needs: exclusive on a
// tiered store (its scan moves frames) or while restoring (every block installed first), shared otherwise.
template <class Reserve, class Visit>
void ScanLiveRecords(EmbeddingShard::Impl& s, Reserve reserve, Visit visit) {
  std::unique_lock<std::shared_mutex> exclusive(s.mutex, std::defer_lock);
  std::shared_lock<std::shared_mutex> shared(s.mutex, std::defer_lock);
  if (s.store.tiered()) {
    exclusive.lock();
  } else {
    shared.lock();
  }
  if (s.Restoring()) {
    if (shared.owns_lock()) {
      shared.unlock();
      exclusive.lock();
    }
    s.EnsureAllBlocks();
  }
  reserve(s.index.size());
  for (size_t slot = 0; slot < s.store.high_water(); ++slot) {
    s.ScanAt(slot);
    uint8_t* r = s.Record(slot);
    if (!RecordLayout::IsLive(RecordLayout::Flags(r)) || !s.Admitted(r)) continue;
    visit(r);
  }
}

}  // namespace

EmbeddingShard::Rows EmbeddingShard::Export() const {
  Impl& s = *impl_;
  Rows rows;
  const size_t dim = s.config.dim, sf = s.layout.state_floats;
  ScanLiveRecords(
      s,
      [&](size_t live) {
        rows.keys.reserve(live);
        rows.values.reserve(live * dim);
        rows.state.reserve(live * sf);
      },
      [&](uint8_t* r) { s.AppendRow(r, &rows); });
  return rows;
}

std::vector<int64_t> EmbeddingShard::SortedKeys() const {
  Impl& s = *impl_;
  std::vector<int64_t> keys;  // 8 bytes a row, not the rows
  ScanLiveRecords(
      s, [&](size_t live) { keys.reserve(live); },
      [&](const uint8_t* r) {
        int64_t key;
        std::memcpy(&key, r, sizeof(key));
        keys.push_back(key);
      });
  std::sort(keys.begin(), keys.end());  // outside the lock: training may go on
  return keys;
}

EmbeddingShard::Rows EmbeddingShard::ExportKeys(const int64_t* keys, size_t n) const {
  RequirePointer(keys, n, "ExportKeys", "keys");
  RequireBatch(n, "ExportKeys");
  Impl& s = *impl_;
  Rows rows;
  rows.keys.reserve(n);
  rows.values.reserve(n * s.config.dim);
  rows.state.reserve(n * s.layout.state_floats);
  // A block's worth of keys per fetch step: a tiered shard keeps its budget (the rows are copied out, so the
  // next step's fetch may let them go) however large the chunk asked.
  const size_t batch = s.store.block_slots();
  for (size_t first = 0; first < n; first += batch) {
    const int64_t* part = keys + first;
    const size_t m = std::min(batch, n - first);
    ReadPass(s, part, m, [&]() {
      s.Resolve(part, m, 0, s.record_bytes, [&](size_t, uint32_t slot) {
        if (slot == KeyIndex::kNone) return true;
        uint8_t* r = s.Record(slot);
        if (s.Admitted(r)) s.AppendRow(r, &rows);
        return true;
      });
    });
  }
  return rows;
}

void EmbeddingShard::TrackDirty(bool on) {
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.track_dirty = on;
  s.dirty.clear();
  s.dirty_slots.clear();
}

bool EmbeddingShard::tracking_dirty() const {
  std::shared_lock<std::shared_mutex> lock(impl_->mutex);
  return impl_->track_dirty;
}

EmbeddingShard::Rows EmbeddingShard::TakeDirty() {
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  if (!s.track_dirty) throw std::logic_error("TakeDirty: dirty tracking is off (TrackDirty(true) first)");
  if (s.Restoring()) s.EnsureAllBlocks();
  std::sort(s.dirty_slots.begin(), s.dirty_slots.end());  // slot order, as Export
  if (s.store.tiered()) s.store.Fetch(s.dirty_slots.data(), s.dirty_slots.size(), s.OtherBytes());
  Rows rows;
  for (const uint32_t slot : s.dirty_slots) {
    s.dirty[slot] = 0;
    uint8_t* r = s.Record(slot);
    if (!RecordLayout::IsLive(RecordLayout::Flags(r))) continue;  // erased since: its slot is free
    if (!s.Admitted(r)) continue;                                 // a pending id: no row
    s.AppendRow(r, &rows);
  }
  s.dirty_slots.clear();
  return rows;
}

namespace {

// Load's checks before the lock: finite values and state, unique keys.
void RequireLoadable(const int64_t* keys, const float* values, const float* state, size_t n, size_t dim, size_t sf) {
  for (size_t i = 0; i < n * dim; ++i) {
    if (!std::isfinite(values[i])) {
      throw std::invalid_argument("Load: values[" + Str(i / dim) + ", " + Str(i % dim) + "] is not finite");
    }
  }
  if (state) {
    for (size_t i = 0; i < n * sf; ++i) {
      if (!std::isfinite(state[i])) {
        throw std::invalid_argument("Load: state[" + Str(i / sf) + ", " + Str(i % sf) + "] is not finite");
      }
    }
  }
  RequireUniqueKeys(keys, n, "Load");
}

// What StageLoadWords / StageSketch staged for the next Load, taken out of the shard (the stage is consumed
// whether the load succeeds or not).
struct LoadStage {
  std::unordered_map<int64_t, std::pair<uint32_t, int64_t>> words;
  std::vector<int64_t> pending_keys;
  std::vector<uint32_t> pending_uses;
  std::vector<int64_t> pending_steps;
  std::vector<uint16_t> sketch_cells;

  explicit LoadStage(EmbeddingShard::Impl& s)
      : words(std::move(s.staged_words)),
        pending_keys(std::move(s.staged_pending_keys)),
        pending_uses(std::move(s.staged_pending_uses)),
        pending_steps(std::move(s.staged_pending_steps)),
        sketch_cells(std::move(s.staged_sketch)) {
    s.staged_sketch.clear();
    s.staged_words.clear();
    s.staged_pending_keys.clear();
    s.staged_pending_uses.clear();
    s.staged_pending_steps.clear();
  }

  // The staged pending ids must be new to the shard and to the load.
  void RequireNewPending(const EmbeddingShard::Impl& s, const int64_t* keys, size_t n) const {
    if (pending_keys.empty()) return;
    const std::unordered_set<int64_t> loaded(keys, keys + n);
    for (const int64_t key : pending_keys) {
      if (s.Lookup(key) != KeyIndex::kNone || loaded.count(key)) {
        throw std::invalid_argument("Load: staged pending id " + std::to_string(key) +
                                    " already has a record or is loaded as a row; nothing was changed");
      }
    }
  }

  // The staged words of `key`, if any, into its record r.
  void WordsInto(const EmbeddingShard::Impl& s, uint8_t* r, int64_t key) const {
    if (words.empty()) return;
    const auto found = words.find(key);
    if (found == words.end()) return;
    s.SetWord<uint32_t>(r, RecordLayout::kUsesOffset, found->second.first);
    s.SetWord<int64_t>(r, RecordLayout::kLastStepOffset, found->second.second);
  }
};

// Writes one loaded row (values v, state st or fresh) as a new record or over its key's record.
void LoadRow(EmbeddingShard::Impl& s, const LoadStage& stage, int64_t key, const float* v, const float* st,
             DeltaBatch* deltas) {
  const uint32_t slot = s.Lookup(key);
  if (slot == KeyIndex::kNone) {
    const uint32_t fresh = s.AllocateSlot();
    const size_t d = s.DeltaBegin(deltas, fresh);
    s.WriteNew(fresh, key, v, st);
    stage.WordsInto(s, s.Record(fresh), key);
    s.DeltaEnd(deltas, d, fresh);
    return;
  }
  const size_t d = s.DeltaBegin(deltas, slot);
  s.MarkDirty(slot);
  uint8_t* r = s.Record(slot);
  std::memcpy(s.Value(r), v, sizeof(float) * s.config.dim);
  if (st) {
    std::memcpy(s.State(r), st, sizeof(float) * s.layout.state_floats);
  } else {
    s.optimizer->InitState(s.State(r), s.config.dim);
  }
  if (s.policy_on) s.SetWord<uint32_t>(r, RecordLayout::kAdmittedOffset, 1);  // a pending id becomes a row
  stage.WordsInto(s, r, key);
  s.Tick(slot);
  s.DeltaEnd(deltas, d, slot);
}

}  // namespace

void EmbeddingShard::Load(const int64_t* keys, const float* values, const float* state, size_t n, DeltaSink* sink) {
  RequirePointer(keys, n, "Load", "keys");
  RequirePointer(values, n, "Load", "values");
  RequireBatch(n, "Load");
  Impl& s = *impl_;
  const size_t dim = s.config.dim, sf = s.layout.state_floats;
  RequireLoadable(keys, values, state, n, dim, sf);
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  const LoadStage stage(s);
  stage.RequireNewPending(s, keys, n);
  SinkBatch batch(sink, s.record_bytes);
  DeltaBatch* deltas = batch.deltas();
  s.PrepareBlocks(keys, n, /*may_insert=*/true);
  if (!stage.pending_keys.empty()) s.EnsureAllBlocks();  // inserts beyond the batch's own: every block at hand
  if (!stage.sketch_cells.empty()) s.BeginSketch();
  s.DeltaStart(deltas, n + stage.pending_keys.size());
  for (size_t i = 0; i < n; ++i) LoadRow(s, stage, keys[i], values + i * dim, state ? state + i * sf : nullptr, deltas);
  for (size_t i = 0; i < stage.pending_keys.size(); ++i) {
    const uint32_t slot = s.AllocateSlot();
    const size_t d = s.DeltaBegin(deltas, slot);
    s.WritePending(slot, stage.pending_keys[i], stage.pending_uses[i], stage.pending_steps[i]);
    s.DeltaEnd(deltas, d, slot);
  }
  if (!stage.sketch_cells.empty()) {
    s.AddCells(deltas, stage.sketch_cells.data());
    s.FinishSketch(deltas);
  }
  batch.Record();
}

void EmbeddingShard::StageLoadWords(const int64_t* keys, const uint32_t* uses, const int64_t* last_step, size_t n,
                                    const int64_t* pending_keys, const uint32_t* pending_uses,
                                    const int64_t* pending_last_step, size_t pending_n) {
  RequirePointer(keys, n, "StageLoadWords", "keys");
  RequirePointer(uses, n, "StageLoadWords", "uses");
  RequirePointer(last_step, n, "StageLoadWords", "last_step");
  RequirePointer(pending_keys, pending_n, "StageLoadWords", "pending_keys");
  RequirePointer(pending_uses, pending_n, "StageLoadWords", "pending_uses");
  RequirePointer(pending_last_step, pending_n, "StageLoadWords", "pending_last_step");
  Impl& s = *impl_;
  if (!s.policy_on && (n != 0 || pending_n != 0)) {
    throw std::invalid_argument("StageLoadWords: the table has no row rules (row_policy), so no policy words");
  }
  if (pending_n != 0 && (s.min_count <= 1 || s.sketch)) {
    throw std::invalid_argument(
        "StageLoadWords: the table has no admission or counts with a sketch, so no pending ids");
  }
  std::unordered_map<int64_t, std::pair<uint32_t, int64_t>> words;
  words.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (last_step[i] < 0) {
      throw std::invalid_argument("StageLoadWords: last_step[" + Str(i) + "] is " + std::to_string(last_step[i]) +
                                  ", must be >= 0");
    }
    if (!words.emplace(keys[i], std::make_pair(uses[i], last_step[i])).second) {
      throw std::invalid_argument("StageLoadWords: key " + std::to_string(keys[i]) + " appears twice");
    }
  }
  std::unordered_map<int64_t, size_t> seen;
  for (size_t i = 0; i < pending_n; ++i) {
    if (pending_uses[i] < 1 || static_cast<int64_t>(pending_uses[i]) >= s.min_count || pending_last_step[i] < 0) {
      throw std::invalid_argument("StageLoadWords: pending id " + std::to_string(pending_keys[i]) + " has uses " +
                                  std::to_string(pending_uses[i]) +
                                  " (must be in [1, admit_min_count)) and "
                                  "last_step " +
                                  std::to_string(pending_last_step[i]) + " (must be >= 0)");
    }
    if (!seen.emplace(pending_keys[i], i).second || words.count(pending_keys[i])) {
      throw std::invalid_argument("StageLoadWords: pending id " + std::to_string(pending_keys[i]) +
                                  " appears twice or also as a row");
    }
  }
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.staged_words = std::move(words);
  s.staged_pending_keys.assign(pending_keys, pending_keys + pending_n);
  s.staged_pending_uses.assign(pending_uses, pending_uses + pending_n);
  s.staged_pending_steps.assign(pending_last_step, pending_last_step + pending_n);
}

}  // namespace xdl_ec

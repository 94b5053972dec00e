// EmbeddingShard's sketch counter (row_policy.h): count-min cells of ids without a row, kept in the record
// bytes of the reserved slots [0, sketch_slots()), so parity, recovery and saves carry them as any record.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "embedding_shard_impl.h"

namespace xdl_ec {

void EmbeddingShard::Impl::TouchSketch(DeltaBatch* deltas, size_t slot) {
  if (sketch_entry[slot] != kUntouched) return;
  sketch_entry[slot] = DeltaBegin(deltas, static_cast<uint32_t>(slot));
  sketch_touched.push_back(static_cast<uint32_t>(slot));
}

void EmbeddingShard::Impl::SetCell(DeltaBatch* deltas, size_t cell, uint16_t v) {
  TouchSketch(deltas, cell / cells_per_slot);
  std::memcpy(CellAt(cell), &v, sizeof(v));
}

void EmbeddingShard::Impl::RaiseCells(DeltaBatch* deltas, const size_t* cells, uint32_t to) {
  for (int64_t row = 0; row < config.row_policy.sketch_depth; ++row) {
    if (Cell(cells[row]) < to) SetCell(deltas, cells[row], static_cast<uint16_t>(to));
  }
}

void EmbeddingShard::Impl::HalveCells(DeltaBatch* deltas) {
  for (size_t slot = 0; slot < sketch_slots; ++slot) TouchSketch(deltas, slot);
  for (size_t cell = 0, n = config.row_policy.sketch_cells(); cell < n; ++cell) {
    const uint16_t v = Cell(cell);
    if (v) SetCell(deltas, cell, static_cast<uint16_t>(v >> 1));
  }
}

void EmbeddingShard::Impl::AddCells(DeltaBatch* deltas, const uint16_t* cells) {
  for (size_t cell = 0, n = config.row_policy.sketch_cells(); cell < n; ++cell) {
    if (!cells[cell]) continue;
    const uint32_t sum = std::min<uint32_t>(uint32_t{Cell(cell)} + cells[cell], RowPolicyConfig::kSketchMaxCount);
    SetCell(deltas, cell, static_cast<uint16_t>(sum));
  }
}

void EmbeddingShard::Impl::FinishSketch(DeltaBatch* deltas) {
  for (const uint32_t slot : sketch_touched) {
    DeltaEnd(deltas, sketch_entry[slot], slot);
    sketch_entry[slot] = kUntouched;
  }
  sketch_touched.clear();
}

void EmbeddingShard::Impl::EnsureSketch() {
  const uint32_t block_slots = store.block_slots();
  for (size_t b = 0; sketch_slots && Restoring() && b <= (sketch_slots - 1) / block_slots; ++b) EnsureBlock(b);
}

void EmbeddingShard::Impl::BeginSketch() {
  EnsureSketch();
  for (const uint32_t slot : sketch_touched) sketch_entry[slot] = kUntouched;
  sketch_touched.clear();
}

size_t EmbeddingShard::sketch_slots() const { return impl_->sketch_slots; }

namespace {

void RequireSketch(const RowPolicyConfig& rules, size_t n, const char* what) {
  if (!rules.sketch()) {
    throw std::invalid_argument(std::string(what) +
                                ": the table has no sketch counter (row_policy.admit_counter is not sketch)");
  }
  if (n != rules.sketch_cells()) {
    throw std::invalid_argument(std::string(what) + ": got " + Str(n) + " cells, the sketch has sketch_width * " +
                                "sketch_depth = " + Str(rules.sketch_cells()) +
                                " (a save of a table with another sketch shape cannot be loaded); nothing was changed");
  }
}

}  // namespace

std::vector<uint16_t> EmbeddingShard::ExportSketch() const {
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);  // exclusive: under restore the cells are faulted in
  std::vector<uint16_t> out;
  if (!s.sketch) return out;
  s.EnsureSketch();
  out.resize(s.config.row_policy.sketch_cells());
  for (size_t cell = 0; cell < out.size(); ++cell) out[cell] = s.Cell(cell);
  return out;
}

void EmbeddingShard::LoadSketch(const uint16_t* cells, size_t n, DeltaSink* sink) {
  RequirePointer(cells, n, "LoadSketch", "cells");
  Impl& s = *impl_;
  RequireSketch(s.config.row_policy, n, "LoadSketch");
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.BeginSketch();
  SinkBatch batch(sink, s.record_bytes);
  DeltaBatch* deltas = batch.deltas();
  s.DeltaStart(deltas, s.sketch_slots);
  s.AddCells(deltas, cells);
  s.FinishSketch(deltas);
  batch.Record();
}

void EmbeddingShard::StageSketch(const uint16_t* cells, size_t n) {
  RequirePointer(cells, n, "StageSketch", "cells");
  Impl& s = *impl_;
  RequireSketch(s.config.row_policy, n, "StageSketch");
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.staged_sketch.assign(cells, cells + n);
}

void EmbeddingShard::SketchEstimate(const int64_t* keys, size_t n, uint32_t* out) const {
  RequirePointer(keys, n, "SketchEstimate", "keys");
  RequirePointer(out, n, "SketchEstimate", "out");
  Impl& s = *impl_;
  RequireSketch(s.config.row_policy, s.config.row_policy.sketch_cells(), "SketchEstimate");
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.EnsureSketch();
  for (size_t i = 0; i < n; ++i) out[i] = s.Estimate(keys[i]);
}

}  // namespace xdl_ec

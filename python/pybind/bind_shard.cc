// xdl_ec._core.EmbeddingShard and its configs: numpy in/out over xdl_ec::EmbeddingShard, 1:1 with the
// C++ API. Shapes are checked here (the core takes raw pointers); every call that takes the shard's
// lock releases the GIL first, so Python threads really run in parallel and a restore handler (which
// re-acquires the GIL under the shard's lock) cannot deadlock against a waiting caller.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "bindings.h"
#include "xdl_ec/delta_batch_sink.h"
#include "xdl_ec/delta_forwarder.h"
#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/shard_registry.h"

namespace py = pybind11;

namespace xdl_ec::python {

// Rows handed to TensorFlow: at 64 bytes (TF's alignment) an eager tensor wraps the array's buffer instead of
// copying it (~0.3 ms a step of 2,048 samples, 15k rows).
constexpr size_t kRowAlignment = 64;

py::array_t<float, py::array::c_style> AlignedRows(size_t n, size_t dim) {
  const size_t bytes = std::max<size_t>(n * dim * sizeof(float), 1);
  void* data = ::operator new(bytes, std::align_val_t(kRowAlignment));
  py::capsule owner(data, [](void* p) { ::operator delete(p, std::align_val_t(kRowAlignment)); });
  return py::array_t<float, py::array::c_style>({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(dim)},
                                                static_cast<float*>(data), owner);
}

namespace {

// Safe casts only (int32 -> int64 yes, float -> int64 no); non-contiguous inputs are copied.
using Keys = py::array_t<int64_t, py::array::c_style>;
using Floats = py::array_t<float, py::array::c_style>;
using Slots = py::array_t<uint32_t, py::array::c_style>;
using Bytes = py::array_t<uint8_t, py::array::c_style>;

std::string Shape(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

void RequireKeys(const Keys& keys, const char* where) {
  if (keys.ndim() != 1) {
    throw std::invalid_argument(std::string(where) + ": keys must be 1-D, got shape " + Shape(keys));
  }
}

void RequireRows(const Floats& a, size_t n, size_t width, const char* where, const char* name) {
  if (a.ndim() != 2 || static_cast<size_t>(a.shape(0)) != n || static_cast<size_t>(a.shape(1)) != width) {
    throw std::invalid_argument(std::string(where) + ": " + name + " must have shape (" + std::to_string(n) + ", " +
                                std::to_string(width) + ") = (len(keys), " +
                                (std::string(name) == "state" ? "state_floats" : "dim") + "), got " + Shape(a));
  }
}

// Hands a std::vector to numpy without copying: the array's base owns the vector.
template <class T>
py::array_t<T> ToNumpy(std::vector<T>&& v, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule base(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, owned->data(), base);
}

// return_deltas: (slots uint32[m], old XOR new uint8[m, record bytes]); a call that reported none gives
// m = 0 rows of the shard's record size.
py::tuple DeltasToNumpy(const EmbeddingShard& shard, DeltaBatch&& d) {
  const py::ssize_t m = static_cast<py::ssize_t>(d.slots.size());
  const py::ssize_t rb = static_cast<py::ssize_t>(shard.layout().bytes());
  return py::make_tuple(ToNumpy(std::move(d.slots), {m}), ToNumpy(std::move(d.xor_bytes), {m, rb}));
}

py::dict MemoryDict(const ShardMemoryStats& m) {
  py::dict d;
  d["live_rows"] = m.live_rows;
  d["slots"] = m.slots;
  d["record_bytes"] = m.record_bytes;
  d["slot_bytes"] = m.slot_bytes;
  d["index_bytes"] = m.index_bytes;
  d["free_slots"] = m.free_slots;
  d["free_list_bytes"] = m.free_list_bytes;
  // The disk tier's counts (zeros without one): rows in frames and in the file, the file's size, its I/O, and
  // the fetch steps' rows found in a frame (hits) or read (misses).
  d["spill_budget_bytes"] = m.spill.budget_bytes;
  d["rows_in_memory"] = m.spill.rows_in_memory;
  d["rows_on_disk"] = m.spill.rows_on_disk;
  d["disk_bytes"] = m.spill.disk_bytes;
  d["disk_read_bytes"] = m.spill.disk_read_bytes;
  d["disk_write_bytes"] = m.spill.disk_write_bytes;
  d["memory_hits"] = m.spill.hits;
  d["memory_misses"] = m.spill.misses;
  return d;
}

// --ft ec: with a DeltaForwarder, the shard records the mutation into the forwarder's DeltaSink for `table`
// (DeltaForwarder::Mutation, applying the worker pushes `pushes`) without leaving C++.
void CheckForward(const char* where, bool return_deltas, const std::shared_ptr<DeltaForwarder>& forwarder) {
  if (forwarder && return_deltas)
    throw std::invalid_argument(std::string(where) + ": give either return_deltas or forwarder, not both");
}

py::object Pull(EmbeddingShard& shard, const Keys& keys, bool return_deltas,
                const std::shared_ptr<DeltaForwarder>& forwarder, const std::string& table, const WorkerSeqs& pushes) {
  RequireKeys(keys, "pull");
  CheckForward("pull", return_deltas, forwarder);
  const size_t n = static_cast<size_t>(keys.shape(0));
  Floats out = AlignedRows(n, shard.dim());
  if (forwarder) {
    DeltaForwarder::Mutation sink(*forwarder, table, pushes);
    py::gil_scoped_release release;
    shard.Pull(keys.data(), n, out.mutable_data(), &sink);
    return std::move(out);
  }
  DeltaBatch deltas;
  {
    py::gil_scoped_release release;
    shard.Pull(keys.data(), n, out.mutable_data(), DeltaBatchSink(return_deltas ? &deltas : nullptr).sink());
  }
  if (!return_deltas) return std::move(out);
  return py::make_tuple(out, DeltasToNumpy(shard, std::move(deltas)));
}

py::array_t<int32_t> Clocks(const EmbeddingShard& shard, const Keys& keys) {
  RequireKeys(keys, "clocks");
  const size_t n = static_cast<size_t>(keys.shape(0));
  py::array_t<int32_t> clocks(static_cast<py::ssize_t>(n));
  py::gil_scoped_release release;
  shard.Clocks(keys.data(), n, clocks.mutable_data());
  return clocks;
}

// (rows of the sent keys float32[m, dim], clocks int32[n], sent bool[n]); `known` is exactly int32 (the
// clocks a RowCache's lookup gives): another dtype is more likely a mix-up than something to convert.
py::tuple PullStale(EmbeddingShard& shard, const Keys& keys, const py::object& known_object, int64_t staleness,
                    const std::shared_ptr<DeltaForwarder>& forwarder, const std::string& table) {
  RequireKeys(keys, "pull_stale");
  const size_t n = static_cast<size_t>(keys.shape(0));
  const py::array known = py::array::ensure(known_object);
  if (!known) throw std::invalid_argument("pull_stale: known must be an int32 array of len(keys)");
  if (!py::isinstance<py::array_t<int32_t>>(known) || known.ndim() != 1 || static_cast<size_t>(known.shape(0)) != n) {
    throw std::invalid_argument("pull_stale: known must be an int32 array of len(keys) = " + std::to_string(n) +
                                " (the cached clocks, -1 where nothing is cached), got dtype " +
                                py::str(known.dtype()).cast<std::string>() + " and shape " + Shape(known));
  }
  if (staleness < 0 || staleness > static_cast<int64_t>(UINT32_MAX)) {
    throw std::invalid_argument(
        "pull_stale: staleness (the versions a cached row may lag) must be in "
        "[0, 4294967295], got " +
        std::to_string(staleness));
  }
  const auto known32 = py::array_t<int32_t, py::array::c_style>::ensure(known);
  const py::ssize_t dim = shard.dim();
  Floats rows({static_cast<py::ssize_t>(n), dim});
  py::array_t<int32_t> clocks(static_cast<py::ssize_t>(n));
  py::array_t<bool> sent(static_cast<py::ssize_t>(n));
  auto* sent_bytes = reinterpret_cast<uint8_t*>(sent.mutable_data());
  size_t m;
  if (forwarder) {
    const WorkerSeqs no_pushes;  // the Mutation refers to it: it must outlive the sink
    DeltaForwarder::Mutation sink(*forwarder, table, no_pushes);
    py::gil_scoped_release release;
    m = shard.PullStale(keys.data(), n, known32.data(), static_cast<uint32_t>(staleness), rows.mutable_data(),
                        clocks.mutable_data(), sent_bytes, &sink);
  } else {
    py::gil_scoped_release release;
    m = shard.PullStale(keys.data(), n, known32.data(), static_cast<uint32_t>(staleness), rows.mutable_data(),
                        clocks.mutable_data(), sent_bytes);
  }
  rows.resize({static_cast<py::ssize_t>(m), dim});  // in place: only the sent rows travel on
  return py::make_tuple(rows, clocks, sent);
}

py::tuple Find(const EmbeddingShard& shard, const Keys& keys) {
  RequireKeys(keys, "find");
  const size_t n = static_cast<size_t>(keys.shape(0));
  Floats out({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(shard.dim())});
  py::array_t<bool> found(static_cast<py::ssize_t>(n));
  std::memset(out.mutable_data(), 0, n * shard.dim() * sizeof(float));
  {
    py::gil_scoped_release release;
    shard.Find(keys.data(), n, out.mutable_data(), reinterpret_cast<uint8_t*>(found.mutable_data()));
  }
  return py::make_tuple(out, found);
}

py::object Push(EmbeddingShard& shard, const Keys& keys, const Floats& grads, int64_t step, bool return_deltas,
                const std::shared_ptr<DeltaForwarder>& forwarder, const std::string& table, const WorkerSeqs& pushes,
                const py::object& repeats, int64_t ttl_before) {
  RequireKeys(keys, "push");
  const size_t n = static_cast<size_t>(keys.shape(0));
  RequireRows(grads, n, shard.dim(), "push", "grads");
  CheckForward("push", return_deltas, forwarder);
  Slots counts;
  const uint32_t* reps = nullptr;
  if (!repeats.is_none()) {
    counts = Slots::ensure(repeats);
    if (!counts || counts.ndim() != 1 || static_cast<size_t>(counts.shape(0)) != n)
      throw std::invalid_argument("push: repeats must be uint32[len(keys)] = uint32[" + std::to_string(n) +
                                  "] (how many gradients each row of grads sums), or None");
    reps = counts.data();
  }
  if (forwarder) {
    DeltaForwarder::Mutation sink(*forwarder, table, pushes);
    py::gil_scoped_release release;
    shard.Push(keys.data(), grads.data(), n, step, &sink, reps, ttl_before);
    return py::none();
  }
  DeltaBatch deltas;
  {
    py::gil_scoped_release release;
    shard.Push(keys.data(), grads.data(), n, step, DeltaBatchSink(return_deltas ? &deltas : nullptr).sink(), reps,
               ttl_before);
  }
  if (!return_deltas) return py::none();
  return DeltasToNumpy(shard, std::move(deltas));
}

py::object Erase(EmbeddingShard& shard, const Keys& keys, bool return_deltas) {
  RequireKeys(keys, "erase");
  DeltaBatch deltas;
  size_t erased;
  {
    py::gil_scoped_release release;
    erased = shard.Erase(keys.data(), static_cast<size_t>(keys.shape(0)),
                         DeltaBatchSink(return_deltas ? &deltas : nullptr).sink());
  }
  if (!return_deltas) return py::int_(erased);
  return py::make_tuple(erased, DeltasToNumpy(shard, std::move(deltas)));
}

// Rows as export returns them: (keys, values, state[, uses, last_step]).
py::tuple RowsTuple(const EmbeddingShard& shard, EmbeddingShard::Rows rows, bool with_words, const char* where) {
  const py::ssize_t n = static_cast<py::ssize_t>(rows.keys.size());
  if (with_words) {
    if (!shard.config().row_policy.active()) {
      throw std::invalid_argument(std::string(where) +
                                  ": with_words needs a table with row rules (row_policy); this one has none");
    }
    return py::make_tuple(ToNumpy(std::move(rows.keys), {n}), ToNumpy(std::move(rows.values), {n, shard.dim()}),
                          ToNumpy(std::move(rows.state), {n, shard.layout().state_floats}),
                          ToNumpy(std::move(rows.uses), {n}), ToNumpy(std::move(rows.last_step), {n}));
  }
  return py::make_tuple(ToNumpy(std::move(rows.keys), {n}), ToNumpy(std::move(rows.values), {n, shard.dim()}),
                        ToNumpy(std::move(rows.state), {n, shard.layout().state_floats}));
}

py::tuple Export(const EmbeddingShard& shard, bool with_words) {
  EmbeddingShard::Rows rows;
  {
    py::gil_scoped_release release;
    rows = shard.Export();
  }
  return RowsTuple(shard, std::move(rows), with_words, "export");
}

py::array SortedKeys(const EmbeddingShard& shard) {
  std::vector<int64_t> keys;
  {
    py::gil_scoped_release release;
    keys = shard.SortedKeys();
  }
  const py::ssize_t n = static_cast<py::ssize_t>(keys.size());
  return ToNumpy(std::move(keys), {n});
}

py::tuple ExportKeys(const EmbeddingShard& shard, const Keys& keys, bool with_words) {
  RequireKeys(keys, "export_keys");
  EmbeddingShard::Rows rows;
  {
    py::gil_scoped_release release;
    rows = shard.ExportKeys(keys.data(), static_cast<size_t>(keys.shape(0)));
  }
  return RowsTuple(shard, std::move(rows), with_words, "export_keys");
}

// One eviction pass: ({"ttl", "l2", "cap": counts, "keys": int64[m] in slot order}[, deltas]).
py::object Evict(EmbeddingShard& shard, int64_t now_step, bool return_deltas,
                 const std::shared_ptr<DeltaForwarder>& forwarder, const std::string& table) {
  CheckForward("evict", return_deltas, forwarder);
  EmbeddingShard::Eviction e;
  DeltaBatch deltas;
  if (forwarder) {
    const WorkerSeqs no_pushes;  // the Mutation refers to it: it must outlive the sink
    DeltaForwarder::Mutation sink(*forwarder, table, no_pushes);
    py::gil_scoped_release release;
    e = shard.Evict(now_step, &sink);
  } else {
    py::gil_scoped_release release;
    e = shard.Evict(now_step, DeltaBatchSink(return_deltas ? &deltas : nullptr).sink());
  }
  py::dict out;
  out["ttl"] = e.counts.ttl;
  out["l2"] = e.counts.l2;
  out["cap"] = e.counts.cap;
  const py::ssize_t m = static_cast<py::ssize_t>(e.keys.size());
  out["keys"] = ToNumpy(std::move(e.keys), {m});
  if (!return_deltas) return std::move(out);
  return py::make_tuple(out, DeltasToNumpy(shard, std::move(deltas)));
}

py::dict PolicyStatsDict(const EmbeddingShard& shard) {
  EmbeddingShard::PolicyStats p;
  {
    py::gil_scoped_release release;
    p = shard.policy_stats();
  }
  py::dict d;
  d["rows"] = p.rows;
  d["pending"] = p.pending;
  d["admitted"] = p.counters.admitted;
  d["not_admitted_lookups"] = p.counters.not_admitted_lookups;
  d["evicted_ttl"] = p.counters.evicted_ttl;
  d["evicted_l2"] = p.counters.evicted_l2;
  d["evicted_cap"] = p.counters.evicted_cap;
  return d;
}

py::object LoadPolicyWords(EmbeddingShard& shard, const Keys& keys, const Slots& uses, const Keys& last_step,
                           bool return_deltas) {
  RequireKeys(keys, "load_policy_words");
  const size_t n = static_cast<size_t>(keys.shape(0));
  if (uses.ndim() != 1 || static_cast<size_t>(uses.shape(0)) != n || last_step.ndim() != 1 ||
      static_cast<size_t>(last_step.shape(0)) != n) {
    throw std::invalid_argument("load_policy_words: uses and last_step must be 1-D with len(keys) = " +
                                std::to_string(n) + " entries, got shapes " + Shape(uses) + " and " + Shape(last_step));
  }
  DeltaBatch deltas;
  {
    py::gil_scoped_release release;
    shard.LoadPolicyWords(keys.data(), uses.data(), last_step.data(), n,
                          DeltaBatchSink(return_deltas ? &deltas : nullptr).sink());
  }
  if (!return_deltas) return py::none();
  return DeltasToNumpy(shard, std::move(deltas));
}

py::tuple TakeDirty(EmbeddingShard& shard) {
  EmbeddingShard::Rows rows;
  {
    py::gil_scoped_release release;
    rows = shard.TakeDirty();
  }
  const py::ssize_t n = static_cast<py::ssize_t>(rows.keys.size());
  return py::make_tuple(ToNumpy(std::move(rows.keys), {n}), ToNumpy(std::move(rows.values), {n, shard.dim()}),
                        ToNumpy(std::move(rows.state), {n, shard.layout().state_floats}));
}

py::object Load(EmbeddingShard& shard, const Keys& keys, const Floats& values, const std::optional<Floats>& state,
                bool return_deltas, const std::shared_ptr<DeltaForwarder>& forwarder, const std::string& table) {
  RequireKeys(keys, "load");
  const size_t n = static_cast<size_t>(keys.shape(0));
  RequireRows(values, n, shard.dim(), "load", "values");
  if (state) RequireRows(*state, n, shard.layout().state_floats, "load", "state");
  CheckForward("load", return_deltas, forwarder);
  if (forwarder) {
    const WorkerSeqs no_pushes;  // the Mutation refers to it: it must outlive the sink
    DeltaForwarder::Mutation sink(*forwarder, table, no_pushes);
    py::gil_scoped_release release;
    shard.Load(keys.data(), values.data(), state ? state->data() : nullptr, n, &sink);
    return py::none();
  }
  DeltaBatch deltas;
  {
    py::gil_scoped_release release;
    shard.Load(keys.data(), values.data(), state ? state->data() : nullptr, n,
               DeltaBatchSink(return_deltas ? &deltas : nullptr).sink());
  }
  if (!return_deltas) return py::none();
  return DeltasToNumpy(shard, std::move(deltas));
}

py::tuple ExportPending(const EmbeddingShard& shard) {
  EmbeddingShard::Rows rows;
  {
    py::gil_scoped_release release;
    rows = shard.ExportPending();
  }
  const py::ssize_t n = static_cast<py::ssize_t>(rows.keys.size());
  return py::make_tuple(ToNumpy(std::move(rows.keys), {n}), ToNumpy(std::move(rows.uses), {n}),
                        ToNumpy(std::move(rows.last_step), {n}));
}

void LoadPending(EmbeddingShard& shard, const Keys& keys, const Slots& uses, const Keys& last_step) {
  RequireKeys(keys, "load_pending");
  const size_t n = static_cast<size_t>(keys.shape(0));
  if (uses.ndim() != 1 || static_cast<size_t>(uses.shape(0)) != n || last_step.ndim() != 1 ||
      static_cast<size_t>(last_step.shape(0)) != n) {
    throw std::invalid_argument("load_pending: uses and last_step must be 1-D with len(keys) = " + std::to_string(n) +
                                " entries, got shapes " + Shape(uses) + " and " + Shape(last_step));
  }
  py::gil_scoped_release release;
  shard.LoadPending(keys.data(), uses.data(), last_step.data(), n);
}

void StageLoadWords(EmbeddingShard& shard, const Keys& keys, const Slots& uses, const Keys& last_step,
                    const Keys& pending_keys, const Slots& pending_uses, const Keys& pending_last_step) {
  RequireKeys(keys, "stage_load_words");
  RequireKeys(pending_keys, "stage_load_words");
  const size_t n = static_cast<size_t>(keys.shape(0)), p = static_cast<size_t>(pending_keys.shape(0));
  auto same = [](const py::array& a, size_t len) { return a.ndim() == 1 && static_cast<size_t>(a.shape(0)) == len; };
  if (!same(uses, n) || !same(last_step, n) || !same(pending_uses, p) || !same(pending_last_step, p)) {
    throw std::invalid_argument(
        "stage_load_words: uses and last_step need len(keys) entries, pending_uses and "
        "pending_last_step len(pending_keys)");
  }
  py::gil_scoped_release release;
  shard.StageLoadWords(keys.data(), uses.data(), last_step.data(), n, pending_keys.data(), pending_uses.data(),
                       pending_last_step.data(), p);
}

using Cells = py::array_t<uint16_t, py::array::c_style>;

void RequireCells(const Cells& cells, const char* where) {
  if (cells.ndim() != 1) throw std::invalid_argument(std::string(where) + ": cells must be 1-D, got " + Shape(cells));
}

py::object LoadSketch(EmbeddingShard& shard, const Cells& cells, bool return_deltas) {
  RequireCells(cells, "load_sketch");
  DeltaBatch deltas;
  {
    py::gil_scoped_release release;
    shard.LoadSketch(cells.data(), static_cast<size_t>(cells.shape(0)),
                     DeltaBatchSink(return_deltas ? &deltas : nullptr).sink());
  }
  if (!return_deltas) return py::none();
  return DeltasToNumpy(shard, std::move(deltas));
}

void StageSketch(EmbeddingShard& shard, const Cells& cells) {
  RequireCells(cells, "stage_sketch");
  py::gil_scoped_release release;
  shard.StageSketch(cells.data(), static_cast<size_t>(cells.shape(0)));
}

py::array_t<uint32_t> SketchEstimate(const EmbeddingShard& shard, const Keys& keys) {
  RequireKeys(keys, "sketch_estimate");
  std::vector<uint32_t> out(static_cast<size_t>(keys.shape(0)));
  {
    py::gil_scoped_release release;
    shard.SketchEstimate(keys.data(), out.size(), out.data());
  }
  const py::ssize_t n = static_cast<py::ssize_t>(out.size());
  return ToNumpy(std::move(out), {n});
}

Bytes ReadBlock(const EmbeddingShard& shard, size_t b) {
  Bytes out(static_cast<py::ssize_t>(shard.block_bytes()));
  {
    py::gil_scoped_release release;
    shard.ReadBlock(b, out.mutable_data());
  }
  return out;
}

Bytes ReadSlots(const EmbeddingShard& shard, size_t slot, size_t count) {
  const size_t rb = shard.layout().bytes();
  if (count > (size_t{1} << 34) / rb) {
    throw std::invalid_argument("read_slots: count " + std::to_string(count) + " is too large");
  }
  Bytes out({static_cast<py::ssize_t>(count), static_cast<py::ssize_t>(rb)});
  {
    py::gil_scoped_release release;
    shard.ReadSlots(slot, count, out.mutable_data());
  }
  return out;
}

void BeginRestore(EmbeddingShard& shard, const Keys& keys, const Slots& slots, size_t high_water,
                  const py::function& handler) {
  RequireKeys(keys, "begin_restore");
  if (slots.ndim() != 1 || slots.shape(0) != keys.shape(0)) {
    throw std::invalid_argument("begin_restore: slots must be 1-D with len(keys) = " + std::to_string(keys.shape(0)) +
                                " entries, got shape " + Shape(slots));
  }
  // The handler may be dropped by a thread without the GIL: delete the Python callable under it.
  std::shared_ptr<py::function> fn(new py::function(handler), [](py::function* f) {
    py::gil_scoped_acquire acquire;
    delete f;
  });
  const size_t block_bytes = shard.block_bytes();
  BlockFaultHandler call = [fn, block_bytes](size_t b, uint8_t* out) {
    py::gil_scoped_acquire acquire;
    py::object result = (*fn)(b);
    Bytes bytes = Bytes::ensure(result);
    if (!bytes || static_cast<size_t>(bytes.size()) != block_bytes) {
      throw std::invalid_argument("begin_restore: handler(" + std::to_string(b) +
                                  ") must return a uint8 array of block_bytes = " + std::to_string(block_bytes) +
                                  " bytes");
    }
    std::memcpy(out, bytes.data(), block_bytes);
  };
  py::gil_scoped_release release;
  shard.BeginRestore(keys.data(), slots.data(), static_cast<size_t>(keys.shape(0)), high_water, std::move(call));
}

bool RestoreBlock(EmbeddingShard& shard, size_t b, const Bytes& bytes) {
  if (static_cast<size_t>(bytes.size()) != shard.block_bytes()) {
    throw std::invalid_argument("restore_block: bytes must hold block_bytes = " + std::to_string(shard.block_bytes()) +
                                " bytes, got " + std::to_string(bytes.size()));
  }
  py::gil_scoped_release release;
  return shard.RestoreBlock(b, bytes.data());
}

}  // namespace

void BindShard(py::module_& m) {
  py::enum_<OptimizerKind>(m, "OptimizerKind")
      .value("SGD", OptimizerKind::kSGD)
      .value("MOMENTUM", OptimizerKind::kMomentum)
      .value("ADAGRAD", OptimizerKind::kAdagrad)
      .value("ADAM", OptimizerKind::kAdam)
      .value("FTRL", OptimizerKind::kFtrl);
  py::enum_<InitializerKind>(m, "InitializerKind")
      .value("ZEROS", InitializerKind::kZeros)
      .value("CONSTANT", InitializerKind::kConstant)
      .value("UNIFORM", InitializerKind::kUniform)
      .value("TRUNCATED_NORMAL", InitializerKind::kTruncatedNormal)
      .value("NORMAL", InitializerKind::kNormal);

  py::class_<RowPolicyConfig>(m, "RowPolicyConfig", "Admission and eviction rules of a table (see row_policy.h)")
      .def(py::init<>())
      .def_readwrite("admit_min_count", &RowPolicyConfig::admit_min_count)
      .def_readwrite("ttl_steps", &RowPolicyConfig::ttl_steps)
      .def_readwrite("min_l2", &RowPolicyConfig::min_l2)
      .def_readwrite("max_rows", &RowPolicyConfig::max_rows)
      .def_readwrite("evict_every_steps", &RowPolicyConfig::evict_every_steps)
      .def_property(
          "policy", [](const RowPolicyConfig& c) { return std::string(EvictPolicyName(c.policy)); },
          [](RowPolicyConfig& c, const std::string& name) { c.policy = ParseEvictPolicy(name, "policy"); })
      .def_property(
          "admit_counter", [](const RowPolicyConfig& c) { return std::string(AdmitCounterName(c.admit_counter)); },
          [](RowPolicyConfig& c, const std::string& name) {
            c.admit_counter = ParseAdmitCounter(name, "admit_counter");
          })
      .def_readwrite("sketch_width", &RowPolicyConfig::sketch_width)
      .def_readwrite("sketch_depth", &RowPolicyConfig::sketch_depth)
      .def_readwrite("sketch_decay_every_steps", &RowPolicyConfig::sketch_decay_every_steps)
      .def_property_readonly("sketch", &RowPolicyConfig::sketch)
      .def_property_readonly("active", &RowPolicyConfig::active)
      .def("validate", &RowPolicyConfig::Validate, py::arg("block_slots"));

  py::class_<OptimizerConfig>(m, "OptimizerConfig", "Sparse optimizer settings (see optimizer.h)")
      .def(py::init<>())
      .def_readwrite("kind", &OptimizerConfig::kind)
      .def_readwrite("learning_rate", &OptimizerConfig::learning_rate)
      .def_readwrite("momentum", &OptimizerConfig::momentum)
      .def_readwrite("use_nesterov", &OptimizerConfig::use_nesterov)
      .def_readwrite("initial_accumulator", &OptimizerConfig::initial_accumulator)
      .def_readwrite("epsilon", &OptimizerConfig::epsilon)
      .def_readwrite("beta1", &OptimizerConfig::beta1)
      .def_readwrite("beta2", &OptimizerConfig::beta2)
      .def_readwrite("learning_rate_power", &OptimizerConfig::learning_rate_power)
      .def_readwrite("l1", &OptimizerConfig::l1)
      .def_readwrite("l2", &OptimizerConfig::l2)
      .def_readwrite("l2_shrinkage", &OptimizerConfig::l2_shrinkage)
      .def("validate", &OptimizerConfig::Validate);

  py::class_<InitializerConfig>(m, "InitializerConfig", "Row initialiser settings (see initializer.h)")
      .def(py::init<>())
      .def_readwrite("kind", &InitializerConfig::kind)
      .def_readwrite("value", &InitializerConfig::value)
      .def_readwrite("minval", &InitializerConfig::minval)
      .def_readwrite("maxval", &InitializerConfig::maxval)
      .def_readwrite("mean", &InitializerConfig::mean)
      .def_readwrite("stddev", &InitializerConfig::stddev)
      .def("validate", &InitializerConfig::Validate);

  m.def(
      "initialize_row",
      [](const InitializerConfig& config, uint64_t seed, int64_t key, int dim) {
        config.Validate();
        if (dim < 1) throw std::invalid_argument("initialize_row: dim must be >= 1, got " + std::to_string(dim));
        Floats out(dim);
        InitializeRow(config, seed, key, out.mutable_data(), dim);
        return out;
      },
      py::arg("config"), py::arg("seed"), py::arg("key"), py::arg("dim"),
      "The initial row of `key` for a table seeded with `seed` (what a first pull inserts).");

  py::class_<ShardConfig>(m, "ShardConfig", "Settings of one embedding shard")
      .def(py::init<>())
      .def_readwrite("dim", &ShardConfig::dim)
      .def_readwrite("optimizer", &ShardConfig::optimizer)
      .def_readwrite("initializer", &ShardConfig::initializer)
      .def_readwrite("seed", &ShardConfig::seed)
      .def_readwrite("block_slots", &ShardConfig::block_slots)
      .def_readwrite("row_policy", &ShardConfig::row_policy)
      .def_readwrite("memory_budget", &ShardConfig::memory_budget,
                     "bytes of rows, key index and slot lists kept in RAM (0: all); the rest in spill_dir")
      .def_readwrite("spill_dir", &ShardConfig::spill_dir)
      .def("validate", &ShardConfig::Validate);

  py::class_<RecordLayout>(m, "RecordLayout", "Byte layout of a slot record: key | flags | value | state")
      .def_readonly("dim", &RecordLayout::dim)
      .def_readonly("state_floats", &RecordLayout::state_floats)
      .def_property_readonly_static("key_offset", [](const py::object&) { return RecordLayout::kKeyOffset; })
      .def_property_readonly_static("flags_offset", [](const py::object&) { return RecordLayout::kFlagsOffset; })
      .def_property_readonly_static("value_offset", [](const py::object&) { return RecordLayout::kValueOffset; })
      .def_property_readonly_static("live_flag", [](const py::object&) { return RecordLayout::kLive; })
      .def_property_readonly_static("clock_shift", [](const py::object&) { return RecordLayout::kClockShift; })
      .def_property_readonly("state_offset", &RecordLayout::state_offset)
      .def_property_readonly("bytes", &RecordLayout::bytes);

  py::class_<EmbeddingShard, std::shared_ptr<EmbeddingShard>>(
      m, "EmbeddingShard", "One shard of an embedding table: int64 keys -> rows in stable slot records")
      .def(py::init<const ShardConfig&>(), py::arg("config"))
      .def_property_readonly("config", &EmbeddingShard::config)
      .def_property_readonly("layout", &EmbeddingShard::layout)
      .def_property_readonly("dim", &EmbeddingShard::dim)
      .def_property_readonly("record_bytes", [](const EmbeddingShard& s) { return s.layout().bytes(); })
      .def_property_readonly("state_floats", [](const EmbeddingShard& s) { return s.layout().state_floats; })
      .def_property_readonly("block_slots", &EmbeddingShard::block_slots)
      .def_property_readonly("block_bytes", &EmbeddingShard::block_bytes)
      .def_property_readonly("num_blocks",
                             py::cpp_function(&EmbeddingShard::num_blocks, py::call_guard<py::gil_scoped_release>()))
      .def_property_readonly(
          "missing_blocks", py::cpp_function(&EmbeddingShard::missing_blocks, py::call_guard<py::gil_scoped_release>()))
      .def("block_missing", &EmbeddingShard::block_missing, py::arg("block"), py::call_guard<py::gil_scoped_release>(),
           "Whether block `block` still waits to be restored.")
      .def(
          "missing_blocks_of",
          [](const EmbeddingShard& shard, const Keys& keys) {
            RequireKeys(keys, "missing_blocks_of");
            std::vector<size_t> blocks;
            {
              py::gil_scoped_release release;
              blocks = shard.MissingBlocksOf(keys.data(), static_cast<size_t>(keys.size()));
            }
            return py::array_t<uint64_t>(static_cast<py::ssize_t>(blocks.size()), blocks.data());
          },
          py::arg("keys"),
          "The missing blocks (ascending, uint64) holding rows of `keys`: to restore together before an access.")
      .def("pull", &Pull, py::arg("keys"), py::arg("return_deltas") = false, py::arg("forwarder") = nullptr,
           py::arg("table") = "", py::arg("pushes") = WorkerSeqs{},
           "Rows of keys (inserting missing keys with their initial rows): float32[n, dim]; with "
           "return_deltas, (rows, (slots, xor)); with a DeltaForwarder, the inserts are recorded on it as a "
           "mutation of `table` (--ft ec).")
      .def("find", &Find, py::arg("keys"), "(rows, found) without inserting; missing rows are zeros.")
      .def("clocks", &Clocks, py::arg("keys"),
           "int32[n]: each key's row clock (its version, changed by every mutation), -1 when missing.")
      .def("pull_stale", &PullStale, py::arg("keys"), py::arg("known"), py::arg("staleness"),
           py::arg("forwarder") = nullptr, py::arg("table") = "",
           "(rows float32[m, dim], clocks int32[n], sent bool[n]): a pull that sends only the rows whose "
           "cached copy (known: int32 clocks, -1 = none) is more than `staleness` versions behind, and missing "
           "keys (inserted); rows holds the sent rows in the order of keys. forwarder: the inserts reach "
           "parity (--ft ec).")
      .def("push", &Push, py::arg("keys"), py::arg("grads"), py::arg("step"), py::arg("return_deltas") = false,
           py::arg("forwarder") = nullptr, py::arg("table") = "", py::arg("pushes") = WorkerSeqs{},
           py::arg("repeats") = py::none(), py::arg("ttl_before") = 0,
           "Sums duplicate keys' grads, then one optimizer step per unique key (with repeats: grads[i] sums "
           "repeats[i] gradients, and a key takes as many steps of its mean gradient); a push that ends with an "
           "eviction pass also frees the records last updated before step ttl_before (0: none); with return_deltas, "
           "(slots: uint32[m], xor: uint8[m, record_bytes]); with a DeltaForwarder, the deltas are recorded on "
           "it as a mutation of `table` that applied the worker pushes `pushes` ({worker: seq}, --ft ec).")
      .def("erase", &Erase, py::arg("keys"), py::arg("return_deltas") = false,
           "Frees the keys' slots; returns the count (and the deltas when asked).")
      .def("size", &EmbeddingShard::size, py::call_guard<py::gil_scoped_release>())
      .def("__len__", &EmbeddingShard::size, py::call_guard<py::gil_scoped_release>())
      .def("memory",
           [](const EmbeddingShard& s) {
             ShardMemoryStats stats;
             {
               py::gil_scoped_release release;
               stats = s.memory();
             }
             return MemoryDict(stats);
           })
      .def("export", &Export, py::arg("with_words") = false,
           "(keys, values, state) of every live row, in slot order; with_words (tables with row rules): "
           "(keys, values, state, uses, last_step)")
      .def("sorted_keys", &SortedKeys,
           "int64[n]: the keys of every row (pending ids left out), ascending (a key-order export's index)")
      .def("export_keys", &ExportKeys, py::arg("keys"), py::arg("with_words") = false,
           "(keys, values, state) of the rows of `keys`, in that order, keys that are no row left out (a chunk of a "
           "key-order export); with_words (tables with row rules): (keys, values, state, uses, last_step)")
      .def("evict", &Evict, py::arg("now_step"), py::arg("return_deltas") = false, py::arg("forwarder") = nullptr,
           py::arg("table") = "",
           "One eviction pass at now_step (row_policy.h): {ttl, l2, cap, keys}, with the deltas when asked")
      .def_property_readonly("eviction_generation", &EmbeddingShard::eviction_generation,
                             "Eviction passes that freed something (a cache's copies are not trusted across one)")
      .def("policy_stats", &PolicyStatsDict,
           "{rows, pending (now), admitted, not_admitted_lookups, evicted_ttl, evicted_l2, evicted_cap}")
      .def("export_pending", &ExportPending, "(keys, uses, last_step) of the ids still counting toward admission")
      .def("load_pending", &LoadPending, py::arg("keys"), py::arg("uses"), py::arg("last_step"),
           "Puts a save's pending ids back (absent keys, uses in [1, admit_min_count))")
      .def("stage_load_words", &StageLoadWords, py::arg("keys"), py::arg("uses"), py::arg("last_step"),
           py::arg("pending_keys"), py::arg("pending_uses"), py::arg("pending_last_step"),
           "Words and pending ids the next load writes within its own deltas (a resume through an agent)")
      .def_property_readonly("sketch_slots", &EmbeddingShard::sketch_slots,
                             "Slots reserved for the sketch counter's cells (row_policy.h); 0 without one")
      .def(
          "export_sketch",
          [](const EmbeddingShard& shard) {
            std::vector<uint16_t> cells;
            {
              py::gil_scoped_release release;
              cells = shard.ExportSketch();
            }
            const py::ssize_t n = static_cast<py::ssize_t>(cells.size());
            return ToNumpy(std::move(cells), {n});
          },
          "The sketch counter's cells (uint16, sketch_depth rows of sketch_width); empty without one")
      .def("load_sketch", &LoadSketch, py::arg("cells"), py::arg("return_deltas") = false,
           "Adds a save's sketch cells cell-wise, saturating (into a fresh shard: a copy)")
      .def("stage_sketch", &StageSketch, py::arg("cells"),
           "Sketch cells the next load adds within its own deltas (a resume through an agent)")
      .def("sketch_estimate", &SketchEstimate, py::arg("keys"), "The sketch's estimated count of each key")
      .def("load_policy_words", &LoadPolicyWords, py::arg("keys"), py::arg("uses"), py::arg("last_step"),
           py::arg("return_deltas") = false, "Sets uses and last_step of existing rows (a save's words after load)")
      .def("track_dirty", &EmbeddingShard::TrackDirty, py::arg("on"), py::call_guard<py::gil_scoped_release>(),
           "Starts (clearing) or stops the set of rows changed since the last take_dirty.")
      .def_property_readonly("tracking_dirty", &EmbeddingShard::tracking_dirty)
      .def("take_dirty", &TakeDirty,
           "(keys, values, state) of the rows changed since the last take, in slot "
           "order; clears the set. RuntimeError when tracking is off.")
      .def("load", &Load, py::arg("keys"), py::arg("values"), py::arg("state") = py::none(),
           py::arg("return_deltas") = false, py::arg("forwarder") = nullptr, py::arg("table") = "",
           "Inserts or overwrites rows; state None: fresh optimizer state. forwarder: a resume's rows reach parity.")
      .def("read_block", &ReadBlock, py::arg("b"), "Bytes of block b (zeros past the end)")
      .def("read_slots", &ReadSlots, py::arg("slot"), py::arg("count"), "uint8[count, record_bytes]")
      .def("begin_restore", &BeginRestore, py::arg("keys"), py::arg("slots"), py::arg("high_water"), py::arg("handler"),
           "Starts rebuilding a lost shard into this empty one; handler(b) -> uint8[block_bytes] is "
           "called (with the GIL, under the shard's lock: it must not call back into this shard) for a "
           "missing block an access touches.")
      .def("restore_block", &RestoreBlock, py::arg("b"), py::arg("bytes"),
           "Installs block b unless already restored; returns whether it was installed.");

  m.def("epoch_after_evictions", &EpochAfterEvictions, py::arg("epoch"), py::arg("generations"),
        "A server's epoch moved on by its tables' eviction generations (row_policy.h); unchanged at 0");
  m.def("register_shard", &ShardRegistry::Register, py::arg("shard"),
        "Registers a shard for the TF ops; returns its int64 handle.");
  m.def("unregister_shard", &ShardRegistry::Unregister, py::arg("handle"));
  m.def("registered_shard", &ShardRegistry::Get, py::arg("handle"), "The shard of a handle (ValueError when unknown).");
}

}  // namespace xdl_ec::python

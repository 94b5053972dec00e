// xdl_ec._core.RowCache: numpy in/out over xdl_ec::RowCache (a worker's cache of hot rows, row_cache.h).
// Shapes and dtypes are checked here; the GIL is released around the work. Like the C++ class it is not
// thread-safe: one worker thread uses it at a time.
#include <pybind11/numpy.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "xdl_ec/row_cache.h"

namespace py = pybind11;

namespace xdl_ec::python {
namespace {

// Keys take safe casts (int32 -> int64), as EmbeddingShard's do.
using Keys = py::array_t<int64_t, py::array::c_style>;

std::string Shape(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

size_t RequireKeys(const Keys& keys, const char* where) {
  if (keys.ndim() != 1) {
    throw std::invalid_argument(std::string("RowCache.") + where + ": keys must be 1-D, got shape " + Shape(keys));
  }
  return static_cast<size_t>(keys.shape(0));
}

// `obj` as a C-contiguous array of exactly T with n rows (of `width` values; 0: 1-D). Another dtype is
// refused, not converted: a float64 gradient or an int64 clock is more likely a mix-up than something
// to round.
template <class T>
py::array_t<T, py::array::c_style> Exact(const py::object& obj, const char* where, const char* name, size_t n,
                                         int width, const char* dtype, const char* shape_name) {
  const py::array a = py::array::ensure(obj);
  const bool shape_ok =
      a && (width == 0 ? a.ndim() == 1 && static_cast<size_t>(a.shape(0)) == n
                       : a.ndim() == 2 && static_cast<size_t>(a.shape(0)) == n && a.shape(1) == width);
  if (!a || !py::isinstance<py::array_t<T>>(a) || !shape_ok) {  // isinstance: the dtype is equivalent to T's
    const std::string expected_shape =
        width == 0 ? "(" + std::to_string(n) + ",)" : "(" + std::to_string(n) + ", " + std::to_string(width) + ")";
    throw std::invalid_argument(std::string("RowCache.") + where + ": " + name + " must be " + dtype +
                                " array of shape " + expected_shape + " = " + shape_name + ", got " +
                                (a ? "dtype " + py::str(a.dtype()).cast<std::string>() + " and shape " + Shape(a)
                                   : std::string(py::str(py::type::of(obj).attr("__name__")))));
  }
  return py::array_t<T, py::array::c_style>::ensure(a);
}

// Hands a std::vector to numpy without copying: the array's base owns the vector.
template <class T>
py::array_t<T> ToNumpy(std::vector<T>&& v, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule base(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, owned->data(), base);
}

py::tuple PendingToNumpy(RowCache::Pending&& p, int dim) {
  const py::ssize_t m = static_cast<py::ssize_t>(p.keys.size());
  return py::make_tuple(ToNumpy(std::move(p.keys), {m}), ToNumpy(std::move(p.grads), {m, dim}),
                        ToNumpy(std::move(p.counts), {m}));
}

RowCache::Policy ParsePolicy(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name == "lru") return RowCache::Policy::kLRU;
  if (name == "lfu") return RowCache::Policy::kLFU;
  throw std::invalid_argument("RowCache: policy must be \"lru\" or \"lfu\", got \"" + name + "\"");
}

std::shared_ptr<RowCache> Make(int dim, int64_t capacity, int64_t staleness, const std::string& policy) {
  if (capacity < 1) {
    throw std::invalid_argument("RowCache: capacity must be >= 1 row, got " + std::to_string(capacity) +
                                " (to run without a cache, do not create one)");
  }
  if (staleness < 0 || staleness > static_cast<int64_t>(UINT32_MAX)) {
    throw std::invalid_argument("RowCache: staleness must be in [0, 4294967295] (0: exact), got " +
                                std::to_string(staleness));
  }
  return std::make_shared<RowCache>(dim, static_cast<size_t>(capacity), static_cast<uint32_t>(staleness),
                                    ParsePolicy(policy));
}

py::tuple Lookup(RowCache& cache, const Keys& keys) {
  const size_t n = RequireKeys(keys, "lookup");
  py::array_t<int32_t> known(static_cast<py::ssize_t>(n));
  py::array_t<uint64_t> tags(static_cast<py::ssize_t>(n));
  {
    py::gil_scoped_release release;
    cache.Lookup(keys.data(), n, known.mutable_data(), tags.mutable_data());
  }
  return py::make_tuple(known, tags);
}

py::array_t<float> Get(const RowCache& cache, const Keys& keys) {
  const size_t n = RequireKeys(keys, "get");
  py::array_t<float> rows({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(cache.dim())});
  py::gil_scoped_release release;
  cache.Get(keys.data(), n, rows.mutable_data());
  return rows;
}

py::tuple Fill(RowCache& cache, const Keys& keys, const py::object& rows, const py::object& clocks,
               const py::object& tags) {
  const size_t n = RequireKeys(keys, "fill");
  const auto rows32 = Exact<float>(rows, "fill", "rows", n, cache.dim(), "a float32", "(len(keys), dim)");
  const auto clocks32 = Exact<int32_t>(clocks, "fill", "clocks", n, 0, "an int32", "(len(keys),)");
  // tags: one per row, or one Python int for all (rows of one server share its epoch)
  py::array_t<uint64_t, py::array::c_style> tags64;
  if (py::isinstance<py::int_>(tags)) {
    if (tags < py::int_(0) || tags > py::int_(UINT64_MAX)) {
      throw std::invalid_argument("RowCache.fill: a tag must be in [0, 2^64), got " +
                                  py::str(tags).cast<std::string>());
    }
    const uint64_t tag = tags.cast<uint64_t>();
    tags64 = py::array_t<uint64_t, py::array::c_style>(static_cast<py::ssize_t>(n));
    std::fill(tags64.mutable_data(), tags64.mutable_data() + n, tag);
  } else {
    tags64 = Exact<uint64_t>(tags, "fill", "tags", n, 0, "a uint64", "(len(keys),) (or one int for every row)");
  }
  RowCache::Pending evicted;
  {
    py::gil_scoped_release release;
    evicted = cache.Fill(keys.data(), n, rows32.data(), clocks32.data(), tags64.data());
  }
  return PendingToNumpy(std::move(evicted), cache.dim());
}

py::tuple Accumulate(RowCache& cache, const Keys& keys, const py::object& grads) {
  const size_t n = RequireKeys(keys, "accumulate");
  const auto grads32 = Exact<float>(grads, "accumulate", "grads", n, cache.dim(), "a float32", "(len(keys), dim)");
  RowCache::Due due;
  {
    py::gil_scoped_release release;
    due = cache.Accumulate(keys.data(), n, grads32.data());
  }
  const py::ssize_t m = static_cast<py::ssize_t>(due.keys.size());
  return py::make_tuple(ToNumpy(std::move(due.keys), {m}), ToNumpy(std::move(due.grads), {m, cache.dim()}),
                        ToNumpy(std::move(due.counts), {m}));
}

py::tuple Invalidate(RowCache& cache, const Keys& keys) {
  const size_t n = RequireKeys(keys, "invalidate");
  RowCache::Pending dropped;
  {
    py::gil_scoped_release release;
    dropped = cache.Invalidate(keys.data(), n);
  }
  return PendingToNumpy(std::move(dropped), cache.dim());
}

py::dict StatsDict(const RowCache::Stats& s) {
  py::dict d;
  d["rows"] = s.rows;
  d["capacity"] = s.capacity;
  d["hits"] = s.hits;
  d["misses"] = s.misses;
  d["evictions"] = s.evictions;
  d["pending_lines"] = s.pending_lines;
  d["pending_count"] = s.pending_count;
  d["max_pending_count"] = s.max_pending_count;
  d["write_backs"] = s.write_backs;
  d["accumulated"] = s.accumulated;
  d["written_through"] = s.written_through;
  return d;
}

}  // namespace

void BindRowCache(py::module_& m) {
  py::class_<RowCache, std::shared_ptr<RowCache>>(
      m, "RowCache",
      "A worker's cache of one table's hot rows with bounded staleness (HET): cached clocks for pull_stale, "
      "cached rows, and gradients held until `staleness` of them were taken (0: exact, none held). Not "
      "thread-safe: one thread at a time.")
      .def(py::init(&Make), py::arg("dim"), py::arg("capacity"), py::arg("staleness"), py::arg("policy") = "lru")
      .def_property_readonly("dim", &RowCache::dim)
      .def_property_readonly("capacity", &RowCache::capacity)
      .def_property_readonly("staleness", &RowCache::staleness)
      .def_property_readonly("policy",
                             [](const RowCache& c) { return c.policy() == RowCache::Policy::kLFU ? "lfu" : "lru"; })
      .def("__len__", &RowCache::size)
      .def_property_readonly("pending_count", &RowCache::pending_count,
                             "Gradients held in lines, not yet handed back (stats()['pending_count'], cheaper).")
      .def("lookup", &Lookup, py::arg("keys"),
           "(known int32[n], tags uint64[n]): each key's cached clock (-1: not cached) and tag (0); counts hits "
           "and misses and touches the lines hit.")
      .def("get", &Get, py::arg("keys"),
           "float32[n, dim]: the cached rows (ValueError naming a key not cached). Get a step's hits before "
           "fill: a fill may evict them.")
      .def("fill", &Fill, py::arg("keys"), py::arg("rows"), py::arg("clocks"), py::arg("tags"),
           "Caches rows (float32[n, dim]) at clocks (int32[n], >= 0) with tags (uint64[n], or one int for "
           "all); returns the evicted lines' pending gradient (keys int64[m], grads float32[m, dim], counts "
           "uint32[m]), to push. Keys of one fill never evict each other; beyond that its new keys stay "
           "uncached.")
      .def("accumulate", &Accumulate, py::arg("keys"), py::arg("grads"),
           "(keys int64[m], grads float32[m, dim], counts uint32[m]) to push now, in input order: uncached "
           "keys' gradients as they are (count 1), cached lines' sums once `staleness` gradients were taken "
           "(count: how many; staleness 0: everything, bit for bit).")
      .def(
          "flush",
          [](RowCache& c) {
            RowCache::Pending p;
            {
              py::gil_scoped_release release;
              p = c.Flush();
            }
            return PendingToNumpy(std::move(p), c.dim());
          },
          "(keys, grads, counts) of every pending gradient, by ascending key, cleared; lines stay cached.")
      .def("invalidate", &Invalidate, py::arg("keys"),
           "Drops the keys' lines; returns their pending gradient (keys, grads, counts) in input order.")
      .def(
          "clear",
          [](RowCache& c) {
            RowCache::Pending p;
            {
              py::gil_scoped_release release;
              p = c.Clear();
            }
            return PendingToNumpy(std::move(p), c.dim());
          },
          "Drops every line; returns all pending gradient (keys, grads, counts) by ascending key.")
      .def(
          "resize",
          [](RowCache& c, int64_t capacity) {
            if (capacity < 1) {
              throw std::invalid_argument("RowCache.resize: capacity must be >= 1 row, got " +
                                          std::to_string(capacity));
            }
            RowCache::Pending p;
            {
              py::gil_scoped_release release;
              p = c.Resize(static_cast<size_t>(capacity));
            }
            return PendingToNumpy(std::move(p), c.dim());
          },
          py::arg("capacity"),
          "Sets the capacity in rows, keeping the lines; shrinking evicts the policy's victims and returns "
          "their pending gradient (keys, grads, counts) in eviction order.")
      .def(
          "stats", [](const RowCache& c) { return StatsDict(c.stats()); },
          "dict: rows, capacity, hits, misses, evictions, pending_lines, pending_count (gradients held), "
          "max_pending_count, write_backs, accumulated, written_through");
}

}  // namespace xdl_ec::python

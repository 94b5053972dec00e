// xdl_ec._core's table-group calls: ShardGroup (one pull and one push over the shards of several tables of one dim)
// and group_sorted_unique / group_fresh (a group's distinct keys in one pass), numpy in and out, the GIL released
// around the work.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "xdl_ec/group_keys.h"
#include "xdl_ec/shard_group.h"

namespace py = pybind11;

namespace xdl_ec::python {
namespace {

using Keys = py::array_t<int64_t, py::array::c_style>;
using Floats = py::array_t<float, py::array::c_style>;
using Offsets = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// The group and the shards it points into (kept alive as long as it is).
class BoundShardGroup {
 public:
  explicit BoundShardGroup(std::vector<std::shared_ptr<EmbeddingShard>> shards)
      : owned_(std::move(shards)), group_(Pointers(owned_)) {}

  Floats Pull(const Keys& keys, const Offsets& offsets) const {
    const size_t n = CheckedKeys(keys, offsets, "pull");
    Floats out = AlignedRows(n, static_cast<size_t>(group_.dim()));
    py::gil_scoped_release release;
    group_.Pull(keys.data(), offsets.data(), out.mutable_data());
    return out;
  }

  void Push(const Keys& keys, const Floats& grads, const Offsets& offsets, int64_t step,
            const std::optional<Offsets>& ttl_before) const {
    const size_t n = CheckedKeys(keys, offsets, "push");
    if (grads.ndim() != 2 || static_cast<size_t>(grads.shape(0)) != n || grads.shape(1) != group_.dim()) {
      throw std::invalid_argument("ShardGroup.push: grads must be float32[len(keys), dim] = [" + std::to_string(n) +
                                  ", " + std::to_string(group_.dim()) + "]");
    }
    if (ttl_before && static_cast<size_t>(ttl_before->size()) != group_.size()) {
      throw std::invalid_argument("ShardGroup.push: ttl_before must hold one cutoff per table (" +
                                  std::to_string(group_.size()) + "), got " + std::to_string(ttl_before->size()));
    }
    const int64_t* cutoffs = ttl_before ? ttl_before->data() : nullptr;
    py::gil_scoped_release release;
    group_.Push(keys.data(), grads.data(), offsets.data(), step, cutoffs);
  }

  size_t size() const { return group_.size(); }
  int dim() const { return group_.dim(); }

 private:
  static std::vector<EmbeddingShard*> Pointers(const std::vector<std::shared_ptr<EmbeddingShard>>& shards) {
    std::vector<EmbeddingShard*> out;
    out.reserve(shards.size());
    for (const auto& s : shards) out.push_back(s.get());
    return out;
  }

  size_t CheckedKeys(const Keys& keys, const Offsets& offsets, const char* where) const {
    if (keys.ndim() != 1) throw std::invalid_argument(std::string("ShardGroup.") + where + ": keys must be 1-D");
    if (offsets.ndim() != 1 || static_cast<size_t>(offsets.shape(0)) != group_.size() + 1) {
      throw std::invalid_argument(std::string("ShardGroup.") + where + ": offsets must be int64[tables + 1] = [" +
                                  std::to_string(group_.size() + 1) + "]");
    }
    const auto n = static_cast<size_t>(keys.shape(0));
    group_.CheckOffsets(offsets.data(), n);
    return n;
  }

  std::vector<std::shared_ptr<EmbeddingShard>> owned_;
  ShardGroup group_;
};

py::tuple GroupUnique(const Keys& keys, const Offsets& part_offsets,
                      const py::array_t<int32_t, py::array::c_style | py::array::forcecast>& part_table,
                      size_t tables) {
  if (keys.ndim() != 1) throw std::invalid_argument("group_sorted_unique: keys must be 1-D int64");
  const auto parts = static_cast<size_t>(part_table.size());
  if (part_table.ndim() != 1 || part_offsets.ndim() != 1 || static_cast<size_t>(part_offsets.size()) != parts + 1 ||
      part_offsets.data()[parts] != keys.size()) {
    throw std::invalid_argument(
        "group_sorted_unique: part_offsets must be int64[parts + 1] from 0 to len(keys), "
        "part_table int32[parts]");
  }
  std::vector<int64_t> unique;
  py::array_t<int64_t> offsets(static_cast<py::ssize_t>(tables + 1));
  py::array_t<int32_t> inverse(keys.size());
  {
    py::gil_scoped_release release;
    GroupSortedUnique(keys.data(), part_offsets.data(), part_table.data(), parts, tables, &unique,
                      offsets.mutable_data(), inverse.mutable_data());
  }
  auto* owned = new std::vector<int64_t>(std::move(unique));
  py::capsule base(owned, [](void* p) { delete static_cast<std::vector<int64_t>*>(p); });
  py::array_t<int64_t> unique_array({static_cast<py::ssize_t>(owned->size())}, owned->data(), base);
  return py::make_tuple(unique_array, offsets, inverse);
}

py::array_t<bool> Fresh(const Keys& keys, const Offsets& offsets, const Keys& before, const Offsets& before_offsets) {
  if (offsets.ndim() != 1 || before_offsets.ndim() != 1 || offsets.shape(0) != before_offsets.shape(0) ||
      offsets.shape(0) < 1) {
    throw std::invalid_argument("group_fresh: offsets and before_offsets must be int64[tables + 1] of one group");
  }
  const auto tables = static_cast<size_t>(offsets.shape(0) - 1);
  if (offsets.data()[tables] != keys.size() || before_offsets.data()[tables] != before.size()) {
    throw std::invalid_argument("group_fresh: offsets must end at the number of keys");
  }
  py::array_t<bool> fresh(keys.size());
  py::gil_scoped_release release;
  GroupFresh(keys.data(), offsets.data(), before.data(), before_offsets.data(), tables,
             reinterpret_cast<uint8_t*>(fresh.mutable_data()));
  return fresh;
}

}  // namespace

void BindShardGroup(py::module_& m) {
  py::class_<BoundShardGroup>(m, "ShardGroup",
                              "One pull and one push over the shards of several tables of one dim (a table group)")
      .def(py::init<std::vector<std::shared_ptr<EmbeddingShard>>>(), py::arg("shards"))
      .def("pull", &BoundShardGroup::Pull, py::arg("keys"), py::arg("offsets"),
           "Rows float32[len(keys), dim] of every table's keys: table t's are keys[offsets[t]:offsets[t + 1]] "
           "(missing keys inserted with their initial rows, as EmbeddingShard.pull does).")
      .def("push", &BoundShardGroup::Push, py::arg("keys"), py::arg("grads"), py::arg("offsets"), py::arg("step"),
           py::arg("ttl_before") = py::none(),
           "Each table's part of keys and grads pushed at `step` with its own optimizer (ttl_before: int64[tables] "
           "eviction cutoffs, or None); every part is checked before any is applied.")
      .def("__len__", &BoundShardGroup::size)
      .def_property_readonly("dim", &BoundShardGroup::dim);
  m.def("group_sorted_unique", &GroupUnique, py::arg("keys"), py::arg("part_offsets"), py::arg("part_table"),
        py::arg("tables"),
        "(unique int64, offsets int64[tables + 1], inverse int32[len(keys)]) of 1-D ids whose part i "
        "(keys[part_offsets[i]:part_offsets[i + 1]]) belongs to table part_table[i]: each table's distinct keys "
        "ascending, tables in order; inverse indexes the whole.");
  m.def("group_fresh", &Fresh, py::arg("keys"), py::arg("offsets"), py::arg("before"), py::arg("before_offsets"),
        "bool[len(keys)]: whether each key is absent from the previous batch's part of the same table.");
}

}  // namespace xdl_ec::python

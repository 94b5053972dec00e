#include "xdl_ec/group_keys.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "xdl_ec/sorted_unique.h"

namespace xdl_ec {

void GroupSortedUnique(const int64_t* keys, const int64_t* part_offsets, const int32_t* part_table, size_t parts,
                       size_t tables, std::vector<int64_t>* unique, int64_t* offsets, int32_t* inverse) {
  if (parts != 0 && part_offsets[0] != 0) throw std::invalid_argument("GroupSortedUnique: part_offsets[0] must be 0");
  std::vector<std::vector<size_t>> table_parts(tables);
  for (size_t i = 0; i < parts; ++i) {
    const int32_t t = part_table[i];
    if (t < 0 || static_cast<size_t>(t) >= tables) {
      throw std::invalid_argument("GroupSortedUnique: part " + std::to_string(i) + " names table " + std::to_string(t) +
                                  ", outside [0, " + std::to_string(tables) + ")");
    }
    if (part_offsets[i + 1] < part_offsets[i]) {
      throw std::invalid_argument("GroupSortedUnique: part_offsets must be non-decreasing, part " + std::to_string(i) +
                                  " ends before it starts");
    }
    table_parts[static_cast<size_t>(t)].push_back(i);
  }
  const auto n = static_cast<uint64_t>(parts == 0 ? 0 : part_offsets[parts]);
  if (n >= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    throw std::invalid_argument("GroupSortedUnique: at most 2^31 - 1 ids per group, got " + std::to_string(n));
  }
  unique->clear();
  std::vector<int64_t> gathered;
  std::vector<int32_t> table_inverse;
  std::vector<int64_t> table_unique;
  offsets[0] = 0;
  for (size_t t = 0; t < tables; ++t) {
    gathered.clear();
    for (size_t i : table_parts[t]) gathered.insert(gathered.end(), keys + part_offsets[i], keys + part_offsets[i + 1]);
    table_inverse.resize(gathered.size());
    SortedUnique(gathered.data(), gathered.size(), &table_unique, table_inverse.data());
    const auto base = static_cast<int32_t>(unique->size());
    unique->insert(unique->end(), table_unique.begin(), table_unique.end());
    offsets[t + 1] = static_cast<int64_t>(unique->size());
    size_t k = 0;
    for (size_t i : table_parts[t]) {
      for (int64_t p = part_offsets[i]; p < part_offsets[i + 1]; ++p) inverse[p] = base + table_inverse[k++];
    }
  }
}

void GroupFresh(const int64_t* keys, const int64_t* offsets, const int64_t* before, const int64_t* before_offsets,
                size_t tables, uint8_t* fresh) {
  for (size_t t = 0; t < tables; ++t) {
    const int64_t* b = before + before_offsets[t];
    const int64_t* b_end = before + before_offsets[t + 1];
    for (int64_t i = offsets[t]; i < offsets[t + 1]; ++i) {
      b = std::lower_bound(b, b_end, keys[i]);  // both ascending: the search only moves forward
      fresh[i] = static_cast<uint8_t>(b == b_end || *b != keys[i]);
    }
  }
}

}  // namespace xdl_ec

// GroupKeys: the distinct keys of several tables' ids in one pass, for a table group (tables of one dim whose
// features go through one pull, one push and one TF op per step). A wide model's batch carries ids for tens to
// hundreds of tables; a unique per table, called from Python, cost per table what a step should cost per id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace xdl_ec {

// keys[0..parts_offsets[parts]) are ids of `tables` tables in `parts` parts: part i is keys[part_offsets[i]..
// part_offsets[i + 1]) and belongs to table part_table[i] (in [0, tables)); a table may have several parts (the
// features it serves), taken in part order. Fills `unique` with each table's distinct keys, ascending, tables one
// after another in table order; offsets[0..tables] (tables + 1 entries) where each table's part of `unique` starts
// and ends; inverse[] (as many as keys) the index in `unique` of every id. A table's part of `unique` equals
// SortedUnique over its parts' ids concatenated. Throws std::invalid_argument (nothing written) for a part_table
// entry out of range, decreasing part offsets, or 2^31 ids or more.
void GroupSortedUnique(const int64_t* keys, const int64_t* part_offsets, const int32_t* part_table, size_t parts,
                       size_t tables, std::vector<int64_t>* unique, int64_t* offsets, int32_t* inverse);

// fresh[i] = whether keys[i] is absent from `before`'s part of the same table: both are GroupSortedUnique outputs
// of the same `tables` tables (each part ascending), given with their offsets. What the step's prefetch needs: the
// keys the previous batch did not touch.
void GroupFresh(const int64_t* keys, const int64_t* offsets, const int64_t* before, const int64_t* before_offsets,
                size_t tables, uint8_t* fresh);

}  // namespace xdl_ec

// DelimitedFields: rows of separated integer fields (a TSV of labels, counts and hashed ids) parsed from their
// bytes in one pass. A data reader hands it a chunk of lines; what it declines (any field or row out of form)
// the reader parses line by line, which also says why. Nothing here knows a dataset's columns: the caller gives
// each column's kind.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xdl_ec {

enum class FieldKind : uint8_t {
  kBit,      // exactly "0" or "1"
  kDecimal,  // an optional sign and 1 to max_digits decimal digits, or empty
  kHex,      // 1 to max_digits hex digits (either case), or empty
};

struct FieldSpec {
  FieldKind kind = FieldKind::kDecimal;
  int max_digits = 15;  // in [1, 18] for kDecimal (exact in int64), [1, 16] for kHex (the bits of a uint64)
  int64_t empty = 0;    // the value of an empty field (kDecimal, kHex)
};

// Parses text[0..size): exactly `rows` rows of `columns` fields, fields separated by `sep`, rows ended by '\n'
// (the last one may end with the text), carriage returns before a row's end dropped. Field j of a row is read by
// specs[j] into values[row * columns + j] (a hex value as its uint64 bits). Returns false when any row or field is
// out of form (values then unspecified). Throws std::invalid_argument for a bad spec.
bool ParseDelimitedFields(const char* text, size_t size, char sep, const FieldSpec* specs, size_t columns, size_t rows,
                          int64_t* values);

}  // namespace xdl_ec

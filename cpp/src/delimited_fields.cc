#include "xdl_ec/delimited_fields.h"

#include <stdexcept>
#include <string>

namespace xdl_ec {
namespace {

// 0-15 for a hex digit, 255 otherwise.
struct HexTable {
  uint8_t value[256];
  HexTable() {
    for (int c = 0; c < 256; ++c) value[c] = 255;
    for (int c = '0'; c <= '9'; ++c) value[c] = static_cast<uint8_t>(c - '0');
    for (int c = 'a'; c <= 'f'; ++c) value[c] = static_cast<uint8_t>(10 + c - 'a');
    for (int c = 'A'; c <= 'F'; ++c) value[c] = static_cast<uint8_t>(10 + c - 'A');
  }
};
const HexTable kHex;

// Field [begin, end) by `spec` into *out; false when out of form.
inline bool ParseField(const char* begin, const char* end, const FieldSpec& spec, int64_t* out) {
  const size_t length = static_cast<size_t>(end - begin);
  switch (spec.kind) {
    case FieldKind::kBit:
      if (length != 1 || (*begin != '0' && *begin != '1')) return false;
      *out = *begin - '0';
      return true;
    case FieldKind::kDecimal: {
      if (length == 0) {
        *out = spec.empty;
        return true;
      }
      const bool negative = *begin == '-';
      if (negative || *begin == '+') ++begin;
      const size_t digits = static_cast<size_t>(end - begin);
      if (digits == 0 || digits > static_cast<size_t>(spec.max_digits)) return false;
      int64_t magnitude = 0;
      for (; begin < end; ++begin) {
        const unsigned digit = static_cast<unsigned char>(*begin) - static_cast<unsigned>('0');
        if (digit > 9) return false;
        magnitude = magnitude * 10 + static_cast<int64_t>(digit);
      }
      *out = negative ? -magnitude : magnitude;
      return true;
    }
    case FieldKind::kHex: {
      if (length == 0) {
        *out = spec.empty;
        return true;
      }
      if (length > static_cast<size_t>(spec.max_digits)) return false;
      uint64_t value = 0;
      for (; begin < end; ++begin) {
        const uint8_t nibble = kHex.value[static_cast<unsigned char>(*begin)];
        if (nibble == 255) return false;
        value = (value << 4) | nibble;
      }
      *out = static_cast<int64_t>(value);
      return true;
    }
  }
  return false;
}

}  // namespace

bool ParseDelimitedFields(const char* text, size_t size, char sep, const FieldSpec* specs, size_t columns, size_t rows,
                          int64_t* values) {
  if (columns == 0) throw std::invalid_argument("ParseDelimitedFields: no columns");
  if (sep == '\n' || sep == '\r') throw std::invalid_argument("ParseDelimitedFields: the separator cannot end a row");
  for (size_t j = 0; j < columns; ++j) {
    const FieldSpec& s = specs[j];
    const int most = s.kind == FieldKind::kDecimal ? 18 : s.kind == FieldKind::kHex ? 16 : 1;
    if (s.kind != FieldKind::kBit && (s.max_digits < 1 || s.max_digits > most))
      throw std::invalid_argument("ParseDelimitedFields: column " + std::to_string(j) + ": max_digits must be in [1, " +
                                  std::to_string(most) + "], got " + std::to_string(s.max_digits));
  }
  const char* p = text;
  const char* const end = text + size;
  for (size_t row = 0; row < rows; ++row) {
    if (p == end) return false;  // fewer rows than asked
    for (size_t j = 0; j < columns; ++j) {
      const char* field = p;
      const bool last = j + 1 == columns;
      while (p < end && *p != sep && *p != '\n') ++p;
      if (last) {
        if (p < end && *p == sep) return false;  // more fields than columns
        const char* field_end = p;
        while (field_end > field && field_end[-1] == '\r') --field_end;  // as a line's rstrip("\r\n")
        if (!ParseField(field, field_end, specs[j], values + row * columns + j)) return false;
        if (p < end) ++p;  // the '\n'
      } else {
        if (p == end || *p != sep) return false;  // fewer fields than columns
        if (!ParseField(field, p, specs[j], values + row * columns + j)) return false;
        ++p;
      }
    }
  }
  return p == end;  // nothing after the last row
}

}  // namespace xdl_ec

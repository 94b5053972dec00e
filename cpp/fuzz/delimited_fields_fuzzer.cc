// libFuzzer target: ParseDelimitedFields, what a data reader does with a chunk of a file's bytes (any bytes: a
// dataset is input from outside). The first input byte picks the rows asked for (0-7), the rest is the text,
// parsed as a Criteo-like row (a bit, two decimals of at most 15 digits, two hex fields of at most 8 digits).
// Parsing either declines or returns values inside each kind's range.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_input.h"
#include "xdl_ec/delimited_fields.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using xdl_ec::FieldKind;
  using xdl_ec::FieldSpec;
  if (size < 1) return 0;
  const size_t rows = data[0] % 8;
  const FieldSpec specs[] = {{FieldKind::kBit, 1, 0},
                             {FieldKind::kDecimal, 15, 0},
                             {FieldKind::kDecimal, 15, -7},
                             {FieldKind::kHex, 8, int64_t{1} << 32},
                             {FieldKind::kHex, 8, 0}};
  constexpr size_t kColumns = sizeof(specs) / sizeof(specs[0]);
  std::vector<int64_t> values(rows * kColumns, 0);
  const char* text = reinterpret_cast<const char*>(data + 1);
  if (!xdl_ec::ParseDelimitedFields(text, size - 1, '\t', specs, kColumns, rows, values.data())) return 0;
  constexpr int64_t kDecimalBound = 1000000000000000;  // 10^15
  for (size_t r = 0; r < rows; ++r) {
    const int64_t* v = values.data() + r * kColumns;
    if (v[0] != 0 && v[0] != 1) xdl_ec::fuzz::Broken("a bit is neither 0 nor 1");
    if (v[1] <= -kDecimalBound || v[1] >= kDecimalBound || v[2] <= -kDecimalBound || v[2] >= kDecimalBound)
      xdl_ec::fuzz::Broken("a decimal past its digits");
    if (v[3] < 0 || v[3] > (int64_t{1} << 32) || v[4] < 0 || v[4] >= (int64_t{1} << 32))
      xdl_ec::fuzz::Broken("a hex value past its digits");
  }
  return 0;
}

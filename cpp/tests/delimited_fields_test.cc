#include "xdl_ec/delimited_fields.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace xdl_ec {
namespace {

const std::vector<FieldSpec> kSpecs = {
    {FieldKind::kBit, 1, 0},
    {FieldKind::kDecimal, 4, -1},
    {FieldKind::kHex, 8, 1LL << 32},
};

bool Parse(const std::string& text, size_t rows, std::vector<int64_t>* values) {
  values->assign(rows * kSpecs.size(), 0);
  return ParseDelimitedFields(text.data(), text.size(), '\t', kSpecs.data(), kSpecs.size(), rows, values->data());
}

TEST(DelimitedFields, ReadsEachColumnByItsKind) {
  std::vector<int64_t> v;
  ASSERT_TRUE(Parse("1\t-12\t0a0B\n0\t\t\r\n1\t+9999\tffffffff", 3, &v));
  EXPECT_EQ(v, (std::vector<int64_t>{1, -12, 0x0a0b, 0, -1, 1LL << 32, 1, 9999, 0xffffffffLL}));
}

TEST(DelimitedFields, DeclinesRowsAndFieldsOutOfForm) {
  std::vector<int64_t> v;
  for (const std::string& bad : {
           "2\t1\tff\n",            // a bit that is not 0 or 1
           "\t1\tff\n",             // an empty bit
           "1\t12345\tff\n",        // more digits than max_digits
           "1\t-\tff\n",            // a sign without digits
           "1\t1x\tff\n",           // not a digit
           "1\t1\tfg\n",            // not a hex digit
           "1\t1\t123456789\n",     // more hex digits than max_digits
           "1\t1\n",                // a field short
           "1\t1\tff\t\n",          // a field too many
           "1\t1\tff\n1\t1\tff\n",  // a row too many
           "1\t1\t\rff\n",          // a carriage return inside a field
       }) {
    EXPECT_FALSE(Parse(bad, 1, &v)) << bad;
  }
  EXPECT_FALSE(Parse("1\t1\tff\n", 2, &v));  // a row short
  EXPECT_FALSE(Parse("", 1, &v));
  EXPECT_TRUE(Parse("", 0, &v));
}

TEST(DelimitedFields, RejectsABadSpec) {
  std::vector<int64_t> v(3);
  const std::string text = "1\t1\tff";
  FieldSpec too_wide[] = {{FieldKind::kHex, 17, 0}};
  EXPECT_THROW(ParseDelimitedFields(text.data(), text.size(), '\t', too_wide, 1, 1, v.data()), std::invalid_argument);
  FieldSpec decimal[] = {{FieldKind::kDecimal, 19, 0}};
  EXPECT_THROW(ParseDelimitedFields(text.data(), text.size(), '\t', decimal, 1, 1, v.data()), std::invalid_argument);
  EXPECT_THROW(ParseDelimitedFields(text.data(), text.size(), '\n', kSpecs.data(), 3, 1, v.data()),
               std::invalid_argument);
  EXPECT_THROW(ParseDelimitedFields(text.data(), text.size(), '\t', kSpecs.data(), 0, 1, v.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace xdl_ec

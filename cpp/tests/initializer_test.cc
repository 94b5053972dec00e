#include "xdl_ec/initializer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace xdl_ec {
namespace {

InitializerConfig Kind(InitializerKind kind) {
  InitializerConfig c;
  c.kind = kind;
  return c;
}

TEST(Initializer, DependsOnSeedAndKeyOnly) {
  InitializerConfig c = Kind(InitializerKind::kTruncatedNormal);
  std::vector<float> a(16), b(16), other(16);
  InitializeRow(c, 9, 12345, a.data(), 16);
  InitializeRow(c, 9, 777, other.data(), 16);  // something else in between changes nothing
  InitializeRow(c, 9, 12345, b.data(), 16);
  EXPECT_EQ(a, b);
  InitializeRow(c, 10, 12345, b.data(), 16);
  EXPECT_NE(a, b);
  InitializeRow(c, 9, 12346, b.data(), 16);
  EXPECT_NE(a, b);
  // A shorter row is a prefix of a longer one: element i depends on (seed, key, i) alone.
  std::vector<float> shorter(5);
  InitializeRow(c, 9, 12345, shorter.data(), 5);
  EXPECT_EQ(0, std::memcmp(shorter.data(), a.data(), 5 * sizeof(float)));
}

TEST(Initializer, TruncatedNormalStatistics) {
  InitializerConfig c = Kind(InitializerKind::kTruncatedNormal);
  c.mean = 1.0f;
  c.stddev = 0.5f;
  double sum = 0, sum2 = 0;
  size_t within_one = 0, below_half = 0;
  const int rows = 20000, dim = 8;
  std::vector<float> row(dim);
  for (int k = 0; k < rows; ++k) {
    InitializeRow(c, 1, k, row.data(), dim);
    for (float v : row) {
      ASSERT_LE(std::fabs(v - 1.0f), 1.0f + 1e-6f);
      sum += v;
      sum2 += (v - 1.0) * (v - 1.0);
      within_one += std::fabs(v - 1.0f) <= 0.5f;
      below_half += v - 1.0f <= -0.25f;
    }
  }
  const double n = rows * dim;
  EXPECT_NEAR(sum / n, 1.0, 0.005);
  EXPECT_NEAR(std::sqrt(sum2 / n), 0.5 * 0.87962566, 0.005);  // a normal truncated at 2 sigma
  // The shape, not just two moments: P(|z| <= 1 | |z| <= 2) and P(z <= -0.5 | |z| <= 2).
  EXPECT_NEAR(within_one / n, 0.682689492 / 0.954499736, 0.005);
  EXPECT_NEAR(below_half / n, (0.308537539 - 0.022750132) / 0.954499736, 0.005);
}

TEST(Initializer, NormalStatisticsAreTheUntruncatedOnes) {
  InitializerConfig c = Kind(InitializerKind::kNormal);
  c.mean = -1.0f;
  c.stddev = 2.0f;
  double sum = 0, sum2 = 0;
  size_t within_one = 0, beyond_two = 0;
  const int rows = 20000, dim = 8;
  std::vector<float> row(dim);
  for (int k = 0; k < rows; ++k) {
    InitializeRow(c, 4, k, row.data(), dim);
    for (float v : row) {
      ASSERT_TRUE(std::isfinite(v));
      const double z = (v + 1.0) / 2.0;
      sum += v;
      sum2 += (v + 1.0) * (v + 1.0);
      within_one += std::fabs(z) <= 1.0;
      beyond_two += std::fabs(z) > 2.0;
    }
  }
  const double n = rows * dim;
  EXPECT_NEAR(sum / n, -1.0, 0.02);
  EXPECT_NEAR(std::sqrt(sum2 / n), 2.0, 0.02);
  EXPECT_NEAR(within_one / n, 0.682689492, 0.005);
  EXPECT_NEAR(beyond_two / n, 1.0 - 0.954499736, 0.003);  // the tails a truncated normal cuts off
}

TEST(Initializer, UniformZerosConstant) {
  InitializerConfig u = Kind(InitializerKind::kUniform);
  u.minval = 2.0f;
  u.maxval = 2.5f;
  std::vector<float> row(64);
  double sum = 0;
  for (int k = 0; k < 2000; ++k) {
    InitializeRow(u, 0, k, row.data(), 64);
    for (float v : row) {
      ASSERT_GE(v, 2.0f);
      ASSERT_LT(v, 2.5f);
      sum += v;
    }
  }
  EXPECT_NEAR(sum / (2000 * 64), 2.25, 0.002);
  InitializeRow(Kind(InitializerKind::kZeros), 0, 1, row.data(), 64);
  for (float v : row) EXPECT_EQ(v, 0.0f);
  InitializerConfig k = Kind(InitializerKind::kConstant);
  k.value = -3.5f;
  InitializeRow(k, 0, 1, row.data(), 64);
  for (float v : row) EXPECT_EQ(v, -3.5f);
}

TEST(Initializer, ValidateNamesTheField) {
  InitializerConfig c = Kind(InitializerKind::kTruncatedNormal);
  c.stddev = -1.0f;
  try {
    c.Validate();
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("stddev"), std::string::npos);
  }
  InitializerConfig u = Kind(InitializerKind::kUniform);
  u.minval = 1.0f;
  u.maxval = 0.0f;
  EXPECT_THROW(u.Validate(), std::invalid_argument);
  InitializerConfig k = Kind(InitializerKind::kConstant);
  k.value = NAN;
  EXPECT_THROW(k.Validate(), std::invalid_argument);
  Kind(InitializerKind::kZeros).Validate();
}

}  // namespace
}  // namespace xdl_ec

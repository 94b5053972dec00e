// Formula checks on hand-computed values (the bit-exact comparison with TF's kernels is in
// tests/test_optim_vs_tf.py, where TF is available).
#include "xdl_ec/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace xdl_ec {
namespace {

OptimizerConfig Kind(OptimizerKind kind, float lr) {
  OptimizerConfig c;
  c.kind = kind;
  c.learning_rate = lr;
  return c;
}

TEST(Optimizer, StateSizesAndInitialState) {
  EXPECT_EQ(Optimizer::Create(Kind(OptimizerKind::kSGD, 0.1f))->StateFloats(8), 0);
  EXPECT_EQ(Optimizer::Create(Kind(OptimizerKind::kMomentum, 0.1f))->StateFloats(8), 8);
  EXPECT_EQ(Optimizer::Create(Kind(OptimizerKind::kAdagrad, 0.1f))->StateFloats(8), 8);
  EXPECT_EQ(Optimizer::Create(Kind(OptimizerKind::kAdam, 0.1f))->StateFloats(8), 16);
  EXPECT_EQ(Optimizer::Create(Kind(OptimizerKind::kFtrl, 0.1f))->StateFloats(8), 16);
  OptimizerConfig f = Kind(OptimizerKind::kFtrl, 0.1f);
  f.initial_accumulator = 0.25f;
  std::vector<float> s(4, -1.0f);
  Optimizer::Create(f)->InitState(s.data(), 2);
  EXPECT_EQ(s, (std::vector<float>{0.25f, 0.25f, 0.0f, 0.0f}));
}

TEST(Optimizer, SgdMomentumAdagrad) {
  float v = 1.0f, g = 2.0f;
  Optimizer::Create(Kind(OptimizerKind::kSGD, 0.25f))->Apply(&v, nullptr, &g, 1, 1);
  EXPECT_EQ(v, 0.5f);

  OptimizerConfig m = Kind(OptimizerKind::kMomentum, 0.5f);
  m.momentum = 0.5f;
  float a = 1.0f;
  v = 1.0f;
  Optimizer::Create(m)->Apply(&v, &a, &g, 1, 1);
  EXPECT_EQ(a, 2.5f);    // 1 * 0.5 + 2
  EXPECT_EQ(v, -0.25f);  // 1 - 0.5 * 2.5
  m.use_nesterov = true;
  a = 1.0f;
  v = 1.0f;
  Optimizer::Create(m)->Apply(&v, &a, &g, 1, 1);
  EXPECT_EQ(v, 1.0f - (0.5f * 2.0f + 0.25f * 2.5f));

  OptimizerConfig ag = Kind(OptimizerKind::kAdagrad, 0.5f);
  ag.epsilon = 0.0f;
  a = 5.0f;
  v = 1.0f;
  Optimizer::Create(ag)->Apply(&v, &a, &g, 1, 1);
  EXPECT_EQ(a, 9.0f);
  EXPECT_EQ(v, 1.0f - 0.5f * 2.0f / 3.0f);
}

TEST(Optimizer, AdamBiasCorrectionFromStep) {
  OptimizerConfig c = Kind(OptimizerKind::kAdam, 0.1f);
  auto adam = Optimizer::Create(c);
  float v = 0.0f, g = 1.0f;
  float s[2] = {0.0f, 0.0f};
  adam->Apply(&v, s, &g, 1, 1);
  // Step 1: m = 0.1, v = 0.001, alpha = lr * sqrt(0.001) / 0.1; update = alpha * m / sqrt(v) = lr.
  EXPECT_NEAR(v, -0.1f, 1e-6f);
  EXPECT_EQ(s[0], 1.0f - 0.9f);    // m += (g - m) * (1 - beta1), in float32
  EXPECT_EQ(s[1], 1.0f - 0.999f);  // v += (g * g - v) * (1 - beta2)
  // ApplyRows computes the same thing per row.
  float vs[2] = {0.0f, 0.0f}, st[4] = {0, 0, 0, 0}, gs[2] = {1.0f, -3.0f};
  float* values[2] = {&vs[0], &vs[1]};
  float* states[2] = {&st[0], &st[2]};
  adam->ApplyRows(values, states, gs, 2, 1, 7);
  float one = 0.0f, one_s[2] = {0, 0};
  adam->Apply(&one, one_s, &gs[1], 1, 7);
  EXPECT_EQ(vs[1], one);
  EXPECT_EQ(st[2], one_s[0]);
}

TEST(Optimizer, FtrlL1ZeroesSmallWeights) {
  OptimizerConfig c = Kind(OptimizerKind::kFtrl, 0.1f);
  c.l1 = 10.0f;
  auto ftrl = Optimizer::Create(c);
  float v = 0.3f, g = 0.5f;
  float s[2] = {0.1f, 0.0f};
  ftrl->Apply(&v, s, &g, 1, 1);
  EXPECT_EQ(v, 0.0f);  // |linear| < l1
  EXPECT_FLOAT_EQ(s[0], 0.35f);
  c.l1 = 0.0f;
  v = 0.0f;
  s[0] = 0.1f;
  s[1] = 0.0f;
  Optimizer::Create(c)->Apply(&v, s, &g, 1, 1);
  EXPECT_FLOAT_EQ(v, -0.5f / (std::sqrt(0.35f) / 0.1f));  // -linear / (sqrt(accum) / lr)
}

TEST(Optimizer, ValidateNamesTheField) {
  auto expect_field = [](OptimizerConfig c, const std::string& field) {
    try {
      c.Validate();
      FAIL() << "no throw for " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_field(Kind(OptimizerKind::kSGD, -0.1f), "learning_rate");
  expect_field(Kind(OptimizerKind::kSGD, NAN), "learning_rate");
  OptimizerConfig c = Kind(OptimizerKind::kAdam, 0.1f);
  c.beta2 = 1.0f;
  expect_field(c, "beta2");
  c = Kind(OptimizerKind::kFtrl, 0.1f);
  c.learning_rate_power = 0.5f;
  expect_field(c, "learning_rate_power");
  c = Kind(OptimizerKind::kFtrl, 0.1f);
  c.l2_shrinkage = -1.0f;
  expect_field(c, "l2_shrinkage");
  c = Kind(OptimizerKind::kMomentum, 0.1f);
  c.momentum = -0.5f;
  expect_field(c, "momentum");
  c = Kind(OptimizerKind::kAdagrad, 0.1f);
  c.kind = static_cast<OptimizerKind>(17);
  EXPECT_THROW(c.Validate(), std::invalid_argument);
  EXPECT_THROW(Optimizer::Create(Kind(OptimizerKind::kFtrl, 0.0f)), std::invalid_argument);
}

}  // namespace
}  // namespace xdl_ec

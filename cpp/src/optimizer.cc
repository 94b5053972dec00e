#include "xdl_ec/optimizer.h"

// Bit-exactness with TF needs each a * b + c rounded twice, as Eigen does: never contract into FMA.
// (The core is built with -fno-math-errno so that the sqrt loops vectorize; sqrt is exact either way.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma clang fp contract(off)
#endif

#include <cmath>
#include <stdexcept>
#include <string>

namespace xdl_ec {
namespace {

void Require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument("OptimizerConfig: " + message);
}

std::string Str(float v) { return std::to_string(v); }

class SGD final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  int StateFloats(int) const override { return 0; }
  void InitState(float*, int) const override {}
  void Apply(float* __restrict v, float*, const float* __restrict g, int dim, int64_t) const override {
    const float lr = config_.learning_rate;
    for (int i = 0; i < dim; ++i) v[i] -= g[i] * lr;
  }
};

// ResourceSparseApplyMomentum: accum = accum * momentum + grad; var -= lr * accum
// (Nesterov: var -= lr * grad + (lr * momentum) * accum).
class Momentum final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  int StateFloats(int dim) const override { return dim; }
  void InitState(float* s, int dim) const override {
    for (int i = 0; i < dim; ++i) s[i] = 0.0f;
  }
  void Apply(float* __restrict v, float* __restrict a, const float* __restrict g, int dim, int64_t) const override {
    const float lr = config_.learning_rate, m = config_.momentum;
    if (config_.use_nesterov) {
      const float lr_m = lr * m;  // TF's sparse kernel folds lr * momentum into one scalar
      for (int i = 0; i < dim; ++i) {
        a[i] = a[i] * m + g[i];
        v[i] -= lr * g[i] + lr_m * a[i];
      }
    } else {
      for (int i = 0; i < dim; ++i) {
        a[i] = a[i] * m + g[i];
        v[i] -= lr * a[i];
      }
    }
  }
};

// ResourceSparseApplyAdagradV2: accum += grad^2; var -= lr * grad / (sqrt(accum) + epsilon).
class Adagrad final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  int StateFloats(int dim) const override { return dim; }
  void InitState(float* s, int dim) const override {
    for (int i = 0; i < dim; ++i) s[i] = config_.initial_accumulator;
  }
  void Apply(float* __restrict v, float* __restrict a, const float* __restrict g, int dim, int64_t) const override {
    const float lr = config_.learning_rate, eps = config_.epsilon;
    for (int i = 0; i < dim; ++i) {
      a[i] += g[i] * g[i];
      v[i] -= lr * g[i] / (std::sqrt(a[i]) + eps);
    }
  }
};

// TF's ApplyAdam (CPU) on the touched rows: m += (g - m) * (1 - beta1); v += (g^2 - v) * (1 - beta2);
// var -= m * alpha / (sqrt(v) + epsilon), alpha = lr * sqrt(1 - beta2^t) / (1 - beta1^t).
class Adam final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  int StateFloats(int dim) const override { return 2 * dim; }
  void InitState(float* s, int dim) const override {
    for (int i = 0; i < 2 * dim; ++i) s[i] = 0.0f;
  }
  float Alpha(int64_t step) const {
    // beta^t in double, rounded once to float32: the correctly rounded power whatever libm's powf does.
    const double t = static_cast<double>(step);
    const float beta1_power = static_cast<float>(std::pow(static_cast<double>(config_.beta1), t));
    const float beta2_power = static_cast<float>(std::pow(static_cast<double>(config_.beta2), t));
    return config_.learning_rate * std::sqrt(1.0f - beta2_power) / (1.0f - beta1_power);
  }
  void Step(float* __restrict var, float* __restrict s, const float* __restrict g, int dim, float alpha) const {
    float* m = s;
    float* v = s + dim;
    const float one_minus_b1 = 1.0f - config_.beta1, one_minus_b2 = 1.0f - config_.beta2;
    const float eps = config_.epsilon;
    for (int i = 0; i < dim; ++i) {
      m[i] += (g[i] - m[i]) * one_minus_b1;
      v[i] += (g[i] * g[i] - v[i]) * one_minus_b2;
      var[i] -= (m[i] * alpha) / (std::sqrt(v[i]) + eps);
    }
  }
  void Apply(float* v, float* s, const float* g, int dim, int64_t step) const override {
    Step(v, s, g, dim, Alpha(step));
  }
  void ApplyRows(float* const* values, float* const* states, const float* grads, size_t rows, int dim,
                 int64_t step) const override {
    const float alpha = Alpha(step);
    for (size_t r = 0; r < rows; ++r) Step(values[r], states[r], grads + r * dim, dim, alpha);
  }
};

// ResourceSparseApplyFtrlV2 (multiply_linear_by_lr = false), in the CPU kernel's operation order.
class Ftrl final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  int StateFloats(int dim) const override { return 2 * dim; }
  void InitState(float* s, int dim) const override {
    for (int i = 0; i < dim; ++i) s[i] = config_.initial_accumulator;
    for (int i = dim; i < 2 * dim; ++i) s[i] = 0.0f;
  }
  void Apply(float* __restrict var, float* __restrict s, const float* __restrict g, int dim, int64_t) const override {
    float* accum = s;
    float* linear = s + dim;
    const float lr = config_.learning_rate, lr_power = config_.learning_rate_power;
    const float l1 = config_.l1, two_l2 = 2.0f * config_.l2, two_shrink = 2.0f * config_.l2_shrinkage;
    const bool shrink = config_.l2_shrinkage > 0.0f;
    const bool sqrt_case = lr_power == -0.5f;
    for (int i = 0; i < dim; ++i) {
      const float gi = g[i];
      const float g_shrunk = shrink ? gi + two_shrink * var[i] : gi;
      const float new_accum = accum[i] + gi * gi;
      float y;
      if (sqrt_case) {
        const float sqrt_new = std::sqrt(new_accum);
        linear[i] += g_shrunk - (sqrt_new - std::sqrt(accum[i])) / lr * var[i];
        y = sqrt_new / lr + two_l2;
      } else {
        const float pow_new = std::pow(new_accum, -lr_power);
        linear[i] += g_shrunk - (pow_new - std::pow(accum[i], -lr_power)) / lr * var[i];
        y = pow_new / lr + two_l2;
      }
      const float clipped = std::fmax(std::fmin(linear[i], l1), -l1);
      var[i] = (clipped - linear[i]) / y;
      accum[i] = new_accum;
    }
  }
};

}  // namespace

void Optimizer::ApplyRows(float* const* values, float* const* states, const float* grads, size_t rows, int dim,
                          int64_t step) const {
  for (size_t r = 0; r < rows; ++r) Apply(values[r], states[r], grads + r * dim, dim, step);
}

void OptimizerConfig::Validate() const {
  const int k = static_cast<int>(kind);
  Require(k >= 0 && k <= static_cast<int>(OptimizerKind::kFtrl), "unknown optimizer kind " + std::to_string(k));
  Require(std::isfinite(learning_rate) && learning_rate >= 0.0f,
          "learning_rate must be finite and >= 0, got " + Str(learning_rate));
  switch (kind) {
    case OptimizerKind::kSGD:
      break;
    case OptimizerKind::kMomentum:
      Require(std::isfinite(momentum) && momentum >= 0.0f, "momentum must be finite and >= 0, got " + Str(momentum));
      break;
    case OptimizerKind::kAdagrad:
      Require(std::isfinite(initial_accumulator) && initial_accumulator >= 0.0f,
              "initial_accumulator must be finite and >= 0, got " + Str(initial_accumulator));
      Require(std::isfinite(epsilon) && epsilon >= 0.0f, "epsilon must be finite and >= 0, got " + Str(epsilon));
      Require(initial_accumulator > 0.0f || epsilon > 0.0f,
              "initial_accumulator and epsilon cannot both be 0 (division by zero on a zero gradient)");
      break;
    case OptimizerKind::kAdam:
      Require(std::isfinite(beta1) && beta1 >= 0.0f && beta1 < 1.0f, "beta1 must be in [0, 1), got " + Str(beta1));
      Require(std::isfinite(beta2) && beta2 >= 0.0f && beta2 < 1.0f, "beta2 must be in [0, 1), got " + Str(beta2));
      Require(std::isfinite(epsilon) && epsilon > 0.0f, "epsilon must be finite and > 0, got " + Str(epsilon));
      break;
    case OptimizerKind::kFtrl:
      Require(learning_rate > 0.0f, "learning_rate must be > 0 for FTRL, got " + Str(learning_rate));
      Require(std::isfinite(learning_rate_power) && learning_rate_power <= 0.0f,
              "learning_rate_power must be finite and <= 0, got " + Str(learning_rate_power));
      Require(std::isfinite(initial_accumulator) && initial_accumulator >= 0.0f,
              "initial_accumulator must be finite and >= 0, got " + Str(initial_accumulator));
      Require(std::isfinite(l1) && l1 >= 0.0f, "l1 must be finite and >= 0, got " + Str(l1));
      Require(std::isfinite(l2) && l2 >= 0.0f, "l2 must be finite and >= 0, got " + Str(l2));
      Require(std::isfinite(l2_shrinkage) && l2_shrinkage >= 0.0f,
              "l2_shrinkage must be finite and >= 0, got " + Str(l2_shrinkage));
      break;
  }
}

std::unique_ptr<Optimizer> Optimizer::Create(const OptimizerConfig& config) {
  config.Validate();
  switch (config.kind) {
    case OptimizerKind::kSGD:
      return std::unique_ptr<Optimizer>(new SGD(config));
    case OptimizerKind::kMomentum:
      return std::unique_ptr<Optimizer>(new Momentum(config));
    case OptimizerKind::kAdagrad:
      return std::unique_ptr<Optimizer>(new Adagrad(config));
    case OptimizerKind::kAdam:
      return std::unique_ptr<Optimizer>(new Adam(config));
    case OptimizerKind::kFtrl:
      return std::unique_ptr<Optimizer>(new Ftrl(config));
  }
  throw std::invalid_argument("Optimizer::Create: unknown optimizer kind");
}

}  // namespace xdl_ec

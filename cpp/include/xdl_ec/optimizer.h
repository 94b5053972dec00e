// Sparse optimizers applied on a shard, one row at a time. Formulas follow TensorFlow's sparse kernels
// (ResourceSparseApplyMomentum, ResourceSparseApplyAdagradV2, ResourceSparseApplyFtrlV2; Adam is the
// lazy variant: only rows in the batch move, bias correction from the caller's global step) to float32
// rounding. The optimizer owns the layout of its per-row state floats within the record:
//
//   SGD       0 floats
//   Momentum  accum[dim]                     (starts at 0)
//   Adagrad   accum[dim]                     (starts at initial_accumulator)
//   Adam      m[dim], v[dim]                 (start at 0; lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t),
//                                             beta^t = float32(double pow), the correctly rounded power)
//   FTRL      accum[dim], linear[dim]        (accum starts at initial_accumulator, linear at 0)
//
// Each Apply mirrors the operation order of TF's CPU kernel on float32 (no fused multiply-add), so
// the result is bit-identical to TF's kernel applied to the same (already deduplicated) gradient.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace xdl_ec {

enum class OptimizerKind { kSGD, kMomentum, kAdagrad, kAdam, kFtrl };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdagrad;
  float learning_rate = 0.01f;
  // Momentum
  float momentum = 0.9f;
  bool use_nesterov = false;
  // Adagrad and FTRL: initial accumulator; Adagrad and Adam: epsilon
  float initial_accumulator = 0.1f;
  float epsilon = 1e-7f;
  // Adam
  float beta1 = 0.9f, beta2 = 0.999f;
  // FTRL
  float learning_rate_power = -0.5f;
  float l1 = 0.0f, l2 = 0.0f, l2_shrinkage = 0.0f;

  // Throws std::invalid_argument naming the bad field (negative learning rate, beta outside [0, 1), ...).
  void Validate() const;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  static std::unique_ptr<Optimizer> Create(const OptimizerConfig& config);  // validates first

  const OptimizerConfig& config() const { return config_; }
  // Floats of per-row state for a row of `dim` floats.
  virtual int StateFloats(int dim) const = 0;
  // Writes the state of a freshly created row.
  virtual void InitState(float* state, int dim) const = 0;
  // One step on one row with its (already summed) gradient. `step` is the 1-based global step
  // (used by Adam's bias correction; ignored by the others).
  virtual void Apply(float* value, float* state, const float* grad, int dim, int64_t step) const = 0;
  // One step on `rows` rows: values[r], states[r] and grads + r * dim. Same result as Apply per row;
  // lets step-wide constants (Adam's bias correction) be computed once per batch.
  virtual void ApplyRows(float* const* values, float* const* states, const float* grads, size_t rows, int dim,
                         int64_t step) const;

 protected:
  explicit Optimizer(const OptimizerConfig& config) : config_(config) {}
  OptimizerConfig config_;
};

}  // namespace xdl_ec

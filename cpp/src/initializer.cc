#include "xdl_ec/initializer.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace xdl_ec {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Counter-based: the random bits of (seed, key, counter) need no generator state, so a row's value
// never depends on what was drawn before it. Bits(seed, key, i) = SplitMix64(RowBits(seed, key) ^ i).
uint64_t RowBits(uint64_t seed, int64_t key) { return SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(key)); }

double Unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }  // [0, 1)

// Wichura's AS241 (PPND16) inverse of the standard normal CDF, relative error ~1e-16, for
// p in [Phi(-2), Phi(2)]: there -log(min(p, 1 - p)) < 25, so the far-tail branch is never needed.
double NormalQuantile(double p) {
  const double q = p - 0.5;
  if (std::fabs(q) <= 0.425) {
    const double r = 0.180625 - q * q;
    return q *
           (((((((2.5090809287301226727e+3 * r + 3.3430575583588128105e+4) * r + 6.7265770927008700853e+4) * r +
                4.5921953931549871457e+4) *
                   r +
               1.3731693765509461125e+4) *
                  r +
              1.9715909503065514427e+3) *
                 r +
             1.3314166789178437745e+2) *
                r +
            3.3871328727963666080e+0) /
           (((((((5.2264952788528545610e+3 * r + 2.8729085735721942674e+4) * r + 3.9307895800092710610e+4) * r +
                2.1213794301586595867e+4) *
                   r +
               5.3941960214247511077e+3) *
                  r +
              6.8718700749205790830e+2) *
                 r +
             4.2313330701600911252e+1) *
                r +
            1.0);
  }
  double r = std::sqrt(-std::log(q < 0.0 ? p : 1.0 - p)) - 1.6;
  const double x =
      (((((((7.74545014278341407640e-4 * r + 2.27238449892691845833e-2) * r + 2.41780725177450611770e-1) * r +
           1.27045825245236838258e+0) *
              r +
          3.64784832476320460504e+0) *
             r +
         5.76949722146069140550e+0) *
            r +
        4.63033784615654529590e+0) *
           r +
       1.42343711074968357734e+0) /
      (((((((1.05075007164441684324e-9 * r + 5.47593808499534494600e-4) * r + 1.51986665636164571966e-2) * r +
           1.48103976427480074590e-1) *
              r +
          6.89767334985100004550e-1) *
             r +
         1.67638483018380384940e+0) *
            r +
        2.05319162663775882187e+0) *
           r +
       1.0);
  return q < 0.0 ? -x : x;
}

// Truncated at 2 stddev as TF's truncated_normal, but by inversion instead of redraws: a uniform
// draw in [Phi(-2), Phi(2)) mapped through the normal quantile is exactly that distribution, with
// one draw per element and no rejection loop.
constexpr double kPhiMinus2 = 0.022750131948179207200;
constexpr double kPhiPlus2 = 0.977249868051820792800;

void Require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument("InitializerConfig: " + message);
}

}  // namespace

void InitializerConfig::Validate() const {
  switch (kind) {
    case InitializerKind::kZeros:
      return;
    case InitializerKind::kConstant:
      Require(std::isfinite(value), "value must be finite, got " + std::to_string(value));
      return;
    case InitializerKind::kUniform:
      Require(std::isfinite(minval) && std::isfinite(maxval),
              "minval and maxval must be finite, got " + std::to_string(minval) + ", " + std::to_string(maxval));
      Require(minval < maxval,
              "minval must be < maxval, got minval=" + std::to_string(minval) + " maxval=" + std::to_string(maxval));
      return;
    case InitializerKind::kTruncatedNormal:
    case InitializerKind::kNormal:
      Require(std::isfinite(mean), "mean must be finite, got " + std::to_string(mean));
      Require(std::isfinite(stddev) && stddev > 0.0f, "stddev must be finite and > 0, got " + std::to_string(stddev));
      return;
  }
  throw std::invalid_argument("InitializerConfig: unknown kind " + std::to_string(static_cast<int>(kind)));
}

void InitializeRow(const InitializerConfig& config, uint64_t seed, int64_t key, float* out, int dim) {
  const uint64_t row = RowBits(seed, key);
  switch (config.kind) {
    case InitializerKind::kZeros:
      std::memset(out, 0, sizeof(float) * static_cast<size_t>(dim));
      return;
    case InitializerKind::kConstant:
      for (int i = 0; i < dim; ++i) out[i] = config.value;
      return;
    case InitializerKind::kUniform: {
      const double lo = config.minval, width = static_cast<double>(config.maxval) - config.minval;
      for (int i = 0; i < dim; ++i) {
        float v = static_cast<float>(lo + width * Unit(SplitMix64(row ^ static_cast<uint64_t>(i))));
        if (v >= config.maxval) v = std::nextafter(config.maxval, config.minval);  // keep [minval, maxval)
        out[i] = v;
      }
      return;
    }
    case InitializerKind::kTruncatedNormal: {
      const double mean = config.mean, stddev = config.stddev;
      for (int i = 0; i < dim; ++i) {
        const double p = kPhiMinus2 + (kPhiPlus2 - kPhiMinus2) * Unit(SplitMix64(row ^ static_cast<uint64_t>(i)));
        out[i] = static_cast<float>(mean + stddev * NormalQuantile(p));
      }
      return;
    }
    case InitializerKind::kNormal: {
      const double mean = config.mean, stddev = config.stddev;
      for (int i = 0; i < dim; ++i) {
        // the middle of the draw's 2^-53 cell: p in (0, 1), so the quantile is finite
        const double p = Unit(SplitMix64(row ^ static_cast<uint64_t>(i))) + 0x1.0p-54;
        out[i] = static_cast<float>(mean + stddev * NormalQuantile(p));
      }
      return;
    }
  }
  throw std::invalid_argument("InitializeRow: unknown initializer kind");
}

}  // namespace xdl_ec

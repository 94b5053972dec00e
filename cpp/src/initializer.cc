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

// Counter-based: the random bits of (seed, key, counter) need no generator state, so a row's
// value never depends on what was drawn before it.
uint64_t Bits(uint64_t seed, int64_t key, uint64_t counter) {
  return SplitMix64(SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(key)) ^ counter);
}

double Unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }               // [0, 1)
double UnitOpenZero(uint64_t bits) { return static_cast<double>((bits >> 11) + 1) * 0x1.0p-53; }  // (0, 1]

constexpr int kMaxDraws = 1 << 16;  // P(|z| > 2) = 4.6%: never reached in practice

float TruncatedNormal(const InitializerConfig& c, uint64_t seed, int64_t key, int element) {
  const double two_pi = 6.283185307179586476925286766559;
  for (int draw = 0; draw < kMaxDraws; ++draw) {
    const uint64_t counter = (static_cast<uint64_t>(element) << 32) | (static_cast<uint64_t>(draw) << 1);
    const double u1 = UnitOpenZero(Bits(seed, key, counter));
    const double u2 = Unit(Bits(seed, key, counter | 1));
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
    if (std::fabs(z) <= 2.0) return static_cast<float>(c.mean + c.stddev * z);
  }
  return c.mean;
}

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
      Require(minval < maxval, "minval must be < maxval, got minval=" + std::to_string(minval) +
                                   " maxval=" + std::to_string(maxval));
      return;
    case InitializerKind::kTruncatedNormal:
      Require(std::isfinite(mean), "mean must be finite, got " + std::to_string(mean));
      Require(std::isfinite(stddev) && stddev > 0.0f,
              "stddev must be finite and > 0, got " + std::to_string(stddev));
      return;
  }
  throw std::invalid_argument("InitializerConfig: unknown kind " + std::to_string(static_cast<int>(kind)));
}

void InitializeRow(const InitializerConfig& config, uint64_t seed, int64_t key, float* out, int dim) {
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
        float v = static_cast<float>(lo + width * Unit(Bits(seed, key, static_cast<uint64_t>(i))));
        if (v >= config.maxval) v = std::nextafter(config.maxval, config.minval);  // keep [minval, maxval)
        out[i] = v;
      }
      return;
    }
    case InitializerKind::kTruncatedNormal:
      for (int i = 0; i < dim; ++i) out[i] = TruncatedNormal(config, seed, key, i);
      return;
  }
  throw std::invalid_argument("InitializeRow: unknown initializer kind");
}

}  // namespace xdl_ec

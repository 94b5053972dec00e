// The byte layout of one slot record. Parity is computed over these bytes, so the layout is part of
// the on-wire and on-parity format: change it only with a format version bump.
//
//   offset 0            int64   key        the feature id (XDL hash64), host byte order
//   offset 8            uint32  flags      bit 0: slot is live; bits 1..31: the row's clock
//   offset 12           float32 value[dim]
//   offset 12 + 4*dim   float32 state[state_floats]   the optimizer's per-row slots, optimizer-defined order
//   then, only in tables with admission / eviction rules (row_policy.h; policy_bytes = 16, else 0):
//     +0  int64  last_step  the step of the last push that reached the record (0: never pushed)
//     +8  uint32 uses       occurrences counted (pushes; saturates at 2^32 - 1)
//     +12 uint32 admitted   1: a row; 0: a pending id still counting toward admission (value, state zero)
//
// A free slot is all zero bytes. That makes the parity of a fresh (empty) shard all zeros, so a
// parity block needs no encoding before its first delta, and inserts and deletes are plain deltas
// from and to the zero record.
//
// The clock (format note: bits 1..31 were zero before clocks; the record size did not change) is the
// row's version for workers' caches (row_cache.h): it changes on every mutation of a live record, so
// an unchanged clock means unchanged record bytes. An insert writes kInitialClock; every later
// mutation (an applied push step, a load over the row) adds one, mod 2^31. Being record bytes, clocks
// are covered by parity: a rebuilt server has the lost one's clocks, and cached copies stay valid.
// What a clock cannot see: a row erased and inserted again starts over at kInitialClock, and a
// rollback (checkpoint restore, CPR, a resume's load into fresh shards, a rebuild that comes back
// older than what workers already read) rewinds clocks. A cached clock can then match a row with other
// bytes (ABA); callers tag cached rows with a per-server epoch that such events change. Liveness is
// bit 0 alone: test it with IsLive, never flags == kLive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace xdl_ec {

struct RecordLayout {
  static constexpr size_t kKeyOffset = 0;
  static constexpr size_t kFlagsOffset = 8;
  static constexpr size_t kValueOffset = 12;
  static constexpr uint32_t kLive = 1u;
  static constexpr int kClockShift = 1;
  static constexpr uint32_t kClockMask = 0x7FFFFFFFu;  // clocks count mod 2^31
  static constexpr uint32_t kInitialClock = 1;

  static constexpr int kPolicyBytes = 16;
  static constexpr size_t kLastStepOffset = 0;  // within the policy words
  static constexpr size_t kUsesOffset = 8;
  static constexpr size_t kAdmittedOffset = 12;

  int dim = 0;           // floats in the embedding value
  int state_floats = 0;  // floats of optimizer state per row (e.g. Adagrad: dim, Adam: 2*dim)
  int policy_bytes = 0;  // kPolicyBytes in tables with admission / eviction rules, else 0

  RecordLayout() = default;
  RecordLayout(int dim_, int state_floats_, int policy_bytes_ = 0)
      : dim(dim_), state_floats(state_floats_), policy_bytes(policy_bytes_) {}

  size_t state_offset() const { return kValueOffset + sizeof(float) * static_cast<size_t>(dim); }
  size_t policy_offset() const { return state_offset() + sizeof(float) * static_cast<size_t>(state_floats); }
  size_t bytes() const { return policy_offset() + static_cast<size_t>(policy_bytes); }

  // ---- flags -----------------------------------------------------------------------------------
  static bool IsLive(uint32_t flags) { return (flags & kLive) != 0; }
  static uint32_t ClockOf(uint32_t flags) { return flags >> kClockShift; }
  static uint32_t LiveFlags(uint32_t clock) { return kLive | ((clock & kClockMask) << kClockShift); }
  // flags with the clock one further: a single add (bit 0 is untouched, the carry out of bit 31 is
  // the wrap mod 2^31), cheap enough for the push path.
  static uint32_t Ticked(uint32_t flags) { return flags + (1u << kClockShift); }
  // How many versions `known` is behind `server`, mod 2^31: right as long as a cached copy is fewer
  // than 2^31 versions old.
  static uint32_t ClockBehind(uint32_t server, uint32_t known) { return (server - known) & kClockMask; }

  // ---- on record bytes ---------------------------------------------------------------------------
  static uint32_t Flags(const uint8_t* record) {
    uint32_t flags;
    std::memcpy(&flags, record + kFlagsOffset, sizeof(flags));
    return flags;
  }
  static void SetFlags(uint8_t* record, uint32_t flags) { std::memcpy(record + kFlagsOffset, &flags, sizeof(flags)); }
  static uint32_t Clock(const uint8_t* record) { return ClockOf(Flags(record)); }
  static void SetClock(uint8_t* record, uint32_t clock) {
    SetFlags(record, (Flags(record) & kLive) | ((clock & kClockMask) << kClockShift));
  }
};

}  // namespace xdl_ec

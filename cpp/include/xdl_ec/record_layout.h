// The byte layout of one slot record. Parity is computed over these bytes, so the layout is part of
// the on-wire and on-parity format: change it only with a format version bump.
//
//   offset 0            int64   key        the feature id (XDL hash64), host byte order
//   offset 8            uint32  flags      bit 0: slot is live; other bits zero
//   offset 12           float32 value[dim]
//   offset 12 + 4*dim   float32 state[state_floats]   the optimizer's per-row slots, optimizer-defined order
//
// A free slot is all zero bytes. That makes the parity of a fresh (empty) shard all zeros, so a
// parity block needs no encoding before its first delta, and inserts and deletes are plain deltas
// from and to the zero record.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xdl_ec {

struct RecordLayout {
  static constexpr size_t kKeyOffset = 0;
  static constexpr size_t kFlagsOffset = 8;
  static constexpr size_t kValueOffset = 12;
  static constexpr uint32_t kLive = 1u;

  int dim = 0;           // floats in the embedding value
  int state_floats = 0;  // floats of optimizer state per row (e.g. Adagrad: dim, Adam: 2*dim)

  RecordLayout() = default;
  RecordLayout(int dim_, int state_floats_) : dim(dim_), state_floats(state_floats_) {}

  size_t state_offset() const { return kValueOffset + sizeof(float) * static_cast<size_t>(dim); }
  size_t bytes() const { return state_offset() + sizeof(float) * static_cast<size_t>(state_floats); }
};

}  // namespace xdl_ec

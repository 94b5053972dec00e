// A DeltaSink (delta_sink.h) into a caller's DeltaBatch: how a caller that wants a mutation's deltas in
// hand (tests, the Python binding's return_deltas) gets them from EmbeddingShard, whose operations all take
// their deltas one way, as a DeltaSink*. Making the sink clears the batch, so after the call the batch holds
// that call's deltas, or none when it reported none (a pull of keys that all exist); it keeps its capacity
// across calls. A sink made for no batch (null) stands for "no deltas": sink() is then null, so
//   shard.Push(keys, grads, n, step, DeltaBatchSink(want ? &batch : nullptr).sink());
// passes a sink only when one is wanted (the temporary lives until the call returns).
#pragma once

#include <cstddef>
#include <utility>

#include "xdl_ec/delta_batch.h"
#include "xdl_ec/delta_sink.h"

namespace xdl_ec {

class DeltaBatchSink final : public DeltaSink {
 public:
  explicit DeltaBatchSink(DeltaBatch* out) : out_(out) {
    if (out_) out_->clear();
  }

  // This sink, or null when it was made for no batch.
  DeltaSink* sink() { return out_ ? this : nullptr; }

  DeltaBatch Begin(size_t record_bytes) override {
    DeltaBatch batch = std::move(*out_);
    batch.clear();
    batch.record_bytes = record_bytes;
    return batch;
  }
  void Record(DeltaBatch deltas) override { *out_ = std::move(deltas); }

 private:
  DeltaBatch* out_;
};

}  // namespace xdl_ec

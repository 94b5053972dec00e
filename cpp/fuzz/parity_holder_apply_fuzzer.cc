// libFuzzer target: ParityHolder::Apply on parsed batches, as a ParityReceiver runs it. Input: one byte choosing
// the sender (any of 0..255: the job has 7 servers), one byte for the durable watermark, then ParseBatches bytes.
// Whatever arrives: no crash; a refused batch changes nothing (the batches before it stay applied); the
// memory the holder allocates stays within what the growth rule allows for the entries received; and rolling
// the sender back to seq 0 (every batch is still in the undo log when durable is 0) gives all-zero parity again.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "xdl_ec/forwarded_batch.h"
#include "xdl_ec/parity_holder.h"

namespace {
using namespace xdl_ec;
using namespace xdl_ec::fuzz;

bool AllZero(const ParityHolder& holder) {
  std::vector<uint8_t> block(kSlots * kRecord);
  for (size_t c = 0; c < holder.NumBlocks("t"); ++c) {
    holder.ReadBlock("t", c, kRecord, 0, kRecord, block.data());
    if (std::any_of(block.begin(), block.end(), [](uint8_t b) { return b != 0; })) return false;
  }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int sender = data[0];
  const int64_t durable = data[1] & 1 ? 0 : data[1] >> 1;
  std::vector<BatchPtr> batches;
  try {
    batches = ParseBatches(data + 2, size - 2);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  ParityHolder holder(kHolder, kN, kK, kR, {{"t", kSlots * kRecord}});
  size_t entries = 0;
  for (const BatchPtr& b : batches)
    for (const auto& [table, update] : b->updates) entries += update.entries.size();
  int64_t applied = 0;
  try {
    applied = holder.Apply(sender, batches, durable);
  } catch (const std::invalid_argument&) {  // BatchRefused included
    applied = holder.Applied(sender);
  }
  if (applied != holder.Applied(sender)) Broken("Apply returned another seq than Applied");
  if (!holder.Protects(sender) && (applied != 0 || holder.Bytes() != 0)) Broken("a stranger's batch was applied");
  // Growth: every batch may add at most 2 + entries / block_slots cycles of r blocks to what came before.
  const size_t most_blocks = (2 * batches.size() + entries / kSlots + 1) * kR;
  if (holder.NumBlocks("t") > most_blocks) Broken("the holder grew beyond what the entries justify");
  if (holder.Bytes() > holder.NumBlocks("t") * kSlots * kRecord) Broken("more bytes allocated than blocks");
  if (durable == 0 && applied > 0) {
    holder.Rollback(sender, 0);
    if (!AllZero(holder)) Broken("rolling everything back did not restore all-zero parity");
  }
  return 0;
}

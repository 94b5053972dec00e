// libFuzzer target: ParseBatches, the first thing a ParityHolder does with bytes from the network. Any input
// either parses or throws std::invalid_argument (never crashes, reads out of bounds, overflows or allocates from
// a length it did not check against the bytes present), and what parses serialises back to bytes that parse to
// the same serialisation.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "fuzz_input.h"
#include "xdl_ec/forwarded_batch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<xdl_ec::BatchPtr> batches;
  try {
    batches = xdl_ec::ParseBatches(data, size);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  const std::vector<uint8_t> once = xdl_ec::SerializeBatches(batches);
  const std::vector<uint8_t> twice = xdl_ec::SerializeBatches(xdl_ec::ParseBatches(once.data(), once.size()));
  if (once != twice) xdl_ec::fuzz::Broken("SerializeBatches(ParseBatches(x)) is not a fixed point");
  // Stamps are a map: serialising sorts them, so bytes may differ from the input only in their order.
  if (once.size() != size) xdl_ec::fuzz::Broken("a parsed input re-serialises to another length");
  return 0;
}

// libFuzzer target: ParityUpdate::Parse (each update inside a forwarded batch). Any input parses or throws
// std::invalid_argument; a parsed update serialises back to exactly the input bytes.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "fuzz_input.h"
#include "xdl_ec/parity_update.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xdl_ec::ParityUpdate update;
  try {
    update = xdl_ec::ParityUpdate::Parse(data, size);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  if (update.deltas.size() != update.entries.size() * static_cast<size_t>(update.record_bytes))
    xdl_ec::fuzz::Broken("a parsed update's deltas do not match entries * record_bytes");
  const std::vector<uint8_t> bytes = update.Serialize();
  if (bytes.size() != size || (size > 0 && !std::equal(bytes.begin(), bytes.end(), data)))
    xdl_ec::fuzz::Broken("ParityUpdate::Serialize(Parse(x)) != x");
  return 0;
}

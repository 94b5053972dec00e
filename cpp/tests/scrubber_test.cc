#include "xdl_ec/scrubber.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

namespace xdl_ec {
namespace {

// n servers' data and parity blocks as plain bytes, parity encoded from the data, read through a FragmentReader.
struct Blocks {
  Blocks(int n, int k, int r, uint32_t block_slots, size_t record_bytes, size_t stripes)
      : layout(n, k, r), code(std::make_shared<ErasureCode>(k, r)), bytes(block_slots * record_bytes) {
    std::mt19937_64 rng(9);
    for (size_t s = 0; s < stripes; ++s) {
      std::vector<const uint8_t*> in;
      std::vector<uint8_t*> out;
      for (int j = 0; j < k; ++j) {
        auto& block = data[Key(layout.DataMember(s, j))];
        block.resize(bytes);
        for (auto& b : block) b = static_cast<uint8_t>(rng());
        in.push_back(block.data());
      }
      for (int i = 0; i < r; ++i) {
        auto& block = parity[Key(layout.ParityMember(s, i))];
        block.resize(bytes);
        out.push_back(block.data());
      }
      code->Encode(bytes, in.data(), out.data());
    }
  }
  static std::pair<int, size_t> Key(const BlockRef& b) { return {b.server, b.block}; }
  FragmentReader Reader() {
    auto read = [this](std::map<std::pair<int, size_t>, std::vector<uint8_t>>& m) {
      return [this, &m](int server, size_t block, size_t offset, size_t width, uint8_t* out) {
        ASSERT_EQ(offset, 0u);
        auto it = m.find({server, block});
        if (it == m.end())
          std::memset(out, 0, bytes);
        else
          std::memcpy(out, it->second.data(), bytes);
      };
    };
    return FragmentReader{read(data), read(parity)};
  }
  StripeLayout layout;
  std::shared_ptr<const ErasureCode> code;
  size_t bytes;
  std::map<std::pair<int, size_t>, std::vector<uint8_t>> data, parity;
};

TEST(Scrubber, FindsExactlyTheParityBlocksThatDisagree) {
  Blocks b(6, 3, 2, 4, 16, 12);
  Scrubber scrubber(b.layout, b.code, 4, 16);
  EXPECT_TRUE(scrubber.Scrub(12, b.Reader()).empty());
  b.parity[{4, 1}][17] ^= 0x20;  // one bit of one parity block
  const StripeSlot where = b.layout.ParitySlot(4, 1);
  std::vector<ScrubMismatch> bad = scrubber.Scrub(12, b.Reader());
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].stripe, where.stripe);
  EXPECT_EQ(bad[0].parity_member, where.member);
  EXPECT_EQ(bad[0].server, 4);
  EXPECT_EQ(bad[0].block, 1u);
  b.parity[{4, 1}][17] ^= 0x20;
  const BlockRef data = b.layout.DataMember(7, 2);
  b.data[{data.server, data.block}][0] ^= 1;  // a data bit: both parity blocks of its stripe disagree
  bad = scrubber.Scrub(12, b.Reader());
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_EQ(bad[0].stripe, 7u);
  EXPECT_EQ(bad[1].stripe, 7u);
  EXPECT_EQ(bad[0].parity_member, 0);
  EXPECT_EQ(bad[1].parity_member, 1);
  EXPECT_TRUE(scrubber.Scrub(7, b.Reader()).empty()) << "stripes past the range are not read";
}

TEST(Scrubber, RefusesABadGeometryOrReader) {
  const StripeLayout layout(5, 3, 2);
  EXPECT_THROW(Scrubber(layout, nullptr, 4, 16), std::invalid_argument);
  EXPECT_THROW(Scrubber(layout, std::make_shared<ErasureCode>(3, 1), 4, 16), std::invalid_argument);
  EXPECT_THROW(Scrubber(layout, std::make_shared<ErasureCode>(3, 2), 0, 16), std::invalid_argument);
  EXPECT_THROW(Scrubber(layout, std::make_shared<ErasureCode>(3, 2), 4, 0), std::invalid_argument);
  Scrubber scrubber(layout, std::make_shared<ErasureCode>(3, 2), 4, 16);
  EXPECT_THROW(scrubber.Scrub(5, FragmentReader{}), std::invalid_argument);
  FragmentReader failing{[](int, size_t, size_t, size_t, uint8_t*) { throw std::runtime_error("server 2 is gone"); },
                         [](int, size_t, size_t, size_t, uint8_t*) {}};
  EXPECT_THROW(scrubber.Scrub(5, failing), std::runtime_error);
}

}  // namespace
}  // namespace xdl_ec

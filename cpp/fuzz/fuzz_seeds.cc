// Seeds for the fuzz targets: real forwarded batches in their wire form, as a data server's forwarder makes them
// for holder 4 of the fuzz layout (fuzz_input.h): a sender's slots filled in order, then updated at random, routed
// by ParityRouter, coalesced ranges included. Usage: fuzz_seeds DIR (writes DIR/<target>/seed-*).
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "xdl_ec/delta_batch.h"
#include "xdl_ec/forwarded_batch.h"
#include "xdl_ec/parity_router.h"
#include "xdl_ec/push_pull_message.h"
#include "xdl_ec/stripe_layout.h"

namespace {
using namespace xdl_ec;
using namespace xdl_ec::fuzz;

void Write(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "fuzz_seeds: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR (DIR/parse_batches_fuzzer etc. must exist)\n");
    return 2;
  }
  const std::string dir = argv[1];
  const StripeLayout layout(kN, kK, kR);
  const ParityRouter router(layout, kSlots, kRecord);
  std::mt19937_64 rng(1);
  int written = 0;
  for (int sender : {0, 1, 3}) {  // protected by holder 4 at distances 4, 3, 1
    int64_t seq = 0;
    uint32_t high = 0;  // slots filled so far
    std::vector<BatchPtr> stream;
    for (int mutation = 0; mutation < 6; ++mutation) {
      DeltaBatch deltas;
      deltas.record_bytes = kRecord;
      const uint32_t inserts = 1 + static_cast<uint32_t>(rng() % (2 * kSlots * kK));
      for (uint32_t s = 0; s < inserts; ++s) deltas.slots.push_back(high + s);
      high += inserts;
      for (uint32_t s = 0; s < high && deltas.slots.size() < inserts + 3; ++s)
        if (rng() % 4 == 0 && s < high - inserts) deltas.slots.push_back(s);  // updates of rows already there
      for (size_t b = 0; b < deltas.slots.size() * kRecord; ++b)
        deltas.xor_bytes.push_back(static_cast<uint8_t>(rng()));
      std::vector<ParityUpdate> updates;
      router.Route(sender, deltas, &updates);
      auto batch = std::make_shared<ForwardedBatch>();
      batch->first_seq = seq + 1;
      seq += 1 + static_cast<int64_t>(rng() % 2);  // sometimes a coalesced range of two mutations
      batch->seq = seq;
      batch->stamp = std::make_shared<const WorkerSeqs>(WorkerSeqs{{0, seq}, {1, seq / 2}});
      if (!updates[kHolder].empty()) {
        Write(dir + "/parity_update_fuzzer/seed-" + std::to_string(written), updates[kHolder].Serialize());
        batch->updates.emplace_back("t", std::move(updates[kHolder]));
      }
      stream.push_back(batch);
      const std::vector<uint8_t> wire = SerializeBatches(stream);
      Write(dir + "/parse_batches_fuzzer/seed-" + std::to_string(written), wire);
      std::vector<uint8_t> apply = {static_cast<uint8_t>(sender), static_cast<uint8_t>(mutation % 2 ? 0 : 3 << 1)};
      apply.insert(apply.end(), wire.begin(), wire.end());
      Write(dir + "/parity_holder_apply_fuzzer/seed-" + std::to_string(written), apply);
      ++written;
    }
  }
  // link_message_fuzzer: well-formed messages without their MACs (pickle bytes, buffer count, body), as
  // LinkSession::Send lays them out: buffers of several sizes after a pickle, 64-byte aligned
  for (int seed = 0; seed < 6; ++seed) {
    const std::vector<uint64_t> buffers = {static_cast<uint64_t>(seed * 37), 64, static_cast<uint64_t>(seed)};
    const uint64_t pickle = 5 + 11 * static_cast<uint64_t>(seed);
    std::vector<uint8_t> message;
    for (int i = 0; i < 8; ++i) message.push_back(static_cast<uint8_t>(pickle >> (8 * i)));
    for (int i = 0; i < 4; ++i) message.push_back(static_cast<uint8_t>(buffers.size() >> (8 * i)));
    std::vector<uint8_t> body;
    for (uint64_t n : buffers)
      for (int i = 0; i < 8; ++i) body.push_back(static_cast<uint8_t>(n >> (8 * i)));
    for (uint64_t i = 0; i < pickle; ++i) body.push_back(static_cast<uint8_t>(rng()));
    for (uint64_t n : buffers) {
      body.resize((body.size() + 63) / 64 * 64, 0);
      for (uint64_t i = 0; i < n; ++i) body.push_back(static_cast<uint8_t>(rng()));
    }
    message.insert(message.end(), body.begin(), body.end());
    Write(dir + "/link_message_fuzzer/seed-" + std::to_string(seed), message);
  }
  // push_pull_message_fuzzer: step requests of one and two parts (with and without repeats) and a pull, and an
  // answer, as the fuzzer reads them: buffer count, their lengths, their bytes, the head
  for (int seed = 0; seed < 4; ++seed) {
    const size_t n = 1 + seed;
    std::vector<int64_t> keys(n, 7 + seed);
    std::vector<float> grads(n * 2, 0.5f);
    std::vector<uint32_t> repeats(n, 1);
    std::vector<int32_t> known(n, seed - 2);
    PushPullRequest request;
    request.step = 1 + seed;
    request.parts.push_back({"t", seed, keys.data(), n, grads.data(), 2, seed % 2 ? repeats.data() : nullptr});
    if (seed > 1) request.parts.push_back({"wide", seed + 1, keys.data(), n, grads.data(), 2, nullptr});
    request.pulls.push_back({"t", keys.data(), n});
    if (seed == 3) {  // a caching worker's push_pull_stale
      request.stale_call = true;
      request.epoch = 7;
      request.stale.push_back({"t", keys.data(), n, known.data(), 2});
    }
    std::vector<std::pair<const void*, size_t>> arrays;
    for (const PushPullPart& p : request.parts) {
      arrays.emplace_back(p.keys, n * 8);
      arrays.emplace_back(p.grads, n * 8);
      if (p.repeats != nullptr) arrays.emplace_back(p.repeats, n * 4);
    }
    arrays.emplace_back(keys.data(), n * 8);
    for (const PushPullStalePull& p : request.stale) {
      arrays.emplace_back(p.keys, n * 8);
      arrays.emplace_back(p.known, n * 4);
    }
    std::vector<uint8_t> input = {static_cast<uint8_t>(arrays.size())};
    for (const auto& a : arrays) {
      input.push_back(static_cast<uint8_t>(a.second));
      input.push_back(static_cast<uint8_t>(a.second >> 8));
    }
    for (const auto& a : arrays) {
      const auto* bytes = static_cast<const uint8_t*>(a.first);
      input.insert(input.end(), bytes, bytes + a.second);
    }
    const std::string head = PushPullMessage::RequestHead(request);
    input.insert(input.end(), head.begin(), head.end());
    Write(dir + "/push_pull_message_fuzzer/seed-" + std::to_string(seed), input);
  }
  PushPullAnswer answer;
  answer.has_ack = answer.applied = answer.has_rows = answer.has_stale = true;
  answer.rows.resize(2);
  answer.stale.resize(1);
  const std::string answer_head = PushPullMessage::AnswerHead(answer);
  std::vector<uint8_t> answer_input = {5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};  // five empty buffers
  answer_input.insert(answer_input.end(), answer_head.begin(), answer_head.end());
  Write(dir + "/push_pull_message_fuzzer/seed-answer", answer_input);
  std::printf("fuzz_seeds: %d seeds per target in %s\n", written, dir.c_str());
  return 0;
}

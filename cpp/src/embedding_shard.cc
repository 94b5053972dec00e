// EmbeddingShard: its config, construction and the counts it reports. The operations are in shard_*.cc.
#include "xdl_ec/embedding_shard.h"

#include <mutex>
#include <stdexcept>
#include <string>

#include "embedding_shard_impl.h"

namespace xdl_ec {
namespace {

constexpr int kMaxDim = 1 << 16;
constexpr uint32_t kMaxBlockSlots = 1u << 24;

}  // namespace

void ShardConfig::Validate() const {
  if (dim < 1 || dim > kMaxDim) {
    throw std::invalid_argument("ShardConfig: dim must be in [1, " + std::to_string(kMaxDim) + "], got " +
                                std::to_string(dim));
  }
  if (block_slots < 1 || block_slots > kMaxBlockSlots) {
    throw std::invalid_argument("ShardConfig: block_slots must be in [1, " + std::to_string(kMaxBlockSlots) +
                                "], got " + std::to_string(block_slots));
  }
  if (memory_budget != 0 && spill_dir.empty()) {
    throw std::invalid_argument("ShardConfig: memory_budget " + std::to_string(memory_budget) +
                                " needs a spill_dir (where the rows beyond it live)");
  }
  if (memory_budget == 0 && !spill_dir.empty()) {
    throw std::invalid_argument("ShardConfig: spill_dir '" + spill_dir + "' needs a memory_budget (> 0)");
  }
  optimizer.Validate();
  initializer.Validate();
  row_policy.Validate(block_slots);
}

namespace {

// The record layout of a validated config: the optimizer's state and, with row rules, the policy words.
RecordLayout LayoutOf(const ShardConfig& config, const Optimizer& optimizer) {
  return RecordLayout(config.dim, optimizer.StateFloats(config.dim),
                      config.row_policy.active() ? RecordLayout::kPolicyBytes : 0);
}

const ShardConfig& Validated(const ShardConfig& config) {
  config.Validate();
  return config;
}

}  // namespace

EmbeddingShard::Impl::Impl(const ShardConfig& c)
    : config(Validated(c)),
      optimizer(Optimizer::Create(config.optimizer)),
      layout(LayoutOf(config, *optimizer)),
      record_bytes(layout.bytes()),
      value_end(layout.state_offset()),
      read_bytes(value_end),
      store(config.memory_budget ? SlotStore(record_bytes, config.block_slots, config.memory_budget, config.spill_dir)
                                 : SlotStore(record_bytes, config.block_slots)) {
  policy_on = config.row_policy.active();
  min_count = config.row_policy.admit_min_count;
  policy_offset = layout.policy_offset();
  admission = min_count > 1;
  admitted_at = admission ? policy_offset + RecordLayout::kAdmittedOffset : 0;
  sketch = config.row_policy.sketch();
  if (sketch) {  // the reserved slots, all zero (never live), with their blocks
    cells_per_slot = (record_bytes - RecordLayout::kValueOffset) / sizeof(uint16_t);
    sketch_slots = (config.row_policy.sketch_cells() + cells_per_slot - 1) / cells_per_slot;
    while (store.high_water() < sketch_slots) store.Grow();
    sketch_entry.assign(sketch_slots, kUntouched);
  }
}

EmbeddingShard::EmbeddingShard(const ShardConfig& config) : impl_(new Impl(config)) {}
EmbeddingShard::~EmbeddingShard() = default;

const ShardConfig& EmbeddingShard::config() const { return impl_->config; }
const RecordLayout& EmbeddingShard::layout() const { return impl_->layout; }
int EmbeddingShard::dim() const { return impl_->config.dim; }
uint32_t EmbeddingShard::block_slots() const { return impl_->store.block_slots(); }
size_t EmbeddingShard::block_bytes() const { return impl_->store.block_bytes(); }

size_t EmbeddingShard::num_blocks() const {
  std::shared_lock<std::shared_mutex> lock(impl_->mutex);
  return impl_->NumBlocks();
}

size_t EmbeddingShard::size() const {
  std::shared_lock<std::shared_mutex> lock(impl_->mutex);
  return impl_->index.size();
}

ShardMemoryStats EmbeddingShard::memory() const {
  Impl& s = *impl_;
  std::shared_lock<std::shared_mutex> lock(s.mutex);
  ShardMemoryStats m;
  m.spill = s.store.spill_stats();
  m.live_rows = s.index.size();
  m.slots = s.store.high_water();
  m.record_bytes = s.record_bytes;
  m.slot_bytes = s.store.bytes();
  m.index_bytes = s.index.bytes();
  m.free_slots = s.free_slots.size();
  m.free_list_bytes = s.free_slots.capacity() * sizeof(uint32_t);
  return m;
}

}  // namespace xdl_ec

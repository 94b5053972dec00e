#include "xdl_ec/shard_server.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace xdl_ec {
namespace {

bool Finite(const float* values, size_t n) {
  // An OR of "not finite" over the whole array, without a branch per value (vectorises).
  bool bad = false;
  for (size_t i = 0; i < n; ++i) bad |= !std::isfinite(values[i]);
  return !bad;
}

bool RepeatsInRange(const uint32_t* repeats, size_t n) {
  if (repeats == nullptr) return true;
  for (size_t i = 0; i < n; ++i) {
    if (repeats[i] < 1 || repeats[i] > EmbeddingShard::kMaxRepeats) return false;
  }
  return true;
}

}  // namespace

ShardServer::ShardServer(int index) : index_(index) {}

int ShardServer::index() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return index_;
}

void ShardServer::set_index(int index) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  index_ = index;
}

void ShardServer::SetTable(const std::string& name, std::shared_ptr<EmbeddingShard> shard) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  tables_[name] = std::move(shard);
}

void ShardServer::DropTables() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  tables_.clear();
}

int64_t ShardServer::LastSeq(int32_t worker) const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const auto it = last_seq_.find(worker);
  return it == last_seq_.end() ? 0 : it->second;
}

void ShardServer::NoteSeq(int32_t worker, int64_t seq) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  int64_t& last = last_seq_[worker];
  last = std::max(last, seq);
}

WorkerSeqs ShardServer::Seqs() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return last_seq_;
}

void ShardServer::SetNative(bool enabled, std::shared_ptr<DeltaForwarder> forwarder) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  native_ = enabled;
  forwarder_ = std::move(forwarder);
}

void ShardServer::SetEpoch(int64_t epoch) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  epoch_ = epoch;
}

bool ShardServer::native() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return native_;
}

ShardServer::Counters ShardServer::counters() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return counters_;
}

bool ShardServer::Acceptable(const PushPullRequest& request) const {
  if (!native_ || request.participants != 1 || request.step < 1 || request.worker < 0) return false;
  for (const PushPullPart& part : request.parts) {
    const auto it = tables_.find(part.table);
    if (it == tables_.end() || part.seq < 0) return false;
    const EmbeddingShard& shard = *it->second;
    if (part.dim != static_cast<uint32_t>(shard.dim()) || shard.missing_blocks() != 0) return false;
    if (!Finite(part.grads, part.n * part.dim) || !RepeatsInRange(part.repeats, part.n)) return false;
  }
  for (const PushPullPull& pull : request.pulls) {
    const auto it = tables_.find(pull.table);
    if (it == tables_.end() || it->second->missing_blocks() != 0) return false;
  }
  for (const PushPullStalePull& pull : request.stale) {
    const auto it = tables_.find(pull.table);
    if (it == tables_.end() || it->second->missing_blocks() != 0) return false;
  }
  for (const PushPullGroupPart& part : request.group_parts) {
    if (part.first_seq < 0 || !Finite(part.grads, part.n * part.dim)) return false;
    for (const std::string& table : part.tables) {
      const auto it = tables_.find(table);
      if (it == tables_.end() || it->second->missing_blocks() != 0) return false;
      if (part.dim != static_cast<uint32_t>(it->second->dim())) return false;
    }
  }
  for (const PushPullGroupPull& pull : request.group_pulls) {
    for (const std::string& table : pull.tables) {
      const auto it = tables_.find(table);
      if (it == tables_.end() || it->second->missing_blocks() != 0) return false;
      if (pull.dim != static_cast<uint32_t>(it->second->dim())) return false;
    }
  }
  return true;
}

void ShardServer::ApplyPart(int32_t worker, const std::string& table, int64_t seq, const int64_t* keys, size_t n,
                            const float* grads, uint32_t dim, const uint32_t* repeats, int64_t step) {
  int64_t& applied = last_seq_[worker];    // made here only for a part applied below (seq 0 or past none)
  if (seq != 0 && seq <= applied) return;  // a replayed part, applied already: exactly once
  Counters& c = counters_;
  ++c.pushes;
  c.keys_pushed += n;
  c.bytes_in += n * (sizeof(int64_t) + dim * sizeof(float)) + (repeats ? n * 4 : 0);
  EmbeddingShard& shard = *tables_.at(table);
  if (forwarder_) {
    const WorkerSeqs pushes{{worker, seq}};
    DeltaForwarder::Mutation sink(*forwarder_, table, pushes);
    shard.Push(keys, grads, n, step, &sink, repeats);
  } else {
    shard.Push(keys, grads, n, step, nullptr, repeats);
  }
  ++c.steps_applied;
  applied = std::max(applied, seq);
}

void ShardServer::PullInto(const std::string& table, const int64_t* keys, size_t n, float* out) {
  EmbeddingShard& shard = *tables_.at(table);
  if (forwarder_) {
    const WorkerSeqs no_pushes;  // the Mutation refers to it: it must outlive the sink
    DeltaForwarder::Mutation sink(*forwarder_, table, no_pushes);
    shard.Pull(keys, n, out, &sink);
  } else {
    shard.Pull(keys, n, out, nullptr);
  }
  Counters& c = counters_;
  c.keys_pulled += n;
  c.bytes_in += n * sizeof(int64_t);
  c.bytes_out += n * static_cast<size_t>(shard.dim()) * sizeof(float);
}

bool ShardServer::Serve(const PushPullRequest& request, PushPullAnswer* answer) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!Acceptable(request)) return false;
  Counters& c = counters_;
  ++c.requests;
  *answer = PushPullAnswer{};
  answer->server = index_;
  answer->worker = request.worker;
  answer->step = request.step;
  if (!request.parts.empty() || !request.group_parts.empty()) {
    const int32_t worker = request.worker;
    int64_t last = 0;
    for (const PushPullPart& part : request.parts) {
      last = std::max(last, part.seq);
      ApplyPart(worker, part.table, part.seq, part.keys, part.n, part.grads, part.dim, part.repeats, request.step);
    }
    for (const PushPullGroupPart& part : request.group_parts) {
      for (size_t t = 0; t < part.tables.size(); ++t) {
        const int64_t seq = part.first_seq == 0 ? 0 : part.first_seq + static_cast<int64_t>(t);
        last = std::max(last, seq);
        const auto begin = static_cast<size_t>(part.offsets[t]);
        const size_t n = static_cast<size_t>(part.offsets[t + 1]) - begin;
        ApplyPart(worker, part.tables[t], seq, part.keys + begin, n, part.grads + begin * part.dim, part.dim, nullptr,
                  request.step);
      }
    }
    answer->has_ack = true;
    answer->seq = last;
    answer->applied = true;
    answer->durable = forwarder_ ? forwarder_->DurableSeq(worker) : 0;
  }
  if (!request.pulls.empty() || !request.group_pulls.empty()) {
    answer->has_rows = true;
    answer->rows.resize(request.pulls.size() + request.group_pulls.size());
    for (size_t i = 0; i < request.pulls.size(); ++i) {
      const PushPullPull& pull = request.pulls[i];
      const auto dim = static_cast<uint32_t>(tables_.at(pull.table)->dim());
      PushPullAnswer::Rows& rows = answer->rows[i];
      rows.floats = pull.n * dim;
      rows.data.reset(new float[std::max<size_t>(rows.floats, 1)]);
      rows.dim = dim;
      PullInto(pull.table, pull.keys, pull.n, rows.data.get());
    }
    for (size_t i = 0; i < request.group_pulls.size(); ++i) {
      const PushPullGroupPull& pull = request.group_pulls[i];
      PushPullAnswer::Rows& rows = answer->rows[request.pulls.size() + i];
      rows.floats = pull.n * pull.dim;
      rows.data.reset(new float[std::max<size_t>(rows.floats, 1)]);
      rows.dim = pull.dim;
      for (size_t t = 0; t < pull.tables.size(); ++t) {
        const auto begin = static_cast<size_t>(pull.offsets[t]);
        const size_t n = static_cast<size_t>(pull.offsets[t + 1]) - begin;
        if (n != 0) PullInto(pull.tables[t], pull.keys + begin, n, rows.data.get() + begin * pull.dim);
      }
    }
    ++c.pulls;
  }
  if (request.stale_call) {
    answer->has_stale = true;
    // after this request's pushes: a pass in one of them frees rows that a later insert restarts at the
    // initial clock, so copies from before it are not trusted (EpochAfterEvictions)
    uint64_t generations = 0;
    for (const auto& named : tables_) generations += named.second ? named.second->eviction_generation() : 0;
    const int64_t epoch = EpochAfterEvictions(epoch_, generations);
    answer->epoch = epoch;
    const bool fresh = request.epoch == epoch;  // else the copies came from other bytes: trust none
    answer->stale.resize(request.stale.size());
    for (size_t i = 0; i < request.stale.size(); ++i) {
      const PushPullStalePull& pull = request.stale[i];
      EmbeddingShard& shard = *tables_.at(pull.table);
      const size_t dim = static_cast<size_t>(shard.dim());
      PushPullAnswer::StaleRows& out = answer->stale[i];
      std::vector<int32_t> unknown;
      if (!fresh) unknown.assign(pull.n, -1);
      const int32_t* known = fresh ? pull.known : unknown.data();
      out.n = pull.n;
      out.rows.data.reset(new float[std::max<size_t>(pull.n * dim, 1)]);
      out.rows.dim = static_cast<uint32_t>(dim);
      out.clocks.reset(new int32_t[std::max<size_t>(pull.n, 1)]);
      out.sent_mask.reset(new uint8_t[std::max<size_t>(pull.n, 1)]);
      size_t sent;
      if (forwarder_) {
        const WorkerSeqs no_pushes;  // the Mutation refers to it: it must outlive the sink
        DeltaForwarder::Mutation sink(*forwarder_, pull.table, no_pushes);
        sent = shard.PullStale(pull.keys, pull.n, known, pull.staleness, out.rows.data.get(), out.clocks.get(),
                               out.sent_mask.get(), &sink);
      } else {
        sent = shard.PullStale(pull.keys, pull.n, known, pull.staleness, out.rows.data.get(), out.clocks.get(),
                               out.sent_mask.get(), nullptr);
      }
      out.sent = static_cast<uint32_t>(sent);
      out.rows.floats = sent * dim;
      out.table_rows = shard.size();
      c.keys_pulled += pull.n;
      c.bytes_in += pull.n * (sizeof(int64_t) + sizeof(int32_t));
      c.bytes_out += out.rows.floats * sizeof(float) + pull.n * (sizeof(int32_t) + 1);
    }
    ++c.pulls;
  }
  return true;
}

}  // namespace xdl_ec

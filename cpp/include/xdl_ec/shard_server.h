// ShardServer: a parameter server's shards and the state its training requests keep (each worker's last push
// seq, counters, the server's lock), and the native path of a one-worker step's request (push_pull_message.h).
//
// Why native: on a multi-process run every step sends each server one request, and serving it in the
// interpreter (decode, checks, bookkeeping, encode) cost several times its warm price under load, where the
// server's thread wakes with cold caches between requests: most of what a step cost beyond one process. The
// general path (sync steps of several workers, a fault-tolerance agent's hooks, bad input and its errors) stays
// the caller's: Serve declines what it does not serve exactly as that path would, having changed nothing.
//
// The lock is the server's one lock: the caller's general path and its agent take it too (it is recursive, as
// the Python RLock it replaces), so the native path sees tables, seqs and agent state in one order with them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "xdl_ec/delta_forwarder.h"
#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/forwarded_batch.h"
#include "xdl_ec/push_pull_message.h"

namespace xdl_ec {

class ShardServer {
 public:
  // What the native path did (the general path counts its own requests).
  struct Counters {
    uint64_t requests = 0;
    uint64_t pushes = 0;  // table parts applied (replayed ones skipped)
    uint64_t keys_pushed = 0;
    uint64_t steps_applied = 0;
    uint64_t pulls = 0;  // requests that pulled
    uint64_t keys_pulled = 0;
    uint64_t bytes_in = 0;
    uint64_t bytes_out = 0;
  };

  explicit ShardServer(int index);
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  int index() const;
  void set_index(int index);  // a spare taking a lost server's place

  std::recursive_mutex& mutex() { return mutex_; }

  // The shard of table `name` (replacing one of that name: a restored shard); DropTables forgets them all.
  void SetTable(const std::string& name, std::shared_ptr<EmbeddingShard> shard);
  void DropTables();

  // The highest push seq of `worker` this server applied (0: none); NoteSeq raises it to `seq` (never lowers).
  int64_t LastSeq(int32_t worker) const;
  void NoteSeq(int32_t worker, int64_t seq);
  WorkerSeqs Seqs() const;

  // Whether Serve may serve requests, and the forwarder its mutations report to (null: none). Off by default:
  // the server turns it on when its fault-tolerance agent applies pushes and pulls as a plain shard does (or
  // through `forwarder` only), and off while the agent needs its own hooks (a crash injected, a server dying).
  void SetNative(bool enabled, std::shared_ptr<DeltaForwarder> forwarder);
  bool native() const;

  // The server's epoch (ParameterServer.epoch): a stale pull whose copies came from another one is answered as
  // if nothing were cached (every key sent).
  void SetEpoch(int64_t epoch);

  // Serves `request` when it is a one-worker step (participants 1) whose every part and pull names a table
  // of this server, of its dim, with finite gradients, steps and seqs in range, repeats in [1, kMaxRepeats],
  // on shards not under restore, with the native path on: applies its parts in order (skipping a part whose
  // seq this server applied already, as a replay), then its group parts table by table (each table as a part of
  // its own, at its seq), then pulls, then group pulls (one rows array each), then its stale pulls (a
  // push_pull_stale call),
  // and fills `answer` (its acks fields, durable from the forwarder, rows, stale answers and the epoch). Otherwise
  // returns false and changes nothing. Throws only what the shards or the forwarder throw (resources), as the general
  // path would.
  bool Serve(const PushPullRequest& request, PushPullAnswer* answer);

  Counters counters() const;

 private:
  bool Acceptable(const PushPullRequest& request) const;  // under the lock
  // Under the lock: one table's push (skipped when `seq` was applied: a replay), as a part of its own is applied.
  void ApplyPart(int32_t worker, const std::string& table, int64_t seq, const int64_t* keys, size_t n,
                 const float* grads, uint32_t dim, const uint32_t* repeats, int64_t step);
  // Under the lock: the rows of one table's keys into out[n * dim].
  void PullInto(const std::string& table, const int64_t* keys, size_t n, float* out);

  mutable std::recursive_mutex mutex_;
  int index_;
  std::map<std::string, std::shared_ptr<EmbeddingShard>> tables_;
  WorkerSeqs last_seq_;
  bool native_ = false;
  int64_t epoch_ = 0;
  std::shared_ptr<DeltaForwarder> forwarder_;
  Counters counters_;
};

}  // namespace xdl_ec

// A shard server: owns the slices the cluster view places on it and applies
// pushes per its consistency mode (actors/server/shard_store.hpp has the
// rules).
//
// Messages (bytes are frames of messages/kv.capnp):
//   (start_atom, string host, uint16_t port)  registers with the scheduler
//   (view_atom, frame ClusterView)            from the scheduler
//   (init_atom, frame Init)   -> frame PushReply
//   (push_atom, frame Push)   -> frame PushReply
//   (pull_atom, frame Pull)   -> frame PullReply    [may wait]
//   (road_atom, road_message_ptr)  the same three requests from the fast
//                             road (actors/road/road.hpp); answered on it
//   (checkpoint_atom, uint64_t gen) -> uint64_t
//                             from the scheduler: our stores' version (the
//                             largest), to pick the version to cut at
//   (checkpoint_atom, uint64_t gen, uint64_t at) -> string
//                             from the scheduler: write checkpoint `gen`
//                             of our stores once they reach version `at`
//                             (sync; other modes write now); answers the
//                             file name once it is written and synced
//   (replicate_atom, uint32_t primary, uint64_t link, uint64_t store,
//    uint32_t origin, uint8_t op, frame, vector<uint64_t>) -> uint64_t
//                             from the server we back up: one operation
//                             on the replica of its store `store`
//   (stale_atom, uint32_t primary, uint64_t link)
//                             from the scheduler: `primary` dropped its
//                             link `link` to us while we stayed in the view
//   us -> scheduler: (stale_atom, uint32_t backup, uint64_t link)
//                             -> uint64_t, when we drop a link to a backup
//                             the view still names (acknowledgements
//                             alone wait for the answer: replication.hpp,
//                             N1)
//
// Chain replication, fencing and promotion: actors/server/replication.hpp.
//
// States and transitions (numbers cited in the code):
//   joining -1-> running      1: RegisterReply with our rank and a view
//   joining -2-> stopped      2: registration failed or timed out
//   running -3-> running      3: newer view: owned slices and live workers
//                                change; waiting pulls are re-checked
//   running -4-> running      4: request from a newer epoch than ours: held
//                                until that view arrives (at most
//                                max_held_bytes in all, each for at most
//                                the request timeout)
//   running -5-> running      5: malformed request: error reply, logged
//   any     -6-> stopped      6: scheduler down: the job is over
//   running -7-> running      7: request from an earlier incarnation of its
//                                rank (a process declared dead whose rank a
//                                restarted one took): refused, not_a_member
//   running -8-> stopped      8: told to stop (user_shutdown): leaves the
//                                view first, so it is not taken for a crash
//
// Checkpoints (--checkpoint.dir). Each hosted store is snapshotted (slices,
// optimizer state, clocks) when it reaches the version the scheduler cut
// at; the file is written on a thread of its own (write, fsync, rename).
// With --resume, the server reads the last checkpoint before it joins and
// restores each slice the view gives its own store that is not initialised
// yet; the replica on our backup gets the same restore.
//
// After a view that lost a worker, the first update applied without it is
// reported to the scheduler as a "resumed" event.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/road/road.hpp"
#include "actors/server/replication.hpp"
#include "actors/server/server_checkpoint.hpp"
#include "actors/server/server_settings.hpp"
#include "actors/server/shard_store.hpp"
#include "messages/kv.hpp"
#include "messages/membership.hpp"

namespace troupe {

/// Where the answer to a request goes: CAF's response promise (middleman
/// road) or back on the fast-road connection the request came in on.
struct replier {
  caf::response_promise rp;
  road_message_ptr road;
  /// With `copy`, a large reply on a road is copied out by that loop.
  void deliver(const outbound& out, const loop_fn* copy = nullptr);
  void deliver(const frame& f);
  void deliver(const caf::error& err);
  /// Who sent the request, for logs.
  std::string source() const;
  /// Runs `say` with who sent the request, naming its address: at once for
  /// a road, once CAF's middleman says where a remote node is otherwise
  /// (with_peer_name).
  void say_source(caf::event_based_actor* self,
                  std::function<void(const std::string&)> say) const;
  /// A request on a road speaks only for the member its connection proved
  /// (road_auth.hpp): not_a_member if it claims to be `claimed`. CAF's
  /// requests pass (TLS authenticates their node, not a rank).
  caf::error check_sender(member_id claimed) const;
};

/// A store this server serves: its own, or one it took over as backup.
struct hosted_store {
  uint64_t id = 0;     ///< unique in the cluster; replicas are keyed by it
  uint32_t origin = 0; ///< rank of the server that created it
  shard_store store;
  /// Epoch of the view from which we serve it: requests sent in older
  /// views were not meant for it (they were cut for our other stores).
  uint64_t since = 0;
};

/// A checkpoint being taken: snapshots of the hosted stores as each
/// reaches the version cut at, then the file.
struct pending_checkpoint {
  uint64_t generation = 0;
  uint64_t serial = 0;        ///< of this take: a retry of a generation is new
  std::set<uint64_t> waiting; ///< ids of stores not yet snapshotted
  checkpoint_data data;
  caf::response_promise rp;
};

/// The thread writing a checkpoint file; joined before the next one and
/// when the server ends, so no write is cut short by our own exit.
struct checkpoint_writer {
  std::thread thread;
  void join() {
    if (thread.joinable())
      thread.join();
  }
  ~checkpoint_writer() { join(); }
};

/// One shard server's state: the stores it serves, the replicas it keeps
/// for its primary, its link to its backup, and its view.
struct shard_server_state {
  static inline const char* name = "shard-server";
  ~shard_server_state();
  struct waiting_pull {
    pull_request req;
    replier to;
  };
  std::vector<hosted_store> stores; // [0] is our own
  std::map<uint64_t, mirror_store> mirrors;
  std::unique_ptr<backup_link> backup; // null: no backup
  uint64_t backup_serial = 0;          // of the last link made
  update_fn fresh_fn; // never called: copied for each new store
  /// How every store's per-slice loops and a round's road replies run:
  /// on a helper_pool of cfg.helper_threads beside the actor thread.
  loop_fn loop = run_serially;
  caf::actor scheduler;
  uint32_t rank = 0;
  bool joined = false;
  uint64_t joined_epoch = 0; // the view we joined in
  bool leaving = false;      // told to stop: leaving the view first
  /// Primary rank -> the newest link of it whose operations we took.
  std::map<uint32_t, primary_link> primary_links;
  /// Our last link dropped while its backup stayed in the view, if any.
  std::optional<alone_notice> alone;
  cluster_view view;
  cluster_view early_view; // newest view received before we joined
  std::vector<waiting_pull> pulls;
  /// A request from a newer epoch than ours, held until our view has it
  /// (4): answered with a timeout once `until` passes, dropped if its road
  /// connection closes first.
  struct held_request {
    uint64_t epoch = 0;
    std::function<void()> run;
    replier rp;
    size_t bytes = 0;
    std::chrono::steady_clock::time_point until;
  };
  std::vector<held_request> held;
  size_t held_bytes = 0; // of every held request's frame
  /// The scheduler's questions about a departed worker's clocks that wait
  /// for our view to reach their epoch (shard_server_cuts.cpp).
  struct cut_query {
    uint32_t worker = 0;
    uint64_t epoch = 0;
    caf::response_promise rp;
  };
  std::vector<cut_query> cut_queries;
  uint32_t request_timeout_ms = 10000;
  server_settings cfg;
  std::unique_ptr<road_listener> road; // null: CAF only
  /// What the road takes in from workers: frames up to worker_frame_bound
  /// of the view, within --server.inflight-bytes in all (road_intake.hpp).
  std::shared_ptr<road_intake> intake;
  /// The cluster's road key, from our RegisterReply: our listener checks
  /// members against it, and we prove ourselves to our backup's road.
  std::shared_ptr<road_keyring> road_keys = std::make_shared<road_keyring>();
  std::optional<secret> road_key; // none: the scheduler gave no key
  // Worker rank -> epoch of the view it (re)joined in: older requests come
  // from a dead incarnation (7).
  std::map<uint32_t, uint64_t> incarnation;
  // A worker left in view `lost_epoch`; 0 = none pending. Reported as
  // resumed once the version passes `lost_version`.
  uint64_t lost_epoch = 0;
  uint64_t lost_version = 0;
  // Checkpoints: the one being taken, its writer, what --resume loaded.
  std::unique_ptr<pending_checkpoint> taking;
  uint64_t checkpoint_serial = 0;
  checkpoint_writer writer;
  std::unique_ptr<resume_set> resume;
};

using shard_server_actor = caf::stateful_actor<shard_server_state>;

/// A store id unique in the cluster, whatever our pid: 64 random bits, never
/// 0. Every store a server hosts (its own, replicas it promoted) has one;
/// a backup keeps the replicas of its primary's stores by id.
uint64_t new_store_id();

/// Spawnable behavior of a shard server. `fn` is the update hook
/// (make_update_fn in actors/server/server_optimizer.hpp makes one).
caf::behavior shard_server(shard_server_actor* self, server_settings cfg,
                           caf::actor scheduler, update_fn fn);

} // namespace troupe

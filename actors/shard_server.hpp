// A shard server: owns the slices the cluster view places on it and applies
// pushes per its consistency mode (actors/shard_store.hpp has the rules).
//
// Messages (bytes are frames of messages/kv.capnp):
//   (start_atom, string host, uint16_t port)  registers with the scheduler
//   (view_atom, frame ClusterView)            from the scheduler
//   (init_atom, frame Init)   -> frame PushReply
//   (push_atom, frame Push)   -> frame PushReply
//   (pull_atom, frame Pull)   -> frame PullReply    [may wait]
//   (road_atom, road_message_ptr)  the same three requests from the fast
//                             road (actors/road.hpp); answered on it
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
//                             alone wait for the answer)
//
// Chain replication. Each server's stores are replicated on its backup,
// the next server of the ring (backup_of in actors/placement.hpp): the
// primary applies every operation (init, push, owned slices, live
// workers), forwards it in the same order, and acknowledges a worker's
// Init or Push only once the backup has applied it. The backup's replica
// is the same state machine fed the same operations, optimizer state
// included. When the primary dies, the scheduler places its slices on the
// backup, which turns its replicas into stores it serves (promotion); a
// request carries no store: the server routes each slice to the store that
// holds it, and every store sees every part of a push, so (worker, clock,
// part) duplicates are dropped per store and workers may resend whole
// clocks. A store that is still pristine (nothing initialised or pushed)
// is replicated from its first operation. A backup that arrives later (a
// restarted server) gets a copy of each other store first (op_copy: its
// state with optimizer state and clocks, as a checkpoint holds it), taken
// where it holds every push accepted: at once outside sync, at the end of
// the open round in sync; operations after it are forwarded as usual
// (event "replicated"). Until the copy is taken the store is unreplicated.
// A backup that cannot be reached, or leaves an operation unanswered for
// half the request timeout, is dropped (workers are answered in
// time: an "unreplicated" event says our stores stand on us alone) and a
// new link to it tried a second later, copies included.
// Replica operations travel on the backup's fast road (a Replicate frame,
// road_op::replicate, answered with a PushReply or a Failure) when the
// primary could dial it once CAF connected, else all over CAF: one link
// uses one of the two, so their order holds. A lost road drops the link.
// The backup's reader hands replica operations to the actor rather than
// running it (two servers that back each other up could otherwise each
// wait, on the other's reader, for the other to read).
//
// Fencing. Each operation carries its link's number, (the primary's join
// epoch, link serial): larger for a later link of the same process and for
// any link of a process that took the rank later. The backup refuses
// operations of a link older than the newest it has seen from that rank
// (a late one would roll the replica back), the rest of a link once it
// refused one operation (the primary drops the link then), and operations
// on a store it serves itself (a primary declared dead that still sends:
// its store was promoted here, and must not be replicated anew beside
// it). A newer link means the older one was dropped, and what the primary
// acknowledged alone since then is missing from the replicas it fed: they
// are stale until the new link's copy replaces them (a copy replaces a
// replica only once applied whole), or, for a replica still pristine, until
// the new link feeds it (the store was pristine at the primary too). A
// stale replica promoted is reported as a "lost" event, with its version.
// A primary that drops a link while its backup stays in the view tells the
// scheduler at once (stale_atom), which tells the backup before any view
// that could promote the replicas, then answers: the replicas are stale
// from then on, even if the primary dies before a newer link reaches the
// backup. An operation the backup may lack (one the link carried
// unanswered, or one taken before a newer link's copy) is acknowledged
// only once that answer came; without one within a fifth of the request
// timeout (a scheduler that is gone or slow) it fails (unreplicated: the
// worker resends, to us after a pause if no view comes), and a scheduler
// that takes us for dead makes it fail with peer_down (the worker resends
// in the view to come). A notice for a link older than the
// newest the backup saw changes nothing: that link's copies came or are
// due. Links are told apart by serial, never by address.
//
// States and transitions (numbers cited in the code):
//   joining -1-> running      1: RegisterReply with our rank and a view
//   joining -2-> stopped      2: registration failed or timed out
//   running -3-> running      3: newer view: owned slices and live workers
//                                change; waiting pulls are re-checked
//   running -4-> running      4: request from a newer epoch than ours: held
//                                until that view arrives
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

#include "actors/node_config.hpp"
#include "actors/road.hpp"
#include "actors/server_checkpoint.hpp"
#include "actors/shard_store.hpp"
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

/// The newest link of a primary a backup took operations from (fencing).
struct primary_link {
  uint64_t newest = 0;
  bool refused = false; ///< it refused one: the primary drops the link
};

/// A replica of a store of the server we back up.
struct mirror_store {
  uint32_t primary = 0; ///< rank of the server that serves the store
  uint32_t origin = 0;
  shard_store store;
  /// Set when a newer link of the primary arrived before this replica's
  /// copy: the version it held then (operations the primary acknowledged
  /// alone may be missing).
  std::optional<uint64_t> stale_since;
};

/// The operations a primary forwards to its backup (replicate_atom's and
/// the Replicate frame's `op`).
enum replica_op : uint8_t {
  op_owned = 1, ///< numbers: the owned slices, (key, index, floats) triples
  op_workers,   ///< numbers: the live worker ranks
  op_init,      ///< frame: an Init
  op_push,      ///< frame: a Push
  op_restore,   ///< frame: a Checkpoint of one store, restored into it
  op_copy       ///< a whole store for a backup that came late: layout, state
};

/// What runs once the backup is done with a forwarded operation: with the
/// error it refused the operation with, or none (it applied it, or the link
/// went, and the operation stands on the primary alone).
using replica_done = std::function<void(const caf::error& refused)>;

/// A forward waiting for its link's connection: `send` runs with `then`
/// once connected (or, the link gone, `then` stands alone); at the
/// server's end `then` fails.
struct queued_forward {
  std::function<void(replica_done)> send;
  replica_done then;
};

/// The connection to our backup and the operations waiting for it.
struct backup_link {
  uint32_t rank = 0;
  node_info node;
  caf::actor handle;                  ///< null while connecting
  std::set<uint64_t> mirrored;        ///< our stores it replicates
  std::vector<queued_forward> queued; ///< sent once connected
  /// Acknowledgements waiting for the backup, by forward number: run when
  /// it answers, or when the link goes (a dead backup holds no one up).
  std::map<uint64_t, replica_done> waiting;
  uint64_t next = 0;
  uint64_t serial = 0;        ///< tells this link from a later one
  std::set<uint64_t> copying; ///< our stores whose copy waits for a round
  /// The backup's fast road, opened once CAF connected and before any
  /// forward: then every replica operation of the link takes it, in order;
  /// null: they all take CAF (--server.replica-road=middleman, no road).
  road_conn_ptr road;
  /// When each forward on the road went out, by number (a silent backup
  /// is dropped after half the request timeout, as over CAF).
  std::map<uint64_t, std::chrono::steady_clock::time_point> sent;
  ~backup_link();
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

/// A link dropped while the view still named its backup. Operations the
/// backup may lack are acknowledged (acknowledged alone) only once the
/// scheduler has passed this notice on to the backup (stale_atom): the
/// backup then reports its replicas lost if it promotes them before a
/// newer link's copy. Until it confirms, their acknowledgements wait here.
struct alone_notice {
  uint32_t backup = 0;
  uint64_t link = 0;      ///< the dropped link's number
  bool asked = false;     ///< the scheduler has the notice, no answer yet
  bool confirmed = false; ///< passed on: acknowledgements alone go out
  /// An acknowledgement alone waiting, until `until`: a drop after it asks
  /// anew, and the answer to the older notice no longer counts, so drops
  /// that follow each other faster than the scheduler answers would hold
  /// it for good.
  struct held_ack {
    std::chrono::steady_clock::time_point until;
    replica_done then;
  };
  std::vector<held_ack> held;
};

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
  // Requests from a newer epoch than ours, with that epoch.
  std::vector<std::pair<uint64_t, std::function<void()>>> held;
  uint32_t request_timeout_ms = 10000;
  server_settings cfg;
  std::unique_ptr<road_listener> road; // null: CAF only
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

/// The number a primary's link to its backup carries (fencing): the epoch
/// of the view the primary joined in, then the link's serial in that
/// process.
constexpr uint64_t replica_link_tag(uint64_t joined_epoch, uint64_t serial) {
  return joined_epoch << 32 | (serial & 0xffffffffu);
}

/// Spawnable behavior of a shard server. `fn` is the update hook (the
/// training issue plugs optimizers in here).
caf::behavior shard_server(shard_server_actor* self, server_settings cfg,
                           caf::actor scheduler, update_fn fn);

} // namespace troupe

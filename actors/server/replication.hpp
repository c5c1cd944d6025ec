// Chain replication of a shard server's stores: who forwards what, what is
// acknowledged when, fencing, promotion, and how a late backup catches up.
// This comment is the one account of it; replication_*.cpp cite its numbers.
//
// Chain replication. Each server's stores are replicated on its backup, the
// next server of the ring (backup_of in actors/cluster/placement.hpp). The
// primary applies every operation (init, push, owned slices, live workers)
// and forwards it, in the same order, to the backup: the backup's replica is
// the same state machine fed the same operations, optimizer state included.
// A request carries no store: the server routes each slice to the store that
// holds it, and every store sees every part of a push, so (worker, clock,
// part) duplicates are dropped per store and workers may resend whole
// clocks.
//
// Roads. Replica operations travel on the backup's fast road (a Replicate
// frame, road_op::replicate, answered with a PushReply or a Failure) when
// the primary could dial it once CAF connected, else all over CAF: one link
// uses one of the two, so their order holds. The backup's reader hands
// replica operations to the actor rather than running it (two servers that
// back each other up could otherwise each wait, on the other's reader, for
// the other to read). Links are told apart by serial, never by address.
//
// The primary's link to its backup (backup_link; one at a time):
//   none       -L1-> connecting  L1: a view names a backup (update_backup),
//                                    or a second after L4 while the backup
//                                    stays in the view (retry_backup_later)
//   connecting -L2-> linked      L2: CAF connected; the road dialled if it
//                                    can be; queued forwards go out in order
//   linked     -L3-> linked      L3: the backup applied a forward: what
//                                    waited for it runs (A1)
//   any        -L4-> none        L4: the backup is unreachable, the road is
//                                    lost, it refused an operation, left one
//                                    unanswered for half the request timeout
//                                    (workers are answered in time), or left
//                                    the view: what waited stands alone (A2),
//                                    and our stores are unreplicated
//
// Catching up. On a new link, a store still pristine (nothing initialised or
// pushed) is replicated from its first operation. Any other gets a copy
// first (op_copy: its state with optimizer state and clocks, as a checkpoint
// holds it), taken where it holds every push accepted: at once outside sync,
// at the end of the open round in sync. The operations after it are
// forwarded as usual ("replicated" event once applied). Until the copy is
// taken the store is unreplicated.
//
// Acknowledgements. A worker's Init or Push is answered
//   A1: once the backup of every store that took a part applied it;
//   A2: alone, for an operation the backup may lack (one the link carried
//       unanswered when it went, L4, or one on a store with no replica on
//       the link, as before its copy): at once, unless a dropped link's
//       notice is open (N below): then only once the scheduler passed it on
//       (N2), and it fails otherwise (N3, N5);
//   A3: never, if the backup refused it: the worker hears peer_down (it
//       resends in the view to come) or unreplicated (it resends, to us
//       after a pause).
//
// Fencing. Each operation carries its link's number (replica_link_tag: the
// primary's join epoch, then the link's serial): larger for a later link of
// the same process and for any link of a process that took the rank later.
// The backup refuses with not_a_member:
//   F1: an operation of a link older than the newest it has seen from that
//       rank (a late one would roll the replica back);
//   F2: the rest of a link once it refused one of its operations (the
//       primary drops the link then), or once the scheduler told it that
//       the primary dropped that link (N1);
//   F3: an operation on a store it serves itself (a primary declared dead
//       that still sends: its store was promoted here, and must not be
//       replicated anew beside it).
// A newer link means the older one was dropped, and what the primary
// acknowledged alone since then is missing from the replicas it fed (B2).
//
// A dropped link's notice (alone_notice, on the primary). A backup the view
// still names is not told by the link itself that we dropped it: if we died
// before a new link's copies reached it, what we acknowledged alone would
// not be there, and it could not know. So:
//   any       -N1-> asking        N1: a link drops (L4) while the view still
//                                     names its backup: an "unreplicated"
//                                     event, and the scheduler is told at
//                                     once (stale_atom); it tells the backup
//                                     before any view that could promote the
//                                     replicas, then answers. A later drop's
//                                     notice takes over what an earlier one
//                                     held
//   asking    -N2-> confirmed     N2: the scheduler answered: the held
//                                     acknowledgements go out, and later
//                                     ones at once
//   asking    -N3-> unasked       N3: it refused (peer_down if it takes us
//                                     for dead: the slices' next server is in
//                                     the view to come) or did not answer
//                                     (unreplicated: a second try may get
//                                     one): the held acknowledgements fail
//   unasked   -N4-> asking        N4: an operation stands alone: asked anew
//   asking    -N5-> asking        N5: an acknowledgement held for a fifth of
//                                     the request timeout (a scheduler gone
//                                     or slow) fails: unreplicated
// A notice for a link older than the newest the backup saw changes nothing:
// that link's copies came or are due.
//
// A replica on the backup (mirror_store):
//   none    -B1-> current  B1: op_owned of a store new to us, or its op_copy
//   current -B2-> stale    B2: a newer link of its primary (F1), the
//                              scheduler's notice that the primary dropped
//                              our link (N1), or a refusal of ours on the
//                              newest link (F2): it may lack what the
//                              primary acknowledged alone, from then on, even
//                              if the primary dies before a newer link
//                              reaches us
//   stale   -B3-> current  B3: the newer link's copy, applied whole (a copy
//                              that fails leaves the replica as it was), or,
//                              for a replica still pristine, the newer link
//                              feeds it (the store was pristine at the
//                              primary too)
//   any     -B4-> served   B4: promotion: a view without the primary gives
//                              us its slices, and the replica becomes a store
//                              we serve; a stale one is reported as a "lost"
//                              event, with its version
//   any     -B5-> none     B5: the primary left the view and its slices are
//                              not ours
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <caf/actor.hpp>
#include <caf/error.hpp>

#include "actors/road/road_conn.hpp"
#include "actors/server/shard_store.hpp"
#include "messages/membership.hpp"

namespace troupe {

/// The newest link of a primary a backup took operations from (fencing).
struct primary_link {
  uint64_t newest = 0;
  bool refused = false; ///< it refused one: the primary drops the link (F2)
};

/// A replica of a store of the server we back up.
struct mirror_store {
  uint32_t primary = 0; ///< rank of the server that serves the store
  uint32_t origin = 0;
  shard_store store;
  /// Set when a newer link of the primary arrived before this replica's
  /// copy: the version it held then (B2).
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
  op_copy,      ///< a whole store for a backup that came late: layout, state
  op_cut,       ///< numbers: a departed worker's rank and the clocks kept
  op_pulled     ///< numbers: a worker's rank, the clock it pulled at and
                ///< its acked (shard_store::pulled), where that changed
                ///< the store
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
  /// forward (L2); null: they all take CAF (--server.replica-road=middleman,
  /// no road).
  road_conn_ptr road;
  /// When each forward on the road went out, by number (a silent backup
  /// is dropped, L4, as over CAF).
  std::map<uint64_t, std::chrono::steady_clock::time_point> sent;
  ~backup_link();
};

/// A link dropped while the view still named its backup (N1): operations
/// the backup may lack are acknowledged alone only once the scheduler has
/// passed this notice on (N2); until then their acknowledgements wait here.
struct alone_notice {
  uint32_t backup = 0;
  uint64_t link = 0;      ///< the dropped link's number
  bool asked = false;     ///< the scheduler has the notice, no answer yet
  bool confirmed = false; ///< passed on: acknowledgements alone go out
  /// An acknowledgement alone waiting, until `until`: a drop after it asks
  /// anew, and the answer to the older notice no longer counts, so drops
  /// that follow each other faster than the scheduler answers would hold
  /// it for good (N5).
  struct held_ack {
    std::chrono::steady_clock::time_point until;
    replica_done then;
  };
  std::vector<held_ack> held;
};

/// The number a primary's link to its backup carries (fencing): the epoch
/// of the view the primary joined in, then the link's serial in that
/// process.
constexpr uint64_t replica_link_tag(uint64_t joined_epoch, uint64_t serial) {
  return joined_epoch << 32 | (serial & 0xffffffffu);
}

} // namespace troupe

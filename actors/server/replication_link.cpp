// The primary's link to its backup (replication.hpp, L1-L4): made per view,
// connected over CAF and then its road, the copies a late backup needs
// (Catching up), and dropped when the backup fails us.
#include "actors/server/shard_server_internal.hpp"

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>

#include "actors/base/log.hpp"
#include "actors/cluster/connect.hpp"
#include "actors/cluster/placement.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

backup_link::~backup_link() {
  // drop_backup runs `waiting` and `queued` first; at the server's end
  // what is left is not acknowledged: the workers resend it to whoever
  // serves the slices next.
  auto left = std::move(waiting);
  auto unsent = std::move(queued);
  for (auto& [n, then] : left)
    then(caf::make_error(errc::peer_down,
                         "the server ended before its backup answered"));
  for (auto& q : unsent)
    q.then(caf::make_error(errc::peer_down,
                           "the server ended before its backup connected"));
}

namespace server_impl {

// -- dropping -----------------------------------------------------------------

/// A backup the view still names is told through the scheduler (N1).
void drop_backup(self_ptr self, const char* why) {
  auto& st = self->state;
  auto& b = st.backup;
  if (!b)
    return;
  TROUPE_LOG(warning, who(self), "backup ", b->rank, " ", why,
             ": our stores are unreplicated");
  auto& servers = st.view.servers;
  if (std::find(servers.begin(), servers.end(), b->node) != servers.end())
    notice_drop(self, *b, why);
  auto waiting = std::move(b->waiting);
  b->waiting.clear();
  auto queued = std::move(b->queued);
  b.reset();
  for (auto& [n, then] : waiting)
    stands_alone(self, std::move(then));
  for (auto& q : queued)
    q.send(std::move(q.then)); // finds no link: stands alone
}

/// It gets a copy of every store that moved on meanwhile.
void retry_backup_later(self_ptr self) {
  self->delayed_send(self, std::chrono::seconds{1}, reconnect_atom_v);
}

/// Links are told apart by serial, never by address: a new link's memory
/// may be the old one's, and a late answer on the old one must not touch it.
backup_link* current_link(self_ptr self, uint64_t serial) {
  auto& b = self->state.backup;
  return b && b->serial == serial ? b.get() : nullptr;
}

/// A backup silent on the road for half the request timeout is dropped,
/// as over CAF (a hung one would hold every acknowledgement); checked
/// every half of that while the link lives.
void check_backup_road(self_ptr self, uint64_t serial) {
  auto& b = self->state.backup;
  if (!b || b->serial != serial || !b->road)
    return;
  auto limit = std::chrono::milliseconds{self->state.request_timeout_ms / 2};
  if (!b->sent.empty() &&
      std::chrono::steady_clock::now() - b->sent.begin()->second > limit) {
    drop_backup(self, "silent on the road");
    retry_backup_later(self);
    return;
  }
  self->delayed_send(self, limit / 2, replicate_atom_v, tick_atom_v, serial);
}

void on_backup_road_down(self_ptr self, uint64_t serial,
                         const std::string& why) {
  auto& b = self->state.backup;
  if (!b || b->serial != serial)
    return;
  drop_backup(self, ("road lost: " + why).c_str());
  retry_backup_later(self);
}

namespace {

// -- connecting ---------------------------------------------------------------

/// Each shared-memory ring of a road to a backup (one per direction).
constexpr size_t replica_ring_bytes = size_t{64} << 20;

/// Opens the road to our backup (CAF just connected): every replica
/// operation of this link takes it. Without one, they all take CAF.
void dial_backup_road(self_ptr self, backup_link& link) {
  auto& cfg = self->state.cfg;
  if (cfg.replica_road == road_kind::middleman || link.node.road.port == 0 ||
      !self->state.road_key)
    return;
  member_id me{role::server, self->state.rank};
  road_credential cred{me, member_token(*self->state.road_key, me)};
  auto addr = self->address();
  auto serial = link.serial;
  auto on_msg = [addr, serial](road_message_ptr m) {
    if (auto h = caf::actor_cast<caf::actor>(addr))
      caf::anon_send(h, replicate_atom_v, serial, std::move(m));
  };
  auto on_down = [addr, serial](uint64_t, const caf::error& err) {
    if (auto h = caf::actor_cast<caf::actor>(addr))
      caf::anon_send(h, replicate_atom_v, road_down_atom_v, serial,
                     describe(err));
  };
  auto limit = std::min<uint32_t>(self->state.request_timeout_ms, 2000);
  auto conn =
      road_dial(link.node.host, link.node.road, cfg.replica_road,
                replica_ring_bytes, limit, cfg.roads, cred, on_msg, on_down);
  if (!conn) {
    TROUPE_LOG(warning, who(self), "no road to backup ", link.rank, " (",
               describe(conn.error()), "): replicating over CAF");
    return;
  }
  TROUPE_LOG(debug, who(self), "road to backup ", link.rank, ": ",
             to_string((*conn)->kind()));
  link.road = std::move(*conn);
  check_backup_road(self, serial);
}

/// Attempts at connecting to a backup, each bounded by 1 s: two servers
/// that are each other's backup connect to each other at once, and CAF
/// 0.17 can leave one of the two handshakes unanswered; the next attempt
/// finds the connection the other side made.
constexpr int backup_connect_tries = 3;

/// CAF connected link `serial` (L2): its road, then what was queued.
void on_backup_connected(self_ptr self, uint64_t serial,
                         caf::strong_actor_ptr& ptr) {
  auto cur = current_link(self, serial);
  if (!cur)
    return;
  if (!ptr) {
    drop_backup(self, "has no actor");
    return;
  }
  cur->handle = caf::actor_cast<caf::actor>(ptr);
  TROUPE_LOG(debug, who(self), "backup ", cur->rank, " connected");
  dial_backup_road(self, *cur);
  auto queued = std::move(cur->queued);
  cur->queued.clear();
  for (auto& q : queued)
    q.send(std::move(q.then));
}

void connect_backup(self_ptr self, uint64_t serial, std::string host,
                    uint16_t port, int tries);

/// Connecting link `serial` failed: try again, or drop it (L4).
void on_connect_failed(self_ptr self, uint64_t serial, const std::string& host,
                       uint16_t port, int tries, const caf::error& err) {
  auto cur = current_link(self, serial);
  if (!cur)
    return;
  if (err == caf::sec::request_timeout && tries > 1) {
    TROUPE_LOG(warning, who(self), "connecting to backup ", cur->rank,
               " timed out; trying again");
    connect_backup(self, serial, host, port, tries - 1);
    return;
  }
  drop_backup(self, ("unreachable: " + self->system().render(err)).c_str());
  // Still in the view, it may answer later: no view may come to
  // make us try again, so try again ourselves.
  retry_backup_later(self);
}

/// Connects link `serial` to its backup at host:port; queued forwards go
/// once connected. A backup that cannot be reached is dropped.
void connect_backup(self_ptr self, uint64_t serial, std::string host,
                    uint16_t port, int tries) {
  auto limit = std::min<uint32_t>(self->state.request_timeout_ms, 1000);
  connect_actor(
      self, host, port, std::chrono::milliseconds{limit},
      [self, serial](caf::strong_actor_ptr& ptr) {
        on_backup_connected(self, serial, ptr);
      },
      [self, serial, host, port, tries](caf::error& err) {
        on_connect_failed(self, serial, host, port, tries, err);
      });
}

// -- copies for a late backup -------------------------------------------------

/// Replicated once the backup has applied the copy (a link dropped first
/// runs this too: then it was not).
void copy_applied(self_ptr self, uint64_t serial, uint32_t origin,
                  uint64_t version, const caf::error& refused) {
  auto& b = self->state.backup;
  if (refused || !b || b->serial != serial)
    return;
  TROUPE_LOG(info, who(self), "store of server ", origin,
             " copied to new backup ", b->rank, " at version ", version);
  report(self, "replicated",
         str("store of server ", origin, " copied to server ", b->rank,
             " at version ", version));
}

/// Copies hosted store `id` to backup link `serial` (if both are still
/// there) where it holds every push it accepted (Catching up).
void copy_to_backup(self_ptr self, uint64_t serial, uint64_t id) {
  auto& st = self->state;
  auto& b = st.backup;
  auto h = hosted(self, id);
  if (!b || b->serial != serial || !h || b->mirrored.count(id) != 0)
    return;
  if (!h->store.between_rounds()) { // pushes wait in a round: after it
    if (!b->copying.insert(id).second)
      return; // armed already
    auto next = h->store.version() + 1;
    auto err = h->store.at_version(next, [self, serial, id] {
      auto& b = self->state.backup;
      if (b && b->serial == serial)
        b->copying.erase(id);
      copy_to_backup(self, serial, id);
    });
    if (err) {
      b->copying.erase(id);
      TROUPE_LOG(error, who(self), "cannot copy store ", id,
                 " to the backup: ", describe(err));
    }
    return;
  }
  auto snap = snapshot_of(h->store);
  snap.id = h->id;
  snap.origin = h->origin;
  checkpoint_data x;
  x.stores.push_back(std::move(snap));
  b->mirrored.insert(id);
  auto applied = [self, serial, origin = h->origin,
                  version = h->store.version()](const caf::error& refused) {
    copy_applied(self, serial, origin, version, refused);
  };
  forward(self, *h, op_copy, encode(x), owned_triples(h->store), applied);
  forward(self, *h, op_workers, frame{}, worker_ranks(st.view), ignore_outcome);
}

/// Copies every store our backup does not replicate yet to it.
void copy_unmirrored(self_ptr self) {
  auto serial = self->state.backup->serial;
  std::vector<uint64_t> ids; // copying sends; collect first, then copy
  for (auto& h : self->state.stores)
    if (self->state.backup->mirrored.count(h.id) == 0)
      ids.push_back(h.id);
  // A copy whose send fails drops the link: the rest go with it.
  for (auto id : ids)
    if (current_link(self, serial))
      copy_to_backup(self, serial, id);
}

} // namespace

// -- linking ------------------------------------------------------------------

/// A new backup replicates the stores still pristine from their first
/// operation, and gets a copy of the others.
void update_backup(self_ptr self) {
  auto& st = self->state;
  std::vector<uint32_t> ranks;
  for (auto& s : st.view.servers)
    ranks.push_back(s.rank);
  auto b = backup_of(st.rank, ranks);
  auto node = std::find_if(st.view.servers.begin(), st.view.servers.end(),
                           [b](const node_info& n) { return n.rank == b; });
  if (b == st.rank || node == st.view.servers.end() || st.cfg.replicas == 0) {
    if (st.backup)
      drop_backup(self, "left the view");
    return;
  }
  if (st.backup && st.backup->node == *node) { // the same backup
    copy_unmirrored(self); // stores we serve since (promoted ones)
    return;
  }
  if (st.backup)
    drop_backup(self, "left the view");
  st.backup = std::make_unique<backup_link>();
  st.backup->rank = b;
  st.backup->node = *node;
  st.backup->serial = ++st.backup_serial;
  for (auto& h : st.stores)
    if (h.store.pristine())
      st.backup->mirrored.insert(h.id);
  connect_backup(self, st.backup->serial, node->host, node->port,
                 backup_connect_tries);
  copy_unmirrored(self); // queued behind the connection, in order
}

void on_reconnect(self_ptr self) {
  if (self->state.backup)
    return;
  update_backup(self);
  forward_layout(self, frame{});
}

} // namespace server_impl
} // namespace troupe

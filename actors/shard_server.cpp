// A shard server's handlers: registration, views, init, push, pull.
#include "actors/shard_server.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/sec.hpp>
#include <caf/system_messages.hpp>

#include "actors/log.hpp"
#include "actors/placement.hpp"
#include "actors/run_here.hpp"
#include "actors/stray_errors.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

uint64_t new_store_id() {
  // Not made of our pid: servers on other machines, started the same way,
  // or in containers (PID namespaces) share pids, and two stores of one id
  // on one backup would be taken for one. Drawn afresh each time, with no
  // state a forked process would share.
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0)
    id = (uint64_t{rd()} << 32) ^ rd();
  return id;
}

void replier::deliver(const outbound& out, const loop_fn* copy) {
  if (road)
    road->conn->send(road_op::reply, road->id, out, copy);
  else
    rp.deliver(out.flatten());
}

void replier::deliver(const frame& f) {
  if (road)
    road->conn->send(road_op::reply, road->id, f);
  else
    rp.deliver(f);
}

void replier::deliver(const caf::error& err) {
  if (road)
    road->conn->send(road_op::failure, road->id, encode_failure(err));
  else
    rp.deliver(err);
}

std::string replier::source() const {
  if (road)
    return std::string{"a "} + to_string(road->conn->kind()) +
           " road connection";
  auto from = rp.source();
  return from ? caf::to_string(from->node()) : std::string{"?"};
}

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

shard_server_state::~shard_server_state() {
  // The server ends: its link goes first, while every member its
  // acknowledgements touch still lives; what waited for the scheduler to
  // tell the backup is not acknowledged either.
  backup.reset();
  if (alone) {
    auto why = caf::make_error(errc::peer_down,
                               "the server ended before its backup was told");
    auto held = std::move(alone->held);
    alone->held.clear();
    for (auto& h : held)
      h.then(why);
  }
}

namespace {

using self_ptr = shard_server_actor*;

std::string who(self_ptr self) {
  return "server " + std::to_string(self->state.rank);
}

shard_store& own_store(self_ptr self) {
  return self->state.stores.front().store;
}

/// The hosted store that holds `id`; null if none.
shard_store* store_of(self_ptr self, const slice_id& id) {
  for (auto& h : self->state.stores)
    if (h.store.owns(id))
      return &h.store;
  return nullptr;
}

/// The store we host with id `id`; null if none.
hosted_store* hosted(self_ptr self, uint64_t id) {
  for (auto& h : self->state.stores)
    if (h.id == id)
      return &h;
  return nullptr;
}

/// Sends the scheduler an event of ours: `kind`, with `detail` for people.
void report(self_ptr self, const char* kind, std::string detail) {
  auto& st = self->state;
  self->send(st.scheduler, event_atom_v,
             encode(event_record{now_ms(), kind, role::server, st.rank,
                                 static_cast<uint32_t>(::getpid()),
                                 std::move(detail), who(self)}));
}

/// Reports the first update after a worker was lost (a "resumed" event).
void report_resumed(self_ptr self) {
  auto& st = self->state;
  if (st.lost_epoch == 0 || own_store(self).version() <= st.lost_version)
    return;
  report(self, "resumed",
         str("version ", own_store(self).version(), " applied with ",
             st.view.workers.size(), " workers after view ", st.lost_epoch));
  st.lost_epoch = 0;
}

// -- replication: the primary side --------------------------------------------

/// The scheduler answered our notice of link `link` (`err`: it did not
/// pass it on): the acknowledgements alone that waited go out, or fail.
void notice_answered(self_ptr self, uint64_t link, const caf::error& err) {
  auto& a = self->state.alone;
  if (!a || a->link != link)
    return; // a later drop's notice took over what waited
  auto held = std::move(a->held);
  a->held.clear();
  a->asked = false;
  a->confirmed = !err;
  if (err)
    TROUPE_LOG(warning, who(self), "the scheduler did not tell backup ",
               a->backup, " that we dropped our link (", describe(err),
               "): ", held.size(),
               " operations it may lack are not acknowledged");
  // Taken for dead (not_a_member), we will not be told otherwise: the
  // slices' next server is in the view to come. Else (no answer in time)
  // a second try may get one.
  auto why = caf::make_error(err == errc::not_a_member ? errc::peer_down
                                                       : errc::unreplicated,
                             "our backup could not be told that it may lack"
                             " this operation");
  for (auto& h : held)
    h.then(err ? why : caf::error{});
}

/// How long the scheduler has to answer a notice, and an acknowledgement
/// alone to wait for it: the drop took up to three quarters of the
/// workers' request timeout (half, or half and a road tick), and the
/// answer must come in what is left.
std::chrono::milliseconds notice_limit(self_ptr self) {
  return std::chrono::milliseconds{self->state.request_timeout_ms / 5};
}

/// Fails the acknowledgements alone that waited their while (unreplicated:
/// the worker tries again); each hold has a check of its own due then.
void expire_held(self_ptr self) {
  auto& a = self->state.alone;
  if (!a)
    return;
  auto now = std::chrono::steady_clock::now();
  std::vector<alone_notice::held_ack> over;
  for (auto i = a->held.begin(); i != a->held.end();)
    if (i->until <= now) {
      over.push_back(std::move(*i));
      i = a->held.erase(i);
    } else {
      ++i;
    }
  if (over.empty())
    return;
  TROUPE_LOG(warning, who(self), "no answer from the scheduler for ",
             over.size(), " operations backup ", a->backup,
             " may lack: not acknowledged");
  auto why = caf::make_error(errc::unreplicated,
                             "the scheduler did not confirm in time that our"
                             " backup was told it may lack this operation");
  for (auto& h : over)
    h.then(why);
}

/// Sends the scheduler the notice of our dropped link, once.
void ask_scheduler(self_ptr self) {
  auto& st = self->state;
  auto& a = *st.alone;
  if (a.asked)
    return;
  a.asked = true;
  auto link = a.link;
  self->request(st.scheduler, notice_limit(self), stale_atom_v, a.backup, link)
      .then(
          [self, link](uint64_t) { notice_answered(self, link, {}); },
          [self, link](caf::error& err) { notice_answered(self, link, err); });
}

/// Runs `then` for an operation our backup may not have applied
/// (acknowledged alone): at once, unless we dropped a link to a backup
/// the view still names and the scheduler has not yet told it.
void stands_alone(self_ptr self, replica_done then) {
  auto& a = self->state.alone;
  if (!a || a->confirmed) {
    then(caf::none);
    return;
  }
  a->held.push_back(
      {std::chrono::steady_clock::now() + notice_limit(self), std::move(then)});
  self->delayed_send(self, notice_limit(self), stale_atom_v, tick_atom_v);
  ask_scheduler(self);
}

/// Drops the link to our backup; what waited for it goes on without it.
/// A backup the view still names is not told we dropped it: if we die
/// before a new link's copies reach it, what we acknowledged alone is not
/// there, and it cannot know. So we say it (an "unreplicated" event), and
/// acknowledge alone only once the scheduler has told it (stands_alone).
void drop_backup(self_ptr self, const char* why) {
  auto& st = self->state;
  auto& b = st.backup;
  if (!b)
    return;
  TROUPE_LOG(warning, who(self), "backup ", b->rank, " ", why,
             ": our stores are unreplicated");
  auto& servers = st.view.servers;
  if (std::find(servers.begin(), servers.end(), b->node) != servers.end()) {
    // What an earlier notice held waits for this one, which covers it
    // (that one's answer, if it is still to come, is for another link).
    if (!st.alone)
      st.alone.emplace();
    st.alone->backup = b->rank;
    st.alone->link = replica_link_tag(st.joined_epoch, b->serial);
    st.alone->asked = st.alone->confirmed = false;
    // Asked at once, whatever waits: a notice left unsent could be
    // replaced by a later drop's, and this backup never told.
    ask_scheduler(self);
    std::string versions;
    for (auto& h : st.stores)
      versions += str(versions.empty() ? "" : ", ", h.store.version());
    report(self, "unreplicated",
           str("backup ", b->rank, " ", why, ": our ", st.stores.size(),
               " stores (versions ", versions,
               ") stand on this server alone until the backup has their"
               " copies"));
  }
  auto waiting = std::move(b->waiting);
  b->waiting.clear();
  auto queued = std::move(b->queued);
  b.reset();
  for (auto& [n, then] : waiting)
    stands_alone(self, std::move(then));
  for (auto& q : queued)
    q.send(std::move(q.then)); // finds no link: stands alone
}

/// A backup that failed us but stays in the view: try a new link in a
/// while (it gets a copy of every store that moved on meanwhile).
void retry_backup_later(self_ptr self) {
  self->delayed_send(self, std::chrono::seconds{1}, reconnect_atom_v);
}

/// Our link to the backup if it is link `serial` still, else null. Links
/// are told apart by serial, never by address: a new link's memory may be
/// the old one's, and a late answer on the old one must not touch it.
backup_link* current_link(self_ptr self, uint64_t serial) {
  auto& b = self->state.backup;
  return b && b->serial == serial ? b.get() : nullptr;
}

/// Sends one operation on store `h` to our backup, then runs `then` (at
/// once if the store has no replica). A backup silent for half the
/// request timeout is dropped, so that workers' requests are answered in
/// time (a dead or hung one also leaves the view), and dropping the link
/// runs what waited; a new link is tried a second later.
void forward(self_ptr self, const hosted_store& h, replica_op op, frame f,
             std::vector<uint64_t> xs, replica_done then) {
  auto& b = self->state.backup;
  if (!b || b->mirrored.count(h.id) == 0) {
    stands_alone(self, std::move(then));
    return;
  }
  auto send = [self, serial = b->serial, id = h.id, origin = h.origin, op,
               f = std::move(f),
               xs = std::move(xs)](replica_done then) mutable {
    auto& b = self->state.backup;
    if (!current_link(self, serial) || !b->handle) { // dropped meanwhile
      stands_alone(self, std::move(then));
      return;
    }
    auto n = b->next++;
    auto tag = replica_link_tag(self->state.joined_epoch, b->serial);
    b->waiting.emplace(n, std::move(then));
    if (b->road) { // the link's order is the road's
      replicate_request r{self->state.rank,         tag,           id, origin,
                          static_cast<uint8_t>(op), std::move(xs), f};
      if (auto err = b->road->send(road_op::replicate, n, encode(r))) {
        drop_backup(self, ("road failed: " + describe(err)).c_str());
        retry_backup_later(self);
        return;
      }
      b->sent.emplace(n, std::chrono::steady_clock::now());
      return;
    }
    auto done = [self, serial, n](const caf::error& refused) {
      auto b = current_link(self, serial);
      if (!b)
        return; // the old link ran it when it went
      auto i = b->waiting.find(n);
      if (i == b->waiting.end())
        return;
      auto fn = std::move(i->second);
      b->waiting.erase(i);
      fn(refused);
    };
    auto limit = std::chrono::milliseconds{self->state.request_timeout_ms / 2};
    self->request(b->handle, limit, replicate_atom_v, self->state.rank, tag, id,
                  origin, static_cast<uint8_t>(op), std::move(f), std::move(xs))
        .then([done](uint64_t) { done(caf::none); },
              [self, serial, done](caf::error& err) {
                // troupe's own errors are the backup's answer: it refused
                // the operation; CAF's (a timeout, the backup gone) drop
                // the link, and the operation stands on the primary alone
                // (dropping it runs what waited, this one included).
                if (err.category() == caf::atom("troupe"))
                  done(err);
                if (current_link(self, serial)) {
                  drop_backup(
                      self, ("failed: " + self->system().render(err)).c_str());
                  retry_backup_later(self);
                }
              });
  };
  if (b->handle)
    send(std::move(then));
  else
    b->queued.push_back({std::move(send), std::move(then)});
}

/// Each shared-memory ring of a road to a backup (one per direction).
constexpr size_t replica_ring_bytes = size_t{64} << 20;

/// The backup answered forward `m->id` of link `serial` on the road: its
/// acknowledgement runs; a failure drops the link as over CAF.
void on_backup_reply(self_ptr self, uint64_t serial, road_message_ptr m) {
  auto& b = self->state.backup;
  if (!b || b->serial != serial)
    return; // an old link's: dropping it ran what waited
  auto i = b->waiting.find(m->id);
  if (i == b->waiting.end())
    return;
  auto fn = std::move(i->second);
  b->waiting.erase(i);
  b->sent.erase(m->id);
  caf::error err;
  if (m->op == road_op::failure)
    err = decode_failure(m->bytes);
  else if (m->op != road_op::reply)
    err = caf::make_error(errc::malformed_message, "backup answered with op",
                          static_cast<uint32_t>(m->op));
  fn(err);
  auto& cur = self->state.backup;
  if (err && cur && cur->serial == serial) {
    drop_backup(self, ("failed: " + describe(err)).c_str());
    retry_backup_later(self);
  }
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

/// Opens the road to our backup (CAF just connected): every replica
/// operation of this link takes it. Without one, they all take CAF.
void dial_backup_road(self_ptr self, backup_link& link) {
  auto& cfg = self->state.cfg;
  if (cfg.replica_road == road_kind::middleman || link.node.road.port == 0)
    return;
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
  auto conn = road_dial(link.node.host, link.node.road, cfg.replica_road,
                        replica_ring_bytes, limit, on_msg, on_down);
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

/// Runs `then` once `n` forwards finished, with the first refusal among
/// them (none if no backup refused its operation).
replica_done after_all(size_t n, replica_done then) {
  struct tally {
    size_t left;
    caf::error refused;
  };
  auto t = std::make_shared<tally>(tally{n, caf::error{}});
  return [t, then](const caf::error& refused) {
    if (refused && !t->refused)
      t->refused = refused;
    if (--t->left == 0)
      then(t->refused);
  };
}

/// What a worker hears for an Init or Push our backup refused, or may lack
/// and could not be told of (stands_alone): we applied it, but it is not
/// replicated. The usual cause of a refusal is a view that declared us
/// dead while we were not (a heartbeat missed under load): the backup
/// promoted our store, and the operation must go there. peer_down has the
/// worker's kv client resend it once a newer view places the slices (or at
/// once, a duplicate for us, if we are still its server). Any other
/// (unreplicated: a backup the scheduler was slow to tell, which a second
/// try may get told; a refusal no view follows, after which we stand
/// alone) has it also resend to us after a pause.
caf::error not_replicated(self_ptr self, const caf::error& refused) {
  bool untold = refused == errc::unreplicated; // stands_alone's
  bool ending = refused == errc::peer_down;    // ours or stands_alone's
  // The backup serves our store, or fences our link: a view that declared
  // us dead is out, and the next one places the slices there.
  bool fenced = refused == errc::not_a_member;
  auto code = ending || fenced ? errc::peer_down : errc::unreplicated;
  return caf::make_error(code, "server", self->state.rank,
                         str("could not replicate the operation: ",
                             untold || ending ? "" : "its backup refused it: ",
                             describe(refused)));
}

/// Answers a worker's Init or Push with `reply` once its `n` forwards to
/// the backup are done; never acknowledged unreplicated by a live backup.
replica_done acknowledge_after(self_ptr self, size_t n, replier rp,
                               frame reply) {
  return after_all(n, [self, rp, reply](const caf::error& refused) mutable {
    if (refused)
      rp.deliver(not_replicated(self, refused));
    else
      rp.deliver(reply);
  });
}

/// A forward whose outcome only the link cares about (it is dropped and
/// tried again on a refusal).
void ignore_outcome(const caf::error&) {
  // nothing waits for it
}

std::vector<uint64_t> owned_triples(const shard_store& s) {
  std::vector<uint64_t> out;
  for (auto& [id, floats] : s.owned()) {
    out.push_back(id.key);
    out.push_back(id.index);
    out.push_back(floats);
  }
  return out;
}

std::vector<uint64_t> worker_ranks(const cluster_view& v) {
  std::vector<uint64_t> out;
  for (auto& w : v.workers)
    out.push_back(w.rank);
  return out;
}

/// Forwards the owned slices and live workers of every replicated store,
/// and between them what our own store restored from a checkpoint;
/// `kept`: the live workers but those whose rank a new process took (they
/// leave first, then join anew).
void forward_layout(self_ptr self, frame restored,
                    const std::set<uint32_t>* kept = nullptr) {
  auto ranks = worker_ranks(self->state.view);
  for (auto& h : self->state.stores) {
    forward(self, h, op_owned, frame{}, owned_triples(h.store), ignore_outcome);
    if (&h == &self->state.stores.front() && !restored.bytes.empty())
      forward(self, h, op_restore, std::move(restored), {}, ignore_outcome);
    // Ranks taken by a new process leave first there too, as here: else
    // the backup keeps the old process's clock, and drops as duplicates
    // the pushes we take from the new one.
    if (kept && kept->size() != ranks.size())
      forward(self, h, op_workers, frame{}, {kept->begin(), kept->end()},
              ignore_outcome);
    forward(self, h, op_workers, frame{}, ranks, ignore_outcome);
  }
}

/// Attempts at connecting to a backup, each bounded by 1 s: two servers
/// that are each other's backup connect to each other at once, and CAF
/// 0.17 can leave one of the two handshakes unanswered; the next attempt
/// finds the connection the other side made.
constexpr int backup_connect_tries = 3;

/// Connects link `serial` to its backup at host:port; queued forwards go
/// once connected. A backup that cannot be reached is dropped.
void connect_backup(self_ptr self, uint64_t serial, std::string host,
                    uint16_t port, int tries) {
  auto mm = self->home_system().middleman().actor_handle();
  auto limit = std::min<uint32_t>(self->state.request_timeout_ms, 1000);
  self->request(mm, std::chrono::milliseconds{limit}, caf::connect_atom_v, host,
                port)
      .then(
          [self, serial](const caf::node_id&, caf::strong_actor_ptr& ptr,
                         const std::set<std::string>&) {
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
          },
          [self, serial, host, port, tries](caf::error& err) {
            auto cur = current_link(self, serial);
            if (!cur)
              return;
            if (err == caf::sec::request_timeout && tries > 1) {
              TROUPE_LOG(warning, who(self), "connecting to backup ", cur->rank,
                         " timed out; trying again");
              connect_backup(self, serial, host, port, tries - 1);
              return;
            }
            drop_backup(self,
                        ("unreachable: " + self->system().render(err)).c_str());
            // Still in the view, it may answer later: no view may come to
            // make us try again, so try again ourselves.
            retry_backup_later(self);
          });
}

/// Copies hosted store `id` to backup link `serial` (if both are still
/// there) where the store holds every push it accepted: now outside sync,
/// else once the open round completes. From then on the store's operations
/// are forwarded to the backup like any replicated store's.
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
  auto version = h->store.version();
  checkpoint_data x;
  x.stores.push_back(std::move(snap));
  b->mirrored.insert(id);
  // Replicated once the backup has applied the copy (a link dropped first
  // runs this too: then it was not).
  auto applied = [self, serial, origin = h->origin,
                  version](const caf::error& refused) {
    auto& b = self->state.backup;
    if (refused || !b || b->serial != serial)
      return;
    TROUPE_LOG(info, who(self), "store of server ", origin,
               " copied to new backup ", b->rank, " at version ", version);
    report(self, "replicated",
           str("store of server ", origin, " copied to server ", b->rank,
               " at version ", version));
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

/// Connects to our backup per view `v`: a new backup replicates the stores
/// that are still pristine from their first operation, and gets a copy of
/// the others (copy_to_backup).
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

// -- replication: the backup side ---------------------------------------------

/// Owned slices from (key, index, floats) triples, as owned_triples makes.
caf::expected<std::map<slice_id, uint32_t>>
owned_of(const std::vector<uint64_t>& xs) {
  if (xs.size() % 3 != 0)
    return caf::make_error(errc::malformed_message, "owned slices");
  std::map<slice_id, uint32_t> owned;
  for (size_t k = 0; k < xs.size(); k += 3)
    owned[slice_id{xs[k], static_cast<uint32_t>(xs[k + 1])}] =
        static_cast<uint32_t>(xs[k + 2]);
  return owned;
}

/// One operation on replica `m`; op_copy sets its layout, then its state.
caf::expected<uint64_t> apply_to_replica(shard_store& m, uint8_t op,
                                         bytes_view f,
                                         const std::vector<uint64_t>& xs) {
  switch (op) {
  case op_owned: {
    auto owned = owned_of(xs);
    if (!owned)
      return std::move(owned.error());
    m.set_owned(*owned);
    return m.version();
  }
  case op_workers: {
    std::set<uint32_t> live;
    for (auto w : xs)
      live.insert(static_cast<uint32_t>(w));
    m.set_workers(live);
    return m.version();
  }
  case op_init: {
    init_request req;
    if (auto err = decode(f, req))
      return err;
    auto& xs_ = req.slices;
    xs_.erase(
        std::remove_if(xs_.begin(), xs_.end(),
                       [&m](const slice_data& x) { return !m.owns(x.id); }),
        xs_.end());
    if (auto err = m.init(req))
      return err;
    return m.version();
  }
  case op_push: {
    push_request req;
    std::vector<slice_view> values;
    auto err = visit_push(f, req, [&](slice_id sid, const float* p, size_t n) {
      if (m.owns(sid))
        values.push_back(slice_view{sid, p, n});
      return caf::error{};
    });
    if (err)
      return err;
    auto r = m.push(req, values);
    if (!r)
      return std::move(r.error());
    return r->version;
  }
  case op_copy: {
    auto owned = owned_of(xs);
    if (!owned)
      return std::move(owned.error());
    m.set_owned(*owned);
    [[fallthrough]]; // then its state, as a restore
  }
  case op_restore: {
    checkpoint_data x;
    if (auto err = decode(f, x))
      return err;
    if (x.stores.size() != 1)
      return caf::make_error(errc::malformed_message, "restore of",
                             x.stores.size(), "stores");
    auto n = apply_restore(m, x.stores.front());
    if (!n)
      return std::move(n.error());
    return m.version();
  }
  default:
    return caf::make_error(errc::malformed_message, "replica operation", op);
  }
}

/// Every replica of `primary` may lack operations it acknowledged alone
/// (`why`), until its copy on a newer link: stale.
void mark_stale(self_ptr self, uint32_t primary, const char* why) {
  for (auto& [id, m] : self->state.mirrors)
    if (m.primary == primary && !m.stale_since) {
      m.stale_since = m.store.version();
      TROUPE_LOG(warning, who(self), "server ", primary, " ", why,
                 ": our replica of store ", id, " (version ", m.store.version(),
                 ") may lack what it acknowledged alone, until its copy");
    }
}

/// Refuses an operation of link `link` of `primary` on store `id` if that
/// link is older than the newest we took from it or refused an operation
/// already (the primary drops a link at its first refusal), or if we serve
/// the store ourselves. A newer link makes every replica of the primary
/// stale until its copy comes (see Fencing in shard_server.hpp).
caf::error fence(self_ptr self, uint32_t primary, uint64_t link, uint64_t id) {
  auto& st = self->state;
  auto& l = st.primary_links[primary];
  if (link < l.newest)
    return caf::make_error(errc::not_a_member, "replica operation of link",
                           link, "of server", primary, "after its newer link",
                           l.newest);
  if (link > l.newest) {
    if (l.newest != 0)
      mark_stale(self, primary, "replaced its link to us");
    l = primary_link{link, false};
  } else if (l.refused) {
    return caf::make_error(errc::not_a_member, "link", link, "of server",
                           primary,
                           "refused an operation already: the primary drops"
                           " it");
  }
  if (auto h = hosted(self, id))
    return caf::make_error(errc::not_a_member, "store", id, "of server",
                           h->origin, "is served here since view", h->since,
                           "(its primary was declared dead): not replicated");
  return caf::none;
}

/// The scheduler says `primary` dropped its link `link` to us while we
/// stayed in the view: what it acknowledged since is on it alone. The
/// rest of that link is refused, as after a refusal of ours.
void on_link_dropped(self_ptr self, uint32_t primary, uint64_t link) {
  auto& st = self->state;
  if (self->current_sender() != st.scheduler) {
    TROUPE_LOG(warning, who(self),
               "ignored a dropped-link notice not from the scheduler");
    return;
  }
  auto& l = st.primary_links[primary];
  if (link < l.newest)
    return; // a newer link came since: its copies make the replicas current
  mark_stale(self, primary, "dropped its link to us");
  l = primary_link{link, true};
}

/// An empty replica of a store `origin` created, which `primary` serves.
mirror_store new_mirror(self_ptr self, uint32_t primary, uint32_t origin) {
  auto& st = self->state;
  mirror_store m{primary, origin, shard_store{st.cfg.mode, st.fresh_fn},
                 std::nullopt};
  m.store.set_loop(st.loop);
  return m;
}

/// A whole store for a backup that came late (op_copy): layout, then state
/// as a restore. It replaces what we held of the store only once it is
/// applied whole: a copy that fails leaves the replica as it was (stale).
caf::expected<uint64_t> apply_copy(self_ptr self, uint32_t primary, uint64_t id,
                                   uint32_t origin, bytes_view f,
                                   const std::vector<uint64_t>& xs) {
  auto m = new_mirror(self, primary, origin);
  auto r = apply_to_replica(m.store, op_copy, f, xs);
  if (!r)
    return r;
  auto& mirrors = self->state.mirrors;
  mirrors.erase(id);
  mirrors.emplace(id, std::move(m));
  return r;
}

/// Applies one replica operation from our primary, fenced.
caf::expected<uint64_t> apply_replica_op(self_ptr self, uint32_t primary,
                                         uint64_t id, uint32_t origin,
                                         uint8_t op, bytes_view f,
                                         const std::vector<uint64_t>& xs) {
  auto& st = self->state;
  if (op == op_copy)
    return apply_copy(self, primary, id, origin, f, xs);
  auto i = st.mirrors.find(id);
  if (i == st.mirrors.end()) {
    if (op != op_owned) // a replica starts with its layout
      return caf::make_error(errc::malformed_message,
                             "replica operation before its layout");
    i = st.mirrors.emplace(id, new_mirror(self, primary, origin)).first;
    TROUPE_LOG(debug, who(self), "replicating the store of server ", origin,
               " for server ", primary);
  }
  // A replica still pristine that the newest link feeds without a copy was
  // pristine at the primary when that link came (else the copy would come
  // first): nothing was acknowledged alone, it is current.
  auto& stale = i->second.stale_since;
  bool current = stale && i->second.store.pristine();
  auto r = apply_to_replica(i->second.store, op, f, xs);
  if (r && current)
    stale.reset();
  return r;
}

/// Applies one replica operation from our primary (over CAF or the road).
caf::expected<uint64_t> apply_replica(self_ptr self, uint32_t primary,
                                      uint64_t link, uint64_t id,
                                      uint32_t origin, uint8_t op, bytes_view f,
                                      const std::vector<uint64_t>& xs) {
  auto err = fence(self, primary, link, id);
  auto r = err ? caf::expected<uint64_t>{std::move(err)}
               : apply_replica_op(self, primary, id, origin, op, f, xs);
  auto& l = self->state.primary_links[primary];
  if (!r && l.newest == link && !l.refused) {
    // The primary drops the link, and acknowledges alone what it had sent
    // on it after this operation (we refuse those): so do we, and its
    // replicas are stale from here.
    l.refused = true;
    mark_stale(self, primary, "had an operation refused");
  }
  return r;
}

// -- pulls --------------------------------------------------------------------

/// True if every store holding a slice of `req` may serve it now.
bool servable(self_ptr self, const pull_request& req) {
  for (auto& h : self->state.stores) {
    std::vector<slice_id> mine;
    for (auto& id : req.slices)
      if (h.store.owns(id))
        mine.push_back(id);
    if (!mine.empty() &&
        (!h.store.readable_at(req.clock) || !h.store.initialised(mine)))
      return false;
  }
  return true;
}

/// The reply to a servable pull: slices from their stores, in order;
/// `copy` (if given) copies it out on a road.
void answer_pull(self_ptr self, const pull_request& req, replier& to,
                 const loop_fn* copy = nullptr) {
  auto& st = self->state;
  std::vector<slice_view> views;
  views.reserve(req.slices.size());
  uint64_t version = UINT64_MAX, clock = UINT64_MAX;
  for (auto& h : st.stores)
    clock = std::min(clock, h.store.clock_of(req.worker));
  std::vector<slice_view> one;
  for (auto& id : req.slices) {
    auto s = store_of(self, id);
    if (!s) {
      to.deliver(caf::make_error(errc::slice_not_owned, id.key, id.index));
      return;
    }
    if (auto err = s->read_views({id}, one)) {
      to.deliver(err);
      return;
    }
    views.push_back(one.front());
    version = std::min(version, s->version());
  }
  if (version == UINT64_MAX)
    version = own_store(self).version();
  // On the fast road, written straight from the stores.
  to.deliver(encode_pull_reply(version, views, clock), copy);
}

/// Answers every waiting pull the stores can serve now. Replies on roads
/// are written side by side (st.loop), or a lone one split over st.loop;
/// the stores do not change meanwhile.
void serve_pulls(self_ptr self) {
  auto& st = self->state;
  std::vector<shard_server_state::waiting_pull> still, on_roads;
  for (auto& p : st.pulls) {
    if (!servable(self, p.req))
      still.push_back(std::move(p));
    else if (p.to.road)
      on_roads.push_back(std::move(p));
    else
      answer_pull(self, p.req, p.to);
  }
  st.pulls = std::move(still);
  if (on_roads.size() == 1)
    answer_pull(self, on_roads[0].req, on_roads[0].to, &st.loop);
  else
    st.loop(on_roads.size(), [&](size_t i) {
      answer_pull(self, on_roads[i].req, on_roads[i].to);
    });
  report_resumed(self);
}

// -- views --------------------------------------------------------------------

/// Notes which workers are new in `v` (7) and whether one was lost.
void track_workers(self_ptr self, const cluster_view& v) {
  auto& st = self->state;
  std::map<uint32_t, uint64_t> next;
  for (auto& w : v.workers) {
    auto old = std::find_if(st.view.workers.begin(), st.view.workers.end(),
                            [&w](const node_info& o) { return o == w; });
    auto i = st.incarnation.find(w.rank);
    next[w.rank] = old != st.view.workers.end() && i != st.incarnation.end()
                       ? i->second
                       : v.epoch;
  }
  for (auto& w : st.view.workers)
    if (next.count(w.rank) == 0 ||
        std::none_of(v.workers.begin(), v.workers.end(),
                     [&w](const node_info& n) { return n == w; })) {
      if (st.lost_epoch == 0)
        st.lost_version = own_store(self).version();
      st.lost_epoch = v.epoch;
    }
  st.incarnation = std::move(next);
}

/// A request from a dead incarnation of its rank (7).
caf::error check_incarnation(self_ptr self, uint32_t worker, uint64_t epoch) {
  auto i = self->state.incarnation.find(worker);
  if (i != self->state.incarnation.end() && epoch < i->second)
    return caf::make_error(errc::not_a_member, "worker", worker,
                           "request from view", epoch,
                           "before it rejoined in view", i->second);
  return caf::none;
}

/// A replica promoted before the copy its primary's newer link owed it:
/// what the primary acknowledged alone in between is lost. Said loudly.
void report_stale_promotion(self_ptr self, uint32_t primary, uint64_t version,
                            uint64_t stale_since) {
  auto what =
      str("the replica of server ", primary,
          "'s store was promoted at version ", version,
          " without the copy its primary owed it since version ", stale_since,
          ": updates the primary acknowledged alone meanwhile are lost");
  TROUPE_LOG(error, who(self), what);
  report(self, "lost", what);
}

/// Replicas of a server that left and whose slices `v` gives us become
/// stores we serve (promotion); replicas no longer ours are dropped.
void promote_replicas(self_ptr self, const cluster_view& v,
                      const std::map<slice_id, uint32_t>& owned) {
  auto& st = self->state;
  for (auto i = st.mirrors.begin(); i != st.mirrors.end();) {
    auto primary = i->second.primary;
    bool alive = std::any_of(
        v.servers.begin(), v.servers.end(),
        [primary](const node_info& n) { return n.rank == primary; });
    auto slices = i->second.store.owned();
    bool ours = !slices.empty() && owned.count(slices.begin()->first) != 0;
    if (hosted(self, i->first)) { // fence() keeps this from happening
      TROUPE_LOG(error, who(self), "dropped a replica of store ", i->first,
                 ", which we serve already");
      i = st.mirrors.erase(i);
    } else if (!alive && ours) {
      TROUPE_LOG(info, who(self), "promoted: serving the ", slices.size(),
                 " slices of server ", primary, " from their replica");
      if (auto stale = i->second.stale_since)
        report_stale_promotion(self, primary, i->second.store.version(),
                               *stale);
      if (st.lost_epoch == 0) // reported as resumed at the next update
        st.lost_version = own_store(self).version();
      st.lost_epoch = v.epoch;
      st.stores.push_back(hosted_store{i->first, i->second.origin,
                                       std::move(i->second.store), v.epoch});
      i = st.mirrors.erase(i);
    } else if (!alive) {
      i = st.mirrors.erase(i);
    } else {
      ++i;
    }
  }
}

/// Gives each hosted store its share of `owned`: a slice stays in the
/// store that holds it; new slices go to our own store.
void share_out(self_ptr self, const std::map<slice_id, uint32_t>& owned) {
  auto& st = self->state;
  std::map<slice_id, uint32_t> rest = owned;
  for (size_t k = 1; k < st.stores.size(); ++k) {
    std::map<slice_id, uint32_t> mine;
    for (auto& [id, floats] : st.stores[k].store.owned())
      if (owned.count(id) != 0) {
        mine[id] = owned.at(id);
        rest.erase(id);
      }
    st.stores[k].store.set_owned(mine);
  }
  // Slices new to us of arrays declared before: they lived on a server
  // that died without a replica here. They start uninitialised, and a
  // resent Init would set them to their first values: say so loudly.
  size_t lost = 0;
  std::set<uint64_t> old_keys;
  for (auto& k : st.view.keys)
    old_keys.insert(k.key);
  for (auto& [id, floats] : rest)
    if (!own_store(self).owns(id) && old_keys.count(id.key) != 0)
      ++lost;
  if (lost > 0) {
    TROUPE_LOG(error, who(self), lost,
               " slices of a dead server came with no replica: their values"
               " are lost");
    report(self, "lost",
           str(lost, " slices of a dead server had no replica here"));
  }
  own_store(self).set_owned(rest);
  st.stores.erase(std::remove_if(st.stores.begin() + 1, st.stores.end(),
                                 [](const hosted_store& h) {
                                   return h.store.owned().empty();
                                 }),
                  st.stores.end());
}

// -- checkpoints --------------------------------------------------------------

/// Restores the slices our own store got in this view from the checkpoint
/// we resume from; returns the restore for our backup's replica (empty if
/// nothing was restored).
frame restore_from_checkpoint(self_ptr self) {
  auto& st = self->state;
  if (!st.resume)
    return {};
  auto snap = restorable(*st.resume, own_store(self));
  if (snap.slices.empty())
    return {};
  auto n = apply_restore(own_store(self), snap);
  if (!n) { // the files passed their checks: a bug, or a changed optimizer
    TROUPE_LOG(error, who(self), "restoring from checkpoint failed: ",
               self->system().render(n.error()));
    self->quit(n.error());
    return {};
  }
  st.resume->meta_applied = true;
  auto gen = st.resume->manifest.generation;
  TROUPE_LOG(info, who(self), "restored ", *n, " slices from checkpoint ", gen,
             " at version ", own_store(self).version());
  report(self, "restored",
         str(*n, " slices from checkpoint ", gen, " at version ",
             own_store(self).version()));
  checkpoint_data x;
  x.stores.push_back(std::move(snap));
  return encode(x);
}

/// Our largest store version: the scheduler cuts a checkpoint above it.
caf::result<uint64_t> checkpoint_version(self_ptr self) {
  if (self->state.cfg.checkpoint.dir.empty())
    return caf::make_error(errc::invalid_config,
                           "this server has no --checkpoint.dir");
  uint64_t v = 0;
  for (auto& h : self->state.stores)
    v = std::max(v, h.store.version());
  return v;
}

/// Writes the snapshots of `p` to our checkpoint file on the writer thread;
/// the thread reports back with (checkpoint_atom, serial, error text).
void write_checkpoint(self_ptr self, pending_checkpoint& p) {
  auto& st = self->state;
  auto name = checkpoint_file_name(p.generation, st.rank);
  auto path = st.cfg.checkpoint.dir + "/" + name;
  std::function<void()> midway;
  if (st.cfg.checkpoint.tear_generation == p.generation)
    midway = [] { // fault injection: die with half a file written
      std::fprintf(stderr, "*** fault injection: killing this server in the"
                           " middle of a checkpoint write\n");
      ::kill(::getpid(), SIGKILL);
    };
  st.writer.join(); // the previous write, long done in practice
  st.writer.thread =
      std::thread([me = caf::actor_cast<caf::actor>(self), serial = p.serial,
                   f = encode(p.data), path, midway] {
        auto err = write_checked_file(path, f, midway);
        caf::anon_send(me, checkpoint_atom_v, serial,
                       err ? describe(err) : std::string{});
      });
}

/// Snapshots hosted store `id` for take `serial` if it is still the one
/// being taken, and starts the write once every store is in.
void snapshot_store(self_ptr self, uint64_t serial, uint64_t id) {
  auto& p = self->state.taking;
  if (!p || p->serial != serial || p->waiting.erase(id) == 0)
    return;
  for (auto& h : self->state.stores)
    if (h.id == id) {
      auto snap = snapshot_of(h.store);
      snap.id = h.id;
      snap.origin = h.origin;
      p->data.stores.push_back(std::move(snap));
    }
  if (p->waiting.empty())
    write_checkpoint(self, *p);
}

caf::response_promise take_checkpoint(self_ptr self, uint64_t gen,
                                      uint64_t at) {
  auto& st = self->state;
  if (st.cfg.checkpoint.dir.empty()) {
    auto rp = self->make_response_promise();
    rp.deliver(caf::make_error(errc::invalid_config,
                               "this server has no --checkpoint.dir"));
    return rp;
  }
  if (st.taking) // the scheduler gave up on it and started another
    st.taking->rp.deliver(caf::make_error(errc::timeout, "checkpoint",
                                          st.taking->generation,
                                          "superseded by", gen));
  st.taking = std::make_unique<pending_checkpoint>();
  auto& p = *st.taking;
  p.generation = gen;
  p.serial = ++st.checkpoint_serial; // the same generation may come again
  auto serial = p.serial;
  p.data = checkpoint_data{
      gen, st.rank, st.cfg.checkpoint.mode, st.cfg.checkpoint.optimizer, {}};
  p.rp = self->make_response_promise();
  auto rp = p.rp;
  for (auto& h : st.stores)
    p.waiting.insert(h.id);
  bool sync = own_store(self).mode().kind == consistency::kind_t::sync;
  std::vector<uint64_t> ids(p.waiting.begin(), p.waiting.end());
  for (auto id : ids) {
    auto h = hosted(self, id);
    auto snap = [self, serial, id] { snapshot_store(self, serial, id); };
    auto err = sync ? h->store.at_version(at, snap) : (snap(), caf::error{});
    if (err) { // past the cut: the scheduler tries again higher
      st.taking.reset();
      rp.deliver(err);
      return rp;
    }
  }
  return rp;
}

/// The writer thread's report on take `serial`.
void checkpoint_written(self_ptr self, uint64_t serial,
                        const std::string& err) {
  auto& st = self->state;
  if (!st.taking || st.taking->serial != serial)
    return; // superseded meanwhile: its file may be cut elsewhere
  auto p = std::move(st.taking);
  auto gen = p->generation;
  if (!err.empty()) {
    TROUPE_LOG(error, who(self), "checkpoint ", gen, " failed: ", err);
    p->rp.deliver(caf::make_error(errc::bad_file, err));
    return;
  }
  TROUPE_LOG(debug, who(self), "checkpoint ", gen, " written");
  p->rp.deliver(checkpoint_file_name(gen, st.rank));
}

void apply_view(self_ptr self, cluster_view v) { // 3
  auto& st = self->state;
  if (!st.joined) { // ownership needs our rank: keep the newest for later
    if (v.epoch > st.early_view.epoch)
      st.early_view = std::move(v);
    return;
  }
  if (v.epoch <= st.view.epoch)
    return;
  std::map<uint64_t, uint64_t> sizes;
  for (auto& k : v.keys)
    sizes[k.key] = k.size;
  std::map<slice_id, uint32_t> owned;
  for (auto& p : v.placement)
    if (p.server == st.rank) {
      auto r = slice_range(sizes[p.key], v.slice_floats, p.index);
      owned[slice_id{p.key, p.index}] =
          static_cast<uint32_t>(r.second - r.first);
    }
  std::set<uint32_t> workers;
  for (auto& w : v.workers)
    workers.insert(w.rank);
  track_workers(self, v);
  promote_replicas(self, v, owned);
  share_out(self, owned);
  // A rank taken by a new process without a view in between: the old one
  // leaves first, so the new one starts at the others' clock.
  auto kept = workers;
  for (auto& [rank, epoch] : st.incarnation)
    if (epoch == v.epoch)
      kept.erase(rank);
  for (auto& h : st.stores) {
    h.store.set_workers(kept);
    h.store.set_workers(workers);
  }
  st.view = std::move(v);
  update_backup(self);
  forward_layout(self, restore_from_checkpoint(self), &kept);
  TROUPE_LOG(debug, who(self), "view ", st.view.epoch, ": ", owned.size(),
             " slices in ", st.stores.size(), " stores, ", workers.size(),
             " workers");
  // Run what waited for this epoch; keep what waits for a later one.
  auto held = std::move(st.held);
  st.held.clear();
  for (auto& [epoch, fn] : held)
    if (epoch <= st.view.epoch)
      fn();
    else
      st.held.emplace_back(epoch, std::move(fn));
  serve_pulls(self);
}

/// Views a request may be ahead of ours; more is a broken sender.
constexpr uint64_t max_epochs_ahead = 1000;

/// Runs `fn` now, or once our view reaches `epoch`.  // 4
template <class F>
void when_epoch(self_ptr self, uint64_t epoch, replier& rp, F fn) {
  auto ours = self->state.view.epoch;
  if (epoch <= ours)
    fn();
  else if (epoch - ours > max_epochs_ahead) // 5
    rp.deliver(caf::make_error(errc::malformed_message, "epoch", epoch,
                               "far ahead of", ours));
  else
    self->state.held.emplace_back(epoch, std::move(fn));
}

template <class Request>
bool decode_or_reject(self_ptr self, bytes_view f, Request& req, replier& rp) {
  if (auto err = decode(f, req)) { // 5
    TROUPE_LOG(warning, who(self), "dropped a malformed request from ",
               rp.source(), ": ", self->system().render(err));
    rp.deliver(err);
    return false;
  }
  return true;
}

// -- requests -----------------------------------------------------------------

void handle_init(self_ptr self, init_request req, replier rp) {
  if (auto err = check_incarnation(self, req.worker, req.epoch)) {
    rp.deliver(err);
    return;
  }
  auto& st = self->state;
  for (auto& x : req.slices)
    if (!store_of(self, x.id)) {
      rp.deliver(caf::make_error(errc::slice_not_owned, x.id.key, x.id.index));
      return;
    }
  // Each store is asked first, as for a push: a part one refuses is taken
  // by none (else the others would hold first values their replicas lack,
  // and take another worker's there).
  std::vector<init_request> parts;
  for (auto& h : st.stores) {
    parts.push_back(init_request{req.worker, req.epoch, {}});
    for (auto& x : req.slices)
      if (h.store.owns(x.id))
        parts.back().slices.push_back(x);
    if (auto err = h.store.check_init(parts.back())) {
      rp.deliver(err);
      return;
    }
  }
  for (size_t k = 0; k < st.stores.size(); ++k)
    if (auto err = st.stores[k].store.init(parts[k])) { // checked above
      TROUPE_LOG(error, who(self), "Init taken by one store, refused by",
                 " another after all: ", self->system().render(err));
      rp.deliver(err);
      return;
    }
  auto reply = encode(push_reply{own_store(self).version(), false});
  auto done = acknowledge_after(self, st.stores.size(), rp, reply);
  auto f = encode(req);
  for (auto& h : st.stores)
    forward(self, h, op_init, f, {}, done);
  serve_pulls(self);
}

void handle_push(self_ptr self, const push_request& req,
                 const std::vector<slice_view>& values, bytes_view f,
                 replier rp) {
  if (auto err = check_incarnation(self, req.worker, req.epoch)) {
    rp.deliver(err);
    return;
  }
  auto& st = self->state;
  for (auto& x : values)
    if (!store_of(self, x.id)) {
      rp.deliver(caf::make_error(errc::slice_not_owned, x.id.key, x.id.index));
      return;
    }
  // Every store sees every part (maybe with no slice of its own), so each
  // counts the worker's clock whole. A push cut under an older view than
  // the store's is not one of its parts: counting it would close the
  // worker's clock there without the slices it holds (the resend would
  // then look like a duplicate). Each store is asked first: a part one
  // refuses is taken by none (else it would change one store, unknown to
  // the backup, and fail).
  std::vector<std::vector<slice_view>> mine(st.stores.size());
  for (size_t k = 0; k < st.stores.size(); ++k) {
    auto& h = st.stores[k];
    if (req.epoch < h.since)
      continue;
    for (auto& x : values)
      if (h.store.owns(x.id))
        mine[k].push_back(x);
    if (auto ok = h.store.check_push(req, mine[k]); !ok) {
      TROUPE_LOG(debug, who(self),
                 "push refused: ", self->system().render(ok.error()));
      rp.deliver(std::move(ok.error()));
      return;
    }
  }
  push_reply out{UINT64_MAX, true};
  for (size_t k = 0; k < st.stores.size(); ++k) {
    auto& h = st.stores[k];
    if (req.epoch < h.since)
      continue;
    auto r = h.store.push(req, mine[k]);
    if (!r) { // check_push said it would take it
      TROUPE_LOG(error, who(self), "push taken by one store, refused by",
                 " another after all: ", self->system().render(r.error()));
      rp.deliver(std::move(r.error()));
      return;
    }
    out.version = std::min(out.version, r->version);
    out.duplicate = out.duplicate && r->duplicate;
  }
  auto reply = encode(out);
  auto done = acknowledge_after(self, st.stores.size(), rp, reply);
  // The backup gets the push as it came. A duplicate too: the original
  // may still be on its way to the backup, and the backup answers in
  // order, so the duplicate is acknowledged only once the backup holds
  // the original (it drops the duplicate itself).
  frame copy;
  if (st.backup && !st.backup->mirrored.empty())
    copy.bytes.assign(f.data, f.data + f.size);
  for (auto& h : st.stores) {
    if (req.epoch < h.since)
      done(caf::none); // not a part of this store's: nothing for its replica
    else
      forward(self, h, op_push, copy, {}, done);
  }
  serve_pulls(self);
}

void handle_pull(self_ptr self, pull_request req, replier rp) {
  auto& st = self->state;
  if (auto err = check_incarnation(self, req.worker, req.epoch)) {
    rp.deliver(err);
    return;
  }
  for (auto& h : st.stores)
    if (auto err = h.store.check_pull(req.worker, req.clock)) {
      rp.deliver(err);
      return;
    }
  for (auto& id : req.slices) // unknown slices fail now, not after a wait
    if (!store_of(self, id)) {
      rp.deliver(caf::make_error(errc::slice_not_owned, id.key, id.index));
      return;
    }
  st.pulls.push_back({std::move(req), std::move(rp)});
  serve_pulls(self);
}

/// Opens the fast road; without it, workers use CAF.
road_info open_road(self_ptr self, const std::string& host) {
  auto addr = self->address();
  // The reader runs the server itself when it is idle: one thread hop
  // less per request (a client's reader only reads, so the server's
  // writes from here always drain).
  auto on_msg = [addr](road_message_ptr m) {
    auto h = caf::actor_cast<caf::actor>(addr);
    if (!h)
      return;
    // Two servers back each other up: each running here while writing
    // to the other could block both, so replica operations are handed
    // over (a worker's reader only reads: its requests may run here).
    // Once a reply waits corked, the rest of the mailbox (other workers'
    // requests) goes to a scheduler thread, so the reply goes out as soon
    // as this reader is back, not after all of them.
    if (m->op == road_op::replicate)
      caf::anon_send(h, road_atom_v, std::move(m));
    else
      send_and_run_here(std::move(h),
                        caf::make_message(road_atom_v, std::move(m)), SIZE_MAX,
                        road_reply_corked);
  };
  auto& cfg = self->state.cfg;
  auto road = road_listener::start(host, cfg.road_port,
                                   cfg.road_send_timeout_ms, on_msg);
  if (!road) {
    TROUPE_LOG(warning, who(self), "no fast road (",
               self->system().render(road.error()), "): workers use CAF");
    return {};
  }
  self->state.road = std::move(*road);
  return self->state.road->info();
}

void start(self_ptr self, const std::string& host, uint16_t port) {
  if (self->state.cfg.checkpoint.resume) { // before joining: fail early
    auto set = load_resume_set(self->state.cfg.checkpoint);
    if (!set) {
      TROUPE_LOG(error, "server", describe(set.error()));
      self->quit(set.error());
      return;
    }
    self->state.resume = std::move(*set);
    TROUPE_LOG(info, "server", "resuming from checkpoint ",
               self->state.resume->manifest.generation, " (",
               self->state.resume->slices.size(), " slices)");
  }
  register_request req{role::server, host, port,
                       static_cast<uint32_t>(::getpid()),
                       open_road(self, host)};
  self->request(self->state.scheduler,
                std::chrono::milliseconds{self->state.request_timeout_ms},
                register_atom_v, encode(req))
      .then(
          [self](const frame& f) { // 1
            register_reply reply;
            if (auto err = decode(f, reply)) {
              TROUPE_LOG(error, "server",
                         "bad RegisterReply: ", self->system().render(err));
              self->quit(err);
              return;
            }
            self->state.rank = reply.rank;
            self->state.joined_epoch = reply.view.epoch;
            self->state.stores.front().origin = reply.rank;
            self->state.joined = true;
            TROUPE_LOG(info, who(self), "joined, mode ",
                       to_string(own_store(self).mode()));
            apply_view(self, std::move(reply.view));
            if (self->state.early_view.epoch > 0)
              apply_view(self, std::move(self->state.early_view));
          },
          [self](caf::error& err) { // 2
            TROUPE_LOG(error, "server",
                       "registration failed: ", self->system().render(err));
            self->quit(err);
          });
}

/// Decodes a request and hands it to `handle` once our view has its epoch.
template <class Request, class Handler>
void accept(self_ptr self, bytes_view f, replier rp, Handler handle) {
  Request req;
  if (decode_or_reject(self, f, req, rp))
    when_epoch(self, req.epoch, rp,
               [self, req = std::move(req), rp, handle]() mutable {
                 handle(self, std::move(req), std::move(rp));
               });
}

/// A push is read in place: its values are applied straight from the
/// frame, which `keep` (or the road message in `rp`) keeps alive.
void accept_push(self_ptr self, bytes_view f, replier rp,
                 std::shared_ptr<const void> keep) {
  if (reinterpret_cast<uintptr_t>(f.data) % 8 != 0) { // never seen; be safe
    auto copy = std::make_shared<frame>();
    copy->bytes.assign(f.data, f.data + f.size);
    f = bytes_view{*copy};
    keep = copy;
  }
  push_request req;
  std::vector<slice_view> values;
  auto err =
      visit_push(f, req, [&values](slice_id id, const float* xs, size_t n) {
        values.push_back(slice_view{id, xs, n});
        return caf::error{};
      });
  if (err) { // 5
    TROUPE_LOG(warning, who(self), "dropped a malformed request from ",
               rp.source(), ": ", self->system().render(err));
    rp.deliver(err);
    return;
  }
  when_epoch(self, req.epoch, rp,
             [self, req, values = std::move(values), rp, keep, f]() mutable {
               handle_push(self, req, values, f, std::move(rp));
             });
}

/// The same for a request that came in on CAF.
template <class Request, class Handler>
caf::response_promise accept_caf(self_ptr self, const frame& f,
                                 Handler handle) {
  auto rp = self->make_response_promise();
  accept<Request>(self, f, replier{rp, nullptr}, handle);
  return rp;
}

/// A request from the fast road.
void accept_road(self_ptr self, road_message_ptr m) {
  auto f = m->bytes;
  replier to{caf::response_promise{}, m};
  switch (m->op) {
  case road_op::init:
    return accept<init_request>(self, f, std::move(to), handle_init);
  case road_op::push:
    return accept_push(self, f, std::move(to), nullptr);
  case road_op::pull:
    return accept<pull_request>(self, f, std::move(to), handle_pull);
  case road_op::replicate: {
    replicate_request r;
    auto err = decode(f, r);
    auto v = err ? caf::expected<uint64_t>{std::move(err)}
                 : apply_replica(self, r.primary, r.link, r.store, r.origin,
                                 r.op, r.payload, r.numbers);
    if (!v) {
      TROUPE_LOG(warning, who(self),
                 "replica operation refused: ", describe(v.error()));
      return to.deliver(v.error());
    }
    m->conn->send(road_op::reply, m->id, encode(push_reply{*v, false}));
    return;
  }
  default:
    TROUPE_LOG(warning, who(self), "dropped a road message of kind ",
               static_cast<int>(m->op), " from ", to.source());
    to.deliver(caf::make_error(errc::malformed_message, "not a request"));
  }
}

} // namespace

caf::behavior shard_server(shard_server_actor* self, server_settings cfg,
                           caf::actor scheduler, update_fn fn) {
  self->state.fresh_fn = fn;
  if (cfg.helper_threads > 0)
    self->state.loop =
        loop_on(std::make_shared<helper_pool>(cfg.helper_threads));
  self->state.stores.push_back(
      hosted_store{new_store_id(), 0, shard_store{cfg.mode, std::move(fn)}});
  self->state.stores.back().store.set_loop(self->state.loop);
  self->state.cfg = cfg;
  self->state.scheduler = scheduler;
  self->monitor(scheduler);
  log_stray_errors(self, [self] { return who(self); });
  self->set_down_handler([self](const caf::down_msg& dm) {
    if (dm.source == self->state.scheduler.address()) { // 6
      if (self->state.leaving) { // we were stopping anyway (8)
        self->quit(caf::exit_reason::user_shutdown);
        return;
      }
      TROUPE_LOG(error, who(self),
                 "scheduler down: ", self->system().render(dm.reason));
      self->quit(scheduler_gone());
    }
  });
  // Told to stop (SIGTERM, the end of a job): leave the view first. The
  // scheduler would otherwise learn of our exit from the connection, and
  // if that closes before our user_shutdown reaches it (our process exits
  // at once), it records a crash.
  self->set_exit_handler([self](caf::exit_msg& em) { // 8
    if (em.reason != caf::exit_reason::user_shutdown || !self->state.joined) {
      self->quit(em.reason);
      return;
    }
    if (self->state.leaving)
      return;
    self->state.leaving = true;
    TROUPE_LOG(info, who(self), "told to stop: leaving the view");
    auto limit = std::min<uint32_t>(self->state.request_timeout_ms, 2000);
    self->request(self->state.scheduler, std::chrono::milliseconds{limit},
                  leave_atom_v)
        .then([self](uint64_t) { self->quit(caf::exit_reason::user_shutdown); },
              [self](caf::error&) {
                self->quit(caf::exit_reason::user_shutdown);
              });
  });
  return {
      [self](start_atom, const std::string& host, uint16_t port) {
        start(self, host, port);
      },
      [self](stale_atom, tick_atom) { expire_held(self); },
      [self](reconnect_atom) { // our backup was unreachable: try again
        if (self->state.backup)
          return;
        update_backup(self);
        forward_layout(self, frame{});
      },
      [self](view_atom, const frame& f) {
        cluster_view v;
        if (auto err = decode(f, v)) {
          TROUPE_LOG(warning, who(self),
                     "dropped a malformed view: ", self->system().render(err));
          return;
        }
        apply_view(self, std::move(v));
      },
      [self](init_atom, const frame& f) {
        return accept_caf<init_request>(self, f, handle_init);
      },
      [self](push_atom, frame& f) {
        auto rp = self->make_response_promise();
        auto keep = std::make_shared<frame>(std::move(f));
        accept_push(self, *keep, replier{rp, nullptr}, keep);
        return rp;
      },
      [self](pull_atom, const frame& f) {
        return accept_caf<pull_request>(self, f, handle_pull);
      },
      [self](road_atom, road_message_ptr& m) {
        accept_road(self, std::move(m));
      },
      [self](checkpoint_atom, uint64_t) { return checkpoint_version(self); },
      [self](checkpoint_atom, uint64_t gen, uint64_t at) {
        return take_checkpoint(self, gen, at);
      },
      [self](checkpoint_atom, uint64_t serial, const std::string& err) {
        checkpoint_written(self, serial, err);
      },
      [self](replicate_atom, uint32_t primary, uint64_t link, uint64_t id,
             uint32_t origin, uint8_t op, const frame& f,
             const std::vector<uint64_t>& xs) -> caf::result<uint64_t> {
        auto r = apply_replica(self, primary, link, id, origin, op, f, xs);
        if (!r)
          return std::move(r.error());
        return *r;
      },
      [self](replicate_atom, uint64_t serial, road_message_ptr& m) {
        on_backup_reply(self, serial, std::move(m));
      },
      [self](replicate_atom, road_down_atom, uint64_t serial,
             const std::string& why) {
        auto& b = self->state.backup;
        if (!b || b->serial != serial)
          return;
        drop_backup(self, ("road lost: " + why).c_str());
        retry_backup_later(self);
      },
      [self](replicate_atom, tick_atom, uint64_t serial) {
        check_backup_road(self, serial);
      },
      [self](stale_atom, uint32_t primary, uint64_t link) {
        on_link_dropped(self, primary, link);
      },
  };
}

} // namespace troupe

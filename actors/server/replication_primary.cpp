// The primary's side of chain replication (replication.hpp): each operation
// forwarded to the backup in order, on its road or over CAF, and a worker's
// acknowledgement sent once the backup has it (A1-A3).
#include "actors/server/shard_server_internal.hpp"

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "actors/base/log.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::server_impl {
namespace {

// -- forwarding ---------------------------------------------------------------

/// Runs what waited for forward `n` of link `serial` (L3), unless the link
/// went meanwhile (then it ran when the link went, L4).
void finish_forward(self_ptr self, uint64_t serial, uint64_t n,
                    const caf::error& refused) {
  auto b = current_link(self, serial);
  if (!b)
    return; // the old link ran it when it went
  auto i = b->waiting.find(n);
  if (i == b->waiting.end())
    return;
  auto fn = std::move(i->second);
  b->waiting.erase(i);
  fn(refused);
}

/// Sends forward `n` on the backup's road: the link's order is the road's.
void forward_on_road(self_ptr self, uint64_t n, const replicate_request& r) {
  auto& b = self->state.backup;
  if (auto err = b->road->send(road_op::replicate, n, encode(r))) {
    drop_backup(self, ("road failed: " + describe(err)).c_str()); // L4
    retry_backup_later(self);
    return;
  }
  b->sent.emplace(n, std::chrono::steady_clock::now());
}

/// Sends one operation on the current link's road, which is connected.
void send_on_road(self_ptr self, uint64_t id, uint32_t origin, replica_op op,
                  bytes_view f, std::vector<uint64_t> xs, replica_done then) {
  auto& b = self->state.backup;
  auto n = b->next++;
  auto tag = replica_link_tag(self->state.joined_epoch, b->serial);
  b->waiting.emplace(n, std::move(then));
  forward_on_road(self, n,
                  replicate_request{self->state.rank, tag, id, origin,
                                    static_cast<uint8_t>(op), std::move(xs),
                                    f});
}

/// Sends one operation on link `serial` now that it is connected, on its
/// road or over CAF; a link dropped meanwhile leaves it alone (A2).
void send_forward(self_ptr self, uint64_t serial, uint64_t id, uint32_t origin,
                  replica_op op, frame& f, std::vector<uint64_t>& xs,
                  replica_done then) {
  auto& b = self->state.backup;
  if (!current_link(self, serial) || !b->handle) { // dropped meanwhile
    stands_alone(self, std::move(then));
    return;
  }
  if (b->road)
    return send_on_road(self, id, origin, op, f, std::move(xs),
                        std::move(then));
  auto n = b->next++;
  auto tag = replica_link_tag(self->state.joined_epoch, b->serial);
  b->waiting.emplace(n, std::move(then));
  auto limit = std::chrono::milliseconds{self->state.request_timeout_ms / 2};
  self->request(b->handle, limit, replicate_atom_v, self->state.rank, tag, id,
                origin, static_cast<uint8_t>(op), std::move(f), std::move(xs))
      .then([self, serial,
             n](uint64_t) { finish_forward(self, serial, n, caf::none); },
            [self, serial, n](caf::error& err) {
              // troupe's own errors are the backup's answer: it refused
              // the operation; CAF's (a timeout, the backup gone) drop
              // the link, and the operation stands on the primary alone
              // (dropping it runs what waited, this one included).
              if (err.category() == caf::atom("troupe"))
                finish_forward(self, serial, n, err);
              if (current_link(self, serial)) {
                drop_backup(self,
                            ("failed: " + self->system().render(err)).c_str());
                retry_backup_later(self);
              }
            });
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
/// replicated (A3). The usual cause of a refusal is a view that declared
/// us dead while we were not (a heartbeat missed under load): the backup
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

} // namespace

/// A backup silent for half the request timeout is dropped (L4), and
/// dropping the link runs what waited.
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
    send_forward(self, serial, id, origin, op, f, xs, std::move(then));
  };
  if (b->handle)
    send(std::move(then));
  else
    b->queued.push_back({std::move(send), std::move(then)});
}

void forward_bytes(self_ptr self, const hosted_store& h, replica_op op,
                   bytes_view f, replica_done then) {
  auto& b = self->state.backup;
  bool mirrored = b && b->mirrored.count(h.id) != 0;
  if (mirrored && b->handle && b->road && f.segments == nullptr)
    return send_on_road(self, h.id, h.origin, op, f, {}, std::move(then));
  // forward() stands alone where there is no replica: no bytes needed.
  forward(self, h, op, mirrored ? frame{{f.data, f.data + f.size}} : frame{},
          {}, std::move(then));
}

/// The backup's answer runs the acknowledgement: a failure drops the link
/// as over CAF (L4).
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

// -- acknowledging ------------------------------------------------------------

replica_done acknowledge_after(self_ptr self, size_t n, replier rp,
                               frame reply) {
  return after_all(n, [self, rp, reply](const caf::error& refused) mutable {
    if (refused)
      rp.deliver(not_replicated(self, refused));
    else
      rp.deliver(reply);
  });
}

void ignore_outcome(const caf::error&) {
  // nothing waits for it
}

// -- the stores' layout -------------------------------------------------------

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

void forward_layout(self_ptr self, frame restored,
                    const std::set<uint32_t>* kept) {
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

} // namespace troupe::server_impl

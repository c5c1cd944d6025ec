// The shard server's end of the fast road (actors/road/road.hpp): where
// replies go (replier), the listener, and the requests that come in on it.
#include "actors/server/shard_server_internal.hpp"

#include <cstdint>

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>

#include "actors/base/log.hpp"
#include "actors/base/stray_errors.hpp"
#include "actors/cluster/peer_name.hpp"
#include "actors/road/run_here.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

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
    return std::string{"the "} + to_string(road->conn->kind()) +
           " road connection from " + road->conn->peer();
  return sender_node(rp.source());
}

void replier::say_source(caf::event_based_actor* self,
                         std::function<void(const std::string&)> say) const {
  if (road)
    say(source());
  else
    with_peer_name(self, rp.source(), std::move(say));
}

caf::error replier::check_sender(member_id claimed) const {
  if (!road || road->conn->member() == claimed)
    return caf::none;
  return caf::make_error(
      errc::not_a_member,
      str("the road connection of ", to_string(road->conn->member()), " from ",
          road->conn->peer(), " spoke as ", to_string(claimed)));
}

namespace server_impl {

road_info open_road(self_ptr self, const std::string& host) {
  auto addr = self->address();
  // The reader runs the server itself when it is idle: one thread hop
  // less per request (a client's reader only reads, so the server's
  // writes from here always drain).
  auto on_msg = [addr](road_message_ptr m) {
    auto h = caf::actor_cast<caf::actor>(addr);
    if (!h)
      return;
    // Replica operations are handed over (replication.hpp, Roads): a
    // worker's reader only reads, so its requests may run here. Once a
    // reply waits corked, the rest of the mailbox (other workers'
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
  // Until the first view gives the slice bound, no frame is over the
  // largest a worker could send (and no worker has a view to send with).
  self->state.intake = std::make_shared<road_intake>(cfg.inflight_bytes);
  self->state.intake->limit_worker_frames(
      worker_frame_bound(cfg.max_message_bytes, max_slice_floats));
  auto road = road_listener::start(
      host, cfg.road_port, cfg.road_send_timeout_ms, cfg.roads,
      self->state.road_keys, on_msg, self->state.intake);
  if (!road) {
    TROUPE_LOG(warning, who(self), "no fast road (",
               self->system().render(road.error()), "): workers use CAF");
    return {};
  }
  self->state.road = std::move(*road);
  return self->state.road->info();
}

namespace {

/// A replica operation from our primary on the road: answered on it with
/// the replica's version, or the refusal.
void accept_replica_op(self_ptr self, road_message_ptr m, replier& to) {
  replicate_request r;
  auto err = decode(m->bytes, r);
  if (!err)
    err = to.check_sender({role::server, r.primary});
  auto v = err ? caf::expected<uint64_t>{std::move(err)}
               : apply_replica(self, r.primary, r.link, r.store, r.origin, r.op,
                               r.payload, r.numbers, m);
  if (!v) {
    TROUPE_LOG(warning, who(self),
               "replica operation refused: ", describe(v.error()));
    return to.deliver(v.error());
  }
  m->conn->send(road_op::reply, m->id, encode(push_reply{*v, false}));
}

} // namespace

void accept_road(self_ptr self, road_message_ptr m) {
  auto f = m->bytes;
  replier to{caf::response_promise{}, m};
  if (m->refused) // skipped unread: too large, or the server is busy
    return to.deliver(m->refused);
  switch (m->op) {
  case road_op::init:
    return accept_init(self, f, std::move(to));
  case road_op::push:
    return accept_push(self, f, std::move(to), nullptr);
  case road_op::pull:
    return accept_pull(self, f, std::move(to));
  case road_op::replicate:
    return accept_replica_op(self, std::move(m), to);
  default:
    TROUPE_LOG_LIMITED(warning, who(self), "dropped a road message of kind ",
                       static_cast<int>(m->op), " from ", to.source());
    to.deliver(caf::make_error(errc::malformed_message, "not a request"));
  }
}

} // namespace server_impl
} // namespace troupe

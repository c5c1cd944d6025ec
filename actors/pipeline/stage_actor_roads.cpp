// A stage actor's tensors to and from its neighbours: on the roads of
// stage_roads.hpp where they are up, else over CAF.
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "actors/base/log.hpp"
#include "actors/pipeline/stage_actor_internal.hpp"
#include "actors/pipeline/stage_roads.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::stage_impl {

namespace {

stage_state::road_out& road_to(stage_ptr self, bool forward) {
  return forward ? self->state.to_next : self->state.to_prev;
}

/// "next" or "previous", for logs.
const char* side(bool forward) {
  return forward ? "next" : "previous";
}

const caf::actor& neighbour(stage_ptr self, bool forward) {
  return forward ? self->state.next : self->state.prev;
}

/// The worker rank of the neighbour before (`forward` false) or after;
/// false if there is none.
bool neighbour_rank(stage_ptr self, bool forward, uint32_t& rank) {
  auto& st = self->state;
  if (forward ? st.model->is_last() : st.cfg.stage == 0)
    return false;
  rank = forward ? st.cfg.member + 1 : st.cfg.member - 1;
  return true;
}

void send_caf(stage_ptr self, bool forward, const caf::actor& to, frame f) {
  if (!to)
    return; // no neighbour yet: a reset gives one, and drops this step
  ++self->state.caf_tensors;
  if (forward)
    self->send(to, activation_atom_v, std::move(f));
  else
    self->send(to, gradient_atom_v, std::move(f));
}

/// Gives up the road `out` for `why`: what it did not acknowledge goes
/// over CAF to the neighbour it led to, if that is still the neighbour.
void fall_back(stage_ptr self, bool forward, const std::string& why) {
  auto& out = road_to(self, forward);
  if (!out.conn)
    return;
  // Nothing in flight (a neighbour that finished, or a new generation):
  // no tensor is at stake, and it is not worth a warning.
  if (out.unacked.empty())
    TROUPE_LOG(info, who(self), "road to the ", side(forward), " stage ended (",
               why, "): CAF carries its tensors from now on");
  else
    TROUPE_LOG(warning, who(self), "road to the ", side(forward),
               " stage ended (", why, "): ", out.unacked.size(),
               " tensors it had not acknowledged go over CAF, as the rest");
  auto conn = std::move(out.conn);
  auto unacked = std::move(out.unacked);
  out.unacked.clear();
  conn->close();
  if (out.to == neighbour(self, forward))
    for (auto& [id, f] : unacked)
      send_caf(self, forward, out.to, std::move(f));
}

/// Dials the road to the neighbour `forward` says, if it is new; then
/// `settled`.
void link_road(stage_ptr self, bool forward,
               std::shared_ptr<std::function<void()>> settled) {
  auto& st = self->state;
  auto& out = road_to(self, forward);
  const auto& to = neighbour(self, forward);
  if (out.to == to && (out.conn || !to))
    return; // the same neighbour: its road (or none) stays
  if (out.conn)
    fall_back(self, forward, "a new neighbour");
  out.unacked.clear(); // of an older generation: the new one drops them
  out.to = to;
  if (!to || !st.cfg.roads)
    return;
  auto call = settled; // one for each answer: the last one runs it
  auto timeout = std::chrono::milliseconds{st.cfg.roads->timeout_ms()};
  self->request(to, timeout, road_atom_v, st.cfg.member)
      .then(
          [self, forward, to, call](std::string& host, uint16_t port,
                                    std::string& machine, std::string& socket,
                                    std::string& token) {
            auto& out = road_to(self, forward);
            if (out.to != to || out.conn)
              return; // another neighbour meanwhile
            stage_ticket t{
                std::move(host),
                road_info{port, std::move(machine), std::move(socket)},
                {}};
            if (!secret_from_bytes(token, t.token)) {
              TROUPE_LOG(warning, who(self),
                         "a ticket of the wrong size:"
                         " CAF carries the tensors");
              return;
            }
            auto c = self->state.cfg.roads->dial(t, self->state.cfg.member);
            if (!c) {
              TROUPE_LOG(warning, who(self), "no road to the ", side(forward),
                         " stage (", describe(c.error()),
                         "): CAF carries the tensors");
              return;
            }
            TROUPE_LOG(info, who(self), "tensors to the ", side(forward),
                       " stage take the ", to_string((*c)->kind()), " road");
            out.conn = std::move(*c);
          },
          [self, forward, call](caf::error& err) {
            TROUPE_LOG(warning, who(self), "no ticket for the road to the ",
                       side(forward), " stage (", describe(err),
                       "): CAF carries the tensors");
          });
}

} // namespace

void send_to_neighbour(stage_ptr self, bool forward, frame f) {
  auto& out = road_to(self, forward);
  const auto& to = neighbour(self, forward);
  if (out.conn && out.to == to) {
    auto id = ++out.next_id;
    auto op = forward ? road_op::activation : road_op::gradient;
    auto err = out.conn->send(op, id, f);
    if (!err) { // its acknowledgement comes by mail, after this
      out.unacked.emplace(id, std::move(f));
      ++self->state.road_tensors;
      return;
    }
    fall_back(self, forward, describe(err));
  }
  send_caf(self, forward, to, std::move(f));
}

void link_roads(stage_ptr self, std::function<void()> settled) {
  // Held by each ticket's handlers; runs when the last of them is gone.
  auto once = std::shared_ptr<std::function<void()>>(
      new std::function<void()>(std::move(settled)),
      [](std::function<void()>* f) {
        if (*f)
          (*f)();
        delete f;
      });
  link_road(self, true, once);
  link_road(self, false, once);
}

caf::result<std::string, uint16_t, std::string, std::string, std::string>
road_ticket(stage_ptr self, uint32_t rank) {
  auto& st = self->state;
  uint32_t before = 0, after = 0;
  bool has_before = neighbour_rank(self, false, before);
  bool has_after = neighbour_rank(self, true, after);
  if (!st.cfg.roads)
    return caf::make_error(errc::invalid_config,
                           who(self) + " has no road: CAF carries its tensors");
  if (!(has_before && rank == before) && !(has_after && rank == after))
    return caf::make_error(errc::not_a_member, who(self) + ": worker", rank,
                           "is not a neighbour of worker", st.cfg.member);
  auto t = st.cfg.roads->ticket_for(rank);
  return {t.host, t.road.port, t.road.machine, t.road.socket,
          secret_bytes(t.token)};
}

void on_road(stage_ptr self, std::shared_ptr<road_message> m) {
  auto& st = self->state;
  if (m->op == road_op::reply || m->op == road_op::failure) {
    for (auto* out : {&st.to_prev, &st.to_next})
      if (out->conn && out->conn == m->conn)
        out->unacked.erase(m->id);
    return;
  }
  bool from_before = m->op == road_op::activation;
  if (!from_before && m->op != road_op::gradient)
    return; // nothing else is sent to a stage
  uint32_t want = 0;
  auto from = m->conn->member();
  if (!neighbour_rank(self, !from_before, want) || from.kind != role::worker ||
      from.rank != want) {
    TROUPE_LOG_LIMITED(warning, who(self), "dropped ",
                       from_before ? "activations" : "a gradient", " from ",
                       to_string(from), " on its road, from ", m->conn->peer(),
                       ": not its neighbour; the"
                       " connection is closed");
    m->conn->close();
    return;
  }
  stage_tensor x;
  auto err = decode(m->bytes, x);
  // The acknowledgement goes once the bytes are read: it carries the
  // ring's release back.
  auto conn = m->conn;
  auto id = m->id;
  m.reset();
  if (auto e = conn->send(road_op::reply, id, bytes_view{}))
    TROUPE_LOG_LIMITED(warning, who(self),
                       "could not acknowledge a tensor: ", describe(e));
  if (err) {
    TROUPE_LOG_LIMITED(warning, who(self),
                       "dropped a tensor from its road: ", describe(err));
    return;
  }
  keep(self, from_before ? st.acts : st.grads, std::move(x),
       from_before ? "activations" : "a gradient");
}

void on_road_down(stage_ptr self, uint64_t serial) {
  for (bool forward : {true, false}) {
    auto& out = road_to(self, forward);
    if (out.conn && out.conn->serial() == serial)
      fall_back(self, forward, "connection lost");
  }
}

} // namespace troupe::stage_impl

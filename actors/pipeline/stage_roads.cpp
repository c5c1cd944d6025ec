// A stage process's roads: see the header.
#include "actors/pipeline/stage_roads.hpp"

#include <utility>

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>

#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

/// How long a stage's road gives a write before it fails the connection
/// (as a server's road: a neighbour that stopped reading).
constexpr uint32_t stage_send_timeout_ms = 2000;

} // namespace

caf::actor stage_roads::sink::target() {
  std::lock_guard<std::mutex> guard{mtx};
  return caf::actor_cast<caf::actor>(stage);
}

void stage_roads::sink::hand(road_message_ptr m) {
  if (m->op == road_op::activation || m->op == road_op::gradient)
    ++tensors;
  if (auto h = target()) // else dropped: the stage ended, its process too
    caf::anon_send(h, road_atom_v, std::move(m));
}

void stage_roads::sink::down(uint64_t serial) {
  if (auto h = target())
    caf::anon_send(h, road_down_atom_v, serial);
}

caf::expected<std::shared_ptr<stage_roads>>
stage_roads::listen(const std::string& host, const kv_settings& kv) {
  if (kv.road == road_kind::middleman)
    return caf::make_error(errc::invalid_config,
                           "--kv.road=middleman: stage tensors go over CAF");
  std::shared_ptr<stage_roads> out{new stage_roads};
  out->kv_ = kv;
  out->host_ = host;
  out->key_ = random_secret();
  out->keys_ = std::make_shared<road_keyring>();
  out->keys_->set(out->key_);
  out->sink_ = std::make_shared<sink>();
  auto to = out->sink_;
  auto l = road_listener::start(
      host, 0, stage_send_timeout_ms, kv.roads, out->keys_,
      [to](road_message_ptr m) { to->hand(std::move(m)); });
  if (!l)
    return l.error();
  out->listener_ = std::move(*l);
  return out;
}

stage_roads::~stage_roads() = default;

void stage_roads::deliver_to(const caf::actor& stage) {
  std::lock_guard<std::mutex> guard{sink_->mtx};
  sink_->stage = stage.address();
}

stage_ticket stage_roads::ticket_for(uint32_t rank) const {
  return {host_, listener_->info(),
          member_token(key_, member_id{role::worker, rank})};
}

caf::expected<road_conn_ptr> stage_roads::dial(const stage_ticket& t,
                                               uint32_t rank) const {
  auto to = sink_;
  return road_dial(
      t.host, t.road, kv_.road, kv_.ring_bytes, kv_.request_timeout_ms,
      kv_.roads, road_credential{member_id{role::worker, rank}, t.token},
      [to](road_message_ptr m) { to->hand(std::move(m)); },
      [to](uint64_t serial, const caf::error&) { to->down(serial); });
}

} // namespace troupe

// The fast road between pipeline stages: activations and input gradients
// ride a road (actors/road) instead of CAF's middleman. Each stage process
// listens on a road of its own, and a stage dials its neighbours': its
// activations go on the next stage's road (road_op::activation), its input
// gradients on the previous one's (road_op::gradient). Each tensor is
// answered with an empty reply, which carries the ring's releases back
// and tells the sender it arrived. CAF still carries the control messages
// (steps, commits, resets, evaluation) and any tensor while no road is up:
// --kv.road=middleman, a ticket or a dial that failed, a road that broke
// (the tensors it had not acknowledged then go again over CAF; a
// receiver keeps a tensor by its generation, step and micro-batch, so a
// second copy changes nothing).
//
// Trust (docs/trust.md). A stage's listener checks tokens under a key the
// stage made at start and never sends. A neighbour asks the stage actor,
// over CAF (mutual TLS, the actor the scheduler's view names), for a
// ticket: the road's address and the neighbour's own token under that key,
// member_token(key, worker rank). A connection is bound to the member its
// handshake proved (road_auth.hpp), and a stage takes activations only
// from its predecessor's rank and gradients only from its successor's.
// The shard servers' key and tokens play no part: a stage can speak as no
// other worker to them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/expected.hpp>

#include "actors/base/member_secret.hpp"
#include "actors/kv/kv_settings.hpp"
#include "actors/road/road.hpp"
#include "messages/membership.hpp"

namespace troupe {

/// What a stage gives a neighbour to dial its road with.
struct stage_ticket {
  std::string host;
  road_info road;
  secret token{};
};

/// One stage process's roads: its listener, and its dials to neighbours.
class stage_roads {
public:
  /// Listens on `host`, on a free port (and an abstract unix socket for
  /// neighbours on this machine), with a fresh key; roads as `kv` says
  /// (road kind, ring size, send timeout, polling). An error where
  /// kv.road is middleman or no listener could start.
  static caf::expected<std::shared_ptr<stage_roads>>
  listen(const std::string& host, const kv_settings& kv);
  ~stage_roads();
  stage_roads(const stage_roads&) = delete;
  stage_roads& operator=(const stage_roads&) = delete;

  /// Where what this process's roads read goes: (road_atom,
  /// road_message_ptr) to `stage`, and (road_down_atom, serial) when a
  /// road it dialled ends.
  void deliver_to(const caf::actor& stage);
  /// A ticket for worker `rank` to dial this road.
  stage_ticket ticket_for(uint32_t rank) const;
  /// Dials `t` as worker `rank` (the ticket's token proves it). Blocks up
  /// to road_dial_deadline_ms.
  caf::expected<road_conn_ptr> dial(const stage_ticket& t, uint32_t rank) const;
  /// Stage tensors the listener read, over the process's life (tests and
  /// benchmarks).
  uint64_t tensors_read() const { return sink_->tensors; }
  /// How long a ticket's request may take: the kv request timeout.
  uint32_t timeout_ms() const { return kv_.request_timeout_ms; }

private:
  /// Where the roads' reader threads hand what they read.
  struct sink {
    std::mutex mtx;
    caf::actor_addr stage;
    std::atomic<uint64_t> tensors{0};
    caf::actor target(); ///< the stage, if it still lives
    void hand(road_message_ptr m);
    void down(uint64_t serial);
  };
  stage_roads() = default;
  kv_settings kv_;
  std::string host_;
  secret key_{};
  std::shared_ptr<road_keyring> keys_;
  std::shared_ptr<sink> sink_;
  std::unique_ptr<road_listener> listener_;
};

} // namespace troupe

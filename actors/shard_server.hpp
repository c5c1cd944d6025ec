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
//
// After a view that lost a worker, the first update applied without it is
// reported to the scheduler as a "resumed" event.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/node_config.hpp"
#include "actors/road.hpp"
#include "actors/shard_store.hpp"
#include "messages/kv.hpp"
#include "messages/membership.hpp"

namespace troupe {

/// Where the answer to a request goes: CAF's response promise (middleman
/// road) or back on the fast-road connection the request came in on.
struct replier {
  caf::response_promise rp;
  road_message_ptr road;
  void deliver(const outbound& out);
  void deliver(const frame& f);
  void deliver(const caf::error& err);
  /// Who sent the request, for logs.
  std::string source() const;
};

struct shard_server_state {
  static inline const char* name = "shard-server";
  struct waiting_pull {
    pull_request req;
    replier to;
  };
  shard_store store;
  caf::actor scheduler;
  uint32_t rank = 0;
  bool joined = false;
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
};

using shard_server_actor = caf::stateful_actor<shard_server_state>;

/// Spawnable behavior of a shard server. `fn` is the update hook (the
/// training issue plugs optimizers in here).
caf::behavior shard_server(shard_server_actor* self, server_settings cfg,
                           caf::actor scheduler, update_fn fn);

} // namespace troupe

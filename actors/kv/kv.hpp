// The public, blocking face of the key-value store for plain C++ code:
// workers written as loops, tests, benchmarks. Actor code talks to the kv
// client actor directly (actors/kv/kv_client.hpp has its messages).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "actors/cluster/connect.hpp"
#include "actors/kv/kv_settings.hpp"
#include "messages/membership.hpp"
#include "messages/named_array.hpp"

namespace troupe {

/// Spawns a kv client that registers with `scheduler` as a worker.
caf::actor spawn_kv_client(caf::actor_system& sys, caf::actor scheduler,
                           kv_settings cfg);

/// Blocking calls on a kv client; one caller thread at a time, and the
/// object outlives every call (destroying it while a call waits in another
/// thread is undefined).
///
/// Clocks: a worker pushes clocks in order, one each, from resume_clock()
/// (0 on a first run): push(c) after push(c - 1). A push of a clock the
/// servers already hold for this rank is taken for a resend, acknowledged
/// and not added again (that is what makes resending safe), so a clock
/// pushed twice, or one below the servers', is not an error but is not
/// added either. In sync mode, pull(c) waits for round c - 1, which needs
/// this worker's push(c - 1).
class kv {
public:
  /// Spawns a kv client for this worker; it joins in the background.
  kv(caf::actor_system& sys, caf::actor scheduler, kv_settings cfg);
  ~kv();
  kv(const kv&) = delete;
  kv& operator=(const kv&) = delete;

  /// Declares `xs`; arrays this worker declares first take its values; all
  /// callers get the values in effect once initialised.
  caf::expected<std::vector<named_array>> init(std::vector<named_array> xs);

  /// Adds `xs` for `clock`; returns the lowest server version acked.
  caf::expected<uint64_t> push(uint64_t clock, std::vector<named_array> xs);

  /// Adds `xs` for `clock`, then reads `keys` at `clock + 1`: one round
  /// trip per server instead of two.
  caf::expected<std::vector<named_array>> push_pull(uint64_t clock,
                                                    std::vector<named_array> xs,
                                                    std::vector<uint64_t> keys);

  /// Reads `keys` as a worker at `clock`.
  caf::expected<std::vector<named_array>> pull(uint64_t clock,
                                               std::vector<uint64_t> keys);

  /// Waits until every live worker arrived at barrier `name`.
  caf::expected<uint64_t> barrier(const std::string& name,
                                  uint32_t timeout_ms = 60000);

  /// The clock to resume at: 0 on a first run; a worker restarted under
  /// its old rank carries on from the clock the servers hold for it (the
  /// smallest over the servers that hold slices).
  caf::expected<uint64_t> resume_clock();

  /// This worker is done: it leaves the cluster view now (call once the
  /// work is over, before the process exits).
  caf::error leave();

  /// This member cannot go on (`why`, for the event log): it leaves the view
  /// now, not done (its rank is free for another process), so that its exit
  /// reads as a departure, not a crash.
  caf::error leave(const std::string& why);

  /// This worker's rank and current view (waits until joined).
  caf::expected<std::pair<uint32_t, cluster_view>> view();

  /// The kv client actor, for actor code and pipelined requests.
  const caf::actor& handle() const { return client_; }

private:
  struct impl;
  std::unique_ptr<impl> impl_;
  caf::actor client_;
};

} // namespace troupe

// Internal to the kv client: what its parts share (views, sending,
// operations, resends: kv_client_*.cpp), i.e. the self pointer, a request
// to one server, readiness, and the functions one part calls in another.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/response_promise.hpp>
#include <caf/system_messages.hpp>

#include "actors/base/log.hpp"
#include "actors/kv/kv_client.hpp"
#include "messages/errors.hpp"

namespace troupe {

/// One operation spread over several servers: the first error wins.
struct kv_gather {
  std::function<void(caf::error)> on_error; // runs once, first failure
  size_t pending = 0;
  bool failed = false;
  void fail(caf::error err) {
    if (!failed) {
      failed = true;
      on_error(std::move(err));
    }
  }
};

namespace kv_internal {

using self_ptr = kv_client_actor*;
using arrays = std::vector<named_array>;
using gather = kv_gather;
using gather_ptr = std::shared_ptr<gather>;
using reply_fn = std::function<caf::error(bytes_view)>;
using keepalive = std::shared_ptr<const void>;
template <class T> using reply_to = std::function<void(caf::expected<T>)>;

inline std::string who(self_ptr self) {
  if (!self->state.joined)
    return "worker (joining)";
  return "worker " + std::to_string(self->state.rank);
}

inline std::chrono::milliseconds timeout_of(self_ptr self) {
  return std::chrono::milliseconds{self->state.cfg.request_timeout_ms};
}

/// A request to the scheduler that got no answer in time fails with CAF's
/// bare request_timeout; the caller learns what waited and for what
/// (`what`: "barrier 'start' ...") instead. Other errors pass unchanged.
inline caf::error scheduler_timeout(caf::error err, const std::string& what,
                                    std::chrono::milliseconds waited) {
  if (err != caf::sec::request_timeout)
    return err;
  return caf::make_error(errc::timeout, what +
                                            ": no answer from the "
                                            "scheduler within " +
                                            std::to_string(waited.count()) +
                                            " ms");
}

/// One request to one server: a small frame, or an outbound message that
/// may point into the caller's arrays.
struct kv_request {
  uint32_t rank;
  std::variant<frame, outbound> body;
  size_t reply_bytes = 0;             // expected reply size (pulls)
  road_landing_ptr landing = nullptr; // where a pull reply may land (tcp)
  size_t bytes() const {
    return body.index() == 0 ? std::get<0>(body).bytes.size()
                             : std::get<1>(body).bytes();
  }
  /// What it holds of the window: its own bytes or its reply's.
  size_t window_bytes() const { return std::max(bytes(), reply_bytes); }
  frame flat() const {
    return body.index() == 0 ? std::get<0>(body) : std::get<1>(body).flatten();
  }
};

/// `f` on the heap, for several callbacks to hold: copying a std::function
/// copies what it holds, and a reply holds a chain of them (with_resend's,
/// the caller's), one allocation each, per copy.
template <class F> std::shared_ptr<F> share(F f) {
  return std::make_shared<F>(std::move(f));
}

/// A fail callback that answers `rp` with the error.
inline std::function<void(caf::error)> fail_to(caf::response_promise rp) {
  return [rp](caf::error err) mutable { rp.deliver(std::move(err)); };
}

/// A reply callback that fulfils `rp`.
template <class T>
std::function<void(caf::expected<T>)> deliver_to(caf::response_promise rp) {
  return [rp](caf::expected<T> x) mutable {
    if (x)
      rp.deliver(std::move(*x));
    else
      rp.deliver(std::move(x.error()));
  };
}

// -- readiness (kv_client_views.cpp) ------------------------------------------

inline bool ready(self_ptr self) {
  // While operations a lost road failed wait out their grace (reroute),
  // later ones wait too: none may overtake them (a push for clock c + 1
  // reaching a server before its push for c is refused). So do they while
  // a road waits to be dialled again for what is in flight over CAF to
  // drain (redial): else a worker with requests always in flight, as a
  // pipelined one, would never let it.
  auto& st = self->state;
  return st.joined && st.connecting == 0 && st.rerouting.empty() &&
         std::none_of(st.redials.begin(), st.redials.end(),
                      [](const auto& r) { return r.second.holding(); });
}

/// 2: runs the operations that waited, once ready().
void flush_waiting(self_ptr self);

void start_tick(self_ptr self);

/// Runs `fn` now if ready(), else once it is. A `resend` (an operation a
/// dead server interrupted) was sent before any operation that waits, so
/// it waits ahead of them, behind the resends before it: else a push for
/// clock c + 1 held meanwhile would reach the server before c's resend.
template <class F>
void when_ready(self_ptr self, F fn, std::function<void(caf::error)> fail,
                bool resend = false) {
  if (ready(self)) {
    fn();
    return;
  }
  TROUPE_LOG(debug, who(self), "not ready (joined ", self->state.joined,
             ", connecting ", self->state.connecting, "): operation waits");
  auto& waiting = self->state.waiting;
  auto at = resend ? std::find_if(waiting.begin(), waiting.end(),
                                  [](const auto& w) { return !w.resend; })
                   : waiting.end();
  waiting.insert(at, kv_client_state::waiting_op{
                         std::chrono::steady_clock::now() + timeout_of(self),
                         std::move(fn), std::move(fail), resend});
  start_tick(self);
}

// -- views (kv_client_views.cpp) ----------------------------------------------

/// Registers with the scheduler as a worker (1, or 4 if that fails).
void join(self_ptr self);

/// 3: takes a newer view: servers to connect, slices' places, departures.
void apply_view(self_ptr self, cluster_view v);

/// Opens the fast road to server `n` if allowed; CAF carries its frames
/// otherwise.
void dial_road(self_ptr self, const node_info& n);

/// 5: reconnects to server `rank` if the view still names it and we have
/// no connection to it.
void reconnect(self_ptr self, uint32_t rank);

/// The one down handler: the scheduler (4) or a server.
void on_down(self_ptr self, const caf::down_msg& dm);

/// The scheduler's word of a "lost" event `f`: ends the client with
/// values_lost where cfg.ends_on_loss, else logs it once.
void on_loss(self_ptr self, const frame& f);

/// (leave_atom, dead, keep, why) from the scheduler: a pipeline stage whose
/// replica lost stage worker `dead`, cut at `keep`
/// (kv_settings::stage_group). If we pushed a clock from `keep` on, answers
/// true and stops with `why` (peer_down): our process ends and is
/// restarted, and our cut joins `dead`'s. Else answers false and fences
/// those clocks until `dead` is back. From anyone else it is refused.
caf::result<bool> told_to_leave(self_ptr self, uint32_t dead, uint64_t keep,
                                const std::string& why);

/// Fails with not_connected if a slice of `key` (`n` floats) has no server
/// in our view: none is left, or the view has not placed it yet.
caf::error check_placed(self_ptr self, uint64_t key, uint64_t n);

/// Fails if an array of `xs` is undeclared, of another size, or unplaced,
/// or if two name one key.
caf::error check_arrays(self_ptr self, const arrays& xs);

/// unknown_key: `key` was never declared, in words a worker's author reads.
caf::error never_declared(uint64_t key);

/// A key that two arrays of `xs` name, if any.
std::optional<uint64_t> key_twice(const arrays& xs);

/// The slices of `xs`, grouped by owning server: views into `xs`.
std::map<uint32_t, std::vector<slice_view>> slices_by_server(self_ptr self,
                                                             const arrays& xs);

// -- sending (kv_client_sending.cpp) ------------------------------------------

/// Remembers that `g` waits on server `rank`; forgets finished operations.
void track(self_ptr self, uint32_t rank, const gather_ptr& g);

/// Sends each request to its server (road or CAF); `on_reply` digests each
/// reply; `done` runs once all replied without error. `keep` holds what the
/// requests point into until they are sent. Defined for init_atom,
/// push_atom and pull_atom.
template <class Atom>
void scatter(self_ptr self, Atom atom, road_op op, gather_ptr g,
             std::vector<kv_request> msgs, reply_fn on_reply,
             std::function<void()> done, keepalive keep = nullptr);

/// A reply (or failure) from a road.
void on_road_message(self_ptr self, uint32_t rank, const road_message& m);

/// Sends the calls deferred on a road reader's thread, in order.
void send_deferred(self_ptr self);

/// Closes the road to `rank` and fails what waited on it.
void drop_road(self_ptr self, uint32_t rank, const caf::error& why);

/// Forgets what was in flight to server `rank` over CAF (it went down:
/// those requests fail or never complete) and lets what waited go, to fail
/// or to reach a successor.
void reset_caf_window(self_ptr self, uint32_t rank);

/// The sweep (tick_atom): deferred writes, lost frames, deadlines.
void on_tick(self_ptr self);

// -- operations (kv_client_operations.cpp) ------------------------------------

void do_init(self_ptr self, std::shared_ptr<const arrays> xs,
             uint32_t clocks_per_step, reply_to<arrays> reply);

void do_push(self_ptr self, uint64_t clock, std::shared_ptr<arrays> keep,
             std::function<void(caf::expected<uint64_t>)> reply);

void do_pull(self_ptr self, uint64_t clock, const std::vector<uint64_t>& keys,
             std::function<void(caf::expected<arrays>)> reply);

/// The clock below which every server acknowledged each of our pushes
/// (clocks this process never pushed count: they were before it began,
/// and a cut or the process before settled them).
inline uint64_t acked_through(self_ptr self) {
  auto& st = self->state;
  return st.unacked.empty() ? st.acked_top : *st.unacked.begin();
}

/// Push, then pull at the next clock, sent together.
void do_push_pull(self_ptr self, uint64_t clock, std::shared_ptr<arrays> keep,
                  const std::vector<uint64_t>& keys,
                  std::function<void(caf::expected<arrays>)> reply);

/// The clock this worker resumes at.
void do_clock(self_ptr self,
              std::function<void(caf::expected<uint64_t>)> reply);

/// Sends our Init of the keys others initialise while our init is not
/// done: a worker left, and it may have been their initialiser.
void init_in_place_of_the_gone(self_ptr self,
                               const kv_client_state::open_init& open);

// -- resends (kv_client_resends.cpp) ------------------------------------------

/// Most resends of one operation.
constexpr int max_resends = 3;

/// Runs `attempt`, and again where a server died or could not replicate
/// it. Defined for arrays and uint64_t.
template <class T>
void with_resend(self_ptr self, std::function<void(reply_to<T>)> attempt,
                 reply_to<T> done, int left = max_resends, uint64_t seq = 0);

/// Resends whose view has come, or whose pause is over; with `all`, every
/// one.
void run_resends(self_ptr self, bool all = false);

/// Server `rank`'s fast road ended: what it failed waits for reroute().
void road_lost(self_ptr self, uint32_t rank, const caf::error& why);

/// The grace after server `rank`'s road ended is over.
void reroute(self_ptr self, uint32_t rank);

/// Dials server `rank`'s fast road again, once nothing is in flight over
/// CAF to it.
void redial(self_ptr self, uint32_t rank);

/// The timer `ticket` of a redial of server `rank` is up.
void on_redial_timer(self_ptr self, uint32_t rank, uint64_t ticket);

/// True if server `rank`'s road is to be dialled once nothing to it is in
/// flight over CAF.
bool redial_waits_for_caf(self_ptr self, uint32_t rank);

/// Drops the redial planned for server `rank`, if any.
void forget_redial(self_ptr self, uint32_t rank);

} // namespace kv_internal
} // namespace troupe

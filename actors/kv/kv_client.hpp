// The worker-side kv client: registers as a worker, follows the cluster
// view, and turns whole-array init/push/pull into one message per server
// (cut into parts only above kv.max-message-bytes).
//
// Messages:
//   (init_atom, vector<named_array>)          -> vector<named_array>
//       declares the arrays; the first declarer of a key initialises it,
//       every caller gets the values in effect
//   (init_atom, vector<named_array>, uint32_t clocks_per_step)
//                                              -> vector<named_array>
//       the same for a worker that pushes each step as this many clocks
//       (overlapped steps: one per block); the scheduler refuses one whose
//       count differs from the other live workers' and cuts sync
//       checkpoints between steps
//   (push_atom, uint64_t clock, vector<named_array>) -> uint64_t version
//       adds the arrays (gradients) for `clock`; reaches every server
//   (push_atom, uint64_t clock, vector<named_array>, vector<uint64_t> keys)
//                                              -> vector<named_array>
//       push for `clock`, then pull `keys` at clock + 1, sent together (one
//       round trip per server: a training step)
//   (pull_atom, uint64_t clock, vector<uint64_t> keys)
//                                              -> vector<named_array>
//       reads as a worker at `clock` (waits as the mode says)
//   (barrier_atom, string name, uint32_t timeout_ms) -> uint64_t epoch
//   (view_atom)                                -> uint32_t rank, frame view
//   (leave_atom)                               -> uint64_t epoch
//       this worker is done: it leaves the view now, so that its exit is
//       a departure, not a crash (stop the client after)
//   (fault_atom, uint64_t clock)                [from this process only]
//       fault injection: the process dies in the middle of its push of
//       `clock`, once its first server acknowledged its parts
//   (leave_atom, uint32_t dead, uint64_t keep, string why) -> bool
//                                              [from the scheduler only]
//       a pipeline stage whose replica lost stage worker `dead`, cut at
//       `keep`: if we pushed a clock from `keep` on, true and the client
//       stops (peer_down); else false, and we push none of those clocks
//       until `dead` is back (kv_settings::stage_group)
//   (clock_atom)                               -> uint64_t clock
//       the clock to resume at: 0 on a first run; for a restarted worker
//       the smallest clock the servers holding slices have for its rank
//
// States and transitions (numbers cited in the code):
//   joining -1-> connecting    1: RegisterReply: rank and view
//   connecting -2-> ready      2: every server of the view connected
//   ready -3-> connecting      3: newer view with new servers
//   ready -5-> ready           5: a server's connection broke, or could
//                                 not be made, while the view still names
//                                 it (cut off from us alone, a heartbeat
//                                 missed under load): reconnect to it after
//                                 a pause, again while it fails and the view
//                                 names it, and run the resends waiting for
//                                 it once it is back; other servers' work
//                                 goes on meanwhile
//   any -4-> stopped           4: scheduler down, or registration failed
//   Every request gets an answer: an operation that waits for readiness
//   fails after kv.request-timeout-ms (errc::not_connected), and stopping
//   (4) fails everything outstanding, so callers need no timeouts of
//   their own.
//   A server down fails the operations waiting on it at once
//   (errc::peer_down); a silent one within kv.request-timeout-ms
//   (errc::timeout). Push, pull and push_pull interrupted by a dead server
//   are resent (up to 3 times) once a newer view has placed its slices on
//   its backup; servers drop the duplicates by (worker, clock, part). One
//   a live server applied but could not replicate (errc::unreplicated:
//   its backup could not be told in time that it may lack it) is resent so
//   too, or after an eighth of kv.request-timeout-ms to the same server if
//   no view came by then and no operation asked for before it still waits
//   for one. Resends go in the order their operations were asked for.
//
// Roads: init, push and pull frames take the server's fast road
// (actors/road/road.hpp) when --kv.road allows and the connection is up, else
// CAF. A lost road fails what waited on it (errc::peer_down) and later
// operations to its server use CAF. If CAF still reaches the server 100 ms
// on (only the road broke), the operations the loss failed are resent
// over CAF then (servers drop the duplicates of pushes they had), instead
// of waiting for a view that need not come, and the road is dialled again
// a second later, once nothing to that server is in flight over CAF (after
// 3 such losses it is not: CAF carries on); else they wait for the view as
// for any dead server. Operations that come during those 100 ms wait, so
// that none overtakes those the loss failed. --fault.cut-road-after ends a
// road on purpose. At most
// kv.window-bytes of frames are in flight per road, and over CAF at most 4 x
// kv.max-message-bytes (within the window); more wait in order. A pull reply on
// a tcp road lands in place: its large slices go from the socket straight into
// the arrays being pulled (actors/kv/kv_pull.hpp). A pull takes the memory of a
// finished push's arrays of the same key when there is one (`spare`), not fresh
// memory. With kv.resend-ms > 0, a road request without a reply after that long
// is sent again (a lost frame; servers drop duplicates). --fault.drop-pushes /
// --fault.duplicate-pushes lose or double push frames on purpose, to test
// exactly that.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/kv/kv_settings.hpp"
#include "actors/road/road.hpp"
#include "messages/kv.hpp"
#include "messages/membership.hpp"
#include "messages/named_array.hpp"

namespace troupe {

/// One operation spread over several servers (defined in
/// kv_client_internal.hpp).
struct kv_gather;

/// A request on a road waiting for its reply.
struct road_call {
  uint32_t rank = 0;
  size_t bytes = 0;
  std::weak_ptr<kv_gather> g;
  std::function<void(bytes_view)> on_reply;
  std::chrono::steady_clock::time_point deadline;
  /// Sends the same frame again (same id: the server drops a duplicate
  /// push, and we take the first reply); due at resend_at if
  /// kv.resend-ms > 0.
  std::function<caf::error()> send;
  std::chrono::steady_clock::time_point resend_at;
};

/// Bytes sent to one server and not yet answered, and the requests that
/// wait behind them, in order.
struct send_window {
  size_t in_flight = 0;
  std::deque<std::pair<size_t, std::function<void()>>> queued;
  /// New (client-wide) at each creation and reset: a reply to a request
  /// sent before holds no bytes of this window.
  uint64_t generation = 0;
  /// True if a request of `bytes` may go now under `limit`: nothing waits
  /// before it, and it fits (one always goes when none is in flight).
  bool admits(size_t bytes, size_t limit) const {
    return queued.empty() && fits(bytes, limit);
  }
  /// True if `bytes` more stay within `limit`, or none are in flight.
  bool fits(size_t bytes, size_t limit) const {
    return in_flight == 0 || in_flight + bytes <= limit;
  }
};

/// The road to one server and its window.
struct road_link : send_window {
  road_conn_ptr conn;
};

struct kv_client_state {
  static inline const char* name = "kv-client";
  kv_settings cfg;
  caf::actor scheduler;
  uint32_t rank = 0;
  bool joined = false;
  /// What we prove ourselves with on roads (our token, from our
  /// RegisterReply); none: no roads (the scheduler gave no token).
  std::optional<road_credential> road_id;
  /// Until when a full cluster is asked again for a place (join()).
  std::chrono::steady_clock::time_point join_deadline;
  cluster_view view;
  std::map<uint64_t, uint64_t> sizes; // declared arrays, floats
  std::map<slice_id, uint32_t> owner; // slice -> server rank
  std::map<uint32_t, caf::actor> servers;
  size_t connecting = 0;
  struct waiting_op {
    std::chrono::steady_clock::time_point deadline;
    std::function<void()> run;
    std::function<void(caf::error)> fail;
    bool resend = false; // sent once before: ahead of the others
  };
  std::vector<waiting_op> waiting; // ops until ready, failed at deadline
  struct resend {
    uint64_t after_epoch; // runs in a view newer than this
    std::chrono::steady_clock::time_point deadline;
    std::function<void()> run;
    std::function<void(caf::error)> fail;
    /// Also runs then, in the same view: a live server did not
    /// acknowledge (errc::unreplicated); never for a dead one.
    std::optional<std::chrono::steady_clock::time_point> retry_at;
    /// The operation's place in the order callers asked for them: resends
    /// go in that order, whatever order they failed in (a server that
    /// gets clock c + 1 before c refuses it).
    uint64_t seq = 0;
  };
  /// Operations a dead server interrupted, or a live one could not
  /// replicate.
  std::vector<resend> resends;
  uint64_t resend_seq = 0; // the last resend::seq given
  /// Per server: operations its lost road failed, parked for the grace in
  /// which CAF would hear that the server died (then resent, or moved to
  /// `resends`).
  std::map<uint32_t, std::vector<resend>> rerouting;
  std::map<uint32_t, uint32_t> road_losses; // per server, its road alone
  /// A server's road due to be dialled again (kv_client_resends.cpp:
  /// redial).
  struct redial_plan {
    uint64_t ticket = 0; // of the one timer that counts; others are stale
    enum class stage : uint8_t {
      due,     // its timer runs: nothing looked at yet
      holding, // operations wait for CAF to drain (ready())
      polling, // a hold ran out: a gap in CAF's traffic dials, nothing held
    } at = stage::due;
    bool holding() const { return at == stage::holding; }
  };
  std::map<uint32_t, redial_plan> redials;
  uint64_t redial_tickets = 0; // the last ticket given out
  bool stopping = false;       // stop() runs: fail, never resend
  /// apply_view fails the operations of departed servers: their resends
  /// wait in `resends` behind those parked before, in order.
  bool failing_departed = false;
  // Operations waiting on a server, failed at once if it goes down.
  std::vector<std::pair<uint32_t, std::weak_ptr<kv_gather>>> inflight;
  std::map<uint32_t, road_link> roads; // server rank -> its fast road
  /// Requests to each server over CAF: a burst of large messages would
  /// hold the middleman's one thread for seconds, and peers took this node
  /// for dead (most likely no heartbeat got through meanwhile).
  std::map<uint32_t, send_window> caf_windows;
  uint64_t window_generations = 0;     // the last generation given out
  std::map<uint64_t, road_call> calls; // by request id
  uint64_t next_call = 1;
  /// Calls whose first write waits for this actor to leave a road reader's
  /// thread (a write there could block on the very peer that waits for
  /// that thread to read): sent on (road_atom).
  std::vector<uint64_t> deferred_calls;
  /// Our pushes not yet acknowledged by every server, by clock, and one
  /// past the highest that was: what Push and Pull carry as `acked`
  /// (acked_through, docs/atomic-pushes.md).
  std::set<uint64_t> unacked;
  uint64_t acked_top = 0;
  bool ticking = false;       // a timeout sweep is scheduled
  std::mt19937_64 faults;     // draws of --fault.drop-pushes / duplicate-pushes
  uint64_t road_requests = 0; // sent on roads, for --fault.cut-road-after
  /// Fault injection, armed by (fault_atom, clock): the push of this clock
  /// goes to the view's first server alone, and once it acknowledged its
  /// parts the process kills itself (a worker dead in the middle of a
  /// push). UINT64_MAX = off.
  uint64_t kill_in_push = UINT64_MAX;
  /// One past the highest clock a push of ours began for.
  uint64_t pushed_top = 0;
  /// A pipeline stage whose replica lost stage worker `fence_rank` with
  /// its clocks from `push_fence` not on every server: our pushes of those
  /// clocks fail until a view names that rank again (its cut is in force
  /// then). UINT64_MAX = none.
  uint64_t push_fence = UINT64_MAX;
  uint32_t fence_rank = 0;
  /// An init from the scheduler's answer to its declaration until it is
  /// done (its own Inits on their way, then the pull after them): its
  /// arrays, and the keys among them we initialise ourselves.
  struct open_init {
    std::shared_ptr<const std::vector<named_array>> arrays;
    std::vector<uint64_t> initialising;
  };
  /// The inits open now, by serial (several may be: init calls from
  /// several senders).
  std::map<uint64_t, open_init> open_inits;
  uint64_t next_init = 1;
  /// Runs the copies of large frames (kv.helper-threads).
  loop_fn loop = run_serially;
  /// The arrays of pushes, until only this list holds them (their frames
  /// are gone); then their memory becomes `spare`.
  std::vector<std::shared_ptr<std::vector<named_array>>> pushed;
  /// Memory for the values of the next pull of a key, full size (stale
  /// values, all overwritten): a pull then takes no fresh memory, and
  /// replies that land in place (tcp) need no zero fill. One per key, so
  /// the client keeps at most one extra copy of the arrays pushed.
  std::map<uint64_t, std::vector<float>> spare;
  ~kv_client_state();
};

/// Puts resends in the order their operations were asked for (`seq`).
void order_resends(std::vector<kv_client_state::resend>& xs);

/// Takes out of `parked` the resends to run now, in the order their
/// operations were asked for: with `all`, every one; else those parked in
/// a view older than `epoch`, and those whose pause (`retry_at`) is over
/// at `now`, unless one asked for before them stays parked (sent first,
/// such a one could reach the slices' next server before that one, a
/// clock skipped there).
std::vector<kv_client_state::resend>
take_due_resends(std::vector<kv_client_state::resend>& parked, uint64_t epoch,
                 std::chrono::steady_clock::time_point now, bool all);

using kv_client_actor = caf::stateful_actor<kv_client_state>;

/// The kv client runs on the thread its work arrives on (a road reader, a
/// blocking caller: run_here.hpp) for replies and pushes below this size;
/// larger ones go to the scheduler, where their copies overlap the next
/// read or write.
constexpr size_t run_here_max_bytes = 64 * 1024;

/// Spawnable behavior of a kv client.
caf::behavior kv_client(kv_client_actor* self, kv_settings cfg,
                        caf::actor scheduler);

} // namespace troupe

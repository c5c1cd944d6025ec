// The kv client's resends: what a dead server interrupted (or a live one
// could not replicate) sent again, in the order asked for, once a view
// places it; and what a lost road failed, rerouted over CAF until a redial.
#include <algorithm>
#include <chrono>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "actors/base/log.hpp"
#include "actors/kv/kv_client_internal.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

void order_resends(std::vector<kv_client_state::resend>& xs) {
  std::stable_sort(xs.begin(), xs.end(),
                   [](const auto& x, const auto& y) { return x.seq < y.seq; });
}

std::vector<kv_client_state::resend>
take_due_resends(std::vector<kv_client_state::resend>& parked, uint64_t epoch,
                 std::chrono::steady_clock::time_point now, bool all) {
  order_resends(parked);
  std::vector<kv_client_state::resend> due;
  bool behind = false; // one asked for before stays parked
  for (auto i = parked.begin(); i != parked.end();)
    if (all || epoch > i->after_epoch ||
        (!behind && i->retry_at && *i->retry_at <= now)) {
      due.push_back(std::move(*i));
      i = parked.erase(i);
    } else {
      behind = true;
      ++i;
    }
  return due;
}

namespace kv_internal {

// -- resending after a server died --------------------------------------------

namespace {

/// Runs `again` (a resend of an operation first sent in view `epoch`) once
/// ready if a newer view has come; else parks it until one comes, or until
/// `retry_at` (run_resends). `fail` answers it if neither comes in time.
template <class F>
void resend_when_due(
    self_ptr self, F again, std::function<void(caf::error)> fail,
    uint64_t epoch,
    std::optional<std::chrono::steady_clock::time_point> retry_at,
    uint64_t seq) {
  auto& st = self->state;
  if (st.view.epoch > epoch && !st.failing_departed) {
    when_ready(self, std::move(again), std::move(fail), true);
    return;
  }
  st.resends.push_back(kv_client_state::resend{
      epoch, std::chrono::steady_clock::now() + timeout_of(self),
      std::move(again), std::move(fail), retry_at, seq});
  start_tick(self);
}

} // namespace

/// Runs `attempt`; if it fails because a server died (peer_down, or
/// not_connected: its handle is gone while the view still names it), runs
/// it again once a newer view placed that server's slices elsewhere (on its
/// backup, which holds their replicas); if a live server could not
/// replicate it (unreplicated), then too, or after a pause (run_resends).
/// Pushes carry (worker, clock, part), so servers drop what they had
/// already: resending is safe. `seq`: the operation's place in the order
/// of resends (0: a new operation, given the next).
template <class T>
void with_resend(self_ptr self, std::function<void(reply_to<T>)> attempt,
                 reply_to<T> done, int left, uint64_t seq) {
  auto epoch = self->state.view.epoch;
  if (seq == 0)
    seq = ++self->state.resend_seq;
  auto tries = share(std::move(attempt));
  auto answer = share(std::move(done));
  (*tries)([self, tries, answer, left, epoch, seq](caf::expected<T> r) {
    // No server at all in our view: nowhere to resend to.
    bool nowhere = self->state.view.servers.empty();
    if (r || left == 0 || nowhere || self->state.stopping ||
        (r.error() != errc::peer_down && r.error() != errc::not_connected &&
         r.error() != errc::unreplicated)) {
      (*answer)(std::move(r));
      return;
    }
    // A live server's: resent to it after a pause if no view comes first
    // (it may be the scheduler that was slow to tell its backup).
    std::optional<std::chrono::steady_clock::time_point> retry_at;
    if (r.error() == errc::unreplicated)
      retry_at = std::chrono::steady_clock::now() + timeout_of(self) / 8;
    TROUPE_LOG(info, who(self), "a server ",
               retry_at ? "could not replicate an operation" : "went down",
               " mid-request (", describe(r.error()), "): resending once the",
               " view changes", retry_at ? ", or after a pause" : "");
    // If the new view has no place for the slices (no server left), the
    // caller hears of the death, not of the empty view.
    auto first = r.error();
    auto again = [self, tries, answer, left, first, seq] {
      with_resend<T>(
          self, *tries,
          [answer, first](caf::expected<T> x) {
            if (!x && x.error() == errc::not_connected)
              (*answer)(first);
            else
              (*answer)(std::move(x));
          },
          left - 1, seq);
    };
    auto fail = [answer](caf::error err) { (*answer)(std::move(err)); };
    resend_when_due(self, std::move(again), std::move(fail), epoch, retry_at,
                    seq);
  });
}

template void with_resend<arrays>(self_ptr self,
                                  std::function<void(reply_to<arrays>)> attempt,
                                  reply_to<arrays> done, int left,
                                  uint64_t seq);
template void
with_resend<uint64_t>(self_ptr self,
                      std::function<void(reply_to<uint64_t>)> attempt,
                      reply_to<uint64_t> done, int left, uint64_t seq);

/// Resends whose view has come, or whose pause after a live server's
/// errc::unreplicated is over; with `all`, every one, its view come or
/// not: a server it waited for is back (5), and one whose server is still
/// gone fails again and waits anew.
void run_resends(self_ptr self, bool all) {
  auto& st = self->state;
  auto due = take_due_resends(st.resends, st.view.epoch,
                              std::chrono::steady_clock::now(), all);
  for (auto& r : due)
    when_ready(self, std::move(r.run), std::move(r.fail), true);
}

// -- rerouting after a lost road ----------------------------------------------

/// How long operations a lost road failed wait before they are resent over
/// CAF: time for CAF to hear of a server that died with its road.
constexpr std::chrono::milliseconds road_reroute_grace{100};
/// How long after such a loss the road is dialled again, and after how
/// many losses of one server's road it is not: CAF carries on.
constexpr std::chrono::milliseconds road_redial_after{1000};
constexpr uint32_t max_road_losses = 3;

/// Drops the redial planned for server `rank`, if any: its timers go
/// stale, and operations its hold kept wait no more (while apply_view
/// fails a departed server's operations, it lets them go itself, after
/// those operations' resends).
void forget_redial(self_ptr self, uint32_t rank) {
  auto i = self->state.redials.find(rank);
  if (i == self->state.redials.end())
    return;
  bool held = i->second.holding();
  self->state.redials.erase(i);
  if (held && !self->state.failing_departed)
    flush_waiting(self);
}

namespace {

/// Plans redial(rank) `after` from now; an earlier timer goes stale.
void plan_redial(self_ptr self, uint32_t rank,
                 std::chrono::milliseconds after) {
  auto ticket = ++self->state.redial_tickets;
  self->state.redials[rank].ticket = ticket;
  self->delayed_send(self, after, redial_atom_v, rank, ticket);
}

} // namespace

/// True if server `rank`'s road is to be dialled once nothing to it is in
/// flight over CAF: it holds operations for that, or looks for the gap.
bool redial_waits_for_caf(self_ptr self, uint32_t rank) {
  auto i = self->state.redials.find(rank);
  return i != self->state.redials.end() &&
         i->second.at != kv_client_state::redial_plan::stage::due;
}

/// Server `rank`'s fast road ended. What the loss failed waits to be
/// resent in a view without that server; if only the road broke, no such
/// view comes. Those operations wait apart for `road_reroute_grace`, in
/// which CAF hears of a server that died with its road, then reroute()
/// resends them over CAF, or leaves them to wait for the view.
void road_lost(self_ptr self, uint32_t rank, const caf::error& why) {
  auto& st = self->state;
  auto before = st.resends.size();
  forget_redial(self, rank);  // reroute() plans one anew if the server lives
  drop_road(self, rank, why); // fails its calls: with_resend parks them
  auto& mine = st.rerouting[rank]; // maybe none: reroute() redials anyway
  auto from = st.resends.begin() + static_cast<std::ptrdiff_t>(before);
  std::move(from, st.resends.end(), std::back_inserter(mine));
  st.resends.erase(from, st.resends.end());
  self->delayed_send(self, road_reroute_grace, reroute_atom_v, rank);
}

/// The grace after server `rank`'s road ended is over: if CAF still holds
/// the server (it lives; only its road broke), its parked operations are
/// resent now, over CAF, and the road is dialled again road_redial_after
/// on; else they wait for the view like the others.
void reroute(self_ptr self, uint32_t rank) {
  auto& st = self->state;
  auto i = st.rerouting.find(rank);
  if (i == st.rerouting.end())
    return;
  auto due = std::move(i->second);
  st.rerouting.erase(i);
  if (st.stopping)
    return; // stop() failed them
  if (st.servers.count(rank) != 0) {
    auto losses = ++st.road_losses[rank];
    TROUPE_LOG(info, who(self), "only the fast road to server ", rank,
               " broke (CAF still reaches it): resending ", due.size(),
               " operations over CAF");
    order_resends(due);
    for (auto& r : due) // in order, before the operations held meanwhile
      r.run();
    if (losses < max_road_losses)
      plan_redial(self, rank, road_redial_after);
    else
      TROUPE_LOG(warning, who(self), "the fast road to server ", rank,
                 " broke ", losses, " times: CAF carries its frames from now",
                 " on");
  } else {
    // The server is gone after all: they wait for the view with the
    // others, before them (they failed first).
    st.resends.insert(st.resends.begin(), std::make_move_iterator(due.begin()),
                      std::make_move_iterator(due.end()));
    run_resends(self); // the view may have come meanwhile
    start_tick(self);
  }
  flush_waiting(self);
}

/// Dials server `rank`'s fast road again, after it broke while the server
/// lived on: while the view names the server and no other road to it came
/// meanwhile. A request on the new road must not overtake one still on
/// CAF. If any to that server is in flight there, later operations wait
/// (ready() is false), and the last reply over CAF calls this again: so a
/// worker that always has requests in flight gets its road back. If they
/// have not drained after road_reroute_grace (a request that waits for a
/// later one of ours, as a pull ahead of its push in sync mode, or a
/// round held up by another worker), the operations go on, holding
/// nothing from then on: the next reply that leaves nothing in flight
/// over CAF dials (as does a look every road_reroute_grace). One dial: if
/// it fails, CAF carries on.
void redial(self_ptr self, uint32_t rank) {
  auto& st = self->state;
  auto plan = st.redials.find(rank);
  if (plan == st.redials.end())
    return; // dialled, or forgotten
  auto n = std::find_if(st.view.servers.begin(), st.view.servers.end(),
                        [rank](const node_info& x) { return x.rank == rank; });
  if (st.stopping || st.roads.count(rank) != 0 || st.servers.count(rank) == 0 ||
      n == st.view.servers.end()) {
    forget_redial(self, rank);
    return;
  }
  auto w = st.caf_windows.find(rank);
  if (w != st.caf_windows.end() &&
      (w->second.in_flight > 0 || !w->second.queued.empty())) {
    auto& p = plan->second;
    using stage = kv_client_state::redial_plan::stage;
    if (p.at == stage::holding) { // the hold ran out
      TROUPE_LOG(info, who(self), "requests to server ", rank,
                 " over CAF did not drain in ", road_reroute_grace.count(),
                 " ms: its road waits for a moment with none in flight");
      p.at = stage::polling;
      flush_waiting(self);
    } else if (p.at == stage::due) {
      TROUPE_LOG(info, who(self), "the road to server ", rank,
                 " is dialled again once what is in flight there over CAF",
                 " drains; operations wait until then");
      p.at = stage::holding;
    }
    plan_redial(self, rank, road_reroute_grace);
    return;
  }
  bool held = plan->second.holding();
  st.redials.erase(plan); // its timers go stale
  dial_road(self, *n);
  if (st.roads.count(rank) != 0)
    TROUPE_LOG(info, who(self), "fast road to server ", rank, " open again");
  if (held) // what the hold kept takes the new road
    flush_waiting(self);
}

/// The timer `ticket` of a redial of server `rank` is up; stale ones (the
/// road came back, broke again, or another timer took over) do nothing.
void on_redial_timer(self_ptr self, uint32_t rank, uint64_t ticket) {
  auto i = self->state.redials.find(rank);
  if (i != self->state.redials.end() && i->second.ticket == ticket)
    redial(self, rank);
}

} // namespace kv_internal
} // namespace troupe

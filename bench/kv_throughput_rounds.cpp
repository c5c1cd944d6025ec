// kv_throughput's timed rounds as the cluster's one worker: push+pull of
// one key one at a time, and small pairs with several requests in flight;
// every pull is checked before its round counts.
#include <sys/resource.h>

#include <algorithm>
#include <deque>
#include <optional>

#include <caf/scoped_actor.hpp>

#include "actors/road/road.hpp"
#include "actors/road/run_here.hpp"
#include "bench/kv_throughput.hpp"
#include "messages/type_ids.hpp"

namespace troupe::bench::kv_throughput {

namespace {

// -- one round at a time ------------------------------------------------------

/// `{key, values}` as the one array of a push, with a single copy of values.
std::vector<named_array> one_array(uint64_t key,
                                   const std::vector<float>& values) {
  std::vector<named_array> xs(1);
  xs[0].key = key;
  xs[0].values = values;
  return xs;
}

/// Ok if `got` is the one array `key` of `floats` values, all `expect`.
caf::error check_values(const std::vector<named_array>& got, uint64_t key,
                        size_t floats, float expect) {
  if (got.size() != 1 || got[0].key != key || got[0].values.size() != floats)
    return caf::make_error(errc::bad_shape, "pulled other arrays than key", key,
                           "of size", uint64_t{floats});
  auto& v = got[0].values;
  auto i = std::find_if(v.begin(), v.end(),
                        [expect](float x) { return x != expect; });
  if (i != v.end())
    return caf::make_error(errc::bad_shape, "key", key, "element",
                           static_cast<uint64_t>(i - v.begin()), "is",
                           double{*i}, "expected", double{expect});
  return caf::none;
}

/// CPU seconds this process has used, all its threads.
double process_cpu_seconds() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  auto secs = [](const timeval& t) { return t.tv_sec + 1e-6 * t.tv_usec; };
  return secs(r.ru_utime) + secs(r.ru_stime);
}

/// What one push+pull took.
struct round_time {
  double seconds = 0;      // push and pull
  double pull_seconds = 0; // the pull alone (two requests only)
  double pull_cpu = 0;     // this process's CPU seconds meanwhile
};

/// Pushes ones to `key` at the next clock, then pulls at the clock after
/// (readable then in sync and async mode): as two requests, or `batched`
/// as one per server (kv::push_pull). Checks the pull and returns what
/// push and pull took.
caf::expected<round_time> push_pull_once(session& s, uint64_t key,
                                         const std::vector<float>& ones,
                                         bool batched) {
  auto xs = one_array(key, ones); // the caller's copy, not timed
  auto t0 = steady::now();
  round_time out;
  caf::expected<std::vector<named_array>> got{caf::error{}};
  if (batched) {
    got = s.store.push_pull(s.next_clock++, std::move(xs), {key});
  } else {
    auto acked = s.store.push(s.next_clock++, std::move(xs));
    if (!acked)
      return std::move(acked.error());
    auto t1 = steady::now();
    auto cpu0 = process_cpu_seconds();
    got = s.store.pull(s.next_clock, {key});
    out.pull_cpu = process_cpu_seconds() - cpu0;
    out.pull_seconds = since(t1);
  }
  out.seconds = since(t0);
  if (!got)
    return std::move(got.error());
  if (auto err = check_values(*got, key, ones.size(), ++s.pushed[key]))
    return err;
  return out;
}

} // namespace

// -- rows ---------------------------------------------------------------------

caf::error init_keys(session& s, const std::vector<size_t>& floats) {
  std::vector<named_array> xs;
  for (size_t i = 0; i < floats.size(); ++i)
    xs.push_back(named_array{i + 1, std::vector<float>(floats[i])});
  auto got = s.store.init(xs);
  if (!got)
    return std::move(got.error());
  if (got->size() != xs.size())
    return caf::make_error(errc::bad_shape, "init returned other keys");
  for (size_t i = 0; i < xs.size(); ++i)
    if (auto err = check_values({(*got)[i]}, i + 1, floats[i], 0.0f))
      return err;
  return caf::none;
}

caf::expected<row_result> run_row(session& s, uint64_t key, size_t floats,
                                  double seconds, bool batched) {
  std::vector<float> ones(floats, 1.0f);
  row_result out{floats * sizeof(float), 0, 0.0};
  for (int round = -1; out.seconds < seconds || out.rounds < 3; ++round) {
    auto t = push_pull_once(s, key, ones, batched);
    if (!t)
      return std::move(t.error());
    if (round < 0)
      continue;
    out.seconds += t->seconds;
    out.pull_seconds += t->pull_seconds;
    out.pull_cpu += t->pull_cpu;
    out.rounds += 1;
  }
  return out;
}

// -- requests in flight -------------------------------------------------------

namespace {

/// A request in flight: a push (expect < 0) or a pull whose values must
/// all be `expect`.
struct pending {
  caf::message_id id;
  float expect;
};

/// Sends the next push or pull of `key` without waiting. A pull asks at the
/// clock after the last push and reaches each server after it (sends are
/// ordered), so it reads exactly the pushes sent so far. As kv's blocking
/// calls do, the request has no timeout of its own (that would cost a
/// wake-up of CAF's clock thread per request): await_reply guards it.
pending send_next(caf::scoped_actor& self, session& s, uint64_t key,
                  const std::vector<float>& ones, bool push, bool batched) {
  if (batched) { // push_pull: its reply sees its own push and all before
    s.pushed[key] += 1;
    return {self->request(s.store.handle(), caf::infinite, push_atom_v,
                          s.next_clock++, one_array(key, ones),
                          std::vector<uint64_t>{key})
                .id(),
            s.pushed[key]};
  }
  if (!push)
    return {self->request(s.store.handle(), caf::infinite, pull_atom_v,
                          s.next_clock, std::vector<uint64_t>{key})
                .id(),
            s.pushed[key]};
  s.pushed[key] += 1;
  return {self->request(s.store.handle(), caf::infinite, push_atom_v,
                        s.next_clock++, one_array(key, ones))
              .id(),
          -1.0f};
}

/// Takes the reply to `p` from the mailbox, waiting up to `wait` for it,
/// and checks it; nullopt if it did not come.
std::optional<caf::error> take_reply(caf::scoped_actor& self, const pending& p,
                                     uint64_t key, size_t floats,
                                     std::chrono::milliseconds wait) {
  std::optional<caf::error> out;
  auto on_error = [&out](caf::error& x) { out = std::move(x); };
  caf::blocking_actor::accept_one_cond rc;
  if (p.expect < 0)
    self->varargs_receive(
        rc, p.id, [&out](uint64_t) { out = caf::error{}; }, on_error,
        caf::after(wait) >> [] {});
  else
    self->varargs_receive(
        rc, p.id,
        [&out, &p, key, floats](std::vector<named_array>& got) {
          out = check_values(got, key, floats, p.expect);
        },
        on_error, caf::after(wait) >> [] {});
  return out;
}

/// Waits (at most s.timeout) for the reply to `p` and checks it. With
/// `conn` (the road our requests went on, claimed), reads it on this
/// thread meanwhile, as kv's blocking calls do (read_road_until_mail).
caf::error await_reply(caf::scoped_actor& self, const session& s,
                       const pending& p, uint64_t key, size_t floats,
                       road_conn* conn) {
  auto deadline = steady::now() + s.timeout;
  for (bool reading = conn != nullptr; reading;) {
    // A receive that finds nothing still sleeps out the timer slack: look
    // only when something came.
    if (!self->mailbox().empty())
      if (auto r =
              take_reply(self, p, key, floats, std::chrono::milliseconds{0}))
        return *r;
    reading = read_road_until_mail(*self.ptr(), *conn, deadline);
  }
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - steady::now());
  if (auto r = take_reply(self, p, key, floats,
                          std::max(left, std::chrono::milliseconds{0})))
    return *r;
  return caf::make_error(errc::timeout, "kv client silent");
}

} // namespace

caf::expected<double> pipelined_ops(session& s, uint64_t key, size_t floats,
                                    size_t depth, double seconds,
                                    bool batched) {
  caf::scoped_actor self{s.sys};
  std::vector<float> ones(floats, 1.0f);
  std::deque<pending> in_flight;
  // The road our requests go on, which this thread reads while replies are
  // due (kv's calls do so one at a time); given back at the end.
  road_caller_done reading;
  uint64_t pairs = 0;
  bool push = true;
  auto t0 = steady::now();
  for (;;) {
    bool more = since(t0) < seconds || pairs < 3;
    auto send = [&in_flight, &push, &self, &s, &ones, more, depth, key,
                 batched] {
      for (; more && in_flight.size() < depth; push = !push)
        in_flight.push_back(send_next(self, s, key, ones, push, batched));
    };
    // As kv's blocking calls do: the kv client runs on this thread, which
    // only waits meanwhile, instead of waking a scheduler thread.
    if (s.scheduler_only) {
      send();
    } else {
      road_caller_scope scope;
      run_here_while(self.ptr(), send);
      if (auto c = scope.claim_only_conn())
        reading.conn = std::move(c);
    }
    if (in_flight.empty())
      break;
    // Every reply already here is taken before more requests go.
    do {
      if (auto err = await_reply(self, s, in_flight.front(), key, floats,
                                 reading.conn.get()))
        return err;
      pairs += in_flight.front().expect >= 0 ? 1 : 0;
      in_flight.pop_front();
    } while (!in_flight.empty() && !self->mailbox().empty());
  }
  return pairs / since(t0);
}

} // namespace troupe::bench::kv_throughput

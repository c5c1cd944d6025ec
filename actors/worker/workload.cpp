// The counter push/pull workload: see the header.
#include "actors/worker/workload.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include <unistd.h>

#include <caf/scoped_actor.hpp>

#include "actors/base/exit_codes.hpp"
#include "actors/base/log.hpp"
#include "actors/base/step_watch.hpp"
#include "actors/kv/kv.hpp"
#include "actors/worker/accounting.hpp"
#include "messages/errors.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

/// Smallest element of all arrays.
float min_value(const std::vector<named_array>& xs) {
  float lo = xs.front().values.front();
  for (auto& x : xs)
    for (auto y : x.values)
      lo = std::min(lo, y);
  return lo;
}

/// The first element of all arrays that differs from `expected`, as one
/// line ("key 2, element 16384 (slice 1): 7990, not 8000"); "" if none.
std::string first_difference(const std::vector<named_array>& xs, float expected,
                             uint32_t slice_floats) {
  for (auto& x : xs)
    for (size_t i = 0; i < x.values.size(); ++i)
      if (x.values[i] != expected) {
        char buf[160];
        std::snprintf(buf, sizeof(buf),
                      "key %llu, element %zu (slice %zu): %.0f, not %.0f",
                      static_cast<unsigned long long>(x.key), i,
                      slice_floats > 0 ? i / slice_floats : 0,
                      double(x.values[i]), double(expected));
        return buf;
      }
  return {};
}

int fail(const char* what, const caf::error& err) {
  stderr_line() << "*** " << what << " failed: " << describe(err) << '\n';
  return exit_code_of(err); // refused at registration: not restarted
}

/// Tells the scheduler, and waits until it heard, that this process of
/// worker `rank` starts at clock `first`: the accounting of its pushes
/// begins there, before any of them is sent.
caf::error say_started(caf::actor_system& sys, const caf::actor& scheduler,
                       uint32_t rank, uint64_t first, uint32_t timeout_ms) {
  event_record e{now_ms(),
                 "started",
                 role::worker,
                 rank,
                 static_cast<uint32_t>(::getpid()),
                 str("worker ", rank, " starts at clock ", first),
                 str("worker ", rank)};
  e.clock = first;
  caf::scoped_actor self{sys};
  caf::error out;
  self->request(scheduler, std::chrono::milliseconds{timeout_ms}, event_atom_v,
                encode(e))
      .receive([] {}, [&out](caf::error& err) { out = std::move(err); });
  return out;
}

/// The accounting of the job's pushes once every departed worker's cut is
/// in the scheduler's log (long polls, up to `timeout_ms`).
caf::expected<push_accounting> final_accounting(caf::actor_system& sys,
                                                const caf::actor& scheduler,
                                                uint64_t steps, bool resumed,
                                                uint32_t timeout_ms) {
  caf::scoped_actor self{sys};
  std::vector<event_record> log;
  auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds{timeout_ms};
  for (;;) {
    auto acc = account_pushes(log, steps, resumed);
    if (acc.complete && !log.empty())
      return acc;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return caf::make_error(errc::timeout,
                             "a departed worker's cut is not in the event log"
                             " (docs/atomic-pushes.md)");
    caf::error failed;
    self->request(scheduler, left, events_atom_v, uint64_t{log.size()})
        .receive(
            [&](const frame& f) {
              std::vector<event_record> more;
              failed = decode(f, more);
              log.insert(log.end(), more.begin(), more.end());
            },
            [&](caf::error& err) { failed = std::move(err); });
    if (failed)
      return failed;
  }
}

/// Every element holds our own acked pushes up to clock `t`. Servers
/// apply pushes independently (async, ssp), so arrays need not be uniform
/// mid-run. The clock's own work: bounded, and stalled by a fault plan's
/// stall (actors/base/step_watch.hpp); the pushes and pulls around it wait
/// on others.
bool own_pushes_seen(uint32_t rank, uint64_t t,
                     const std::vector<named_array>& got) {
  watched_work watch{"worker " + std::to_string(rank) + ": clock " +
                     std::to_string(t)};
  if (min_value(got) >= float(t))
    return true;
  stderr_line() << "*** worker " << rank << ": clock " << t
                << " does not see its own acked pushes\n";
  return false;
}

} // namespace

int run_counter_workload(caf::actor_system& sys, caf::actor scheduler,
                         const worker_settings& w, const kv_settings& kv_cfg,
                         bool resumed) {
  auto join = kv_cfg; // says its work: in sync every worker runs as many
  join.work = "--worker.steps=" + std::to_string(w.steps) +
              " --worker.keys=" + std::to_string(w.keys);
  kv store{sys, scheduler, join};
  std::vector<named_array> arrays;
  std::vector<uint64_t> keys;
  for (uint32_t k = 0; k < w.keys; ++k) {
    arrays.push_back(named_array{k + 1, std::vector<float>(w.key_floats)});
    keys.push_back(k + 1);
  }
  if (auto init = store.init(arrays); !init)
    return fail("init", init.error());
  if (auto b = store.barrier("start"); !b)
    return fail("barrier start", b.error());
  auto v = store.view();
  if (!v)
    return fail("view", v.error());
  auto [rank, view] = *v;
  auto first = store.resume_clock(); // > 0 after a restart or --resume
  if (!first)
    return fail("resume clock", first.error());
  if (*first > 0)
    std::printf("worker %u: resuming at clock %llu\n", rank,
                static_cast<unsigned long long>(*first));
  if (auto err =
          say_started(sys, scheduler, rank, *first, kv_cfg.request_timeout_ms))
    return fail("recording the start", err);
  auto start = std::chrono::steady_clock::now();
  std::vector<named_array> ones = arrays;
  for (auto& x : ones)
    std::fill(x.values.begin(), x.values.end(), 1.0f);
  for (uint64_t t = *first; t < w.steps; ++t) {
    auto got = store.pull(t, keys);
    if (!got)
      return fail("pull", got.error());
    if (!own_pushes_seen(rank, t, *got)) // the clock's own work
      return 1;
    if (auto pushed = store.push(t, ones); !pushed)
      return fail("push", pushed.error());
  }
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  // This read says that every server has all our pushes: with atomic
  // pushes in async and ssp they apply our last one only then.
  if (auto last = store.pull(w.steps, keys); !last)
    return fail("pull after the last push", last.error());
  if (auto b = store.barrier("end"); !b)
    return fail("barrier end", b.error());
  double mib = double(w.steps - *first) * w.keys * w.key_floats * 4 / (1 << 20);
  std::printf("worker %u: %u clocks x %u arrays of %u floats over %zu "
              "servers in %.2f s: pushed %.1f MiB, pulled %.1f MiB "
              "(%.0f MiB/s both ways)\n",
              rank, static_cast<unsigned>(w.steps - *first), w.keys,
              w.key_floats, view.servers.size(), secs, mib, mib,
              secs > 0 ? 2 * mib / secs : 0.0);
  // Every element holds every push the cluster kept: each live worker's
  // from where it started, each departed one's up to its cut.
  auto acc = final_accounting(sys, scheduler, w.steps, resumed,
                              kv_cfg.request_timeout_ms);
  if (!acc)
    return fail("the accounting", acc.error());
  // Read once every cut is in: a cut's event comes once the servers
  // applied it (scheduler_cuts.cpp).
  auto got = store.pull(w.steps, keys);
  if (!got)
    return fail("final pull", got.error());
  std::printf("worker %u: accounting: %s\n", rank, acc->explained.c_str());
  float expected = float(acc->pushes);
  auto differs = first_difference(*got, expected, view.slice_floats);
  if (differs.empty() && !acc->unexplained.empty())
    differs = acc->unexplained;
  bool exact = differs.empty();
  std::printf("worker %u: final value %.0f, expected the pushes kept"
              " (accounting above) = %llu: %s\n",
              rank, double(got->front().values.front()),
              static_cast<unsigned long long>(acc->pushes),
              exact ? "sums exact" : "MISMATCH");
  std::fflush(stdout);
  if (!exact) // the end reached: a restart would find the same
    stderr_line() << "*** worker " << rank << ": the sums differ: " << differs
                  << '\n';
  // The exact sums are this workload's check: a lost value shows there.
  // (It does not read the "lost" event, which a server also raises for a
  // dead server's slices that held nothing acknowledged yet.)
  int rc = exact ? exit_done : exit_job_failed;
  if (auto err = store.leave()) // done: our exit is a departure
    stderr_line() << "leaving the cluster failed: " << describe(err) << '\n';
  return rc;
}

} // namespace troupe

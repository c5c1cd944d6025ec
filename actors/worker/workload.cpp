// The counter push/pull workload: see the header.
#include "actors/worker/workload.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "actors/kv/kv.hpp"
#include "actors/worker/worker.hpp"
#include "messages/errors.hpp"

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

/// Every element of every array equals the first; returns that value.
caf::expected<float> uniform_value(const std::vector<named_array>& xs) {
  float v = xs.front().values.front();
  for (auto& x : xs)
    for (auto y : x.values)
      if (y != v)
        return caf::make_error(errc::bad_shape, "array not uniform", x.key);
  return v;
}

int fail(const char* what, const caf::error& err) {
  std::cerr << "*** " << what << " failed: " << describe(err) << '\n';
  return 1;
}

} // namespace

int run_counter_workload(caf::actor_system& sys, caf::actor scheduler,
                         const worker_settings& w, const kv_settings& kv_cfg) {
  kv store{sys, scheduler, kv_cfg};
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
  auto start = std::chrono::steady_clock::now();
  std::vector<named_array> ones = arrays;
  for (auto& x : ones)
    std::fill(x.values.begin(), x.values.end(), 1.0f);
  for (uint64_t t = *first; t < w.steps; ++t) {
    auto got = store.pull(t, keys);
    if (!got)
      return fail("pull", got.error());
    // Servers apply pushes independently (async, ssp), so arrays need not
    // be uniform mid-run; every element must hold our own acked pushes.
    if (min_value(*got) < float(t)) {
      std::cerr << "*** worker " << rank << ": clock " << t
                << " does not see its own acked pushes\n";
      return 1;
    }
    if (auto pushed = store.push(t, ones); !pushed)
      return fail("push", pushed.error());
  }
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (auto b = store.barrier("end"); !b)
    return fail("barrier end", b.error());
  auto got = store.pull(w.steps, keys);
  if (!got)
    return fail("final pull", got.error());
  // Every worker of the job pushed every clock: the job's size, or the
  // start view's if larger. (A view read now may already lack a worker that
  // passed the end barrier and exited; a restarted worker's start view may
  // lack one that finished before it came back.)
  size_t workers = std::max<size_t>(view.expected_workers, view.workers.size());
  double mib = double(w.steps - *first) * w.keys * w.key_floats * 4 / (1 << 20);
  std::printf("worker %u: %u clocks x %u arrays of %u floats over %zu "
              "servers in %.2f s: pushed %.1f MiB, pulled %.1f MiB "
              "(%.0f MiB/s both ways)\n",
              rank, static_cast<unsigned>(w.steps - *first), w.keys,
              w.key_floats, view.servers.size(), secs, mib, mib,
              secs > 0 ? 2 * mib / secs : 0.0);
  auto value = uniform_value(*got);
  float expected = float(w.steps) * float(workers);
  bool exact = value && *value == expected;
  std::printf("worker %u: final value %.0f, expected %u clocks x %zu workers"
              " = %.0f: %s\n",
              rank, value ? *value : -1.0f, w.steps, workers, expected,
              exact ? "sums exact" : "MISMATCH");
  std::fflush(stdout);
  int rc = exact ? 0 : 1;
  if (rc == 0 && !kv_cfg.allow_loss)
    rc = check_nothing_lost(sys, scheduler, kv_cfg.request_timeout_ms);
  if (auto err = store.leave()) // done: our exit is a departure
    std::cerr << "leaving the cluster failed: " << describe(err) << '\n';
  return rc;
}

} // namespace troupe

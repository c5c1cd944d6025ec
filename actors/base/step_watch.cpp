// The watch over a worker's own work; see the header.
#include "actors/base/step_watch.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/base/exit_codes.hpp"
#include "actors/base/log.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;

struct work_entry {
  clock_type::time_point since;
  std::string what;
};

/// Shared by the watched threads and the watch's own; never destroyed (the
/// watch may outlive main).
struct watch_state {
  std::mutex mx;
  std::map<uint64_t, work_entry> busy; // by id: the oldest first
  uint64_t next_id = 1;
};

watch_state& state() {
  static auto* s = new watch_state;
  return *s;
}

std::atomic<int64_t> limit_ms{0};
std::atomic<bool> handler_installed{false};
/// Set by SIGUSR1: the next watched work stalls (a lock-free atomic, safe
/// in a signal handler).
std::atomic<bool> stall_asked{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void on_stall_signal(int) {
  stall_asked = true;
}

/// Writes the line and ends the process. One write(2), not the log's
/// writer: the hung work may hold the log's lock or stdout's (blocked on a
/// full pipe), and the watch must not wait on it.
/// `beside` is the other work under way then (a device's share of the
/// step: which one hangs in it), named in the line too.
[[noreturn]] void end_hung(const work_entry& e,
                           const std::vector<work_entry>& beside,
                           clock_type::time_point now) {
  auto ms = [now](const work_entry& w) {
    return std::to_string(
        std::chrono::duration_cast<std::chrono::milliseconds>(now - w.since)
            .count());
  };
  auto line = "*** " + e.what + " has run for " + ms(e) +
              " ms, past its bound of " + std::to_string(limit_ms.load()) +
              " ms (--worker.step-timeout-ms)";
  for (size_t i = 0; i < beside.size(); ++i)
    line += (i == 0 ? "; under way beside it: " : ", ") + beside[i].what +
            " for " + ms(beside[i]) + " ms";
  line += ": it is hung, and its process still answers its peers, so"
          " nothing else would notice; this process ends so that its agent"
          " restarts it\n";
  auto n = ::write(STDERR_FILENO, line.data(), line.size());
  (void)n; // nothing more to do if it fails
  std::_Exit(exit_failed);
}

/// How much later than asked the watch may wake before the time counts as
/// the process not running (stopped by SIGSTOP, or starved): not work.
constexpr std::chrono::milliseconds late_slack{200};
/// Other work under way named beside hung work, at most (the line stays
/// short: a worker has one step and its devices' shares).
constexpr size_t max_beside = 8;

void watch_loop(std::chrono::milliseconds limit) {
  using std::chrono::milliseconds;
  auto& s = state();
  // It looks this often: hung work ends at most a quarter bound late, and
  // work that starts wakes no one (a step costs a lock, no wake-up).
  auto tick = std::clamp(limit / 4, milliseconds{10}, milliseconds{500});
  for (auto deadline = clock_type::now() + tick;; deadline += tick) {
    std::this_thread::sleep_until(deadline);
    auto now = clock_type::now();
    std::unique_lock<std::mutex> guard{s.mx};
    // Woken this late, the process did not run meanwhile: its work did
    // not either (a worker stopped and continued is no hung one).
    if (auto late = now - deadline; late > late_slack) {
      for (auto& entry : s.busy)
        entry.second.since += late;
      deadline = now;
    }
    // Ids grow with time, so the first entry is the oldest work.
    if (!s.busy.empty() && now - s.busy.begin()->second.since >= limit) {
      auto hung = s.busy.begin()->second;
      std::vector<work_entry> beside;
      for (auto i = std::next(s.busy.begin());
           i != s.busy.end() && beside.size() < max_beside; ++i)
        beside.push_back(i->second);
      guard.unlock();
      end_hung(hung, beside, now);
    }
  }
}

/// Stalls the calling thread for good, as a hung step does.
[[noreturn]] void stall(const std::string& what) {
  TROUPE_LOG(warning, "fault injection",
             "SIGUSR1 (a fault plan's stall): ", what, " never ends");
  for (;;)
    std::this_thread::sleep_for(std::chrono::hours{1});
}

} // namespace

void start_step_watch(std::chrono::milliseconds limit) {
  if (!handler_installed.exchange(true)) {
    struct sigaction sa {};
    sa.sa_handler = on_stall_signal;
    sa.sa_flags = SA_RESTART; // no system call fails for it (EINTR)
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGUSR1, &sa, nullptr);
  }
  int64_t off = 0;
  if (limit.count() > 0 && limit_ms.compare_exchange_strong(off, limit.count()))
    std::thread{watch_loop, limit}.detach();
}

std::chrono::milliseconds step_bound(uint32_t step_timeout_ms,
                                     uint32_t others_wait_ms) {
  auto ms = step_timeout_ms > 0 ? step_timeout_ms
                                : std::max<uint32_t>(others_wait_ms / 2, 1);
  return std::chrono::milliseconds{ms};
}

std::chrono::milliseconds step_watch_limit() {
  return std::chrono::milliseconds{limit_ms.load()};
}

watched_work::watched_work(std::string what) {
  if (limit_ms.load(std::memory_order_relaxed) > 0) {
    auto& s = state();
    std::lock_guard<std::mutex> guard{s.mx};
    id_ = s.next_id++;
    s.busy.emplace(id_, work_entry{clock_type::now(), what});
  }
  if (stall_asked.load(std::memory_order_relaxed) &&
      stall_asked.exchange(false)) // one stall per signal
    stall(what);
}

watched_work::~watched_work() {
  if (id_ == 0)
    return;
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mx};
  s.busy.erase(id_);
}

} // namespace troupe

// The watch over a worker's own work; see the header.
#include "actors/base/step_watch.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

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
  std::condition_variable cv;
  std::map<uint64_t, work_entry> busy; // by id: the oldest first
  uint64_t next_id = 1;
};

watch_state& state() {
  static auto* s = new watch_state;
  return *s;
}

std::atomic<int64_t> limit_ms{0};
std::atomic<bool> handler_installed{false};
/// Set by SIGUSR1: the next watched work stalls.
volatile sig_atomic_t stall_asked = 0;

void on_stall_signal(int) {
  stall_asked = 1;
}

[[noreturn]] void end_hung(const work_entry& e, clock_type::time_point now) {
  auto ran =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - e.since);
  stderr_line() << "*** " << e.what << " has run for " << ran.count()
                << " ms, past its bound of " << limit_ms.load()
                << " ms (--worker.step-timeout-ms; 0: half"
                   " --kv.request-timeout-ms): it is hung, and its process"
                   " still answers its peers, so nothing else would notice;"
                   " this process ends so that its agent restarts it\n";
  std::_Exit(exit_failed);
}

void watch_loop(std::chrono::milliseconds limit) {
  auto& s = state();
  std::unique_lock<std::mutex> guard{s.mx};
  for (;;) {
    if (s.busy.empty()) {
      s.cv.wait(guard);
      continue;
    }
    // Ids grow with time, so the first entry is the oldest work.
    auto& oldest = s.busy.begin()->second;
    auto now = clock_type::now();
    if (now - oldest.since >= limit)
      end_hung(oldest, now);
    s.cv.wait_until(guard, oldest.since + limit);
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
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGUSR1, &sa, nullptr);
  }
  int64_t off = 0;
  if (limit.count() > 0 && limit_ms.compare_exchange_strong(off, limit.count()))
    std::thread{watch_loop, limit}.detach();
}

std::chrono::milliseconds step_bound(uint32_t step_timeout_ms,
                                     uint32_t request_timeout_ms) {
  auto ms = step_timeout_ms > 0 ? step_timeout_ms
                                : std::max<uint32_t>(request_timeout_ms / 2, 1);
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
    bool was_idle = s.busy.empty();
    s.busy.emplace(id_, work_entry{clock_type::now(), what});
    if (was_idle) // the watch sleeps without a deadline
      s.cv.notify_one();
  }
  if (stall_asked != 0) {
    stall_asked = 0; // one stall per signal
    stall(what);
  }
}

watched_work::~watched_work() {
  if (id_ == 0)
    return;
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mx};
  s.busy.erase(id_);
}

} // namespace troupe

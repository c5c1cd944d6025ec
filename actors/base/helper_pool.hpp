// Helper threads that share a loop with the thread that runs it.
//
// A shard server applies a sync round's update slice by slice and then
// writes one reply per worker, all on its actor thread, while every worker
// waits for the result and the other core idles. run() spreads such a loop
// over the caller and the helpers: each claims the next item until none is
// left. The caller never waits for a helper that has not started an item,
// so a helper the OS schedules late only means the caller does more of the
// work itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe {

/// A loop body: called once for each index of the loop.
using loop_body = std::function<void(size_t)>;

/// How a loop runs: `run(n, body)` calls body(0) .. body(n - 1), each once,
/// and returns when all calls are done. The serial form is the default.
using loop_fn = std::function<void(size_t n, const loop_body& body)>;

/// Calls body(0) .. body(n - 1) on the calling thread.
void run_serially(size_t n, const loop_body& body);

class helper_pool {
public:
  /// Starts `threads` helper threads (0: run() works alone).
  explicit helper_pool(size_t threads);

  /// Stops and joins the helpers (no run() may be active).
  ~helper_pool();

  helper_pool(const helper_pool&) = delete;
  helper_pool& operator=(const helper_pool&) = delete;

  /// Calls body(0) .. body(n - 1), each once, on this thread and the
  /// helpers; returns when every call returned. Calls for distinct indices
  /// may run at the same time; `body` must not throw. One run at a time.
  void run(size_t n, const loop_body& body);

  /// Items the helpers ran, over the pool's life (to see that they help).
  uint64_t helped() const { return helped_.load(); }

private:
  void help();
  /// Claims and runs items of the current loop until none is left;
  /// returns how many it ran.
  size_t drain(const loop_body& body, size_t n);

  std::mutex mtx_;
  std::condition_variable wake_;    // a loop began, or stop
  std::condition_variable idle_;    // the last helper left a loop
  const loop_body* body_ = nullptr; // the open loop; null: none
  size_t n_ = 0;
  uint64_t loop_ = 0;             // count of loops begun
  std::atomic<size_t> inside_{0}; // helpers inside the open loop
  bool stop_ = false;
  std::atomic<size_t> next_{0}; // next unclaimed index
  std::atomic<uint64_t> helped_{0};
  std::vector<std::thread> threads_;
};

/// A loop_fn that runs loops on `pool`, keeping it alive while the loop_fn
/// (or a copy) lives.
loop_fn loop_on(std::shared_ptr<helper_pool> pool);

} // namespace troupe

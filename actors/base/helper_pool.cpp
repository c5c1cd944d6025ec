// Helper threads that share a loop with its caller.
#include "actors/base/helper_pool.hpp"

#include <chrono>

namespace troupe {

void run_serially(size_t n, const loop_body& body) {
  for (size_t i = 0; i < n; ++i)
    body(i);
}

helper_pool::helper_pool(size_t threads) {
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i)
    threads_.emplace_back([this] { help(); });
}

helper_pool::~helper_pool() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_)
    t.join();
}

size_t helper_pool::drain(const loop_body& body, size_t n) {
  size_t ran = 0;
  for (auto i = next_.fetch_add(1); i < n; i = next_.fetch_add(1), ++ran)
    body(i);
  return ran;
}

namespace {

/// How long run() spins for helpers still inside its loop before it
/// sleeps until they leave.
constexpr std::chrono::microseconds max_spin{50};

} // namespace

void helper_pool::run(size_t n, const loop_body& body) {
  if (threads_.empty() || n < 2)
    return run_serially(n, body);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    body_ = &body;
    n_ = n;
    next_.store(0);
    ++loop_;
  }
  wake_.notify_all();
  drain(body, n);
  // Every item is claimed: close the loop to helpers not yet inside, and
  // wait for those inside to finish the items they claimed.
  {
    std::lock_guard<std::mutex> guard{mtx_};
    body_ = nullptr;
  }
  // A helper inside holds one item at most: spin a little for it (a
  // sleep would put a wake-up on the caller's path: 30-40 us on the
  // 2-vCPU machines here, as long as a slice's update), then sleep in
  // case the OS has put that helper aside.
  auto until = std::chrono::steady_clock::now() + max_spin;
  while (inside_.load(std::memory_order_acquire) != 0) {
    if (std::chrono::steady_clock::now() > until) {
      std::unique_lock<std::mutex> guard{mtx_};
      idle_.wait(guard, [this] { return inside_.load() == 0; });
      return;
    }
    std::this_thread::yield();
  }
}

loop_fn loop_on(std::shared_ptr<helper_pool> pool) {
  return [pool](size_t n, const loop_body& body) { pool->run(n, body); };
}

void helper_pool::help() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> guard{mtx_};
  for (;;) {
    wake_.wait(guard, [&] { return stop_ || (body_ && loop_ != seen); });
    if (stop_)
      return;
    seen = loop_;
    auto* body = body_;
    auto n = n_;
    inside_.fetch_add(1, std::memory_order_relaxed); // under the lock
    guard.unlock();
    helped_ += drain(*body, n);
    guard.lock();
    if (inside_.fetch_sub(1, std::memory_order_release) == 1)
      idle_.notify_all();
  }
}

} // namespace troupe

// The pairing of a tcp road's two connections on the server: the reply
// connection offers its socket, the connection that announced it takes
// it (internal to the road's .cpp files).
#pragma once

#include <fcntl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

#include <caf/expected.hpp>

#include "actors/road/road_internal.hpp"
#include "messages/errors.hpp"

namespace troupe {

/// A listener's tcp connections that wait for their pair: a worker's
/// reply connection offers its socket under the token of its hello, and
/// the first connection, whose hello announced it, takes it. Each side
/// waits for the other up to the hello's timeout, then gives up (the
/// offering connection closes its socket): nothing stays behind.
class road_pairing {
public:
  /// Offers `fd`, a reply connection from `peer` (an IPv4 address), under
  /// `token`, until taken (true) or `wait` is up or `gone` says the
  /// connection ended (false). A token already offered is refused.
  bool offer(uint64_t token, int fd, uint32_t peer,
             std::chrono::milliseconds wait,
             const std::function<bool()>& gone) {
    std::unique_lock<std::mutex> guard{mtx_};
    if (!offers_.emplace(token, entry{fd, peer, false}).second)
      return false;
    cv_.notify_all();
    wait_until(guard, wait, gone,
               [this, token] { return offers_.at(token).taken; });
    bool taken = offers_.at(token).taken;
    offers_.erase(token);
    return taken;
  }

  /// Waits up to `wait` for the reply connection of `token` from `peer`
  /// and returns a descriptor of its own for the socket.
  caf::expected<int> take(uint64_t token, uint32_t peer,
                          std::chrono::milliseconds wait,
                          const std::function<bool()>& gone) {
    std::unique_lock<std::mutex> guard{mtx_};
    auto offered_now = [this, token] {
      auto i = offers_.find(token);
      return i != offers_.end() && !i->second.taken;
    };
    wait_until(guard, wait, gone, offered_now);
    if (!offered_now())
      return caf::make_error(errc::peer_down,
                             "road: the reply connection never came");
    auto& o = offers_.at(token);
    if (o.peer != peer)
      return caf::make_error(errc::malformed_message,
                             "road: a reply connection from another host");
    int fd = ::fcntl(o.fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
      return road_detail::sys_error("road: taking the reply connection");
    o.taken = true;
    cv_.notify_all();
    return fd;
  }

  /// Connections waiting for their pair (for tests).
  size_t offered() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return offers_.size();
  }

private:
  struct entry {
    int fd;
    uint32_t peer;
    bool taken;
  };
  /// Waits until `done` or `gone` holds, or `wait` is up; looks at `gone`
  /// (a connection closed meanwhile) every 20 ms.
  template <class Done>
  void wait_until(std::unique_lock<std::mutex>& guard,
                  std::chrono::milliseconds wait,
                  const std::function<bool()>& gone, Done done) {
    auto until = std::chrono::steady_clock::now() + wait;
    while (!done() && !gone() && std::chrono::steady_clock::now() < until)
      cv_.wait_for(guard, std::chrono::milliseconds{20});
  }

  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::map<uint64_t, entry> offers_; // token -> reply connection
};

} // namespace troupe

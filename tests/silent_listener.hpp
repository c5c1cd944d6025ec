// A TCP listener that accepts and never speaks: a peer that hangs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

namespace troupe::test {

/// A TCP listener on a free loopback port that accepts every connection
/// and never speaks: a CAF peer connecting to it waits for a handshake
/// that never comes (a full backlog would block CAF 0.17's connect
/// itself, and with it the middleman).
struct silent_listener {
  int fd = -1;
  int wake[2] = {-1, -1}; // written to stop the thread
  uint16_t port = 0;
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<int> accepted;
  std::thread thread;
  silent_listener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    BOOST_REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0);
    BOOST_REQUIRE(::listen(fd, 8) == 0);
    BOOST_REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) ==
                  0);
    port = ntohs(a.sin_port);
    BOOST_REQUIRE(::pipe2(wake, O_CLOEXEC) == 0);
    thread = std::thread{[this] { accept_all(); }};
  }
  void accept_all() {
    for (;;) {
      pollfd p[2] = {{fd, POLLIN, 0}, {wake[0], POLLIN, 0}};
      if (::poll(p, 2, -1) < 0 && errno != EINTR)
        return;
      if (p[1].revents != 0)
        return;
      if (p[0].revents == 0)
        continue;
      int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0)
        continue;
      std::lock_guard<std::mutex> guard{mtx};
      accepted.push_back(c);
      cv.notify_all();
    }
  }
  /// True once a peer connected within `wait`.
  bool await_peer(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, wait, [this] { return !accepted.empty(); });
  }
  /// Closes the listener and every connection (before the actor system
  /// that connects here ends: its connections then fail at once).
  void close() {
    if (!thread.joinable())
      return;
    char x = 1;
    if (::write(wake[1], &x, 1) != 1)
      BOOST_ERROR("cannot stop the listener thread");
    thread.join();
    for (int c : accepted)
      ::close(c);
    accepted.clear();
    ::close(fd);
    ::close(wake[0]);
    ::close(wake[1]);
  }
  ~silent_listener() { close(); }
};

} // namespace troupe::test

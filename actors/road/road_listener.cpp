// A server's road listener: the TCP and abstract unix sockets it listens
// on, the thread that accepts, and the connections it keeps.
#include "actors/road/road_listener.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "actors/base/log.hpp"
#include "actors/base/machine_id.hpp"
#include "actors/road/road_internal.hpp"
#include "actors/road/road_pairing.hpp"
#include "messages/errors.hpp"

namespace troupe {

using namespace road_detail;

// -- listening ----------------------------------------------------------------

caf::expected<std::unique_ptr<road_listener>>
road_listener::start(const std::string& host, uint16_t port,
                     uint32_t send_timeout_ms, road_settings settings,
                     std::shared_ptr<road_keyring> keys, road_handler on_msg,
                     std::shared_ptr<road_intake> intake) {
  std::unique_ptr<road_listener> l{new road_listener};
  l->keys_ = std::move(keys);
  l->intake_ = std::move(intake);
  l->send_timeout_ms_ = send_timeout_ms;
  l->settings_ = settings;
  l->pairing_ = std::make_shared<road_pairing>();
  l->on_msg_ = std::move(on_msg);
  auto sa = ipv4_of(host, port);
  if (!sa)
    return std::move(sa.error());
  l->tcp_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(l->tcp_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(*sa);
  if (l->tcp_fd_ < 0 ||
      ::bind(l->tcp_fd_, reinterpret_cast<sockaddr*>(&*sa), len) != 0 ||
      ::listen(l->tcp_fd_, 64) != 0 ||
      ::getsockname(l->tcp_fd_, reinterpret_cast<sockaddr*>(&*sa), &len) != 0)
    return caf::make_error(errc::invalid_config, "road: cannot listen on",
                           host + ":" + std::to_string(port),
                           std::string{strerror(errno)});
  l->info_.port = ntohs(sa->sin_port);
  l->info_.machine = machine_id();
  l->listen_unix();
  l->wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (l->wake_fd_ < 0)
    return sys_error("road: eventfd");
  l->acceptor_ = std::thread{[p = l.get()] { p->accept_loop(); }};
  return l;
}

void road_listener::listen_unix() {
  // The shm road's socket: abstract, so nothing is left on disk.
  auto name = "troupe-road-" + std::to_string(::getpid()) + "-" +
              std::to_string(info_.port);
  sockaddr_un ua;
  auto ulen = abstract_addr(name, ua);
  unix_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (unix_fd_ >= 0 &&
      ::bind(unix_fd_, reinterpret_cast<sockaddr*>(&ua), ulen) == 0 &&
      ::listen(unix_fd_, 64) == 0) {
    info_.socket = name;
  } else {
    TROUPE_LOG(warning, "road",
               "no shared-memory road (unix socket: ", strerror(errno),
               "); TCP only");
    if (unix_fd_ >= 0)
      ::close(unix_fd_);
    unix_fd_ = -1;
  }
}

road_listener::~road_listener() {
  uint64_t one = 1;
  if (acceptor_.joinable()) {
    if (::write(wake_fd_, &one, sizeof(one)) < 0)
      TROUPE_LOG(warning, "road", "cannot wake the acceptor");
    acceptor_.join();
  }
  for (int fd : {tcp_fd_, unix_fd_, wake_fd_})
    if (fd >= 0)
      ::close(fd);
  std::vector<road_conn_ptr> conns;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    conns.swap(conns_);
  }
  for (auto& c : conns)
    c->close();
}

size_t road_listener::reply_connections_waiting() const {
  return pairing_->offered();
}

size_t road_listener::connections() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return static_cast<size_t>(
      std::count_if(conns_.begin(), conns_.end(),
                    [](const road_conn_ptr& c) { return !c->closed(); }));
}

// -- accepting ----------------------------------------------------------------

void road_listener::accept_loop() {
  for (;;) {
    pollfd ps[3] = {
        {wake_fd_, POLLIN, 0}, {tcp_fd_, POLLIN, 0}, {unix_fd_, POLLIN, 0}};
    auto n = ::poll(ps, unix_fd_ >= 0 ? 3 : 2, -1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 || (ps[0].revents & POLLIN))
      return;
    if (ps[1].revents & POLLIN)
      accept_one(tcp_fd_, road_kind::tcp);
    if (unix_fd_ >= 0 && (ps[2].revents & POLLIN))
      accept_one(unix_fd_, road_kind::shm);
  }
}

void road_listener::accept_one(int lfd, road_kind kind) {
  int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOMEM) {
      TROUPE_LOG(warning, "road", "cannot accept: ", strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds{50});
    }
    return;
  }
  if (connections() >= max_connections) {
    TROUPE_LOG_LIMITED(warning, "road", "refused a connection from ",
                       peer_address(fd), ": already ", max_connections);
    ::close(fd);
    return;
  }
  evict_unadmitted();
  if (kind == road_kind::shm && !same_user(fd)) {
    TROUPE_LOG_LIMITED(warning, "road",
                       "refused a shared-memory connection from another user:"
                       " its rings would be read in place, and it could"
                       " change them as they are read");
    ::close(fd);
    return;
  }
  try {
    start_conn(fd, kind);
  } catch (const std::exception& e) { // no thread or memory left
    TROUPE_LOG(warning, "road", "refused a connection: ", e.what());
  }
}

void road_listener::start_conn(int fd, road_kind kind) {
  auto c = adopt(fd, kind, send_timeout_ms_, settings_);
  // The hello is read on the connection's own thread: a silent peer holds
  // up no one else. `this` outlives the handler: ~road_listener joins the
  // reader of every connection it still holds.
  std::lock_guard<std::mutex> guard{mtx_};
  c->start_accepted(
      keys_, on_msg_,
      [this](uint64_t serial, const caf::error& err) {
        if (err)
          TROUPE_LOG(debug, "road", "worker connection ended: ", describe(err));
        forget(serial);
      },
      pairing_, intake_);
  conns_.push_back(std::move(c));
}

void road_listener::evict_unadmitted() {
  road_conn_ptr oldest;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    size_t waiting = 0;
    for (auto& c : conns_) {
      if (c->admitted() || c->closed())
        continue;
      ++waiting;
      if (!oldest || c->accepted_at() < oldest->accepted_at())
        oldest = c;
    }
    if (waiting < max_unadmitted)
      return;
  }
  TROUPE_LOG_LIMITED(warning, "road", "ended the connection from ",
                     oldest->peer(), ": ", max_unadmitted,
                     " connections are in their handshake (strangers?)");
  oldest->end(caf::make_error(errc::not_a_member,
                              "road: ended in its handshake to make way"));
}

void road_listener::forget(uint64_t serial) {
  road_conn_ptr gone; // released after the lock
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = std::find_if(
      conns_.begin(), conns_.end(),
      [serial](const road_conn_ptr& x) { return x->serial() == serial; });
  if (i != conns_.end()) {
    gone = std::move(*i);
    conns_.erase(i);
  }
}

} // namespace troupe

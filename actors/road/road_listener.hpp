// A server's listening end of the road: it accepts workers' connections
// over TCP and, for the same machine, an abstract unix socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/expected.hpp>

#include "actors/road/road_auth.hpp"
#include "actors/road/road_conn.hpp"
#include "actors/road/road_intake.hpp"
#include "actors/road/road_settings.hpp"
#include "actors/road/road_wire.hpp"
#include "messages/membership.hpp"

namespace troupe {

/// A server's listening end: TCP on host:port and, for the same machine,
/// an abstract unix socket. Each accepted connection gets a reader thread
/// that checks the member's handshake against `keys` (road_auth.hpp), then
/// hands requests to `on_msg`, and polls as `settings` say. Workers'
/// frames go through `intake`, if given (road_intake.hpp).
class road_listener {
public:
  static caf::expected<std::unique_ptr<road_listener>>
  start(const std::string& host, uint16_t port, uint32_t send_timeout_ms,
        road_settings settings, std::shared_ptr<road_keyring> keys,
        road_handler on_msg, std::shared_ptr<road_intake> intake = nullptr);
  ~road_listener();
  /// What the server advertises in its Register.
  const road_info& info() const { return info_; }
  /// Live connections (for tests and logs).
  size_t connections() const;
  /// Tcp reply connections offered and not yet taken (for tests).
  size_t reply_connections_waiting() const;
  /// Connections still in their handshake that a listener keeps at most:
  /// a new one past these ends the oldest, so strangers that connect and
  /// stay silent cannot hold the listener against members (who finish in
  /// milliseconds).
  static constexpr size_t max_unadmitted = 64;

private:
  road_listener() = default;
  /// Listens on the shm road's abstract unix socket, if it can; else the
  /// listener is TCP only.
  void listen_unix();
  void accept_loop();
  void accept_one(int lfd, road_kind kind);
  void start_conn(int fd, road_kind kind);
  /// Connections a listener keeps at most; more are refused.
  static constexpr size_t max_connections = 1024;
  /// Ends the oldest connection still in its handshake if there are
  /// max_unadmitted of them.
  void evict_unadmitted();
  /// Drops an ended connection: its rings go once its messages are gone.
  void forget(uint64_t serial);

  road_info info_;
  std::shared_ptr<road_pairing> pairing_;
  std::shared_ptr<road_keyring> keys_;
  std::shared_ptr<road_intake> intake_;
  int tcp_fd_ = -1;
  int unix_fd_ = -1;
  int wake_fd_ = -1; // eventfd that ends accept_loop
  uint32_t send_timeout_ms_ = 0;
  road_settings settings_; // of every connection accepted
  road_handler on_msg_;
  mutable std::mutex mtx_;
  std::vector<road_conn_ptr> conns_;
  std::thread acceptor_;
};

} // namespace troupe

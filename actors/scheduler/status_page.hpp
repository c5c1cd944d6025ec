// The scheduler's status page (--cluster.status-port): one HTML page that
// polls /status.json, served by civetweb. It shows the cluster view, each
// member's health (its last event), the event timeline, and the training
// curves from rank 0's "progress" events. The scheduler actor hands it
// each view and event; civetweb's threads read under a lock.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "messages/membership.hpp"

class CivetServer;

namespace troupe {

class status_page {
public:
  /// Serves at host:port (http); null and `why` set if it cannot.
  static std::shared_ptr<status_page> start(const std::string& host,
                                            uint16_t port, std::string& why);
  ~status_page();

  void set_view(const cluster_view& v);
  void add_event(const event_record& e);

  /// What /status.json answers now (made by the last set_view or
  /// add_event, on the scheduler's thread; civetweb's only copy it).
  std::string json() const;

  /// The page itself.
  static const std::string& html();

private:
  status_page() = default;
  /// Renders the state into snapshot_.
  void publish();
  std::string render() const;
  mutable std::mutex mtx_; // guards snapshot_
  std::string snapshot_ = "{}";
  // The scheduler's thread alone:
  cluster_view view_;
  std::vector<event_record> events_;   // the last max_events
  std::vector<event_record> progress_; // every "progress" event
  std::unique_ptr<CivetServer> server_;
  struct handler;
  std::unique_ptr<handler> handler_;
};

} // namespace troupe

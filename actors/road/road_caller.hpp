// A blocking caller that reads its own replies: the scope that marks its
// sends, and the guard that gives the road back (road_conn's turn
// machine, actors/road/road_conn.hpp).
#pragma once

#include <utility>
#include <vector>

#include "actors/road/road_conn.hpp"

namespace troupe {

/// While it lives, the road sends of this thread are a blocking caller's,
/// which will read their replies itself (road_conn::pump_once): they leave
/// a connection with callers, and the scope notes which they went on. A
/// caller reads one connection at most (claim_only_conn); when the scope
/// ends, the others go back to their reader threads if replies are due.
class road_caller_scope {
public:
  road_caller_scope();
  ~road_caller_scope();
  road_caller_scope(const road_caller_scope&) = delete;
  road_caller_scope& operator=(const road_caller_scope&) = delete;
  /// The one connection sent on in this scope, which the caller then
  /// reads and gives up with caller_done; null if none or several.
  road_conn_ptr claim_only_conn();
  /// Every connection sent on in this scope.
  const std::vector<road_conn_ptr>& conns() const { return conns_; }
  /// Notes a send on `c` (road_conn does, on the sending thread).
  void note(road_conn_ptr c);
  /// The scope of this thread, or null.
  static road_caller_scope* current();

private:
  road_caller_scope* outer_;
  std::vector<road_conn_ptr> conns_;
  bool claimed_ = false;
};

/// Gives the road a caller read (pump_once) back when it goes
/// (road_conn::caller_done): the reader thread's again if replies are due.
/// Empty, it does nothing.
struct road_caller_done {
  road_conn_ptr conn;
  road_caller_done() = default;
  explicit road_caller_done(road_conn_ptr c) : conn(std::move(c)) {}
  road_caller_done(const road_caller_done&) = delete;
  road_caller_done& operator=(const road_caller_done&) = delete;
  ~road_caller_done() {
    if (conn)
      conn->caller_done();
  }
};

} // namespace troupe

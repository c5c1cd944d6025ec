// A worker's end of the road: dialling a server's road listener, over
// shared memory on the same machine, else over TCP.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <caf/expected.hpp>

#include "actors/road/road_auth.hpp"
#include "actors/road/road_conn.hpp"
#include "actors/road/road_settings.hpp"
#include "actors/road/road_wire.hpp"
#include "messages/membership.hpp"

namespace troupe {

/// How long road_dial waits, at most, for the connection and then for
/// the server's hello: a connect on one machine or a LAN takes
/// milliseconds, and a road port that a firewall drops (CAF's port open)
/// costs a worker this long per server before CAF carries that server's
/// frames, not its request timeout.
constexpr uint32_t road_dial_deadline_ms = 2000;

/// Connects a worker to a server's road: shm when `want` is shm and the
/// server is on this machine, else tcp (with a reply connection of its
/// own unless `settings.single_conn`). Waits up to `timeout_ms`, and at
/// most road_dial_deadline_ms, for the connection and the server's hello
/// together (a failed shm connect, before tcp, may take as long again);
/// `timeout_ms` bounds the connection's sends. The connection's reader
/// and callers poll as `settings` say. Each socket opens with the
/// handshake that proves `cred` (road_auth.hpp).
caf::expected<road_conn_ptr>
road_dial(const std::string& host, const road_info& info, road_kind want,
          size_t ring_bytes, uint32_t timeout_ms, road_settings settings,
          const road_credential& cred, road_handler on_msg,
          road_down_handler on_down);

} // namespace troupe

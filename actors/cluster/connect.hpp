// How a node reaches its peers over CAF: plain, or mutual TLS where
// node_config loaded CAF's openssl module (--openssl.*). Every publish and
// connect of a node goes through here, so a TLS node never opens a
// plaintext port or connection. Every node but the scheduler starts with
// connect_scheduler.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/node_id.hpp>
#include <caf/sec.hpp>

namespace troupe {

/// True if this node speaks TLS to its peers.
bool speaks_tls(caf::actor_system& sys);

/// The actor that makes this node's connections (connect_atom): CAF's
/// openssl middleman with TLS, else the plain one.
caf::io::middleman_actor connector(caf::actor_system& sys);

/// The files of a node's TLS identity in `dir`, as deploy/make-certs.sh
/// names them (node.pem, node.key, ca.pem).
struct tls_files {
  std::string certificate, key, cafile;
};
tls_files tls_files_in(const std::string& dir);

/// Whether OpenSSL can load `f` as CAF's TLS sessions will (the chain,
/// the key, with `passphrase` if it is encrypted, that key belonging to the
/// certificate, the trusted CAs of the cafile and of `capath`, which the
/// certificate must verify against): "" if so, else one line naming the
/// file and OpenSSL's reason. CAF 0.17 finds out only at its first
/// session, and then throws in its multiplexer: the node hung.
std::string check_tls_identity(const tls_files& f,
                               const std::string& passphrase,
                               const std::string& capath = "");

/// The three --openssl.* flags that name tls_files_in(dir).
std::vector<std::string> tls_flags_for(const std::string& dir);

/// Publishes `whom` on host:port (0 = any free port; with `reuse`,
/// SO_REUSEADDR), over TLS where this node speaks it: the port.
caf::expected<uint16_t> publish_actor(caf::actor_system& sys,
                                      const caf::actor& whom, uint16_t port,
                                      const std::string& host, bool reuse);

/// True for the error CAF 0.17 gives a new connection whose handshake a
/// heartbeat tick (--middleman.heartbeat-interval) found unfinished:
/// sec::connection_timeout. Its pending connection's last-seen time is
/// never set, so the first tick takes it for a silent peer, whatever
/// --middleman.connection-timeout says (a peer short of CPU failed 19
/// connections of 20, each within one interval; tests/cluster/
/// connect_retry_test.cpp shows it). The tick that cut it has just
/// passed, so a new try at once has a whole interval for its handshake.
bool tick_cut_handshake(const caf::error& err);

/// How long connect_scheduler waits before its next try when the last
/// `cuts` tries in a row were cut by a tick (tick_cut_handshake): none
/// after the first (the tick has just passed), then a random part of a
/// bound that doubles from 100 ms up to 1.6 s. Trying again at once every
/// time was a storm: eight nodes starting on two cores opened 40
/// connections a second, the scheduler spent its multiplexer on TLS
/// sessions of tries already given up, first come first served, and no
/// handshake ended within an interval any more (pipeline_hybrid_test hung
/// that way). `random` is any number; the wait is `random` modulo the
/// bound, so that nodes cut together spread out.
std::chrono::milliseconds pause_after_cuts(int cuts, uint32_t random);

/// Whether the peer of the connected socket `fd` has closed its end (its
/// data may still be unread): a TLS session of such a connection is not
/// begun (see connect.cpp).
bool peer_closed(int fd);

/// Connects `self` to the actor published at host:port over this node's
/// connector (TLS where it speaks it), with `limit` per try. A try a
/// heartbeat tick cut (tick_cut_handshake) is made again at once, up to
/// `tries` in all; then `ok` gets the actor (null if none is published
/// there), or `failed` the last error.
template <class Self, class Ok, class Failed>
void connect_actor(Self* self, std::string host, uint16_t port,
                   caf::timespan limit, Ok ok, Failed failed, int tries = 4) {
  self->request(connector(self->home_system()), limit, caf::connect_atom_v,
                host, port)
      .then([ok](const caf::node_id&, caf::strong_actor_ptr& ptr,
                 const std::set<std::string>&) mutable { ok(ptr); },
            [self, host, port, limit, ok, failed,
             tries](caf::error& err) mutable {
              if (tries > 1 && tick_cut_handshake(err)) {
                connect_actor(self, std::move(host), port, limit, std::move(ok),
                              std::move(failed), tries - 1);
                return;
              }
              failed(err);
            });
}

/// Connects to a scheduler at host:port, retrying for up to `wait_ms`
/// while it starts, or until `*stop` turns true (SIGTERM to a node that
/// waits: it ended only when the wait did). Errors say where and why.
caf::expected<caf::actor>
connect_scheduler(caf::actor_system& sys, const std::string& host,
                  uint16_t port, uint32_t wait_ms,
                  const std::atomic<bool>* stop = nullptr);

} // namespace troupe

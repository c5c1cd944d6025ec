// How a node reaches its peers over CAF: plain, or mutual TLS where
// node_config loaded CAF's openssl module (--openssl.*). Every publish and
// connect of a node goes through here, so a TLS node never opens a
// plaintext port or connection. Every node but the scheduler starts with
// connect_scheduler.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/io/middleman_actor.hpp>

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

/// The three --openssl.* flags that name tls_files_in(dir).
std::vector<std::string> tls_flags_for(const std::string& dir);

/// Publishes `whom` on host:port (0 = any free port; with `reuse`,
/// SO_REUSEADDR), over TLS where this node speaks it: the port.
caf::expected<uint16_t> publish_actor(caf::actor_system& sys,
                                      const caf::actor& whom, uint16_t port,
                                      const std::string& host, bool reuse);

/// Connects to a scheduler at host:port, retrying for up to `wait_ms`
/// while it starts. Errors say where and why.
caf::expected<caf::actor> connect_scheduler(caf::actor_system& sys,
                                            const std::string& host,
                                            uint16_t port, uint32_t wait_ms);

} // namespace troupe

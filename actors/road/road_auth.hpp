// Who may use a road: the handshake that opens every road connection,
// before its hello. The dialling member names itself (role and rank) and
// proves that it holds the token the scheduler issued it; the listening
// server proves in turn that it knows the cluster's key, which the
// scheduler gave it at registration. Neither sends the token itself:
//
//   dialler  -> listener : "TRAU", role, rank, nonce_d (48 bytes)
//   listener -> dialler  : nonce_l, HMAC(token, "listener" | first | nonce_l)
//   dialler  -> listener : HMAC(token, "member" | first | nonce_l)
//
// token = member_token(cluster key, member). A connection that fails the
// handshake, or does not finish it within road_hello_timeout_ms, is closed
// before anything else is read from it; one that passes is bound to its
// member for its life (road_conn::member), and the server refuses
// requests that name another one (not_a_member). The handshake
// authenticates; frames after it travel as they are (docs/trust.md).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/base/member_secret.hpp"

namespace troupe {

/// How long a listener gives an accepted connection to finish the
/// handshake and its hello: the dialler gives up after
/// road_dial_deadline_ms, so this only ends strangers' connections.
constexpr uint32_t road_hello_timeout_ms = 5000;

/// What a member dials with: who it is and the token it was issued.
struct road_credential {
  member_id who;
  secret token{};
};

/// The cluster key a server's listener checks tokens against. The
/// listener starts before its server registers (the server advertises it
/// there), so the key comes later: a handshake that arrives first waits
/// for it.
class road_keyring {
public:
  void set(const secret& key);
  /// The key, once set; waits until `deadline` for it.
  std::optional<secret> wait(std::chrono::steady_clock::time_point deadline);

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  std::optional<secret> key_;
};

/// The dialler's side on connected socket `fd`: proves `cred`, and checks
/// that the listener knows the cluster's key. Waits until `deadline`.
caf::error prove_member(int fd, const road_credential& cred,
                        std::chrono::steady_clock::time_point deadline);

/// The listener's side on accepted socket `fd`: the member that proved
/// itself with a token under the key of `keys`. Waits until `deadline`.
caf::expected<member_id>
check_member(int fd, road_keyring& keys,
             std::chrono::steady_clock::time_point deadline);

} // namespace troupe

// Secrets of membership: the key a scheduler makes when it starts, and the
// token of each member derived from it, with which the member proves
// itself on the fast road (actors/road/road_auth.hpp). A server gets the
// key (it checks any member's token); a worker gets only its own token.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "messages/membership.hpp"

namespace troupe {

/// 32 bytes of key material (HMAC-SHA256 keys and MACs).
using secret = std::array<uint8_t, 32>;

/// A member as the scheduler admitted it: its role and rank.
struct member_id {
  role kind = role::worker;
  uint32_t rank = 0;
  bool operator==(const member_id& y) const {
    return kind == y.kind && rank == y.rank;
  }
};

/// "worker 3", "server 0".
std::string to_string(member_id x);

/// A fresh secret from the kernel's random source. Throws
/// std::runtime_error if there is none.
secret random_secret();

/// HMAC-SHA256 (OpenSSL) of the `n` bytes at `data` under `key`.
secret hmac(const secret& key, const void* data, size_t n);

/// The token of member `who` under cluster key `key`.
secret member_token(const secret& key, member_id who);

/// True if `a` equals `b`, in a time that does not tell where they differ.
bool same_secret(const secret& a, const secret& b);

/// `x` as the bytes of a message field, and back: false if `bytes` is not
/// a secret's length.
std::string secret_bytes(const secret& x);
bool secret_from_bytes(const std::string& bytes, secret& x);

} // namespace troupe

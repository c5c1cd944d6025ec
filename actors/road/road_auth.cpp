// The road handshake (road_auth.hpp) on plain blocking sockets.
#include "actors/road/road_auth.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "actors/base/log.hpp"
#include "actors/road/road_internal.hpp"
#include "messages/errors.hpp"

namespace troupe {

using namespace road_detail;

namespace {

constexpr uint32_t auth_magic = 0x55415254; // "TRAU" on the wire

/// The dialler's first message.
struct auth_hello {
  uint32_t magic = auth_magic;
  uint8_t kind = 0;
  uint8_t zero[3] = {0, 0, 0};
  uint32_t rank = 0;
  uint32_t zero2 = 0;
  secret nonce{};
};
static_assert(sizeof(auth_hello) == 48, "48 bytes on the wire");

/// The listener's answer: its nonce and its proof.
struct auth_answer {
  secret nonce{};
  secret proof{};
};
static_assert(sizeof(auth_answer) == 64, "64 bytes on the wire");

/// HMAC(token, label | first | nonce): each side's proof.
secret proof_of(const secret& token, const char (&label)[9],
                const auth_hello& first, const secret& nonce) {
  uint8_t msg[sizeof(label) + sizeof(first) + sizeof(nonce)];
  std::memcpy(msg, label, sizeof(label));
  std::memcpy(msg + sizeof(label), &first, sizeof(first));
  std::memcpy(msg + sizeof(label) + sizeof(first), nonce.data(), nonce.size());
  return hmac(token, msg, sizeof(msg));
}

constexpr char listener_label[9] = "listener";
constexpr char member_label[9] = "member\0\0";

/// Reads `n` bytes into `buf` by `deadline`.
bool read_by(int fd, void* buf, size_t n,
             std::chrono::steady_clock::time_point deadline) {
  set_timeout(fd, SO_RCVTIMEO, ms_until(deadline));
  auto ok = recv_all(fd, buf, n);
  set_timeout(fd, SO_RCVTIMEO, 0);
  return ok;
}

caf::error write(int fd, const void* buf, size_t n) {
  std::vector<iovec> iov{{const_cast<void*>(buf), n}};
  return send_all(fd, iov);
}

caf::error refused(const std::string& why) {
  return caf::make_error(errc::not_a_member, "road handshake: " + why);
}

} // namespace

void road_keyring::set(const secret& key) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    key_ = key;
  }
  cv_.notify_all();
}

std::optional<secret>
road_keyring::wait(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> guard{mtx_};
  cv_.wait_until(guard, deadline, [this] { return key_.has_value(); });
  return key_;
}

caf::error prove_member(int fd, const road_credential& cred,
                        std::chrono::steady_clock::time_point deadline) {
  auth_hello first;
  first.kind = static_cast<uint8_t>(cred.who.kind);
  first.rank = cred.who.rank;
  try {
    first.nonce = random_secret();
  } catch (const std::exception& e) {
    return refused(e.what());
  }
  if (auto err = write(fd, &first, sizeof(first)))
    return err;
  auth_answer answer;
  if (!read_by(fd, &answer, sizeof(answer), deadline))
    return refused("the server did not answer (it does not know us, or it"
                   " is not a troupe road)");
  if (!same_secret(answer.proof,
                   proof_of(cred.token, listener_label, first, answer.nonce)))
    return refused("the server does not know this cluster's key (a server"
                   " of another cluster, or a stranger on its port)");
  auto mine = proof_of(cred.token, member_label, first, answer.nonce);
  return write(fd, mine.data(), mine.size());
}

caf::expected<member_id>
check_member(int fd, road_keyring& keys,
             std::chrono::steady_clock::time_point deadline) {
  auth_hello first;
  if (!read_by(fd, &first, sizeof(first), deadline))
    return refused("no credentials in time");
  if (first.magic != auth_magic)
    return refused("not a troupe member's handshake");
  if (first.kind != static_cast<uint8_t>(role::server) &&
      first.kind != static_cast<uint8_t>(role::worker))
    return refused("not a server's or a worker's");
  member_id who{static_cast<role>(first.kind), first.rank};
  auto key = keys.wait(deadline);
  if (!key)
    return refused("this server has not joined its cluster yet");
  auth_answer answer;
  try {
    answer.nonce = random_secret();
  } catch (const std::exception& e) {
    return refused(e.what());
  }
  auto token = member_token(*key, who);
  answer.proof = proof_of(token, listener_label, first, answer.nonce);
  if (auto err = write(fd, &answer, sizeof(answer)))
    return err;
  secret theirs;
  if (!read_by(fd, theirs.data(), theirs.size(), deadline))
    return refused(str("no proof from ", to_string(who), " in time"));
  if (!same_secret(theirs, proof_of(token, member_label, first, answer.nonce)))
    return refused(
        str("a wrong token for ", to_string(who), " (not a member)"));
  return who;
}

} // namespace troupe

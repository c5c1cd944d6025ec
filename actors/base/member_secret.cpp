// Membership secrets on OpenSSL's HMAC and the kernel's random source.
#include "actors/base/member_secret.hpp"

#include <sys/random.h>

#include <cstring>
#include <stdexcept>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace troupe {

std::string to_string(member_id x) {
  return std::string{to_string(x.kind)} + " " + std::to_string(x.rank);
}

secret random_secret() {
  secret out;
  size_t got = 0;
  while (got < out.size()) {
    auto n = ::getrandom(out.data() + got, out.size() - got, 0);
    if (n <= 0)
      throw std::runtime_error("no random bytes for a secret");
    got += static_cast<size_t>(n);
  }
  return out;
}

secret hmac(const secret& key, const void* data, size_t n) {
  secret out{};
  unsigned len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            static_cast<const unsigned char*>(data), n, out.data(), &len) ||
      len != out.size())
    throw std::runtime_error("HMAC-SHA256 failed");
  return out;
}

secret member_token(const secret& key, member_id who) {
  // A label keeps tokens apart from every other MAC made with the key.
  uint8_t msg[24] = "troupe member token";
  msg[19] = static_cast<uint8_t>(who.kind);
  std::memcpy(msg + 20, &who.rank, sizeof(who.rank));
  return hmac(key, msg, sizeof(msg));
}

bool same_secret(const secret& a, const secret& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string secret_bytes(const secret& x) {
  return std::string(reinterpret_cast<const char*>(x.data()), x.size());
}

bool secret_from_bytes(const std::string& bytes, secret& x) {
  if (bytes.size() != x.size())
    return false;
  std::memcpy(x.data(), bytes.data(), x.size());
  return true;
}

} // namespace troupe

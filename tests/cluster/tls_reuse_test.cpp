// CAF 0.17 decodes a node's key, certificate chain and CA file again for
// every TLS session it begins (fault 3 of actors/cluster/connect.cpp);
// connect.cpp keeps what was decoded and gives it to the next context while
// the files hold the same bytes. Contexts made as CAF makes them share it,
// still refuse what they refused, decode a file written anew, and complete
// a mutual handshake with what they share.
#define BOOST_TEST_MODULE tls_reuse_tests
#include <boost/test/unit_test.hpp>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "actors/cluster/connect.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using troupe::test::temp_dir;

namespace {

using ctx_ptr = std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)>;

/// Certificates of one CA in `dir` (deploy/make-certs.sh), for `names`.
void make_certs(const std::string& dir, const std::string& names) {
  auto cmd = std::string{TROUPE_SOURCE_DIR "/deploy/make-certs.sh '"} + dir +
             "' " + names + " >/dev/null";
  BOOST_REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
}

/// A context loaded as a CAF 0.17 session loads one: the chain, the key,
/// the CA file, through the calls connect.cpp wraps. Null if a call failed.
ctx_ptr load(const std::string& dir, const std::string& name,
             const std::string& key_name = "") {
  ctx_ptr ctx{SSL_CTX_new(TLS_method()), &SSL_CTX_free};
  BOOST_REQUIRE(ctx);
  auto cert = dir + "/" + name + ".pem", ca = dir + "/ca.pem";
  auto key = dir + "/" + (key_name.empty() ? name : key_name) + ".key";
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM) !=
          1 ||
      SSL_CTX_load_verify_locations(ctx.get(), ca.c_str(), nullptr) != 1) {
    ERR_clear_error();
    return {nullptr, &SSL_CTX_free};
  }
  SSL_CTX_set_verify(
      ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return ctx;
}

/// The key in `path`, read without the wrapped calls.
std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>
key_in(const std::string& path) {
  std::unique_ptr<FILE, decltype(&std::fclose)> f{std::fopen(path.c_str(), "r"),
                                                  &std::fclose};
  BOOST_REQUIRE(f);
  return {PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr),
          &EVP_PKEY_free};
}

/// Whether a client of `client` and a server of `server` complete a TLS
/// handshake, each verifying the other, over a pair of memory BIOs.
bool handshake(SSL_CTX* client, SSL_CTX* server) {
  std::unique_ptr<SSL, decltype(&SSL_free)> c{SSL_new(client), &SSL_free};
  std::unique_ptr<SSL, decltype(&SSL_free)> s{SSL_new(server), &SSL_free};
  BIO *cb = nullptr, *sb = nullptr;
  BOOST_REQUIRE(BIO_new_bio_pair(&cb, 0, &sb, 0) == 1);
  SSL_set_bio(c.get(), cb, cb);
  SSL_set_bio(s.get(), sb, sb);
  SSL_set_connect_state(c.get());
  SSL_set_accept_state(s.get());
  for (int round = 0; round < 20; ++round) {
    auto rc = SSL_do_handshake(c.get());
    auto rs = SSL_do_handshake(s.get());
    if (rc == 1 && rs == 1)
      return true;
    auto blocked = [](SSL* ssl, int r) {
      auto e = SSL_get_error(ssl, r);
      return r == 1 || e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE;
    };
    if (!blocked(c.get(), rc) || !blocked(s.get(), rs))
      break;
  }
  ERR_clear_error();
  return false;
}

} // namespace

BOOST_AUTO_TEST_CASE(contexts_of_the_same_files_share_what_was_decoded) {
  temp_dir tmp;
  make_certs(tmp.path, "a");
  auto first = load(tmp.path, "a");
  auto second = load(tmp.path, "a");
  BOOST_REQUIRE(first && second);
  BOOST_CHECK(SSL_CTX_get0_privatekey(first.get()) ==
              SSL_CTX_get0_privatekey(second.get()));
  BOOST_CHECK(SSL_CTX_get0_certificate(first.get()) ==
              SSL_CTX_get0_certificate(second.get()));
  BOOST_CHECK(SSL_CTX_get_cert_store(first.get()) ==
              SSL_CTX_get_cert_store(second.get()));
  // What is shared works: each verifies the other in a handshake, and one
  // context freed leaves the other whole.
  BOOST_CHECK(handshake(first.get(), second.get()));
  first.reset();
  auto third = load(tmp.path, "a");
  BOOST_REQUIRE(third);
  BOOST_CHECK(handshake(second.get(), third.get()));
}

BOOST_AUTO_TEST_CASE(a_stranger_is_still_refused_with_a_shared_store) {
  temp_dir tmp, rogue;
  make_certs(tmp.path, "a");
  make_certs(rogue.path, "r");
  auto ours = load(tmp.path, "a");
  auto again = load(tmp.path, "a"); // the shared store
  auto theirs = load(rogue.path, "r");
  BOOST_REQUIRE(ours && again && theirs);
  BOOST_CHECK(!handshake(theirs.get(), again.get()));
  BOOST_CHECK(!handshake(again.get(), theirs.get()));
}

BOOST_AUTO_TEST_CASE(a_key_not_of_the_certificate_is_still_refused) {
  temp_dir tmp;
  make_certs(tmp.path, "a b");
  BOOST_REQUIRE(load(tmp.path, "a")); // a.key is kept
  BOOST_CHECK(!load(tmp.path, "b", "a"));
  BOOST_CHECK(load(tmp.path, "b"));
  BOOST_CHECK(!load(tmp.path, "a", "b")); // and now b.key
}

BOOST_AUTO_TEST_CASE(files_written_anew_are_decoded_anew) {
  temp_dir tmp, other;
  make_certs(tmp.path, "a");
  make_certs(other.path, "a");
  auto before = load(tmp.path, "a");
  BOOST_REQUIRE(before);
  // Another CA's identity, at the same paths: a rotation.
  namespace fs = std::filesystem;
  for (auto f : {"a.pem", "a.key", "ca.pem"})
    fs::copy_file(fs::path{other.path} / f, fs::path{tmp.path} / f,
                  fs::copy_options::overwrite_existing);
  auto after = load(tmp.path, "a");
  BOOST_REQUIRE(after);
  auto want = key_in(tmp.path + "/a.key");
  BOOST_REQUIRE(want);
  BOOST_CHECK(EVP_PKEY_eq(SSL_CTX_get0_privatekey(after.get()), want.get()) ==
              1);
  BOOST_CHECK(SSL_CTX_get_cert_store(before.get()) !=
              SSL_CTX_get_cert_store(after.get()));
  // The old identity and the new one are strangers to each other now.
  BOOST_CHECK(!handshake(before.get(), after.get()));
  BOOST_CHECK(handshake(after.get(), load(other.path, "a").get()));
}

BOOST_AUTO_TEST_CASE(a_file_that_cannot_be_read_fails_as_before) {
  temp_dir tmp;
  make_certs(tmp.path, "a");
  BOOST_REQUIRE(load(tmp.path, "a"));
  std::filesystem::remove(tmp.path + "/ca.pem");
  BOOST_CHECK(!load(tmp.path, "a"));
  std::filesystem::remove(tmp.path + "/a.key");
  BOOST_CHECK(!load(tmp.path, "a"));
}

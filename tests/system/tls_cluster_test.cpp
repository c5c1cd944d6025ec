// Mutual TLS between real troupe-node processes (CAF's openssl module):
// peers without the cluster's certificates are refused, refusing them
// costs the cluster nothing, and certificate flags that cannot work are
// one line and exit 2.
#define BOOST_TEST_MODULE tls_cluster_tests
#include <boost/test/unit_test.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/system/nodes.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

/// The port in a "... listening on HOST:PORT (pid N)" line of `p`.
uint16_t listening_port(child_process& p, const char* what) {
  auto line = p.wait_for_line(what, 20s);
  BOOST_REQUIRE_MESSAGE(line, p.output());
  auto colon = line->rfind(':');
  return static_cast<uint16_t>(std::stoi(line->substr(colon + 1)));
}

/// A stranger that speaks plain TCP to `port`: it writes bytes that are no
/// TLS record and waits (bounded) for the port to close on it.
void plaintext_stranger(uint16_t port) {
  int fd = connect_loopback(port, 10);
  const char junk[] = "GET / HTTP/1.1\r\nHost: troupe\r\n\r\nnot a TLS peer";
  ::send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
  char buf[256];
  while (::recv(fd, buf, sizeof(buf), 0) > 0) {
  }
  ::close(fd);
}

/// A stranger that connects to `port` and says nothing: true if the port
/// closes on it within 20 s. (CAF 0.17 kept such a connection for good, in
/// a handshake that kept a core busy.)
bool silent_stranger_is_dropped(uint16_t port) {
  int fd = connect_loopback(port, 20);
  char buf[64];
  auto n = ::recv(fd, buf, sizeof(buf), 0);
  ::close(fd);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

/// A worker of `steps` counter clocks with `flags` for TLS.
std::vector<std::string> counter_worker(const scheduler_process& s,
                                        std::vector<std::string> flags) {
  std::vector<std::string> args{
      node_bin, "--role=worker",     "--worker.task=counter",
      s.flag(), "--worker.steps=10", "--kv.request-timeout-ms=5000"};
  args.insert(args.end(), fast_heartbeats.begin(), fast_heartbeats.end());
  args.insert(args.end(), flags.begin(), flags.end());
  return args;
}

/// TLS flags a scheduler must refuse at start, and what it must say.
struct bad_case {
  std::vector<std::string> flags;
  std::string says;
};

/// Checks that a scheduler given `c.flags` exits 2 saying `c.says`; its
/// output.
std::string refused(const bad_case& c) {
  std::vector<std::string> args{node_bin, "--role=scheduler",
                                "--scheduler-port=0"};
  args.insert(args.end(), c.flags.begin(), c.flags.end());
  child_process p{args};
  auto rc = p.wait_exit(20s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_EQUAL(*rc, 2);
  BOOST_CHECK_MESSAGE(p.output().find(c.says) != std::string::npos, p.output());
  return p.output();
}

} // namespace

BOOST_AUTO_TEST_SUITE(tls_cluster_tests)

BOOST_AUTO_TEST_CASE(a_tls_cluster_refuses_peers_without_its_certificates) {
  // At bc0f027 --openssl.* did nothing and every port spoke plain BASP.
  scheduler_process s{1, 1}; // TLS, as node_args gives every node
  auto srv = start_server(s, "sync");
  auto server_port = listening_port(*srv, "server listening on");
  auto ca = test_certs + "/ca.pem";
  struct refused_peer {
    const char* who;
    std::vector<std::string> args;
  };
  const refused_peer peers[] = {
      {"a plaintext worker", counter_worker(s, {})},
      {"a worker of another CA", counter_worker(s, tls_flags(rogue_certs))},
      // A TLS client without a certificate, to each port.
      {"a certless client (scheduler)",
       {"/usr/bin/openssl", "s_client", "-connect",
        "127.0.0.1:" + std::to_string(s.port), "-CAfile", ca, "-tls1_2"}},
      {"a certless client (server)",
       {"/usr/bin/openssl", "s_client", "-connect",
        "127.0.0.1:" + std::to_string(server_port), "-CAfile", ca, "-tls1_2"}}};
  for (auto& peer : peers) {
    child_process p{peer.args};
    auto rc = p.wait_exit(30s);
    BOOST_REQUIRE_MESSAGE(rc, peer.who << " did not end: " << p.output());
    BOOST_CHECK_MESSAGE(*rc != 0, peer.who << " got in: " << p.output());
  }
  plaintext_stranger(s.port);
  plaintext_stranger(server_port);
  BOOST_CHECK_MESSAGE(silent_stranger_is_dropped(s.port),
                      "a silent connection held the scheduler's port");
  // Refusing them cost the cluster nothing: CAF 0.17 left each failed
  // handshake's errors queued, and the next read of a live connection on
  // that thread failed (the server lost the scheduler and stopped).
  auto w = start_counter(s, 20);
  auto rc = w->wait_exit(60s);
  BOOST_REQUIRE_MESSAGE(rc, "worker did not finish: " << w->output());
  BOOST_CHECK_MESSAGE(*rc == 0, w->output());
  BOOST_CHECK_MESSAGE(w->output().find("sums exact") != std::string::npos,
                      w->output());
  BOOST_CHECK_MESSAGE(!srv->wait_exit(0ms),
                      "the server stopped: " << srv->output());
}

BOOST_AUTO_TEST_CASE(
    certificate_flags_that_cannot_work_are_one_line_and_exit_2) {
  auto certs = tls_flags();
  // PEM files OpenSSL cannot load as asked: at fbf4dac they passed the
  // check of the first line, and CAF threw at its first session (the
  // scheduler listened with them; a worker hung).
  troupe::test::temp_dir dir;
  auto fake = dir / "fake.pem";
  std::ofstream{fake} << "-----BEGIN CERTIFICATE-----\ngarbage\n"
                         "-----END CERTIFICATE-----\n";
  // A key cut short, and a certificate of the right CA out of date: they
  // got the hints of an encrypted key, and of another CA.
  auto torn = dir / "torn.key";
  {
    std::ifstream key{test_certs + "/node.key"};
    std::string text{std::istreambuf_iterator<char>{key}, {}};
    std::ofstream{torn} << text.substr(0, text.size() / 2);
  }
  auto expired = dir / "expired.pem";
  for (auto cmd : std::vector<std::vector<std::string>>{
           {"/usr/bin/openssl", "req", "-new", "-key", test_certs + "/node.key",
            "-subj", "/CN=troupe-node", "-out", dir / "node.csr"},
           {"/usr/bin/openssl", "x509", "-req", "-in", dir / "node.csr", "-CA",
            test_certs + "/ca.pem", "-CAkey", test_certs + "/ca.key",
            "-set_serial", "7", "-days", "-1", "-out", expired}}) {
    child_process made{cmd};
    auto rc = made.wait_exit(20s);
    BOOST_REQUIRE_MESSAGE(rc && *rc == 0, made.output());
  }
  const bad_case cases[] = {
      {{"--openssl.certificate=/nonexistent/node.pem", certs[1], certs[2]},
       "--openssl.certificate=/nonexistent/node.pem: cannot read it"},
      {{certs[0], certs[1], "--openssl.cafile=/etc/hostname"},
       "--openssl.cafile=/etc/hostname: not a PEM file"},
      {{certs[0], certs[1]}, "missing: --openssl.cafile"},
      {{"--openssl.certificate=" + fake, certs[1], certs[2]},
       "--openssl.certificate=" + fake +
           ": not a certificate OpenSSL can load (error:"},
      {{certs[0], "--openssl.key=" + test_certs + "/ca.key", certs[2]},
       "--openssl.key=" + test_certs +
           "/ca.key is not the key of"
           " --openssl.certificate=" +
           test_certs + "/node.pem"},
      {{certs[0], "--openssl.key=" + fake, certs[2]},
       "--openssl.key=" + fake + ": not a private key OpenSSL can load"},
      {{certs[0], certs[1], "--openssl.cafile=" + test_certs + "/node.key"},
       "--openssl.cafile=" + test_certs +
           "/node.key: no CA certificates OpenSSL can load"},
      {{"--openssl.cafile=" + test_certs + "/ca.pem"},
       "missing: --openssl.certificate and --openssl.key"},
      // Another CA's certificate, or the node's own named as the CA: the
      // scheduler listened, and every peer's handshake failed.
      {{"--openssl.certificate=" + rogue_certs + "/node.pem",
        "--openssl.key=" + rogue_certs + "/node.key", certs[2]},
       "--openssl.certificate=" + rogue_certs +
           "/node.pem does not verify against " + certs[2] + " ("},
      {{certs[0], certs[1], "--openssl.cafile=" + test_certs + "/node.pem"},
       "does not verify against --openssl.cafile=" + test_certs + "/node.pem"},
      {{"--openssl.certificate=" + dir.path, certs[1], certs[2]},
       "--openssl.certificate=" + dir.path + " is a folder: name a PEM file"},
      {{certs[0], "--openssl.key=" + torn, certs[2]},
       "--openssl.key=" + torn + ": not a private key OpenSSL can load ("},
      {{"--openssl.certificate=" + expired, certs[1], certs[2]},
       "(certificate has expired): every peer would refuse it; make new"
       " certificates (deploy/make-certs.sh), or set this machine's clock"}};
  for (auto& c : cases) {
    auto out = refused(c);
    // Only a key that says it is encrypted gets that hint.
    BOOST_CHECK_MESSAGE(out.find("passphrase") == std::string::npos, out);
  }
}

BOOST_AUTO_TEST_CASE(
    an_encrypted_key_needs_its_passphrase_and_a_plain_one_none) {
  auto certs = tls_flags();
  troupe::test::temp_dir dir;
  auto locked = dir / "node.key.enc";
  child_process seal{{"/usr/bin/openssl", "pkey", "-in",
                      test_certs + "/node.key", "-aes256", "-passout",
                      "pass:open sesame", "-out", locked}};
  auto sealed = seal.wait_exit(20s);
  BOOST_REQUIRE_MESSAGE(sealed && *sealed == 0, seal.output());
  const bad_case cases[] = {
      {{certs[0], "--openssl.key=" + locked, certs[2]},
       "; an encrypted key needs --openssl.passphrase)"},
      {{certs[0], "--openssl.key=" + locked, certs[2],
        "--openssl.passphrase=open sesam"},
       "--openssl.key=" + locked + ": not a private key OpenSSL can load"},
      // The passphrase was taken and protected nothing, without a word.
      {{certs[0], certs[1], certs[2], "--openssl.passphrase=open sesame"},
       "--openssl.passphrase is given, but " + certs[1] + " is not encrypted"}};
  for (auto& c : cases)
    refused(c);
  // With its passphrase the scheduler's sessions use the key: a cluster of
  // plain keys trains with it.
  auto args = node_args({"--role=scheduler", "--scheduler-port=0",
                         "--cluster.servers=1", "--cluster.workers=1", certs[0],
                         "--openssl.key=" + locked, certs[2],
                         "--openssl.passphrase=open sesame"},
                        false);
  scheduler_process s{std::make_unique<child_process>(args)};
  auto srv = start_server(s, "sync");
  auto w = start_counter(s, 10);
  auto rc = w->wait_exit(60s);
  BOOST_REQUIRE_MESSAGE(rc, "worker did not finish: " << w->output());
  BOOST_CHECK_MESSAGE(*rc == 0 &&
                          w->output().find("sums exact") != std::string::npos,
                      w->output());
}

BOOST_AUTO_TEST_SUITE_END()

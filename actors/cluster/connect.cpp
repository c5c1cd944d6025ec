// Plain or TLS connections to peers, and reaching the scheduler with
// back-off while it starts.
#include "actors/cluster/connect.hpp"

#include <dlfcn.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/openssl/remote_actor.hpp>

#include "actors/base/log.hpp"
#include "messages/errors.hpp"

// Three faults of CAF 0.17's TLS sessions (libcaf_openssl), mended here by
// wrapping seven OpenSSL calls they make: the dynamic linker picks these
// before libssl's for every library of the process, and every program that
// publishes or connects over TLS links this file.
//
// 1. They never clear OpenSSL's per-thread error queue, and SSL_get_error
//    reports SSL_ERROR_SSL for any call while it holds an error. So a
//    failed handshake (a plaintext or certless peer) left its errors
//    behind, and the next read of a live peer's connection on that thread
//    looked failed: one stranger's attempt cut the scheduler off a server.
//    Each call now starts with a clear queue, as OpenSSL asks of callers.
// 2. A connection in its handshake keeps the multiplexer busy (a full core)
//    until the handshake ends, and a peer that connects and stays silent
//    never ends it. A handshake now has tls_handshake_limit: past it, the
//    socket is shut, and CAF drops the connection at its next call. Where
//    the node connects, the spin now waits for the peer (await_peer).
// 3. CAF builds a TLS context for each connection it accepts (the key and
//    certificates read again) and signs its part of the handshake at once:
//    about 3 ms of the multiplexer each (2 ms the context, 1 ms an RSA-2048
//    signature), many more on a busy machine. A peer that gave up while the
//    connection waited in the listen queue (a heartbeat tick cuts a
//    handshake: tick_cut_handshake) cost as much, and a queue of those kept
//    the multiplexer from the live ones. The first SSL_accept of a
//    connection whose peer has closed its end now fails at once, and the
//    key, the certificate chain and the CA store are decoded once and then
//    shared while their files hold the same bytes (reused_files).
namespace {

constexpr auto tls_handshake_limit = std::chrono::seconds{3};

template <class Fn> Fn next_ssl_function(const char* name) {
  auto* fn = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
  if (!fn)
    std::abort(); // libssl is linked: it has them
  return fn;
}

void free_started(void*, void* started, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<std::chrono::steady_clock::time_point*>(started);
}

/// Where a session keeps when its handshake started.
int started_index() {
  static const int index =
      SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, free_started);
  return index;
}

/// Clears the error queue; shuts the socket of a handshake past its limit.
void before_ssl_call(SSL* ssl) {
  ERR_clear_error();
  if (SSL_is_init_finished(ssl))
    return;
  using clock = std::chrono::steady_clock;
  auto now = clock::now();
  auto* started =
      static_cast<clock::time_point*>(SSL_get_ex_data(ssl, started_index()));
  if (!started) {
    SSL_set_ex_data(ssl, started_index(), new clock::time_point(now));
  } else if (now - *started > tls_handshake_limit) {
    auto fd = SSL_get_fd(ssl);
    TROUPE_LOG_LIMITED(warning, "tls", "ended a connection whose TLS handshake",
                       " took over ", tls_handshake_limit.count(), " s (fd ",
                       fd, ")");
    ::shutdown(fd, SHUT_RDWR);
    *started = clock::time_point::max() - tls_handshake_limit; // said once
  }
}

/// The spin of fault 2 where this node connects: the handshake waits for
/// the peer's next flight, and CAF calls again at once. Waiting here for up
/// to 1 ms leaves the core to the peer (on a busy machine, eight nodes
/// spinning so starved the ones they waited for that no handshake ended
/// within a heartbeat interval). The node chose the peer, so no stranger
/// can hold it. Where a node accepts, the spin only yields the core.
void await_peer(int fd) {
  if (fd < 0)
    return;
  pollfd p{fd, POLLIN, 0};
  ::poll(&p, 1, 1);
}

/// The bytes of `path`, or none where it cannot be read (then nothing is
/// shared: the call itself says why it fails). Reading is cheap; decoding
/// is what costs (OpenSSL 3 tries one decoder after another).
std::optional<std::string> contents_of(const char* path) {
  if (!path)
    return std::nullopt;
  std::ifstream in{path, std::ios::binary};
  std::string bytes{std::istreambuf_iterator<char>{in}, {}};
  if (!in.good() && !in.eof())
    return std::nullopt;
  return bytes;
}

/// What a decoded file came from: its path and its bytes, so that a file
/// written anew (a rotated certificate) is decoded anew.
struct file_seen {
  std::string path, bytes;
  bool is(const char* p, const std::optional<std::string>& b) const {
    return b && path == p && bytes == *b;
  }
};

/// The last key, chain and CA store CAF's sessions loaded (a node has one
/// identity), each with the file it came from. Sessions
/// start on the multiplexer's thread, checks on others: one lock.
struct reused_files {
  std::mutex lock;
  file_seen key_file;
  int key_type = 0;
  EVP_PKEY* key = nullptr;
  file_seen chain_file;
  X509* leaf = nullptr;
  STACK_OF(X509) * chain = nullptr;
  file_seen ca_file;
  X509_STORE* store = nullptr;
};

reused_files& reused() {
  static auto* r = new reused_files; // kept to the end: sessions outlive main
  return *r;
}

} // namespace

extern "C" {

// Fault 3: CAF decodes these files for every session. They are decoded by
// libssl once and kept; a context gets what is kept while its file is
// unchanged. Each still checks what it checked: the key against the
// certificate (SSL_CTX_use_PrivateKey), the chain as it was read.

int SSL_CTX_use_PrivateKey_file(SSL_CTX* ctx, const char* file, int type) {
  static auto next = next_ssl_function<int (*)(SSL_CTX*, const char*, int)>(
      "SSL_CTX_use_PrivateKey_file");
  auto bytes = contents_of(file);
  auto& r = reused();
  std::lock_guard<std::mutex> guard{r.lock};
  if (r.key && r.key_file.is(file, bytes) && r.key_type == type)
    return SSL_CTX_use_PrivateKey(ctx, r.key);
  auto rc = next(ctx, file, type);
  auto* key = SSL_CTX_get0_privatekey(ctx);
  if (rc == 1 && bytes && key && EVP_PKEY_up_ref(key) == 1) {
    EVP_PKEY_free(r.key);
    r.key = key;
    r.key_file = {file, std::move(*bytes)};
    r.key_type = type;
  }
  return rc;
}

int SSL_CTX_use_certificate_chain_file(SSL_CTX* ctx, const char* file) {
  static auto next = next_ssl_function<int (*)(SSL_CTX*, const char*)>(
      "SSL_CTX_use_certificate_chain_file");
  auto bytes = contents_of(file);
  auto& r = reused();
  std::lock_guard<std::mutex> guard{r.lock};
  if (r.leaf && r.chain_file.is(file, bytes)) {
    bool ok = SSL_CTX_use_certificate(ctx, r.leaf) == 1 &&
              SSL_CTX_set1_chain(ctx, r.chain) == 1;
    return ok ? 1 : 0;
  }
  auto rc = next(ctx, file);
  auto* leaf = SSL_CTX_get0_certificate(ctx);
  STACK_OF(X509)* chain = nullptr;
  if (rc == 1 && bytes && leaf && SSL_CTX_get0_chain_certs(ctx, &chain) == 1 &&
      X509_up_ref(leaf) == 1) {
    X509_free(r.leaf);
    sk_X509_pop_free(r.chain, X509_free);
    r.leaf = leaf;
    r.chain = chain ? X509_chain_up_ref(chain) : nullptr;
    r.chain_file = {file, std::move(*bytes)};
  }
  return rc;
}

int SSL_CTX_load_verify_locations(SSL_CTX* ctx, const char* cafile,
                                  const char* capath) {
  static auto next =
      next_ssl_function<int (*)(SSL_CTX*, const char*, const char*)>(
          "SSL_CTX_load_verify_locations");
  // A CA folder (--openssl.capath) is read as peers come, by hash, into
  // the store: a store of one is not shared, so that each context sees the
  // folder as it is.
  if (capath && *capath)
    return next(ctx, cafile, capath);
  auto bytes = contents_of(cafile);
  auto& r = reused();
  std::lock_guard<std::mutex> guard{r.lock};
  if (r.store && r.ca_file.is(cafile, bytes)) {
    SSL_CTX_set1_cert_store(ctx, r.store);
    return 1;
  }
  auto rc = next(ctx, cafile, capath);
  auto* store = SSL_CTX_get_cert_store(ctx);
  if (rc == 1 && bytes && store && X509_STORE_up_ref(store) == 1) {
    X509_STORE_free(r.store);
    r.store = store;
    r.ca_file = {cafile, std::move(*bytes)};
  }
  return rc;
}

int SSL_read(SSL* ssl, void* buf, int num) {
  static auto next = next_ssl_function<int (*)(SSL*, void*, int)>("SSL_read");
  before_ssl_call(ssl);
  return next(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static auto next =
      next_ssl_function<int (*)(SSL*, const void*, int)>("SSL_write");
  before_ssl_call(ssl);
  return next(ssl, buf, num);
}

int SSL_accept(SSL* ssl) {
  static auto next = next_ssl_function<int (*)(SSL*)>("SSL_accept");
  bool first = SSL_get_ex_data(ssl, started_index()) == nullptr;
  before_ssl_call(ssl);
  if (first && troupe::peer_closed(SSL_get_fd(ssl)))
    return -1; // SSL_get_error says SSL_ERROR_SYSCALL: CAF drops it
  auto rc = next(ssl);
  if (rc <= 0 && SSL_want_read(ssl))
    ::sched_yield(); // a stranger may hold it: no wait here
  return rc;
}

int SSL_connect(SSL* ssl) {
  static auto next = next_ssl_function<int (*)(SSL*)>("SSL_connect");
  before_ssl_call(ssl);
  auto rc = next(ssl);
  if (rc <= 0 && SSL_want_read(ssl))
    await_peer(SSL_get_fd(ssl));
  return rc;
}

} // extern "C"

namespace troupe {

bool speaks_tls(caf::actor_system& sys) {
  return sys.has_openssl_manager();
}

caf::io::middleman_actor connector(caf::actor_system& sys) {
  return speaks_tls(sys) ? sys.openssl_manager().actor_handle()
                         : sys.middleman().actor_handle();
}

tls_files tls_files_in(const std::string& dir) {
  return {dir + "/node.pem", dir + "/node.key", dir + "/ca.pem"};
}

namespace {

/// OpenSSL's last error, as words.
std::string openssl_reason() {
  auto code = ERR_peek_error(); // the first: the cause
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  ERR_clear_error();
  return code == 0 ? std::string{"no reason given"} : std::string{buf};
}

/// The passphrase OpenSSL may ask for, and whether it did (a key that is
/// not encrypted never asks).
struct passphrase_ask {
  const std::string& passphrase;
  bool asked = false;
};

int give_passphrase(char* buf, int size, int, void* ask) {
  auto& a = *static_cast<passphrase_ask*>(ask);
  a.asked = true;
  auto& p = a.passphrase;
  if (p.empty() || p.size() >= static_cast<size_t>(size))
    return 0; // none given: an encrypted key fails to load
  std::copy(p.begin(), p.end(), buf);
  return static_cast<int>(p.size());
}

} // namespace

std::string check_tls_identity(const tls_files& f,
                               const std::string& passphrase,
                               const std::string& capath) {
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx{
      SSL_CTX_new(TLS_method()), &SSL_CTX_free};
  if (!ctx)
    return "OpenSSL cannot make a TLS context: " + openssl_reason();
  passphrase_ask ask{passphrase};
  SSL_CTX_set_default_passwd_cb(ctx.get(), give_passphrase);
  SSL_CTX_set_default_passwd_cb_userdata(ctx.get(), &ask);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), f.certificate.c_str()) != 1)
    return "--openssl.certificate=" + f.certificate +
           ": not a certificate OpenSSL can load (" + openssl_reason() + ")";
  std::unique_ptr<BIO, decltype(&BIO_free)> in{BIO_new_file(f.key.c_str(), "r"),
                                               &BIO_free};
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key{
      in ? PEM_read_bio_PrivateKey(in.get(), nullptr, give_passphrase, &ask)
         : nullptr,
      &EVP_PKEY_free};
  if (!key) {
    // The hint only for a key that says it is encrypted: a torn one got it.
    // (PEM says so in its first lines.)
    std::ifstream pem{f.key};
    std::string head(4096, '\0');
    pem.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(pem.gcount()));
    bool encrypted = head.find("ENCRYPTED") != std::string::npos;
    return "--openssl.key=" + f.key + ": not a private key OpenSSL can load (" +
           openssl_reason() +
           (passphrase.empty() && encrypted ? "; an encrypted key needs"
                                              " --openssl.passphrase)"
                                            : ")");
  }
  if (!passphrase.empty() && !ask.asked) // it protects nothing
    return "--openssl.passphrase is given, but --openssl.key=" + f.key +
           " is not encrypted: drop the passphrase, or encrypt the key"
           " (openssl pkey -in KEY -aes256 -out KEY.enc)";
  if (SSL_CTX_use_PrivateKey(ctx.get(), key.get()) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1)
    return "--openssl.key=" + f.key +
           " is not the key of --openssl.certificate=" + f.certificate + " (" +
           openssl_reason() + ")";
  if (SSL_CTX_load_verify_locations(ctx.get(), f.cafile.c_str(),
                                    capath.empty() ? nullptr
                                                   : capath.c_str()) != 1)
    return "--openssl.cafile=" + f.cafile +
           ": no CA certificates OpenSSL can load (" + openssl_reason() + ")";
  // Peers trust that CA alone: a certificate it did not sign (another
  // cluster's, a leaf named as the CA) fails every handshake, which said
  // only "disconnect_during_handshake".
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> check{
      X509_STORE_CTX_new(), &X509_STORE_CTX_free};
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx.get(), &chain);
  if (!check ||
      X509_STORE_CTX_init(check.get(), SSL_CTX_get_cert_store(ctx.get()),
                          SSL_CTX_get0_certificate(ctx.get()), chain) != 1)
    return "OpenSSL cannot check --openssl.certificate: " + openssl_reason();
  if (X509_verify_cert(check.get()) != 1) {
    auto code = X509_STORE_CTX_get_error(check.get());
    // Out of date, it is the right CA's: the other hint misled.
    bool dated = code == X509_V_ERR_CERT_HAS_EXPIRED ||
                 code == X509_V_ERR_CERT_NOT_YET_VALID;
    return "--openssl.certificate=" + f.certificate +
           " does not verify against --openssl.cafile=" + f.cafile + " (" +
           X509_verify_cert_error_string(code) +
           (dated ? "): every peer would refuse it; make new certificates"
                    " (deploy/make-certs.sh), or set this machine's clock"
                  : "): every peer trusts that CA alone and would refuse it;"
                    " give the CA that signed it, or a certificate it signed"
                    " (deploy/make-certs.sh)");
  }
  return "";
}

std::vector<std::string> tls_flags_for(const std::string& dir) {
  auto f = tls_files_in(dir);
  return {"--openssl.certificate=" + f.certificate, "--openssl.key=" + f.key,
          "--openssl.cafile=" + f.cafile};
}

caf::expected<uint16_t> publish_actor(caf::actor_system& sys,
                                      const caf::actor& whom, uint16_t port,
                                      const std::string& host, bool reuse) {
  auto* in = host.empty() ? nullptr : host.c_str();
  auto got = speaks_tls(sys) ? caf::openssl::publish(whom, port, in, reuse)
                             : sys.middleman().publish(whom, port, in, reuse);
  // CAF says only "tcp socket creation failed": name the two causes.
  if (!got && got.error() == caf::sec::cannot_open_port)
    return caf::make_error(
        errc::not_connected,
        "cannot listen on " + (host.empty() ? std::string{"*"} : host) + ":" +
            std::to_string(port) +
            ": another process holds the port, or the host is no address of"
            " this machine; give another port (0: a free one) or host");
  return got;
}

bool tick_cut_handshake(const caf::error& err) {
  return err == caf::sec::connection_timeout;
}

bool peer_closed(int fd) {
  if (fd < 0)
    return false;
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP)) != 0;
}

std::chrono::milliseconds pause_after_cuts(int cuts, uint32_t random) {
  if (cuts <= 1)
    return std::chrono::milliseconds{0}; // a whole interval for the next
  uint32_t bound = 100u << std::min(cuts - 2, 4); // 100 ms .. 1.6 s
  return std::chrono::milliseconds{random % (bound + 1)};
}

caf::expected<caf::actor> connect_scheduler(caf::actor_system& sys,
                                            const std::string& host,
                                            uint16_t port, uint32_t wait_ms,
                                            const std::atomic<bool>* stop) {
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + std::chrono::milliseconds{wait_ms};
  caf::error last;
  std::minstd_rand random{std::random_device{}()};
  int cuts = 0; // tries in a row a heartbeat tick cut
  for (auto delay = std::chrono::milliseconds{20};;
       delay = std::min(delay * 2, std::chrono::milliseconds{500})) {
    auto h = speaks_tls(sys) ? caf::openssl::remote_actor(sys, host, port)
                             : sys.middleman().remote_actor(host, port);
    if (h)
      return std::move(*h);
    last = std::move(h.error());
    cuts = tick_cut_handshake(last) ? cuts + 1 : 0;
    // While it starts, back-off; a busy one, a random wait (a storm else).
    auto pause = cuts > 0 ? pause_after_cuts(cuts, random()) : delay;
    if (clock::now() + pause > deadline || (stop && *stop))
      break;
    std::this_thread::sleep_for(pause);
  }
  return caf::make_error(errc::not_connected, "no scheduler at " + host + ":" +
                                                  std::to_string(port) + " (" +
                                                  sys.render(last) + ")");
}

} // namespace troupe

// kv_throughput: push+pull GB/s and small-key ops/s of troupe's kv store as
// the one worker of real troupe-node servers on loopback, set against plain
// TCP. Over 400 lines: it also starts and reaps the cluster and measures TCP.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/kv.hpp"
#include "actors/node_config.hpp"
#include "actors/road.hpp"
#include "actors/run_here.hpp"
#include "bench/cpu_share.hpp"
#include "bench/memcpy_rate.hpp"
#include "bench/round_trips.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

using namespace troupe;

namespace {

using steady = std::chrono::steady_clock;

const char* usage =
    "usage: kv_throughput [--servers=N] [--mode=async|sync] [--seconds=S]"
    " [--road=all|middleman|tcp|shm] [--rows=all|large|small]"
    " [--road-spin-us=N] [--road-caller-spin-us=N] [--road-frame-spin-us=N]"
    " [--road-reply-conn=on|off]"
    " [--scheduler-only] [--node=PATH]\n"
    "  --road     roads to measure, each on a fresh cluster (default all)\n"
    "  --rows     which rows: the large values (4 KiB..16 MiB), the small"
    " pairs, or all (default all)\n"
    "  --max-message-bytes  the kv client's part size (default: the kv"
    " default, 1 MiB)\n"
    "  --servers  troupe-node servers to start, 1..64 (default 1)\n"
    "  --mode     consistency mode of the servers (default async)\n"
    "  --seconds  timed transfer per row, 0 < S <= 60 (default 0.5)\n"
    "  --road-spin-us  readers of the roads, ours and the servers', poll"
    " this long before they sleep (--road.spin-us; default 0 = off)\n"
    "  --road-caller-spin-us  our blocking kv calls poll this long for"
    " their reply before they sleep (--road.caller-spin-us; default 200,"
    " 0 = off)\n"
    "  --road-frame-spin-us  readers of the roads, ours and the servers',"
    " inside a large frame poll this long for more of it before they sleep"
    " (--road.frame-spin-us; default 50, 0 = off)\n"
    "  --road-reply-conn  our tcp roads get a reply connection of their own"
    " (default on; off: --road.single-conn)\n"
    "  --scheduler-only  our kv client runs on CAF's scheduler threads only"
    " (--kv.scheduler-only), for comparison\n"
    "  --node     troupe-node binary (default: beside this program, then in"
    " its parent dir)\n";

struct options {
  uint32_t servers = 1;
  std::string mode = "async";
  double seconds = 0.5;
  std::string node;
  std::vector<std::string> roads{"middleman", "tcp", "shm"};
  uint32_t max_message_bytes = kv_settings{}.max_message_bytes;
  bool scheduler_only = false;
  bool large_rows = true; // push+pull of 4 KiB..16 MiB values
  bool small_rows = true; // small pairs, one at a time and 8 in flight
  uint32_t spin_us = 0;   // --road.spin-us of both ends (0 = off)
  uint32_t caller_spin_us = road_caller_spin_default_us; // ours (0 = off)
  uint32_t frame_spin_us = road_frame_spin_default_us;   // both ends (0 = off)
  bool reply_conn = true; // our tcp roads: replies on a connection apart
};

double since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

caf::error sys_error(const char* what) {
  return caf::make_error(errc::not_connected, what, std::strerror(errno));
}

/// Prints `*** what failed: why` (a bad_shape is a failed check); returns 1.
int fail(const char* what, const caf::error& err) {
  std::cerr << "*** " << (err == errc::bad_shape ? "check" : what)
            << " failed: " << describe(err) << '\n';
  return 1;
}

/// Reads `--name=value` flags into `opt`; returns an error line, or "".
/// Reads a poll time of 0..10000 us for flag `name` into `out`; "" if it
/// is one, else what is wrong.
std::string parse_us(const std::string& name, const std::string& value,
                     uint32_t& out) {
  char* end = nullptr;
  auto n = std::strtoul(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || n > 10000)
    return name + " must be 0..10000, got '" + value + "'";
  out = static_cast<uint32_t>(n);
  return "";
}

std::string parse_flags(const std::vector<std::string>& args, options& opt) {
  for (auto& a : args) {
    auto eq = std::min(a.find('='), a.size());
    auto name = a.substr(0, eq);
    auto value = a.substr(std::min(eq + 1, a.size()));
    char* end = nullptr;
    if (name == "--servers") {
      auto n = std::strtoul(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 1 || n > 64)
        return "--servers must be 1..64, got '" + value + "'";
      opt.servers = static_cast<uint32_t>(n);
    } else if (name == "--seconds") {
      opt.seconds = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(opt.seconds > 0) ||
          opt.seconds > 60)
        return "--seconds must be in (0, 60], got '" + value + "'";
    } else if (name == "--mode") {
      if (value != "async" && value != "sync")
        return "--mode must be async or sync, got '" + value + "'";
      opt.mode = value;
    } else if (name == "--max-message-bytes") {
      auto n = std::strtoul(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < (1u << 16) || n > (1u << 30))
        return "--max-message-bytes must be 65536..1073741824, got '" + value +
               "'";
      opt.max_message_bytes = static_cast<uint32_t>(n);
    } else if (name == "--rows") {
      if (value != "all" && value != "large" && value != "small")
        return "--rows must be all, large or small, got '" + value + "'";
      opt.large_rows = value != "small";
      opt.small_rows = value != "large";
    } else if (name == "--road") {
      if (value != "all" && value != "middleman" && value != "tcp" &&
          value != "shm")
        return "--road must be all, middleman, tcp or shm, got '" + value + "'";
      if (value != "all")
        opt.roads = {value};
    } else if (name == "--road-spin-us" || name == "--road-caller-spin-us" ||
               name == "--road-frame-spin-us") {
      auto& out = name == "--road-spin-us"          ? opt.spin_us
                  : name == "--road-caller-spin-us" ? opt.caller_spin_us
                                                    : opt.frame_spin_us;
      if (auto msg = parse_us(name, value, out); !msg.empty())
        return msg;
    } else if (name == "--road-reply-conn") {
      if (value != "on" && value != "off")
        return "--road-reply-conn must be on or off, got '" + value + "'";
      opt.reply_conn = value == "on";
    } else if (a == "--scheduler-only") {
      opt.scheduler_only = true;
    } else if (name == "--node") {
      if (::access(value.c_str(), X_OK) != 0)
        return "--node: no executable at '" + value + "'";
      opt.node = value;
    } else {
      return "unknown flag '" + a + "' (see --help)";
    }
  }
  return "";
}

/// The troupe-node beside this program, else the one in its parent dir.
caf::expected<std::string> default_node_path() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return sys_error("reading /proc/self/exe");
  std::string dir{buf, static_cast<size_t>(n)};
  dir.erase(dir.rfind('/'));
  for (auto& path : {dir + "/troupe-node", dir + "/../troupe-node"})
    if (::access(path.c_str(), X_OK) == 0)
      return path;
  return caf::make_error(errc::bad_file, "no troupe-node in", dir,
                         "nor its parent; pass --node=PATH");
}

/// GB/s through one loopback TCP connection: a writer thread sends 4 MiB
/// buffers for `seconds`, this thread reads until the writer shuts down.
caf::expected<double> tcp_loopback_gbps(double seconds) {
  int wfd, rfd;
  if (!bench::connect_loopback_tcp(wfd, rfd))
    return sys_error("connecting on loopback");
  auto t0 = steady::now();
  std::thread writer{[wfd, seconds, t0] {
    std::vector<char> buf(4u << 20, 'x');
    for (ssize_t n = 0; n >= 0 && since(t0) < seconds;)
      for (size_t off = 0; n >= 0 && off < buf.size(); off += n)
        n = ::write(wfd, buf.data() + off, buf.size() - off);
    ::shutdown(wfd, SHUT_WR);
  }};
  std::vector<char> buf(4u << 20);
  uint64_t bytes = 0;
  for (ssize_t n; (n = ::read(rfd, buf.data(), buf.size())) > 0;)
    bytes += static_cast<uint64_t>(n);
  auto secs = since(t0);
  writer.join();
  ::close(rfd);
  ::close(wfd);
  return bytes / secs / 1e9;
}

/// The small-message limits: raw round trips per second between two
/// processes, 1 and 8 in flight, over each kind of socket the roads use.
struct rt_limits {
  double unix_1 = 0, unix_8 = 0, tcp_1 = 0, tcp_8 = 0;

  /// The limit for a road's small requests: shm sends its headers over
  /// unix sockets, tcp and the middleman over TCP.
  double for_road(const std::string& road, size_t depth) const {
    if (road == "shm")
      return depth == 1 ? unix_1 : unix_8;
    return depth == 1 ? tcp_1 : tcp_8;
  }
  /// The higher of each figure: a limit taken in a slow moment must not
  /// flatter the ratios.
  rt_limits max(const rt_limits& o) const {
    return {std::max(unix_1, o.unix_1), std::max(unix_8, o.unix_8),
            std::max(tcp_1, o.tcp_1), std::max(tcp_8, o.tcp_8)};
  }
};

caf::expected<rt_limits> measure_rt_limits(double seconds) {
  rt_limits out;
  double* slots[] = {&out.unix_1, &out.unix_8, &out.tcp_1, &out.tcp_8};
  size_t i = 0;
  for (auto kind : {bench::rt_socket::unix_pair, bench::rt_socket::tcp})
    for (size_t depth : {1, 8}) {
      auto r = bench::round_trips_per_s(kind, depth, seconds);
      if (r.per_s < 0)
        return caf::make_error(errc::not_connected, "raw round trips:", r.why);
      *slots[i++] = r.per_s;
    }
  return out;
}

// -- troupe-node processes ----------------------------------------------------

/// Child processes; on every path out of scope each gets SIGTERM, then
/// SIGKILL if it is still there after 2 s, and is reaped; the newest
/// first, so servers go before their scheduler and do not log its loss.
struct node_group {
  std::vector<pid_t> pids;

  ~node_group() {
    for (auto i = pids.rbegin(); i != pids.rend(); ++i) {
      ::kill(*i, SIGTERM);
      auto t0 = steady::now();
      int status = 0;
      pid_t r;
      while ((r = ::waitpid(*i, &status, WNOHANG)) == 0 && since(t0) < 2)
        std::this_thread::sleep_for(std::chrono::milliseconds{5});
      if (r == 0 && ::kill(*i, SIGKILL) == 0)
        ::waitpid(*i, &status, 0);
    }
  }

  /// Runs `path args...` and waits up to 10 s for its stdout line
  /// "troupe-node: ROLE listening on HOST:PORT (pid N)"; returns PORT.
  caf::expected<uint16_t> start(const std::string& path,
                                std::vector<std::string> args) {
    // stdout is a memory file: unlike a pipe it never fills up or breaks.
    int fd = ::memfd_create("troupe-node-stdout", MFD_CLOEXEC);
    if (fd < 0)
      return sys_error("memfd_create");
    args.insert(args.begin(), path);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL); // no orphans if we get killed
      ::dup2(fd, STDOUT_FILENO);
      ::execv(path.c_str(), argv.data());
      ::_exit(127);
    }
    if (pid > 0)
      pids.push_back(pid);
    auto port = pid > 0 ? await_port(pid, fd) : sys_error("fork");
    ::close(fd);
    return port;
  }

  /// Polls the stdout of `pid` for its port, and `pid` for an early exit.
  caf::expected<uint16_t> await_port(pid_t pid, int fd) {
    for (auto t0 = steady::now(); since(t0) < 10;) {
      char buf[4096];
      auto n = std::max(::pread(fd, buf, sizeof(buf), 0), ssize_t{0});
      std::string out{buf, static_cast<size_t>(n)};
      auto at = out.find(" listening on ");
      auto end = out.find(" (pid", at);
      if (at != std::string::npos && end != std::string::npos)
        return static_cast<uint16_t>(
            std::stoul(out.substr(out.rfind(':', end) + 1)));
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pids.pop_back();
        return caf::make_error(errc::peer_down,
                               "troupe-node exited before"
                               " it listened, wait status",
                               status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
    return caf::make_error(errc::timeout, "troupe-node did not listen in 10 s");
  }
};

/// Starts a scheduler for one worker, then `opt.servers` servers; returns
/// the scheduler's port.
caf::expected<uint16_t> start_cluster(node_group& nodes, const options& opt) {
  // error level: a warning after our JSON line would end the output.
  auto port = nodes.start(
      opt.node, {"--role=scheduler", "--scheduler-port=0", "--log-level=error",
                 "--cluster.servers=" + std::to_string(opt.servers),
                 "--cluster.workers=1"});
  for (uint32_t i = 0; port && i < opt.servers; ++i)
    if (auto p = nodes.start(
            opt.node,
            {"--role=server", "--log-level=error",
             "--scheduler-port=" + std::to_string(*port),
             "--server.mode=" + opt.mode,
             "--road.spin-us=" + std::to_string(opt.spin_us),
             "--road.frame-spin-us=" + std::to_string(opt.frame_spin_us)});
        !p)
      return p.error();
  return port;
}

// -- measurements -------------------------------------------------------------

/// The one worker's bookkeeping: the clock of its next push (one sequence
/// for all keys) and, per key, how many pushes of ones it sent.
struct session {
  caf::actor_system& sys;
  kv& store;
  std::chrono::milliseconds timeout; // guards each pipelined request
  uint64_t next_clock = 0;
  std::map<uint64_t, float> pushed = {};
  bool scheduler_only = false; // kv.scheduler-only
};

/// `{key, values}` as the one array of a push, with a single copy of values.
std::vector<named_array> one_array(uint64_t key,
                                   const std::vector<float>& values) {
  std::vector<named_array> xs(1);
  xs[0].key = key;
  xs[0].values = values;
  return xs;
}

/// Ok if `got` is the one array `key` of `floats` values, all `expect`.
caf::error check_values(const std::vector<named_array>& got, uint64_t key,
                        size_t floats, float expect) {
  if (got.size() != 1 || got[0].key != key || got[0].values.size() != floats)
    return caf::make_error(errc::bad_shape, "pulled other arrays than key", key,
                           "of size", uint64_t{floats});
  auto& v = got[0].values;
  auto i = std::find_if(v.begin(), v.end(),
                        [expect](float x) { return x != expect; });
  if (i != v.end())
    return caf::make_error(errc::bad_shape, "key", key, "element",
                           static_cast<uint64_t>(i - v.begin()), "is",
                           double{*i}, "expected", double{expect});
  return caf::none;
}

/// Declares keys 1, 2, ... of `floats[i]` zeros; checks zeros come back.
caf::error init_keys(session& s, const std::vector<size_t>& floats) {
  std::vector<named_array> xs;
  for (size_t i = 0; i < floats.size(); ++i)
    xs.push_back(named_array{i + 1, std::vector<float>(floats[i])});
  auto got = s.store.init(xs);
  if (!got)
    return std::move(got.error());
  if (got->size() != xs.size())
    return caf::make_error(errc::bad_shape, "init returned other keys");
  for (size_t i = 0; i < xs.size(); ++i)
    if (auto err = check_values({(*got)[i]}, i + 1, floats[i], 0.0f))
      return err;
  return caf::none;
}

/// CPU seconds this process has used, all its threads.
double process_cpu_seconds() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  auto secs = [](const timeval& t) { return t.tv_sec + 1e-6 * t.tv_usec; };
  return secs(r.ru_utime) + secs(r.ru_stime);
}

/// What one push+pull took.
struct round_time {
  double seconds = 0;      // push and pull
  double pull_seconds = 0; // the pull alone (two requests only)
  double pull_cpu = 0;     // this process's CPU seconds meanwhile
};

/// Pushes ones to `key` at the next clock, then pulls at the clock after
/// (readable then in sync and async mode): as two requests, or `batched`
/// as one per server (kv::push_pull). Checks the pull and returns what
/// push and pull took.
caf::expected<round_time> push_pull_once(session& s, uint64_t key,
                                         const std::vector<float>& ones,
                                         bool batched) {
  auto xs = one_array(key, ones); // the caller's copy, not timed
  auto t0 = steady::now();
  round_time out;
  caf::expected<std::vector<named_array>> got{caf::error{}};
  if (batched) {
    got = s.store.push_pull(s.next_clock++, std::move(xs), {key});
  } else {
    auto acked = s.store.push(s.next_clock++, std::move(xs));
    if (!acked)
      return std::move(acked.error());
    auto t1 = steady::now();
    auto cpu0 = process_cpu_seconds();
    got = s.store.pull(s.next_clock, {key});
    out.pull_cpu = process_cpu_seconds() - cpu0;
    out.pull_seconds = since(t1);
  }
  out.seconds = since(t0);
  if (!got)
    return std::move(got.error());
  if (auto err = check_values(*got, key, ones.size(), ++s.pushed[key]))
    return err;
  return out;
}

struct row_result {
  size_t bytes;
  uint64_t rounds;
  double seconds;          // in push and pull, checks excluded
  double pull_seconds = 0; // in the pulls alone
  double pull_cpu = 0;     // this process's CPU seconds in the pulls
  double gbps() const { return 2.0 * bytes * rounds / seconds / 1e9; }
  double pull_gbps() const { return 1.0 * bytes * rounds / pull_seconds / 1e9; }
  /// This process's CPU time per pulled byte, in copies at `memcpy_gbps`.
  double pull_copies(double memcpy_gbps) const {
    return pull_cpu * memcpy_gbps * 1e9 / (1.0 * bytes * rounds);
  }
};

/// Push+pull rounds of `key` (`floats` long) one at a time, after one
/// warm-up round, until `seconds` of transfer and at least 3 rounds.
caf::expected<row_result> run_row(session& s, uint64_t key, size_t floats,
                                  double seconds, bool batched = false) {
  std::vector<float> ones(floats, 1.0f);
  row_result out{floats * sizeof(float), 0, 0.0};
  for (int round = -1; out.seconds < seconds || out.rounds < 3; ++round) {
    auto t = push_pull_once(s, key, ones, batched);
    if (!t)
      return std::move(t.error());
    if (round < 0)
      continue;
    out.seconds += t->seconds;
    out.pull_seconds += t->pull_seconds;
    out.pull_cpu += t->pull_cpu;
    out.rounds += 1;
  }
  return out;
}

/// A request in flight: a push (expect < 0) or a pull whose values must
/// all be `expect`.
struct pending {
  caf::message_id id;
  float expect;
};

/// Sends the next push or pull of `key` without waiting. A pull asks at the
/// clock after the last push and reaches each server after it (sends are
/// ordered), so it reads exactly the pushes sent so far. As kv's blocking
/// calls do, the request has no timeout of its own (that would cost a
/// wake-up of CAF's clock thread per request): await_reply guards it.
pending send_next(caf::scoped_actor& self, session& s, uint64_t key,
                  const std::vector<float>& ones, bool push, bool batched) {
  if (batched) { // push_pull: its reply sees its own push and all before
    s.pushed[key] += 1;
    return {self->request(s.store.handle(), caf::infinite, push_atom_v,
                          s.next_clock++, one_array(key, ones),
                          std::vector<uint64_t>{key})
                .id(),
            s.pushed[key]};
  }
  if (!push)
    return {self->request(s.store.handle(), caf::infinite, pull_atom_v,
                          s.next_clock, std::vector<uint64_t>{key})
                .id(),
            s.pushed[key]};
  s.pushed[key] += 1;
  return {self->request(s.store.handle(), caf::infinite, push_atom_v,
                        s.next_clock++, one_array(key, ones))
              .id(),
          -1.0f};
}

/// Takes the reply to `p` from the mailbox, waiting up to `wait` for it,
/// and checks it; nullopt if it did not come.
std::optional<caf::error> take_reply(caf::scoped_actor& self, const pending& p,
                                     uint64_t key, size_t floats,
                                     std::chrono::milliseconds wait) {
  std::optional<caf::error> out;
  auto on_error = [&out](caf::error& x) { out = std::move(x); };
  caf::blocking_actor::accept_one_cond rc;
  if (p.expect < 0)
    self->varargs_receive(
        rc, p.id, [&out](uint64_t) { out = caf::error{}; }, on_error,
        caf::after(wait) >> [] {});
  else
    self->varargs_receive(
        rc, p.id,
        [&out, &p, key, floats](std::vector<named_array>& got) {
          out = check_values(got, key, floats, p.expect);
        },
        on_error, caf::after(wait) >> [] {});
  return out;
}

/// Waits (at most s.timeout) for the reply to `p` and checks it. With
/// `conn` (the road our requests went on, claimed), reads it on this
/// thread meanwhile, as kv's blocking calls do (read_road_until_mail).
caf::error await_reply(caf::scoped_actor& self, const session& s,
                       const pending& p, uint64_t key, size_t floats,
                       road_conn* conn) {
  auto deadline = steady::now() + s.timeout;
  for (bool reading = conn != nullptr; reading;) {
    // A receive that finds nothing still sleeps out the timer slack: look
    // only when something came.
    if (!self->mailbox().empty())
      if (auto r =
              take_reply(self, p, key, floats, std::chrono::milliseconds{0}))
        return *r;
    reading = read_road_until_mail(*self.ptr(), *conn, deadline);
  }
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - steady::now());
  if (auto r = take_reply(self, p, key, floats,
                          std::max(left, std::chrono::milliseconds{0})))
    return *r;
  return caf::make_error(errc::timeout, "kv client silent");
}

/// Push+pull pairs of `key` per second with `depth` requests in flight
/// (pushes and pulls alternate) for about `seconds`.
caf::expected<double> pipelined_ops(session& s, uint64_t key, size_t floats,
                                    size_t depth, double seconds,
                                    bool batched = false) {
  caf::scoped_actor self{s.sys};
  std::vector<float> ones(floats, 1.0f);
  std::deque<pending> in_flight;
  // The road our requests go on, which this thread reads while replies are
  // due (kv's calls do so one at a time); given back at the end.
  road_caller_done reading;
  uint64_t pairs = 0;
  bool push = true;
  auto t0 = steady::now();
  for (;;) {
    bool more = since(t0) < seconds || pairs < 3;
    auto send = [&in_flight, &push, &self, &s, &ones, more, depth, key,
                 batched] {
      for (; more && in_flight.size() < depth; push = !push)
        in_flight.push_back(send_next(self, s, key, ones, push, batched));
    };
    // As kv's blocking calls do: the kv client runs on this thread, which
    // only waits meanwhile, instead of waking a scheduler thread.
    if (s.scheduler_only) {
      send();
    } else {
      road_caller_scope scope;
      run_here_while(self.ptr(), send);
      if (auto c = scope.claim_only_conn())
        reading.conn = std::move(c);
    }
    if (in_flight.empty())
      break;
    // Every reply already here is taken before more requests go.
    do {
      if (auto err = await_reply(self, s, in_flight.front(), key, floats,
                                 reading.conn.get()))
        return err;
      pairs += in_flight.front().expect >= 0 ? 1 : 0;
      in_flight.pop_front();
    } while (!in_flight.empty() && !self->mailbox().empty());
  }
  return pairs / since(t0);
}

// -- report -------------------------------------------------------------------

/// What one road measured.
struct road_result {
  std::string road;
  std::vector<row_result> rows;
  double ops_1 = 0;     // small push+pull pairs per second, 1 in flight
  double ops_8 = 0;     // the same, 8 in flight
  double batched_1 = 0; // pairs per second as push_pull, 1 in flight
  double batched_8 = 0; // the same, 8 in flight
};

const road_result* find_road(const std::vector<road_result>& rs,
                             const std::string& road) {
  for (auto& r : rs)
    if (r.road == road)
      return &r;
  return nullptr;
}

/// What a road measured, in one line on stderr as soon as it is done, so
/// that a run cut short still tells it (the report adds the limits).
void print_progress(const road_result& r, const options& opt) {
  std::fprintf(stderr, "  %s:", r.road.c_str());
  const char* sep = "";
  for (auto& row : r.rows) {
    bool mib = row.bytes >= (1u << 20);
    std::fprintf(stderr, "%s %zu %s %.2f GB/s", sep,
                 row.bytes >> (mib ? 20 : 10), mib ? "MiB" : "KiB", row.gbps());
    sep = ",";
  }
  if (opt.small_rows)
    std::fprintf(stderr,
                 "%s small pairs/s %.0f / %.0f (1 / 8 in flight), batched"
                 " %.0f / %.0f",
                 sep, r.ops_1, r.ops_8, r.batched_1, r.batched_8);
  std::fprintf(stderr, "\n");
}

/// One target line: met or missed, with the figure.
void print_target(const char* what, double got, double want, const char* unit,
                  double limit = 0) {
  std::printf("  %-52s %9.2f %-5s (target %.2f) %s", what, got, unit, want,
              got >= want ? "MET" : "MISSED");
  if (limit > 0 && got < want)
    std::printf(want > limit ? ", above the raw limit %.0f" : ", limit %.0f",
                limit);
  std::printf("\n");
}

/// A small-pair row: pairs/s per road, each with its ratio to the road's
/// raw limit in pairs/s (`requests` round trips make a pair).
void print_pairs(const char* label, const std::vector<road_result>& rs,
                 const rt_limits& rt, size_t depth, size_t requests,
                 double road_result::*field) {
  std::printf("%12s", label);
  for (auto& r : rs)
    std::printf(" %12.0f (%5.3f)", r.*field,
                r.*field * requests / rt.for_road(r.road, depth));
  std::printf("\n");
}

/// The push+pull rows of large values, and the pull alone.
void print_large_rows(const std::vector<road_result>& rs, double tcp,
                      double mem) {
  std::printf("push+pull of one key, GB/s both ways (ratio to plain TCP)\n");
  for (size_t i = 0; !rs.empty() && i < rs[0].rows.size(); ++i) {
    auto bytes = rs[0].rows[i].bytes;
    bool mib = bytes >= (1u << 20);
    std::printf("%8zu %s", bytes >> (mib ? 20 : 10), mib ? "MiB" : "KiB");
    for (auto& r : rs)
      std::printf(" %12.2f (%5.3f)", r.rows[i].gbps(), r.rows[i].gbps() / tcp);
    std::printf("\n");
  }
  std::printf("the pull alone, GB/s (ratio to plain TCP) and this process's"
              " CPU time per pulled byte, in copies at the memcpy rate\n");
  for (size_t i = 0; !rs.empty() && i < rs[0].rows.size(); ++i) {
    auto bytes = rs[0].rows[i].bytes;
    if (bytes < (1u << 20))
      continue;
    std::printf("%8zu MiB", bytes >> 20);
    for (auto& r : rs)
      std::printf(" %5.2f (%5.3f) %4.1fx", r.rows[i].pull_gbps(),
                  r.rows[i].pull_gbps() / tcp, r.rows[i].pull_copies(mem));
    std::printf("\n");
  }
}

/// The rows of small pairs, one at a time and 8 in flight.
void print_small_rows(const std::vector<road_result>& rs, const rt_limits& rt,
                      size_t small_floats) {
  std::printf("small key (%zu floats), push+pull pairs per second (ratio to"
              " the raw limit: a pair is two round trips; the raw limit's"
              " ends sleep, one at a time a kv call polls for its reply)\n",
              small_floats);
  print_pairs("1 in flight", rs, rt, 1, 2, &road_result::ops_1);
  print_pairs("8 in flight", rs, rt, 8, 2, &road_result::ops_8);
  std::printf("the same pairs batched per step (kv push_pull: one request"
              " per server, one round trip)\n");
  print_pairs("1 in flight", rs, rt, 1, 1, &road_result::batched_1);
  print_pairs("8 in flight", rs, rt, 8, 1, &road_result::batched_8);
}

/// Each issue-3 target of the rows measured: met or missed.
void print_targets(const options& opt, double tcp, const rt_limits& rt,
                   const std::vector<road_result>& rs) {
  std::printf("\ntargets (issue 3; where missed, the raw limit in pairs/s):\n");
  if (auto shm = find_road(rs, "shm")) {
    for (auto& row : shm->rows)
      if (row.bytes >= (4u << 20))
        print_target(
            ("shm push+pull " + std::to_string(row.bytes >> 20) + " MiB")
                .c_str(),
            row.gbps(), 4.0, "GB/s");
  }
  if (auto t = find_road(rs, "tcp"))
    for (auto& row : t->rows)
      if (row.bytes >= (4u << 20))
        print_target(
            ("tcp road " + std::to_string(row.bytes >> 20) + " MiB / plain TCP")
                .c_str(),
            row.gbps() / tcp, 0.70, "");
  for (auto& r : rs)
    if (opt.small_rows && r.road != "middleman") {
      print_target((r.road + " small pairs/s, 1 in flight").c_str(), r.ops_1,
                   10000, "/s", rt.for_road(r.road, 1) / 2);
      print_target((r.road + " small pairs/s, 8 in flight").c_str(), r.ops_8,
                   60000, "/s", rt.for_road(r.road, 8) / 2);
      print_target((r.road + " small pairs/s batched, 1 in flight").c_str(),
                   r.batched_1, 10000, "/s", rt.for_road(r.road, 1));
      print_target((r.road + " small pairs/s batched, 8 in flight").c_str(),
                   r.batched_8, 60000, "/s", rt.for_road(r.road, 8));
    }
}

/// One line of JSON with every figure (small pairs null where not run).
void print_json(const options& opt, double tcp, double mem, const rt_limits& rt,
                const std::vector<road_result>& rs,
                const bench::cpu_share& cpu) {
  std::string json;
  std::printf("\n");
  for (auto& r : rs) {
    std::string rows;
    for (auto& row : r.rows) {
      char buf[240];
      std::snprintf(buf, sizeof(buf),
                    "%s{\"bytes\":%zu,\"gbps\":%.4f,\"ratio_to_tcp\":%.4f,"
                    "\"pull_gbps\":%.4f,\"pull_cpu_copies\":%.3f}",
                    rows.empty() ? "" : ",", row.bytes, row.gbps(),
                    row.gbps() / tcp, row.pull_gbps(), row.pull_copies(mem));
      rows += buf;
    }
    auto rate = [&opt](double x) {
      return opt.small_rows ? std::to_string(x) : std::string{"null"};
    };
    char buf[240];
    std::snprintf(buf, sizeof(buf),
                  "%s\"%s\":{\"rows\":[%%s],\"small_ops_per_s_1\":%s,"
                  "\"small_ops_per_s_8\":%s,\"batched_per_s_1\":%s,"
                  "\"batched_per_s_8\":%s}",
                  json.empty() ? "" : ",", r.road.c_str(),
                  rate(r.ops_1).c_str(), rate(r.ops_8).c_str(),
                  rate(r.batched_1).c_str(), rate(r.batched_8).c_str());
    std::vector<char> line(rows.size() + 256);
    std::snprintf(line.data(), line.size(), buf, rows.c_str());
    json += line.data();
  }
  std::printf("{\"tcp_loopback_gbps\":%.4f,\"memcpy_gbps\":%.4f,"
              "\"round_trips_per_s\":{\"unix_1\":%.1f,\"unix_8\":%.1f,"
              "\"tcp_1\":%.1f,\"tcp_8\":%.1f},"
              "\"cpu_steal\":%s,\"roads\":{%s},\"servers\":%u,\"mode\":"
              "\"%s\",\"scheduler_only\":%s,\"road_spin_us\":%u,"
              "\"road_caller_spin_us\":%u,\"road_frame_spin_us\":%u,"
              "\"road_reply_conn\":%s}\n",
              tcp, mem, rt.unix_1, rt.unix_8, rt.tcp_1, rt.tcp_8,
              cpu.known() ? std::to_string(cpu.steal).c_str() : "null",
              json.c_str(), opt.servers, opt.mode.c_str(),
              opt.scheduler_only ? "true" : "false", opt.spin_us,
              opt.caller_spin_us, opt.frame_spin_us,
              opt.reply_conn ? "true" : "false");
}

/// Prints the table, the targets, then one line of JSON with every figure.
void print_report(const options& opt, double tcp, double mem,
                  const rt_limits& rt, const std::vector<road_result>& rs,
                  size_t small_floats, const bench::cpu_share& cpu) {
  auto steal = bench::percent(cpu.steal, "unknown");
  std::printf("troupe kv: 1 worker (this process), %u server(s), %s mode;"
              " each road on a fresh cluster; road readers poll %u us before"
              " they sleep (--road-spin-us), %u us inside a large frame"
              " (--road-frame-spin-us), our blocking calls %u us"
              " (--road-caller-spin-us); tcp replies on a connection apart:"
              " %s (--road-reply-conn)\n"
              "limits measured in this run, the higher of a measurement before"
              " and one after the roads: plain TCP on loopback %.2f GB/s,"
              " memcpy %.2f GB/s;\nraw round trips/s of 64-byte messages"
              " between two processes, 1 / 8 in flight: unix sockets"
              " %.0f / %.0f, TCP %.0f / %.0f\n"
              "CPU time stolen by the host during the run: %s\n\n%12s",
              opt.servers, opt.mode.c_str(), opt.spin_us, opt.frame_spin_us,
              opt.caller_spin_us, opt.reply_conn ? "on" : "off", tcp, mem,
              rt.unix_1, rt.unix_8, rt.tcp_1, rt.tcp_8, steal.c_str(), "");
  for (auto& r : rs)
    std::printf(" %20s", r.road.c_str());
  std::printf("\n");
  if (opt.large_rows)
    print_large_rows(rs, tcp, mem);
  if (opt.small_rows)
    print_small_rows(rs, rt, small_floats);
  print_targets(opt, tcp, rt, rs);
  print_json(opt, tcp, mem, rt, rs, cpu);
}

// Keys 1-4: 4 KiB, 256 KiB, 4 MiB, 16 MiB; key 5: the small key.
const std::vector<size_t> key_floats{1u << 10, 1u << 16, 1u << 20, 1u << 22,
                                     16};

/// Runs every measurement as the cluster's one worker over `road`.
caf::expected<road_result> run_road(caf::actor_system& sys,
                                    const kv_settings& cfg, uint16_t port,
                                    const options& opt,
                                    const std::string& road) {
  const auto& floats = key_floats;
  const uint64_t small_key = floats.size();
  auto sched = connect_scheduler(sys, "127.0.0.1", port, 10000);
  if (!sched)
    return std::move(sched.error());
  kv store{sys, *sched, cfg};
  // Our timeout only guards against a lost client, as in kv.cpp.
  session s{sys, store, std::chrono::milliseconds{cfg.request_timeout_ms} * 4};
  s.scheduler_only = cfg.scheduler_only;
  if (auto err = init_keys(s, floats))
    return err;
  road_result out{road, {}, 0, 0, 0, 0};
  for (uint64_t key = 1; opt.large_rows && key < small_key; ++key) {
    auto r = run_row(s, key, floats[key - 1], opt.seconds);
    if (!r)
      return std::move(r.error());
    out.rows.push_back(*r);
  }
  if (!opt.small_rows)
    return out;
  auto one = run_row(s, small_key, floats.back(), opt.seconds);
  if (!one)
    return std::move(one.error());
  auto eight = pipelined_ops(s, small_key, floats.back(), 8, opt.seconds);
  if (!eight)
    return std::move(eight.error());
  out.ops_1 = one->rounds / one->seconds;
  out.ops_8 = *eight;
  auto b1 = run_row(s, small_key, floats.back(), opt.seconds, true);
  if (!b1)
    return std::move(b1.error());
  auto b8 = pipelined_ops(s, small_key, floats.back(), 8, opt.seconds, true);
  if (!b8)
    return std::move(b8.error());
  out.batched_1 = b1->rounds / b1->seconds;
  out.batched_8 = *b8;
  return out;
}

/// A fresh cluster of troupe-node processes and a worker over `road`.
caf::expected<road_result> measure_road(const options& opt,
                                        const std::string& road) {
  node_group nodes; // declared before sys, so stopped after sys shut down
  auto port = start_cluster(nodes, opt);
  if (!port)
    return std::move(port.error());
  node_config cfg;
  cfg.load<caf::io::middleman>();
  cfg.kv.request_timeout_ms = 30000;
  cfg.log_level = "warning";
  cfg.kv.road_text = road;
  cfg.kv.max_message_bytes = opt.max_message_bytes;
  cfg.kv.scheduler_only = opt.scheduler_only;
  if (auto err = cfg.finish())
    return err;
  caf::actor_system sys{cfg};
  return run_road(sys, cfg.kv, *port, opt, road);
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (std::count(args.begin(), args.end(), "--help") != 0) {
    std::cout << usage;
    return 0;
  }
  options opt;
  if (auto msg = parse_flags(args, opt); !msg.empty()) {
    std::cerr << "*** reading flags failed: " << msg << '\n';
    return 2;
  }
  auto node = opt.node.empty() ? default_node_path() : opt.node;
  if (!node)
    return fail("finding troupe-node", node.error());
  opt.node = *node;
  set_road_spin(std::chrono::microseconds{opt.spin_us});
  set_road_caller_spin(std::chrono::microseconds{opt.caller_spin_us});
  set_road_frame_spin(std::chrono::microseconds{opt.frame_spin_us});
  set_road_reply_connection(opt.reply_conn);
  auto cpu0 = bench::read_cpu_times();
  auto tcp = tcp_loopback_gbps(opt.seconds);
  if (!tcp)
    return fail("measuring loopback TCP", tcp.error());
  auto mem = bench::memcpy_gbps(opt.seconds);
  auto rt = measure_rt_limits(opt.seconds);
  if (!rt)
    return fail("measuring round trips", rt.error());
  std::vector<road_result> results;
  for (auto& road : opt.roads) {
    std::fprintf(stderr, "measuring the %s road...\n", road.c_str());
    auto r = measure_road(opt, road);
    if (!r)
      return fail(("the " + road + " road").c_str(), r.error());
    results.push_back(std::move(*r));
    print_progress(results.back(), opt);
  }
  // On a shared machine the limits move during the run: measured again
  // after the roads, the higher of the two is the limit, so that a limit
  // taken in a slow moment cannot flatter the ratios.
  auto tcp_after = tcp_loopback_gbps(opt.seconds);
  if (!tcp_after)
    return fail("measuring loopback TCP", tcp_after.error());
  std::fprintf(stderr,
               "limits before / after the roads: TCP %.2f / %.2f GB/s,"
               " memcpy %.2f / ",
               *tcp, *tcp_after, mem);
  auto mem_after = bench::memcpy_gbps(opt.seconds);
  std::fprintf(stderr, "%.2f GB/s\n", mem_after);
  auto rt_after = measure_rt_limits(opt.seconds);
  if (!rt_after)
    return fail("measuring round trips", rt_after.error());
  std::fprintf(stderr,
               "round trips/s before / after, unix 1: %.0f / %.0f, unix 8:"
               " %.0f / %.0f, tcp 1: %.0f / %.0f, tcp 8: %.0f / %.0f\n",
               rt->unix_1, rt_after->unix_1, rt->unix_8, rt_after->unix_8,
               rt->tcp_1, rt_after->tcp_1, rt->tcp_8, rt_after->tcp_8);
  print_report(opt, std::max(*tcp, *tcp_after), std::max(mem, mem_after),
               rt->max(*rt_after), results, key_floats.back(),
               bench::share_between(cpu0, bench::read_cpu_times()));
  return 0;
}

// time_to_accuracy: samples/s and training seconds to 0.85, 0.88 and 0.89
// test accuracy of troupe-node's Fashion-MNIST trainer (1 server, W workers,
// per mode), beside the same model step's compute-only rate in one process
// and the machine's limit for a step's exchange (a raw round trip between
// two processes plus the model's bytes copied once each way), both
// measured in the same run. Over 400 lines: it also starts, watches and reaps
// the clusters and checks their metrics before it prints a figure.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "actors/consistency.hpp"
#include "actors/node_config.hpp"
#include "bench/cpu_share.hpp"
#include "bench/memcpy_rate.hpp"
#include "bench/round_trips.hpp"
#include "kernels/blas.hpp"
#include "kernels/idx.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/partition.hpp"

using namespace troupe;

namespace {

using steady = std::chrono::steady_clock;

// The setup of every figure; the cluster gets it as flags.
const std::string model_spec = "mlp:784-256-128-10";
constexpr uint32_t batch = 64;         // samples per step and worker
constexpr float lr = 0.05f, mu = 0.9f; // momentum SGD (on the server)
// Pipelined workers push gradients one step older, and staleness acts as
// momentum of its own ("asynchrony begets momentum", Mitliagkas et al.
// 2016): with 0.9 on top, 3 epochs ended at 0.80 (1 worker) and 0.29 (2
// workers, diverged); with 0.7, 0.86 and 0.86.
constexpr float mu_pipelined = 0.7f;
// lr halves every this many server updates (about 3 epochs at 2 workers,
// sync); the compute-only floor runs without it (it measures speed only).
constexpr uint32_t lr_decay_steps = 1400;
constexpr uint32_t evals_per_epoch = 4; // metrics lines per epoch
constexpr double floor_seconds = 3;     // of compute-only steps
const std::vector<double> thresholds{0.85, 0.88, 0.89};
const double missing = std::nan(""); // a figure not reached or not run

const char* usage =
    "usage: time_to_accuracy [--epochs=E] [--modes=M,...] [--workers=W,...]"
    " [--servers=S] [--node=PATH] [--node-arg=FLAG ...]\n"
    "  --epochs   passes over the training set per run, 1..100 (default 10)\n"
    "  --modes    server modes: sync, async, ssp:S; async+pipe and ssp:S+pipe\n"
    "             add pipelined workers (--worker.pipeline: step t+1 runs\n"
    "             while push t is in flight); sync+overlap and async+overlap\n"
    "             overlapped ones (--worker.overlap: each block of gradients\n"
    "             is pushed as backward finishes it; no helper threads)\n"
    "             (default sync,async,ssp:2,async+pipe,sync+overlap)\n"
    "  --workers  worker counts, each 1..16 (default 1,2)\n"
    "  --servers  server processes per cluster, 1..16 (default 1; with 2\n"
    "             or more each replicates to the next, as --server.replicas\n"
    "             says)\n"
    "  --node     troupe-node binary (default: beside this program)\n"
    "  --node-arg a flag for every server and worker, e.g.\n"
    "             --node-arg=--server.helper-threads=0 (repeatable)\n"
    "A run not done in 60 s + 30 s per epoch is killed; its row fails.\n";

/// How a --modes item's workers step.
enum class stepping { whole, pipe, overlap };

/// A --modes item: the servers' mode and how workers step.
std::pair<std::string, stepping> split_mode(const std::string& m) {
  for (auto [suffix, how] : {std::pair{"+pipe", stepping::pipe},
                             std::pair{"+overlap", stepping::overlap}}) {
    std::string sfx = suffix;
    if (m.size() > sfx.size() &&
        m.compare(m.size() - sfx.size(), sfx.size(), sfx) == 0)
      return {m.substr(0, m.size() - sfx.size()), how};
  }
  return {m, stepping::whole};
}

/// Flags of an overlapped row's nodes beside --worker.overlap: no helper
/// threads, whose share of a copy or an update would take the core the
/// step computes on (the exchange runs beside the step, not after it).
const std::vector<std::string> overlap_args{"--kv.helper-threads=0",
                                            "--server.helper-threads=0"};

struct options {
  uint32_t epochs = 10;
  std::vector<std::string> modes{"sync", "async", "ssp:2", "async+pipe",
                                 "sync+overlap"};
  std::vector<uint32_t> workers{1, 2};
  uint32_t servers = 1;
  std::string node;
  std::vector<std::string> node_args; // for every server and worker
};

double since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

/// printf into a string.
template <class... Ts> std::string strf(const char* fmt, Ts... xs) {
  std::string out(size_t(std::snprintf(nullptr, 0, fmt, xs...)) + 1, '\0');
  std::snprintf(out.data(), out.size(), fmt, xs...);
  out.pop_back();
  return out;
}

/// The number in all of `s` if it is in [1, hi], else 0.
uint32_t parse_count(const std::string& s, uint32_t hi) {
  if (s.empty() || s.size() > 3 ||
      s.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  auto n = uint32_t(std::stoul(s));
  return n <= hi ? n : 0;
}

/// Reads one `--name=value` flag into `opt`; returns an error line, or "".
std::string parse_flag(const std::string& a, options& opt) {
  auto eq = std::min(a.find('='), a.size());
  auto name = a.substr(0, eq), value = a.substr(std::min(eq + 1, a.size()));
  std::vector<std::string> items{""}; // value cut at commas
  for (char c : value)
    if (c == ',')
      items.emplace_back();
    else
      items.back().push_back(c);
  if (name == "--epochs" && (opt.epochs = parse_count(value, 100)) == 0)
    return "--epochs must be 1..100, got '" + value + "'";
  if (name == "--modes")
    for (auto& m : (opt.modes = items)) {
      auto [server_mode, how] = split_mode(m);
      auto c = parse_consistency(server_mode);
      if (!c ||
          (how == stepping::pipe && c->kind == consistency::kind_t::sync) ||
          (how == stepping::overlap && c->kind == consistency::kind_t::ssp))
        return "--modes must list sync, async, ssp:S, async+pipe, "
               "ssp:S+pipe, sync+overlap or async+overlap, got '" +
               value + "'";
    }
  if (name == "--workers") {
    opt.workers.clear();
    for (auto& w : items)
      if (opt.workers.emplace_back(parse_count(w, 16)) == 0)
        return "--workers must list counts 1..16, got '" + value + "'";
  }
  if (name == "--servers" && (opt.servers = parse_count(value, 16)) == 0)
    return "--servers must be 1..16, got '" + value + "'";
  if (name == "--node" && ::access((opt.node = value).c_str(), X_OK) != 0)
    return "--node: no executable at '" + value + "'";
  if (name == "--node-arg") {
    if (value.size() < 3 || value.compare(0, 2, "--") != 0)
      return "--node-arg must be a troupe-node flag such as "
             "--node-arg=--server.helper-threads=0, got '" +
             value + "'";
    opt.node_args.push_back(value);
  }
  if (name != "--epochs" && name != "--modes" && name != "--workers" &&
      name != "--servers" && name != "--node" && name != "--node-arg")
    return "unknown flag '" + a + "' (see --help)";
  return "";
}

/// The troupe-node beside this program, or "" with `err` set.
std::string default_node_path(std::string& err) {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string dir{buf, size_t(std::max(n, ssize_t{0}))};
  auto path = dir.substr(0, dir.rfind('/') + 1) + "troupe-node";
  if (n > 0 && ::access(path.c_str(), X_OK) == 0)
    return path;
  err = "no troupe-node at '" + path + "'; pass --node=PATH";
  return "";
}

// -- compute-only floor -------------------------------------------------------

/// The machine's price for a step's exchange, measured in the same run:
/// one round trip of a small message between two processes (a step's
/// gradients reach the server and its weights come back: at least one)
/// and the model's bytes copied once each way. A step that does not
/// overlap its exchange with its computing, and whose exchange copies the
/// model once each way (troupe's roads do: a frame is copied into a ring
/// or a socket and out of it), waits at least that long. Only tensors
/// shared in place (gradients written where the server reads them,
/// weights read where it wrote them) would wait less.
struct exchange_limit {
  double round_trips_per_s = 0; // 64 bytes, unix socket, 1 in flight
  double memcpy_gbps = 0;
  std::string why; // what failed; "" if measured
  /// Microseconds of one round trip plus `bytes` copied each way.
  double us(double bytes) const {
    return 1e6 / round_trips_per_s + 2.0 * bytes / (memcpy_gbps * 1e3);
  }
};

exchange_limit measure_exchange() {
  exchange_limit x;
  auto rt = bench::round_trips_per_s(bench::rt_socket::unix_pair, 1, 0.5);
  if (rt.per_s <= 0) {
    x.why = "raw round trips: " + rt.why;
    return x;
  }
  x.round_trips_per_s = rt.per_s;
  x.memcpy_gbps = bench::memcpy_gbps(0.5);
  if (x.memcpy_gbps <= 0)
    x.why = "the memcpy check failed";
  return x;
}

struct floor_result {
  double samples_per_s = 0;
  double model_bytes = 0; // of the parameters, float32
  exchange_limit exchange;
  uint64_t steps = 0;
  double first_loss = 0, last_loss = 0; // means of the first and last 50
  bench::cpu_share cpu;                 // the machine's, while it ran
};

/// What a floor step keeps between steps: optimizer state, batch buffers.
struct floor_state {
  std::vector<momentum_state> opt;
  std::vector<float> xs;
  std::vector<uint8_t> ys;
};

/// One trainer step without a cluster: gather the batch at idx, forward,
/// backward, then momentum SGD on every parameter array.
kernel_status floor_step(model& net, floor_state& st, const dataset& d,
                         const size_t* idx, float* loss) {
  size_t per = net.input_size();
  st.xs.resize(batch * per);
  st.ys.resize(batch);
  for (size_t i = 0; i < batch; ++i) {
    std::memcpy(&st.xs[i * per], d.images.data() + idx[i] * per,
                per * sizeof(float));
    st.ys[i] = d.labels[idx[i]];
  }
  auto s = net.compute_gradients(st.xs.data(), st.ys.data(), batch, loss);
  auto ps = net.parameters(), gs = net.gradients();
  st.opt.resize(ps.size());
  for (size_t i = 0; s == kernel_status::ok && i < ps.size(); ++i)
    s = momentum_update_cpu(ps[i].data, gs[i].data, ps[i].size, st.opt[i],
                            momentum_params{lr, mu, 0.0f});
  return s;
}

/// Steps for floor_seconds on the training set (a seeded shuffle per epoch)
/// and checks that the loss fell; returns "" or what went wrong.
std::string measure_floor(const dataset& train, floor_result& out) {
  std::string err;
  auto net = model::from_spec(model_spec, &err);
  if (!net)
    return "model: " + err;
  net->init_parameters(1);
  for (auto& p : net->parameters())
    out.model_bytes += double(p.size * sizeof(float));
  floor_state st;
  std::vector<float> losses;
  std::vector<size_t> idx;
  size_t steps_per_epoch = train.labels.size() / batch;
  auto t0 = steady::now();
  for (size_t s = 0; since(t0) < floor_seconds || s < 100; ++s) {
    if (s % steps_per_epoch == 0)
      epoch_partition(train.labels.size(), s / steps_per_epoch, 1, 0, 1, idx);
    float loss = 0;
    auto k =
        floor_step(*net, st, train, &idx[(s % steps_per_epoch) * batch], &loss);
    if (k != kernel_status::ok || !std::isfinite(loss))
      return std::string{"step failed: "} + to_string(k);
    losses.push_back(loss);
  }
  out.samples_per_s = double(losses.size()) * batch / since(t0);
  out.steps = losses.size();
  out.first_loss =
      std::accumulate(losses.begin(), losses.begin() + 50, 0.0) / 50;
  out.last_loss = std::accumulate(losses.end() - 50, losses.end(), 0.0) / 50;
  if (!(out.last_loss < 0.8 * out.first_loss))
    return strf("the loss did not fall: %.4f -> %.4f", out.first_loss,
                out.last_loss);
  return "";
}

// -- troupe-node processes ----------------------------------------------------

/// One child process; its stdout and stderr go to one memory file, which
/// unlike a pipe never fills up or breaks.
struct child {
  pid_t pid = -1; // -1 once reaped
  int out = -1;   // the memfd
  int status = 0; // wait status, once reaped
};

/// The last line `c` wrote (all of it, up to 64 KiB, if `all`).
std::string output(const child& c, bool all = false) {
  std::string out(1 << 16, '\0');
  out.resize(
      size_t(std::max(::pread(c.out, &out[0], out.size(), 0), ssize_t{0})));
  while (!all && !out.empty() && out.back() == '\n')
    out.pop_back();
  return all ? out : out.substr(out.rfind('\n') + 1, 200);
}

std::string exit_text(int status) {
  return WIFSIGNALED(status) ? strf("killed by signal %d", WTERMSIG(status))
                             : strf("exited with %d", WEXITSTATUS(status));
}

/// Reaps `c` if it ended; true if it is gone.
bool reap(child& c) {
  if (c.pid > 0 && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid)
    c.pid = -1;
  return c.pid < 0;
}

/// Child processes; on every path out of scope each gets SIGTERM, then
/// SIGKILL if it is still there after 2 s, and is reaped.
struct node_group {
  std::vector<child> kids;

  ~node_group() {
    for (auto& c : kids)
      if (c.pid > 0)
        ::kill(c.pid, SIGTERM);
    auto t0 = steady::now();
    for (auto& c : kids) {
      while (!reap(c) && since(t0) < 2)
        std::this_thread::sleep_for(std::chrono::milliseconds{5});
      if (c.pid > 0 && ::kill(c.pid, SIGKILL) == 0)
        ::waitpid(c.pid, &c.status, 0);
      ::close(c.out);
    }
  }

  /// Runs `path args...` as kids.back(); returns "" or what failed.
  std::string start(const std::string& path, std::vector<std::string> args) {
    int fd = ::memfd_create("troupe-node-out", MFD_CLOEXEC);
    args.insert(args.begin(), path);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    auto parent = ::getpid();
    pid_t pid = fd < 0 ? -1 : ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL); // no orphans if we get killed
      if (::getppid() != parent)
        ::_exit(127);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execv(path.c_str(), argv.data());
      ::_exit(127);
    }
    if (pid < 0) {
      auto err = std::string{"fork: "} + std::strerror(errno);
      ::close(fd);
      return err;
    }
    kids.push_back(child{pid, fd, 0});
    return "";
  }
};

/// Waits up to 10 s for c's line "troupe-node: ROLE listening on HOST:PORT
/// (pid N)"; returns "" and sets `port`, or what went wrong.
std::string await_port(child& c, uint16_t& port) {
  for (auto t0 = steady::now(); since(t0) < 10;) {
    auto out = output(c, true);
    auto at = out.find(" listening on ");
    auto end = out.find(" (pid", at);
    if (at != std::string::npos && end != std::string::npos) {
      port = uint16_t(std::stoul(out.substr(out.rfind(':', end) + 1)));
      return "";
    }
    if (reap(c))
      return exit_text(c.status) + " before it listened: " + output(c);
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  return "did not listen in 10 s";
}

// -- one configuration --------------------------------------------------------

struct row_result {
  std::string mode;
  uint32_t workers = 0;
  std::string error; // "" = ok
  double samples_per_s = 0, train_s = 0, wall_s = 0, final_accuracy = 0;
  double wait_share = 0;    // of rank 0's steps: waiting for the rounds
  double wait_us = 0;       // rank 0's mean wait per step
  std::vector<double> s_to; // train_s per threshold, or missing
  bench::cpu_share cpu;     // the machine's, while the cluster ran
};

/// Starts the scheduler, opt.servers servers of `mode`, then `workers`
/// trainers appending to `metrics`; returns "" or what failed.
std::string start_cluster(node_group& nodes, const options& opt,
                          const std::string& mode, uint32_t workers,
                          const std::string& metrics) {
  uint16_t port = 0;
  auto err = nodes.start(opt.node, {"--role=scheduler", "--scheduler-port=0",
                                    "--log-level=warning",
                                    strf("--cluster.servers=%u", opt.servers),
                                    strf("--cluster.workers=%u", workers)});
  if (!err.empty() || !(err = await_port(nodes.kids.back(), port)).empty())
    return "scheduler: " + err;
  auto sched = strf("--scheduler-port=%u", unsigned{port});
  // async and ssp apply every push as an update: W workers make W updates
  // where sync makes one with the mean, so the same step per sample is
  // lr / W, and the schedule counts W times the updates.
  auto [server_mode, how] = split_mode(mode);
  bool pipeline = how == stepping::pipe;
  auto per_push = server_mode == "sync" ? 1u : workers;
  std::vector<std::string> server_args{
      "--role=server",
      sched,
      "--log-level=warning",
      "--server.mode=" + server_mode,
      "--optimizer.name=momentum",
      strf("--optimizer.lr=%g", double{lr} / per_push),
      strf("--optimizer.momentum=%g", double{pipeline ? mu_pipelined : mu}),
      strf("--optimizer.lr-decay-steps=%u", lr_decay_steps * per_push),
      "--optimizer.lr-decay=0.5"};
  if (how == stepping::overlap)
    server_args.insert(server_args.end(), overlap_args.begin(),
                       overlap_args.end());
  server_args.insert(server_args.end(), opt.node_args.begin(),
                     opt.node_args.end());
  for (uint32_t i = 0; i < opt.servers; ++i) {
    err = nodes.start(opt.node, server_args);
    if (!err.empty() || !(err = await_port(nodes.kids.back(), port)).empty())
      return "server: " + err;
  }
  std::vector<std::string> worker_args{
      "--role=worker",
      sched,
      "--log-level=warning",
      "--server.mode=" + server_mode,
      "--train.model=" + model_spec,
      strf("--train.batch=%u", batch),
      strf("--train.epochs=%u", opt.epochs),
      strf("--train.evals-per-epoch=%u", evals_per_epoch),
      "--train.metrics-file=" + metrics,
      strf("--train.data-dir=%s", fashion_mnist_dir)};
  if (pipeline)
    worker_args.push_back("--worker.pipeline");
  if (how == stepping::overlap) {
    worker_args.push_back("--worker.overlap");
    worker_args.insert(worker_args.end(), overlap_args.begin(),
                       overlap_args.end());
  }
  worker_args.insert(worker_args.end(), opt.node_args.begin(),
                     opt.node_args.end());
  for (uint32_t i = 0; err.empty() && i < workers; ++i)
    err = nodes.start(opt.node, worker_args);
  return err.empty() ? "" : "worker: " + err;
}

/// Waits until every worker (the kids after the scheduler and `servers`
/// servers) exited 0; fails at once if one did not or if the scheduler or
/// a server ended, and after `deadline_s`.
std::string wait_workers(node_group& nodes, uint32_t servers,
                         double deadline_s) {
  size_t daemons = 1 + size_t{servers};
  for (auto t0 = steady::now();;) {
    bool done = true;
    for (size_t i = 0; i < nodes.kids.size(); ++i) {
      auto& c = nodes.kids[i];
      bool gone = reap(c);
      if (gone && i < daemons)
        return std::string{i == 0 ? "scheduler " : "server "} +
               exit_text(c.status) + ": " + output(c);
      if (gone && !(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0))
        return "a worker " + exit_text(c.status) + ": " + output(c);
      done = done && (gone || i < daemons);
    }
    if (done)
      return "";
    if (since(t0) > deadline_s)
      return strf("workers not done in %.0f s; killed", deadline_s);
    std::this_thread::sleep_for(std::chrono::milliseconds{50});
  }
}

/// `"key":NUMBER` of a metrics line; false if absent.
bool field(const std::string& line, const std::string& key, double& out) {
  auto at = line.find('"' + key + "\":");
  if (at == std::string::npos)
    return false;
  const char* p = line.c_str() + at + key.size() + 3;
  char* end = nullptr;
  out = std::strtod(p, &end);
  return end != p;
}

/// Reads rank 0's metrics lines, checks them, and fills the row's figures.
std::string read_metrics(const std::string& path, uint32_t epochs,
                         row_result& r) {
  std::ifstream in{path};
  std::string line;
  double epoch = 0, acc = 0, rate = 0, secs = 0, samples = 0, compute = 0,
         wait = 0, busy = 0, waited = 0;
  size_t n = 0;
  r.s_to.assign(thresholds.size(), missing);
  for (double prev = 0; std::getline(in, line); prev = secs, ++n) {
    if (!field(line, "epoch", epoch) || !field(line, "test_accuracy", acc) ||
        !field(line, "samples_per_s", rate) || !field(line, "train_s", secs) ||
        !field(line, "compute_s", compute) || !field(line, "wait_s", wait))
      return "metrics line does not parse: " + line;
    if (!(acc >= 0 && acc <= 1 && rate > 0 && secs > prev && compute > 0 &&
          wait >= 0))
      return "metrics line out of range: " + line;
    busy += compute + wait;
    waited += wait;
    samples += rate * (secs - prev); // each line's rate is over its interval
    for (size_t i = 0; i < thresholds.size(); ++i)
      if (std::isnan(r.s_to[i]) && acc >= thresholds[i])
        r.s_to[i] = secs;
  }
  if (n != size_t(epochs) * evals_per_epoch || std::fabs(epoch - epochs) > 1e-3)
    return strf("metrics has %zu lines to epoch %g, expected %u to epoch %u", n,
                epoch, epochs * evals_per_epoch, epochs);
  r.train_s = secs;
  r.samples_per_s = samples / secs;
  r.final_accuracy = acc;
  r.wait_share = waited / busy;
  r.wait_us = 1e6 * waited / (samples / (batch * r.workers)); // rank 0's steps
  return "";
}

/// Trains on a fresh cluster of `mode` with `workers` workers.
row_result run_config(const options& opt, const std::string& mode,
                      uint32_t workers) {
  row_result r{mode, workers, "", 0, 0, 0, 0, 0, 0, {}, {}};
  char path[] = "/tmp/time_to_accuracy-XXXXXX";
  int fd = ::mkstemp(path); // empty: the trainer appends
  if (fd < 0)
    return r.error = std::string{"mkstemp: "} + std::strerror(errno), r;
  ::close(fd);
  auto t0 = steady::now();
  auto cpu0 = bench::read_cpu_times();
  {
    node_group nodes; // stopped at the end of this block
    r.error = start_cluster(nodes, opt, mode, workers, path);
    if (r.error.empty())
      r.error = wait_workers(nodes, opt.servers, 60.0 + 30.0 * opt.epochs);
    r.wall_s = since(t0);
  }
  r.cpu = bench::share_between(cpu0, bench::read_cpu_times());
  if (r.error.empty())
    r.error = read_metrics(path, opt.epochs, r);
  ::unlink(path);
  return r;
}

// -- report -------------------------------------------------------------------

/// x with `digits` decimals and `unit`, or `none` if it is missing.
std::string num(double x, int digits, const char* none = "null",
                const char* unit = "") {
  return std::isfinite(x) ? strf("%.*f%s", digits, x, unit) : none;
}

std::string json_str(const std::string& s) {
  std::string out = "\"";
  for (char c : s)
    out += c == '"' || c == '\\'     ? std::string{'\\', c}
           : (unsigned char)c < 0x20 ? std::string{' '}
                                     : std::string{c};
  return out + '"';
}

/// "cpu_steal":x,"cpu_idle":y (null if unknown).
std::string cpu_json(const bench::cpu_share& c) {
  return c.known()
             ? strf("\"cpu_steal\":%.4f,\"cpu_idle\":%.4f", c.steal, c.idle)
             : "\"cpu_steal\":null,\"cpu_idle\":null";
}

/// The part of each worker's step that is not the floor's step.
double overhead(const row_result& r, double floor) {
  return r.error.empty() ? 1.0 - r.samples_per_s / (r.workers * floor)
                         : missing;
}

/// Prints one table row (`limit_us`: the exchange limit per step);
/// returns the row as JSON.
std::string print_row(const row_result& r, double floor, double limit_us) {
  auto json =
      strf("{\"mode\":%s,\"workers\":%u,\"error\":%s", json_str(r.mode).c_str(),
           r.workers, r.error.empty() ? "null" : json_str(r.error).c_str());
  std::printf("%-13s %7u", r.mode.c_str(), r.workers);
  if (!r.error.empty())
    return std::printf("  failed: %s\n", r.error.c_str()), json + "}";
  std::string to;
  std::printf(" %10.0f", r.samples_per_s);
  for (size_t i = 0; i < thresholds.size(); ++i) {
    std::printf(" %10s", num(r.s_to[i], 1, "-").c_str());
    to += strf("%s\"%.2f\":%s", i ? "," : "", thresholds[i],
               num(r.s_to[i], 2).c_str());
  }
  double vs_limit = r.wait_us / limit_us; // NaN if the limit is unknown
  std::printf(" %10.4f %9.1f%% %7.1f%% %7.0f %7s %6s %5s\n", r.final_accuracy,
              100 * overhead(r, floor), 100 * r.wait_share, r.wait_us,
              num(vs_limit, 2, "-").c_str(),
              bench::percent(r.cpu.steal).c_str(),
              bench::percent(r.cpu.idle).c_str());
  return json + strf(",\"samples_per_s\":%.1f,\"train_s_to_accuracy\":{%s},"
                     "\"final_accuracy\":%.4f,\"train_s\":%.2f,\"wall_s\":"
                     "%.2f,\"overhead_vs_floor\":%.4f,\"wait_share\":%.4f,"
                     "\"wait_us_per_step\":%.1f,\"wait_vs_exchange_limit\":%s,"
                     "%s}",
                     r.samples_per_s, to.c_str(), r.final_accuracy, r.train_s,
                     r.wall_s, overhead(r, floor), r.wait_share, r.wait_us,
                     num(vs_limit, 3).c_str(), cpu_json(r.cpu).c_str());
}

/// Prints one target line; adds `"what":met` (null: not run) to `json`.
void print_target(std::string& json, const std::string& what,
                  const std::string& shown, bool ran, bool met) {
  static const char* verdict[] = {"not run", "met", "NOT met"};
  static const char* json_verdict[] = {"null", "true", "false"};
  int v = !ran ? 0 : met ? 1 : 2;
  std::printf("  %-50s %10s  %s\n", what.c_str(), shown.c_str(), verdict[v]);
  json += strf("%s%s:%s", json.empty() ? "" : ",", json_str(what).c_str(),
               json_verdict[v]);
}

/// The overhead a step that does not overlap an exchange of `limit_us`
/// has at the least, against a floor step (NaN if the limit is unknown).
double unoverlapped_overhead(double limit_us, double floor) {
  double step_us = 1e6 * batch / floor;
  return limit_us / (step_us + limit_us);
}

/// Prints the targets beside the figures (`limit_us`: the exchange limit
/// per step); returns them as a JSON object.
std::string print_targets(const std::vector<row_result>& rows, double floor,
                          double limit_us) {
  auto s2 = std::find_if(rows.begin(), rows.end(), [](const row_result& r) {
    return r.mode == "sync" && r.workers == 2;
  });
  bool ran = s2 != rows.end(), ok = ran && s2->error.empty();
  double rate = ok ? s2->samples_per_s : missing,
         s89 = ok ? s2->s_to[2] : missing;
  std::string json;
  std::printf("\ntargets (shown, not asserted):\n");
  print_target(json, "sync, 2 workers: samples/s >= 50000", num(rate, 0, "-"),
               ran, rate >= 50000);
  print_target(json, "sync, 2 workers: 0.89 in <= 25 s of training",
               num(s89, 1, "-", " s"), ran, s89 <= 25);
  for (auto& r : rows)
    if (r.workers == 1)
      print_target(json, r.mode + ", 1 worker: overhead <= 20% of the step",
                   num(100 * overhead(r, floor), 1, "-", "%"), true,
                   overhead(r, floor) <= 0.2);
  if (double least = unoverlapped_overhead(limit_us, floor); least > 0.2)
    std::printf("  (a 20%% overhead is below this machine's exchange limit"
                " for a step that does not overlap an exchange copying the"
                " model once each way: %.1f%%)\n",
                100 * least);
  return "{" + json + "}";
}

/// The better of two measurements of the exchange limit (a limit is what
/// the machine can do); a failed one counts only if both failed.
exchange_limit best_of(const exchange_limit& a, const exchange_limit& b) {
  if (!a.why.empty() || !b.why.empty())
    return a.why.empty() ? a : b;
  return {std::max(a.round_trips_per_s, b.round_trips_per_s),
          std::max(a.memcpy_gbps, b.memcpy_gbps), ""};
}

/// Prints the exchange limit per step; returns it in microseconds (NaN if
/// it could not be measured), and as JSON in `json`.
double print_exchange(const exchange_limit& x, const floor_result& fl,
                      std::string& json) {
  if (!x.why.empty()) {
    std::printf("exchange limit per step: not measured (%s)\n\n",
                x.why.c_str());
    json = "null";
    return missing;
  }
  double rt_us = 1e6 / x.round_trips_per_s, limit = x.us(fl.model_bytes);
  double step_us = 1e6 * batch / fl.samples_per_s;
  double least = unoverlapped_overhead(limit, fl.samples_per_s);
  std::printf(
      "exchange limit per step (measured beside the floor): one round trip"
      " of 64 bytes between two processes, %.0f us, + the model's %.2f MB"
      " copied once each way at %.2f GB/s (memcpy) = %.0f us;\n a step that"
      " does not overlap such an exchange with its computing (%.0f us at"
      " the floor) has at least %.1f%% overhead here\n\n",
      rt_us, fl.model_bytes / 1e6, x.memcpy_gbps, limit, step_us, 100 * least);
  json = strf("{\"round_trip_us\":%.1f,\"memcpy_gbps\":%.4f,\"model_bytes\":"
              "%.0f,\"limit_us\":%.1f,\"floor_step_us\":%.1f,"
              "\"unoverlapped_overhead\":%.4f}",
              rt_us, x.memcpy_gbps, fl.model_bytes, limit, step_us, least);
  return limit;
}

/// Prints the table and the targets, then one line of JSON with everything.
void print_report(const options& opt, const floor_result& before,
                  const floor_result& after,
                  const std::vector<row_result>& rows) {
  auto& fl = after.samples_per_s > before.samples_per_s ? after : before;
  std::printf(
      "troupe time to accuracy: %s on Fashion-MNIST, batch %u per "
      "worker, momentum lr %g, halved every %u updates (async, ssp: "
      "lr / workers, every updates x workers), mu %g (+pipe: %g), 1 "
      "server, %u epoch(s)\n"
      "compute-only floor (this process, no cluster): %.0f samples/s, "
      "the higher of %.0f before the clusters and %.0f after (%llu steps, "
      "loss %.3f -> %.3f; CPU stolen by the host meanwhile: %s)\n\n",
      model_spec.c_str(), batch, double{lr}, lr_decay_steps, double{mu},
      double{mu_pipelined}, opt.epochs, fl.samples_per_s, before.samples_per_s,
      after.samples_per_s, (unsigned long long)fl.steps, fl.first_loss,
      fl.last_loss, bench::percent(fl.cpu.steal).c_str());
  auto blas = blas_description();
  std::printf("math: %s, one thread per process\n", blas.c_str());
  if (auto w = blas_core_warning(); !w.empty())
    std::printf("*** %s\n", w.c_str());
  std::string exchange_json;
  auto limit_us = print_exchange(best_of(before.exchange, after.exchange), fl,
                                 exchange_json);
  std::string node_args, shown; // as JSON, and as given
  for (auto& a : opt.node_args) {
    node_args += (node_args.empty() ? "" : ",") + json_str(a);
    shown += " " + a;
  }
  std::printf("each cluster: a scheduler, %u server(s), the workers\n",
              opt.servers);
  if (!shown.empty())
    std::printf("servers and workers also ran with:%s\n\n", shown.c_str());
  std::printf(
      "mode          workers  samples/s  s to 0.85  s to 0.88  s to 0.89 "
      " final acc  overhead vs floor  waiting  wait us  x limit  steal"
      "  idle\n");
  std::string json;
  for (auto& r : rows)
    json +=
        (json.empty() ? "" : ",") + print_row(r, fl.samples_per_s, limit_us);
  std::printf("(waiting: the share of rank 0's step time spent between"
              " handing its gradients over and getting the next weights,"
              " measured by the worker;\n wait us: that wait per step; x"
              " limit: the wait over the exchange limit above;\n steal: the"
              " machine's CPU time its host gave to others; idle: CPU time of"
              " the cores this benchmark may run on that no process used, i.e."
              " waiting that no core filled;\n +pipe: workers compute step"
              " t+1 while push t is in flight, so the servers' update runs"
              " beside the step and the overhead can fall below 0;\n"
              " +overlap: each block of gradients is pushed as backward"
              " finishes it (a sync round per block, the weights those of"
              " whole steps), with --kv.helper-threads=0"
              " --server.helper-threads=0)\n");
  auto targets = print_targets(rows, fl.samples_per_s, limit_us);
  std::printf(
      "\n{\"model\":%s,\"blas\":%s,\"batch\":%u,\"epochs\":%u,"
      "\"servers\":%u,"
      "\"floor_samples_per_s\":%.1f,\"floor_before\":%.1f,\"floor_after\":%.1f,"
      "\"floor_cpu\":{%s},\"exchange_limit\":%s,\"node_args\":[%s],"
      "\"rows\":[%s],\"targets\":%s}\n",
      json_str(model_spec).c_str(), json_str(blas).c_str(), batch, opt.epochs,
      opt.servers, fl.samples_per_s, before.samples_per_s, after.samples_per_s,
      cpu_json(fl.cpu).c_str(), exchange_json.c_str(), node_args.c_str(),
      json.c_str(), targets.c_str());
}

/// Loads the training set and measures the floor on it (with the CPU
/// share meanwhile); the set is freed before the clusters run.
std::string floor_once(floor_result& out) {
  dataset train;
  if (auto err = load_fashion_mnist(fashion_mnist_dir, "train", train);
      !err.empty())
    return "loading the data: " + err;
  auto cpu0 = bench::read_cpu_times();
  auto err = measure_floor(train, out);
  out.cpu = bench::share_between(cpu0, bench::read_cpu_times());
  if (err.empty()) // after the CPU share: it forks
    out.exchange = measure_exchange();
  return err;
}

int fail(const char* what, const std::string& why) {
  std::cerr << "*** " << what << " failed: " << why << '\n';
  return 1;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (std::count(args.begin(), args.end(), "--help") != 0)
    return std::cout << usage, 0;
  options opt;
  for (auto& a : args)
    if (auto msg = parse_flag(a, opt); !msg.empty())
      return fail("reading flags", msg) + 1;
  std::string err;
  if (opt.node.empty() && (opt.node = default_node_path(err)).empty())
    return fail("finding troupe-node", err);
  set_blas_threads(1);      // as in each trainer
  apply_process_settings(); // as in each troupe process (denormals flushed)
  // The floor is a limit: measured before and after the clusters (the
  // machine's speed drifts), the higher one counts.
  floor_result before, after;
  if (err = floor_once(before); !err.empty())
    return fail("check of the compute-only floor", err);
  std::fprintf(stderr, "compute-only floor: %.0f samples/s\n",
               before.samples_per_s);
  std::vector<row_result> rows;
  bool all_ok = true;
  for (auto& mode : opt.modes)
    for (auto w : opt.workers) {
      std::fprintf(stderr, "running %s, %u worker(s), %u epoch(s) ...",
                   mode.c_str(), w, opt.epochs);
      rows.push_back(run_config(opt, mode, w));
      auto& r = rows.back();
      all_ok = all_ok && r.error.empty();
      // The row's figures now, so that a run cut short still tells them;
      // the report's overhead uses the higher floor of before and after.
      if (r.error.empty())
        std::fprintf(stderr,
                     " done in %.1f s: %.0f samples/s, final accuracy %.4f,"
                     " waiting %.1f%%, overhead %.1f%% against the first"
                     " floor\n",
                     r.wall_s, r.samples_per_s, r.final_accuracy,
                     100 * r.wait_share,
                     100 * overhead(r, before.samples_per_s));
      else
        std::fprintf(stderr, " FAILED in %.1f s: %s\n", r.wall_s,
                     r.error.c_str());
    }
  if (err = floor_once(after); !err.empty())
    return fail("check of the compute-only floor (after)", err);
  print_report(opt, before, after, rows);
  return all_ok ? 0 : 1;
}

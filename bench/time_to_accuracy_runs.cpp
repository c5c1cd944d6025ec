// One configuration of time_to_accuracy: a fresh cluster of one mode and
// worker count trains, and rank 0's metrics give the row's figures.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "bench/time_to_accuracy.hpp"
#include "kernels/idx.hpp"

namespace troupe::bench::time_to_accuracy {

namespace {

// -- starting the cluster -----------------------------------------------------

/// Flags of an overlapped row's nodes beside --worker.overlap: no helper
/// threads, whose share of a copy or an update would take the core the
/// step computes on (the exchange runs beside the step, not after it).
const std::vector<std::string> overlap_args{"--kv.helper-threads=0",
                                            "--server.helper-threads=0"};

/// The flags of each server of `mode` in a cluster of `workers` workers
/// whose scheduler `sched` names.
std::vector<std::string> server_args(const options& opt,
                                     const std::string& mode, uint32_t workers,
                                     const std::string& sched) {
  // async and ssp apply every push as an update: W workers make W updates
  // where sync makes one with the mean, so the same step per sample is
  // lr / W, and the schedule counts W times the updates.
  auto [server_mode, how] = split_mode(mode);
  bool pipeline = how == stepping::pipe;
  auto per_push = server_mode == "sync" ? 1u : workers;
  std::vector<std::string> args{
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
    args.insert(args.end(), overlap_args.begin(), overlap_args.end());
  args.insert(args.end(), opt.node_args.begin(), opt.node_args.end());
  args.insert(args.end(), opt.tls_args.begin(), opt.tls_args.end());
  return args;
}

/// The flags of each worker of `mode`, appending to `metrics`.
std::vector<std::string> worker_args(const options& opt,
                                     const std::string& mode,
                                     const std::string& sched,
                                     const std::string& metrics) {
  auto [server_mode, how] = split_mode(mode);
  std::vector<std::string> args{
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
  if (how == stepping::pipe)
    args.push_back("--worker.pipeline");
  if (how == stepping::overlap) {
    args.push_back("--worker.overlap");
    args.insert(args.end(), overlap_args.begin(), overlap_args.end());
  }
  args.insert(args.end(), opt.node_args.begin(), opt.node_args.end());
  args.insert(args.end(), opt.tls_args.begin(), opt.tls_args.end());
  return args;
}

/// Starts the scheduler, opt.servers servers of `mode`, then `workers`
/// trainers appending to `metrics`; returns "" or what failed.
std::string start_cluster(node_group& nodes, const options& opt,
                          const std::string& mode, uint32_t workers,
                          const std::string& metrics) {
  uint16_t port = 0;
  std::vector<std::string> sched_args{"--role=scheduler", "--scheduler-port=0",
                                      "--log-level=warning",
                                      strf("--cluster.servers=%u", opt.servers),
                                      strf("--cluster.workers=%u", workers)};
  sched_args.insert(sched_args.end(), opt.tls_args.begin(), opt.tls_args.end());
  auto err = nodes.start(opt.node, sched_args);
  if (!err.empty() || !(err = await_port(nodes.kids.back(), port)).empty())
    return "scheduler: " + err;
  auto sched = strf("--scheduler-port=%u", unsigned{port});
  auto servers = server_args(opt, mode, workers, sched);
  for (uint32_t i = 0; i < opt.servers; ++i) {
    err = nodes.start(opt.node, servers);
    if (!err.empty() || !(err = await_port(nodes.kids.back(), port)).empty())
      return "server: " + err;
  }
  auto trainers = worker_args(opt, mode, sched, metrics);
  for (uint32_t i = 0; err.empty() && i < workers; ++i)
    err = nodes.start(opt.node, trainers);
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

// -- reading the metrics ------------------------------------------------------

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

} // namespace

// -- one row ------------------------------------------------------------------

row_result run_config(const options& opt, const std::string& mode,
                      uint32_t workers) {
  row_result r;
  r.mode = opt.tls_args.empty() ? mode : mode + " tls";
  r.workers = workers;
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

} // namespace troupe::bench::time_to_accuracy

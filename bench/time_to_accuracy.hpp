// The pieces of the time_to_accuracy benchmark, shared by its files and by
// nothing else: the setup of every figure, its flags, the compute-only
// floor, the troupe-node processes, one configuration's run, the report.
#pragma once

#include <sys/types.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench/common.hpp"
#include "bench/cpu_share.hpp"

namespace troupe::bench::time_to_accuracy {

// -- setup --------------------------------------------------------------------

// The setup of every figure; the cluster gets it as flags.
inline const std::string model_spec = "mlp:784-256-128-10";
constexpr uint32_t batch = 64;         // samples per step and worker
constexpr float lr = 0.05f, mu = 0.9f; // momentum SGD (on the server)
// Pipelined workers push gradients one step older, and staleness acts as
// momentum of its own ("asynchrony begets momentum", Mitliagkas et al.
// 2016): with 0.9 on top, 3 epochs ended lower than with 0.7, and 2
// workers diverged (the figures are in docs/benchmarks.md).
constexpr float mu_pipelined = 0.7f;
// lr halves every this many server updates (about 3 epochs at 2 workers,
// sync); the compute-only floor runs without it (it measures speed only).
constexpr uint32_t lr_decay_steps = 1400;
constexpr uint32_t evals_per_epoch = 4; // metrics lines per epoch
constexpr double floor_seconds = 3;     // of compute-only steps
inline const std::vector<double> thresholds{0.85, 0.88, 0.89};
inline const double missing = std::nan(""); // a figure not reached or not run

/// printf into a string.
template <class... Ts> std::string strf(const char* fmt, Ts... xs) {
  std::string out(size_t(std::snprintf(nullptr, 0, fmt, xs...)) + 1, '\0');
  std::snprintf(out.data(), out.size(), fmt, xs...);
  out.pop_back();
  return out;
}

// -- flags (time_to_accuracy_flags.cpp) ---------------------------------------

extern const char* const usage;

/// How a --modes item's workers step.
enum class stepping { whole, pipe, overlap };

/// A --modes item: the servers' mode and how workers step.
std::pair<std::string, stepping> split_mode(const std::string& m);

struct options {
  uint32_t epochs = 10;
  std::vector<std::string> modes{"sync", "async", "ssp:2", "async+pipe",
                                 "sync+overlap"};
  std::vector<uint32_t> workers{1, 2};
  uint32_t servers = 1;
  std::string node;
  std::vector<std::string> node_args; // for every server and worker
  /// --tls=DIR: each row runs twice, in plain text and then with mutual
  /// TLS from DIR's certificates (deploy/make-certs.sh), whose flags
  /// every node of the second run gets, the scheduler too.
  std::string tls_dir;
  std::vector<std::string> tls_args; // the row's; set per run
};

/// Reads one `--name=value` flag into `opt`; returns an error line, or "".
std::string parse_flag(const std::string& a, options& opt);

/// The troupe-node beside this program, or "" with `err` set.
std::string default_node_path(std::string& err);

// -- compute-only floor (time_to_accuracy_floor.cpp) --------------------------

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

/// The better of two measurements of the exchange limit (a limit is what
/// the machine can do); a failed one counts only if both failed.
exchange_limit best_of(const exchange_limit& a, const exchange_limit& b);

struct floor_result {
  double samples_per_s = 0;
  double model_bytes = 0; // of the parameters, float32
  exchange_limit exchange;
  uint64_t steps = 0;
  double first_loss = 0, last_loss = 0; // means of the first and last 50
  bench::cpu_share cpu;                 // the machine's, while it ran
};

/// Loads the training set and measures the floor on it (with the CPU
/// share meanwhile); the set is freed before the clusters run.
std::string floor_once(floor_result& out);

// -- troupe-node processes (time_to_accuracy_nodes.cpp) -----------------------

/// One child process; its stdout and stderr go to one memory file, which
/// unlike a pipe never fills up or breaks.
struct child {
  pid_t pid = -1; // -1 once reaped
  int out = -1;   // the memfd
  int status = 0; // wait status, once reaped
};

/// The last line `c` wrote (all of it, up to 64 KiB, if `all`).
std::string output(const child& c, bool all = false);

std::string exit_text(int status);

/// Reaps `c` if it ended; true if it is gone.
bool reap(child& c);

/// Child processes; on every path out of scope each gets SIGTERM, then
/// SIGKILL if it is still there after 2 s, and is reaped.
struct node_group {
  std::vector<child> kids;

  ~node_group();

  /// Runs `path args...` as kids.back(); returns "" or what failed.
  std::string start(const std::string& path, std::vector<std::string> args);
};

/// Waits up to 10 s for c's line "troupe-node: ROLE listening on HOST:PORT
/// (pid N)"; returns "" and sets `port`, or what went wrong.
std::string await_port(child& c, uint16_t& port);

// -- one configuration (time_to_accuracy_runs.cpp) ----------------------------

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

/// Trains on a fresh cluster of `mode` with `workers` workers.
row_result run_config(const options& opt, const std::string& mode,
                      uint32_t workers);

// -- report (time_to_accuracy_report.cpp) -------------------------------------

/// The part of each worker's step that is not the floor's step.
double overhead(const row_result& r, double floor);

/// Prints the table and the targets, then one line of JSON with everything.
void print_report(const options& opt, const floor_result& before,
                  const floor_result& after,
                  const std::vector<row_result>& rows);

} // namespace troupe::bench::time_to_accuracy

// time_to_accuracy: samples/s and training seconds to 0.85, 0.88 and 0.89
// test accuracy of troupe-node's Fashion-MNIST trainer (1 server, W workers,
// per mode), beside the same model step's compute-only rate in one process
// and the machine's limit for a step's exchange (a raw round trip between
// two processes plus the model's bytes copied once each way), both
// measured in the same run. Its pieces are in bench/time_to_accuracy_*.cpp.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "actors/cluster/connect.hpp"
#include "actors/node/node_config.hpp"
#include "bench/time_to_accuracy.hpp"
#include "kernels/blas.hpp"

using namespace troupe;
using namespace troupe::bench::time_to_accuracy;

namespace {

int fail(const char* what, const std::string& why) {
  std::cerr << "*** " << what << " failed: " << why << '\n';
  return 1;
}

/// Runs every configuration of `opt`, telling each row's figures on stderr
/// as it ends; false if one failed.
bool run_rows(options opt, const floor_result& before,
              std::vector<row_result>& rows) {
  bool all_ok = true;
  std::vector<std::vector<std::string>> tls_runs{{}}; // plain text first
  if (!opt.tls_dir.empty())
    tls_runs.push_back(tls_flags_for(opt.tls_dir));
  for (auto& mode : opt.modes)
    for (auto w : opt.workers)
      for (auto& tls : tls_runs) {
        opt.tls_args = tls;
        std::fprintf(stderr, "running %s%s, %u worker(s), %u epoch(s) ...",
                     mode.c_str(), tls.empty() ? "" : " with TLS", w,
                     opt.epochs);
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
  return all_ok;
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
  bool all_ok = run_rows(opt, before, rows);
  if (err = floor_once(after); !err.empty())
    return fail("check of the compute-only floor (after)", err);
  print_report(opt, before, after, rows);
  return all_ok ? 0 : 1;
}

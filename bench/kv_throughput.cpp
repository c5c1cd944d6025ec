// kv_throughput: push+pull GB/s and small-key ops/s of troupe's kv store as
// the one worker of real troupe-node servers on loopback, set against plain
// TCP. Its pieces are in bench/kv_throughput_*.cpp.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>

#include "actors/cluster/connect.hpp"
#include "actors/kv/kv.hpp"
#include "actors/node/node_config.hpp"
#include "bench/cpu_share.hpp"
#include "bench/kv_throughput.hpp"
#include "bench/memcpy_rate.hpp"
#include "messages/errors.hpp"

using namespace troupe;
using namespace troupe::bench::kv_throughput;

namespace {

/// Prints `*** what failed: why` (a bad_shape is a failed check); returns 1.
int fail(const char* what, const caf::error& err) {
  std::cerr << "*** " << (err == errc::bad_shape ? "check" : what)
            << " failed: " << describe(err) << '\n';
  return 1;
}

// -- one road -----------------------------------------------------------------

// Keys 1-4: 4 KiB, 256 KiB, 4 MiB, 16 MiB; key 5: the small key.
const std::vector<size_t> key_floats{1u << 10, 1u << 16, 1u << 20, 1u << 22,
                                     16};

/// The small key's pairs per second, one at a time and 8 in flight, as two
/// requests and batched, into `out`.
caf::error run_small_rows(session& s, const options& opt, road_result& out) {
  const auto& floats = key_floats;
  const uint64_t small_key = floats.size();
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
  return caf::none;
}

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
  if (auto err = run_small_rows(s, opt, out))
    return err;
  return out;
}

/// A fresh cluster of troupe-node processes and a worker over `road`,
/// with mutual TLS from `tls_dir`'s certificates unless it is "".
caf::expected<road_result> measure_road(const options& opt,
                                        const std::string& road,
                                        const std::string& tls_dir) {
  node_group nodes; // declared before sys, so stopped after sys shut down
  auto port = start_cluster(nodes, opt,
                            tls_dir.empty() ? std::vector<std::string>{}
                                            : tls_flags_for(tls_dir));
  if (!port)
    return std::move(port.error());
  node_config cfg;
  cfg.load<caf::io::middleman>();
  cfg.kv.request_timeout_ms = 30000;
  cfg.log_level = "warning";
  cfg.kv.road_text = road;
  cfg.kv.max_message_bytes = opt.max_message_bytes;
  cfg.kv.scheduler_only = opt.scheduler_only;
  cfg.road.spin_us = opt.spin_us; // how our roads poll
  cfg.road.caller_spin_us = opt.caller_spin_us;
  cfg.road.frame_spin_us = opt.frame_spin_us;
  cfg.road.single_conn = !opt.reply_conn;
  if (!tls_dir.empty())
    cfg.use_certificates(tls_dir);
  if (auto err = cfg.finish())
    return err;
  caf::actor_system sys{cfg};
  auto out = run_road(sys, cfg.kv, *port, opt, road);
  if (out && !tls_dir.empty())
    out->road += " tls";
  return out;
}

/// Each road of `opt` on a fresh cluster, told on stderr as it ends, into
/// `results`; 0 or the exit code.
int measure_roads(const options& opt, std::vector<road_result>& results) {
  std::vector<std::string> tls_runs{""}; // plain text first
  if (!opt.tls_dir.empty())
    tls_runs.push_back(opt.tls_dir);
  for (auto& road : opt.roads)
    for (auto& tls : tls_runs) {
      std::fprintf(stderr, "measuring the %s road%s...\n", road.c_str(),
                   tls.empty() ? "" : " with TLS");
      auto r = measure_road(opt, road, tls);
      if (!r)
        return fail(("the " + road + " road").c_str(), r.error());
      results.push_back(std::move(*r));
      print_progress(results.back(), opt);
    }
  return 0;
}

// -- limits -------------------------------------------------------------------

/// The limits of this machine: plain TCP on loopback, memcpy, raw round
/// trips.
struct limits {
  double tcp = 0, mem = 0;
  rt_limits rt;
};

/// Measures the limits before the roads; 0 or the exit code.
int measure_limits(const options& opt, limits& out) {
  auto tcp = tcp_loopback_gbps(opt.seconds);
  if (!tcp)
    return fail("measuring loopback TCP", tcp.error());
  out.tcp = *tcp;
  out.mem = bench::memcpy_gbps(opt.seconds);
  auto rt = measure_rt_limits(opt.seconds);
  if (!rt)
    return fail("measuring round trips", rt.error());
  out.rt = *rt;
  return 0;
}

/// Measures the limits again after the roads, and tells both on stderr;
/// 0 or the exit code.
int measure_limits_after(const options& opt, const limits& before,
                         limits& after) {
  auto tcp = tcp_loopback_gbps(opt.seconds);
  if (!tcp)
    return fail("measuring loopback TCP", tcp.error());
  after.tcp = *tcp;
  std::fprintf(stderr,
               "limits before / after the roads: TCP %.2f / %.2f GB/s,"
               " memcpy %.2f / ",
               before.tcp, after.tcp, before.mem);
  after.mem = bench::memcpy_gbps(opt.seconds);
  std::fprintf(stderr, "%.2f GB/s\n", after.mem);
  auto rt = measure_rt_limits(opt.seconds);
  if (!rt)
    return fail("measuring round trips", rt.error());
  after.rt = *rt;
  const auto& a = before.rt;
  const auto& b = after.rt;
  std::fprintf(stderr,
               "round trips/s before / after, unix 1: %.0f / %.0f, unix 8:"
               " %.0f / %.0f, tcp 1: %.0f / %.0f, tcp 8: %.0f / %.0f\n",
               a.unix_1, b.unix_1, a.unix_8, b.unix_8, a.tcp_1, b.tcp_1,
               a.tcp_8, b.tcp_8);
  return 0;
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
  auto cpu0 = bench::read_cpu_times();
  limits before, after;
  if (int rc = measure_limits(opt, before))
    return rc;
  std::vector<road_result> results;
  if (int rc = measure_roads(opt, results))
    return rc;
  // On a shared machine the limits move during the run: measured again
  // after the roads, the higher of the two is the limit, so that a limit
  // taken in a slow moment cannot flatter the ratios.
  if (int rc = measure_limits_after(opt, before, after))
    return rc;
  print_report(opt, std::max(before.tcp, after.tcp),
               std::max(before.mem, after.mem), before.rt.max(after.rt),
               results, key_floats.back(),
               bench::share_between(cpu0, bench::read_cpu_times()));
  return 0;
}

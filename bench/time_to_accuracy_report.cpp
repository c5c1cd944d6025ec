// time_to_accuracy's report: the setup and limits, one table row per
// configuration, the targets, then one line of JSON with everything.
#include <algorithm>

#include "bench/time_to_accuracy.hpp"
#include "kernels/blas.hpp"

namespace troupe::bench::time_to_accuracy {

double overhead(const row_result& r, double floor) {
  return r.error.empty() ? 1.0 - r.samples_per_s / (r.workers * floor)
                         : missing;
}

namespace {

// -- formatting ---------------------------------------------------------------

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

// -- rows and targets ---------------------------------------------------------

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

// -- the setup ----------------------------------------------------------------

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

/// The lines above the table: the setup, the floor `fl` (the higher of
/// `before` and `after`) and the math library.
void print_setup(const options& opt, const floor_result& fl,
                 const floor_result& before, const floor_result& after,
                 const std::string& blas) {
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
  std::printf("math: %s (this process)\n", blas.c_str());
  if (auto w = blas_core_warning(); !w.empty())
    std::printf("*** %s\n", w.c_str());
}

/// The lines under the table: what its columns mean.
void print_legend() {
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
}

} // namespace

// -- the report ---------------------------------------------------------------

void print_report(const options& opt, const floor_result& before,
                  const floor_result& after,
                  const std::vector<row_result>& rows) {
  auto& fl = after.samples_per_s > before.samples_per_s ? after : before;
  auto blas = blas_description();
  print_setup(opt, fl, before, after, blas);
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
  print_legend();
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

} // namespace troupe::bench::time_to_accuracy

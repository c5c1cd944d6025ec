// bench/pipeline: the bubble of each pipeline schedule, measured on stage
// actors beside the theory and a simulation.
//
// Each stage is a detached stage actor whose F, B and W each take a fixed
// time asleep (--unit-us; a whole backward twice), so the idle share shows
// the schedule, not how the stages share this machine's cores. A stage's
// work per mini-batch is 3M units, so its idle share of a mini-batch that
// takes T is 1 - 3M units / T. Also printed: throughput (samples/s, two per
// micro-batch) and the activations a stage holds at most (micro-batches).
// The stages train a small model for real: a mini-batch whose loss is not a
// positive finite number fails the run before anything is printed.
//
//   pipeline [--unit-us=2000] [--steps=3] [--stages=2,4] [--micros=1,2,4,8,16]
//
// Ends with one line of JSON.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/node/node_config.hpp"
#include "actors/pipeline/schedule.hpp"
#include "actors/pipeline/stage_actor.hpp"
#include "bench/common.hpp"
#include "kernels/stage.hpp"
#include "messages/errors.hpp"
#include "messages/pipeline.hpp"
#include "messages/type_ids.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

const std::string spec = "mlp:8-8-8-8-8"; // 4 layers: up to 4 stages
constexpr uint32_t rows_per_micro = 2;

struct options {
  uint32_t unit_us = 2000;
  uint32_t steps = 3;
  std::vector<uint32_t> stages{2, 4};
  std::vector<uint32_t> micros{1, 2, 4, 8, 16};
};

bool parse_list(const std::string& text, std::vector<uint32_t>& out) {
  out.clear();
  std::stringstream in{text};
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    auto n = std::strtoul(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n == 0 || n > 64)
      return false;
    out.push_back(static_cast<uint32_t>(n));
  }
  return !out.empty();
}

/// Parses argv; an error line and false on a bad flag.
bool parse(int argc, char** argv, options& opt) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    auto name = a.substr(0, eq);
    auto value = eq == std::string::npos ? "" : a.substr(eq + 1);
    char* end = nullptr;
    auto n = std::strtoul(value.c_str(), &end, 10);
    bool number = !value.empty() && *end == '\0';
    if (name == "--unit-us" && number && n >= 100 && n <= 1000000) {
      opt.unit_us = uint32_t(n);
    } else if (name == "--steps" && number && n >= 1 && n <= 1000) {
      opt.steps = uint32_t(n);
    } else if (name == "--stages" && parse_list(value, opt.stages) &&
               *std::max_element(opt.stages.begin(), opt.stages.end()) <= 4 &&
               *std::min_element(opt.stages.begin(), opt.stages.end()) >= 2) {
    } else if (name == "--micros" && parse_list(value, opt.micros)) {
    } else {
      std::fprintf(stderr,
                   "*** pipeline: bad flag '%s'\nusage: pipeline "
                   "[--unit-us=100..1000000] [--steps=1..1000] "
                   "[--stages=2..4,...] [--micros=1..64,...]\n",
                   a.c_str());
      return false;
    }
  }
  return true;
}

struct row {
  uint32_t stages, micros;
  pipeline_schedule schedule;
  double theory, simulated, measured, samples_per_s;
  uint32_t peak_held;
};

/// Runs `opt.steps` mini-batches (after one to warm up) on P detached
/// stage actors; the best wall time of a mini-batch, or an error.
caf::expected<double> measure(caf::actor_system& sys, const options& opt,
                              pipeline_schedule s, uint32_t p, uint32_t m) {
  auto whole = model::from_spec(spec, nullptr); // a valid spec
  auto cut = cut_model(*whole, p);
  std::vector<caf::actor> stages;
  for (uint32_t i = 0; i < p; ++i)
    stages.push_back(sys.spawn<caf::detached>(
        stage_actor,
        stage_settings{spec, 1, cut, i, m, s, 0.01f, opt.unit_us}));
  caf::scoped_actor self{sys};
  auto stop = [&] {
    for (auto& a : stages)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  };
  for (uint32_t i = 0; i < p; ++i)
    self->send(stages[i], link_atom_v, i > 0 ? stages[i - 1] : caf::actor{},
               i + 1 < p ? stages[i + 1] : caf::actor{});
  for (uint32_t i = 0; i < p; ++i)
    self->receive([](uint64_t) {});
  uint32_t rows = m * rows_per_micro;
  double best = 1e30;
  caf::error failed;
  for (uint64_t k = 0; k <= opt.steps && !failed; ++k) {
    stage_tensor x{k, 0, rows, 8, std::vector<float>(rows * 8, 0.5f)};
    stage_tensor y{k, 0, rows, 1, std::vector<float>(rows, 3.0f)};
    auto t0 = bench::steady::now();
    for (uint32_t i = 0; i < p; ++i)
      self->send(stages[i], step_atom_v, k,
                 i == 0       ? encode(x)
                 : i + 1 == p ? encode(y)
                              : frame{});
    double loss = 0;
    for (uint32_t i = 0; i < p; ++i)
      self->receive([&loss](double l) { loss += l; },
                    [&failed](caf::error& e) { failed = std::move(e); },
                    caf::after(120s) >>
                        [&failed] {
                          failed = caf::make_error(errc::timeout,
                                                   "a stage did not finish");
                        });
    auto wall = bench::since(t0);
    if (!failed && !(loss > 0 && std::isfinite(loss)))
      failed = caf::make_error(errc::bad_shape, "the loss is not positive");
    if (k > 0) // the first warms up
      best = std::min(best, wall);
  }
  stop();
  if (failed)
    return failed;
  return best;
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  if (!parse(argc, argv, opt))
    return 2;
  node_config cfg;
  if (auto err = cfg.finish()) {
    std::fprintf(stderr, "*** pipeline: %s\n", describe(err).c_str());
    return 2;
  }
  caf::actor_system sys{cfg};
  std::vector<row> rows;
  for (auto p : opt.stages)
    for (auto m : opt.micros)
      for (auto s : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b,
                     pipeline_schedule::zb_h1}) {
        auto sim = simulate(s, p, m);
        auto wall = measure(sys, opt, s, p, m);
        if (!sim || !wall) {
          std::fprintf(stderr, "*** pipeline: %s P=%u M=%u: %s\n", to_string(s),
                       p, m,
                       describe(sim ? wall.error() : sim.error()).c_str());
          return 1;
        }
        double work = 3.0 * m * opt.unit_us * 1e-6;
        uint32_t held =
            *std::max_element(sim->peak_held.begin(), sim->peak_held.end());
        rows.push_back(
            {p, m, s,
             s == pipeline_schedule::zb_h1 ? sim->bubble : theory_bubble(p, m),
             sim->bubble, std::max(0.0, 1.0 - work / *wall),
             m * rows_per_micro / *wall, held});
      }
  std::printf("pipeline bubble: stages asleep %u us per F, B or W; best of "
              "%u mini-batches\n\n",
              opt.unit_us, opt.steps);
  std::printf("%3s %3s  %-6s %8s %9s %8s %10s %6s\n", "P", "M", "sched",
              "theory", "simulated", "measured", "samples/s", "held");
  double worst = 0;
  for (auto& r : rows) {
    std::printf("%3u %3u  %-6s %8.3f %9.3f %8.3f %10.0f %6u\n", r.stages,
                r.micros, to_string(r.schedule), r.theory, r.simulated,
                r.measured, r.samples_per_s, r.peak_held);
    if (r.schedule != pipeline_schedule::zb_h1)
      worst = std::max(worst, std::abs(r.measured - r.theory));
  }
  std::printf("\ngpipe and 1f1b: measured within %.1f points of theory\n",
              100 * worst);
  std::printf("{\"bench\":\"pipeline\",\"unit_us\":%u,\"worst_points\":%.2f,"
              "\"rows\":[",
              opt.unit_us, 100 * worst);
  for (size_t i = 0; i < rows.size(); ++i) {
    auto& r = rows[i];
    std::printf("%s{\"P\":%u,\"M\":%u,\"schedule\":\"%s\",\"theory\":%.4f,"
                "\"measured\":%.4f,\"samples_per_s\":%.1f,\"held\":%u}",
                i ? "," : "", r.stages, r.micros, to_string(r.schedule),
                r.theory, r.measured, r.samples_per_s, r.peak_held);
  }
  std::printf("]}\n");
  return 0;
}

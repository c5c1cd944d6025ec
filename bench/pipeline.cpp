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
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/node/node_config.hpp"
#include "actors/pipeline/schedule.hpp"
#include "actors/pipeline/stage_actor.hpp"
#include "actors/pipeline/stage_roads.hpp"
#include "bench/common.hpp"
#include "kernels/blas.hpp"
#include "kernels/stage.hpp"
#include "messages/errors.hpp"
#include "messages/pipeline.hpp"
#include "messages/type_ids.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

const std::string spec = "mlp:8-8-8-8-8"; // 4 layers: up to 4 stages
// Real stages: 5 layers of real compute, about 1.1 M parameters.
const std::string real_spec = "mlp:784-512-512-512-256-10";
constexpr uint32_t rows_per_micro = 2;

struct options {
  uint32_t unit_us = 2000;
  uint32_t steps = 3;
  std::vector<uint32_t> stages{2, 4};
  std::vector<uint32_t> micros{1, 2, 4, 8, 16};
  bool real = true; ///< also real stages (--real=0: synthetic only)
  std::vector<uint32_t> real_micros{1, 4, 16};
  /// Real stages' tensors: over CAF (middleman), on a road, or each.
  std::vector<road_kind> real_roads{road_kind::middleman, road_kind::shm};
};

bool parse_roads(const std::string& text, std::vector<road_kind>& out) {
  out.clear();
  std::stringstream in{text};
  std::string item;
  while (std::getline(in, item, ',')) {
    auto r = parse_road(item);
    if (!r || item == "auto")
      return false;
    out.push_back(*r);
  }
  return !out.empty();
}

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
    } else if (name == "--real" && number && n <= 1) {
      opt.real = n == 1;
    } else if (name == "--real-micros" && parse_list(value, opt.real_micros)) {
    } else if (name == "--real-roads" && parse_roads(value, opt.real_roads)) {
    } else {
      std::fprintf(stderr,
                   "*** pipeline: bad flag '%s'\nusage: pipeline "
                   "[--unit-us=100..1000000] [--steps=1..1000] "
                   "[--stages=2..4,...] [--micros=1..64,...] [--real=0|1]"
                   " [--real-micros=1..64,...]"
                   " [--real-roads=middleman|tcp|shm,...]\n",
                   a.c_str());
      return false;
    }
  }
  return true;
}

struct row {
  road_kind road; ///< what carried the tensors
  uint32_t stages, micros;
  pipeline_schedule schedule;
  double theory, simulated, measured, samples_per_s;
  uint32_t peak_held;      ///< measured on the stages: micro-batches
  uint64_t peak_bytes = 0; ///< measured: bytes of activations
};

/// What one configuration's stages did.
struct run_result {
  double wall = 0;   ///< mean seconds per mini-batch (after a warm-up)
  double idle = 0;   ///< 1 - the stages' mean busy share of it
  uint32_t held = 0; ///< the most micro-batches any stage held
  uint64_t bytes = 0;
};

/// The pipeline's shape: its model, micro-batch rows, F, B and W's
/// synthetic cost (0: real compute), and what carries stages' tensors
/// apart (stage_roads.hpp; middleman: CAF).
struct shape {
  std::string spec;
  uint32_t rows_per_micro;
  uint32_t unit_us;
  road_kind road = road_kind::middleman;
};

/// Runs `steps` mini-batches (after one to warm up) on P stage actors: in
/// `sys` (detached) or, given `apart`, each in an actor system of its own
/// reached over loopback TCP as separate processes would be.
caf::expected<run_result>
measure(caf::actor_system& sys,
        std::vector<std::unique_ptr<caf::actor_system>>* apart, const shape& sh,
        uint32_t steps, pipeline_schedule s, uint32_t p, uint32_t m) {
  auto whole = model::from_spec(sh.spec, nullptr); // a valid spec
  auto cut = cut_model(*whole, p);
  std::vector<caf::actor> stages, homes; // homes: where each one lives
  std::vector<std::shared_ptr<stage_roads>> roads;
  auto stop = [&] {       // each actor where it lives: a proxy's exit may not
    for (auto& a : homes) // arrive before its system shuts down
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  };
  for (uint32_t i = 0; i < p; ++i) {
    stage_settings cfg{sh.spec, 1, cut, i, m, s, sgd_at(0.01f), sh.unit_us};
    if (!apart) {
      stages.push_back(sys.spawn<caf::detached>(stage_actor, cfg));
      homes.push_back(stages.back());
      continue;
    }
    auto& home = *(*apart)[i];
    if (sh.road != road_kind::middleman) {
      kv_settings kv;
      kv.road = sh.road;
      auto r = stage_roads::listen("127.0.0.1", kv);
      if (!r) {
        stop();
        return std::move(r.error());
      }
      cfg.roads = *r;
      cfg.member = i;
      roads.push_back(*r);
    }
    homes.push_back(home.spawn(stage_actor, cfg));
    if (cfg.roads)
      cfg.roads->deliver_to(homes.back());
    auto port = home.middleman().publish(homes.back(), 0, "127.0.0.1");
    // CAF 0.17 fails a fresh connection now and then at once with
    // connection_timeout (also seen at a cluster's start): try again.
    auto there = port ? sys.middleman().remote_actor("127.0.0.1", *port)
                      : caf::expected<caf::actor>{port.error()};
    for (int tries = 1; !there && port && tries < 5; ++tries)
      there = sys.middleman().remote_actor("127.0.0.1", *port);
    if (!there) {
      stop();
      return std::move(there.error());
    }
    stages.push_back(*there);
  }
  caf::scoped_actor self{sys};
  for (uint32_t i = 0; i < p; ++i)
    self->send(stages[i], link_atom_v, i > 0 ? stages[i - 1] : caf::actor{},
               i + 1 < p ? stages[i + 1] : caf::actor{});
  for (uint32_t i = 0; i < p; ++i)
    self->receive([](uint64_t) {});
  uint32_t rows = m * sh.rows_per_micro;
  auto cols = static_cast<uint32_t>(whole->input_size());
  auto classes = float(whole->output_size());
  caf::error failed;
  run_result out;
  uint64_t busy = 0;
  auto collect = [&](bool keep) {
    for (auto& st : stages)
      self->request(st, 60s, stats_atom_v)
          .receive(
              [&](uint32_t held, uint64_t bytes, uint64_t ns) {
                if (!keep)
                  return;
                out.held = std::max(out.held, held);
                out.bytes = std::max(out.bytes, bytes);
                busy += ns;
              },
              [&failed](caf::error& e) { failed = std::move(e); });
  };
  auto t0 = bench::steady::now();
  for (uint64_t k = 0; k <= steps && !failed; ++k) {
    if (k == 1) { // the first warms up
      collect(false);
      t0 = bench::steady::now();
    }
    stage_tensor x{k, 0, rows, cols, std::vector<float>(rows * cols, 0.5f)};
    stage_tensor y{k, 0, rows, 1, std::vector<float>(rows)};
    for (uint32_t i = 0; i < rows; ++i)
      y.values[i] = float(i % uint32_t(classes));
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
    if (!failed && !(loss > 0 && std::isfinite(loss)))
      failed = caf::make_error(errc::bad_shape, "the loss is not positive");
  }
  auto wall = bench::since(t0);
  if (!failed)
    collect(true);
  // Checked: with roads, no tensor crossed CAF.
  for (auto& st : stages)
    self->request(st, 60s, stats_atom_v, road_atom_v)
        .receive(
            [&](uint64_t, uint64_t on_caf) {
              if (sh.road != road_kind::middleman && on_caf > 0 && !failed)
                failed = caf::make_error(errc::bad_shape, on_caf,
                                         "tensors crossed CAF, not the road");
            },
            [&failed](caf::error& e) { failed = std::move(e); });
  stop();
  if (failed)
    return failed;
  out.wall = wall / steps;
  out.idle = std::max(0.0, 1.0 - double(busy) * 1e-9 / (wall * p));
  return out;
}

/// Every schedule for every P and M of `stages` and `micros`.
caf::expected<std::vector<row>> table(caf::actor_system& sys, bool apart,
                                      const shape& sh, uint32_t steps,
                                      const std::vector<uint32_t>& stages,
                                      const std::vector<uint32_t>& micros) {
  std::vector<row> rows;
  for (auto p : stages) {
    std::vector<std::unique_ptr<node_config>> cfgs;
    std::vector<std::unique_ptr<caf::actor_system>> systems;
    for (uint32_t i = 0; apart && i < p; ++i) {
      cfgs.push_back(std::make_unique<node_config>());
      cfgs.back()->load<caf::io::middleman>();
      if (auto err = cfgs.back()->finish())
        return err;
      systems.push_back(std::make_unique<caf::actor_system>(*cfgs.back()));
    }
    for (auto m : micros)
      for (auto s : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b,
                     pipeline_schedule::zb_h1}) {
        auto sim = simulate(s, p, m);
        if (!sim)
          return std::move(sim.error());
        auto r = measure(sys, apart ? &systems : nullptr, sh, steps, s, p, m);
        if (!r)
          return caf::make_error(
              errc::bad_shape,
              std::string{to_string(s)} + " P=" + std::to_string(p) +
                  " M=" + std::to_string(m) + ": " + describe(r.error()));
        rows.push_back(
            {sh.road, p, m, s,
             s == pipeline_schedule::zb_h1 ? sim->bubble : theory_bubble(p, m),
             sim->bubble, r->idle, m * sh.rows_per_micro / r->wall, r->held,
             r->bytes});
      }
  }
  return rows;
}

void print_table(const std::vector<row>& rows) {
  std::printf("%3s %3s  %-6s %8s %9s %8s %10s %6s %10s\n", "P", "M", "sched",
              "theory", "simulated", "measured", "samples/s", "held",
              "act KiB");
  for (auto& r : rows)
    std::printf("%3u %3u  %-6s %8.3f %9.3f %8.3f %10.0f %6u %10.1f\n", r.stages,
                r.micros, to_string(r.schedule), r.theory, r.simulated,
                r.measured, r.samples_per_s, r.peak_held,
                r.peak_bytes / 1024.0);
}

void print_json_rows(const char* name, const std::vector<row>& rows) {
  std::printf("\"%s\":[", name);
  for (size_t i = 0; i < rows.size(); ++i) {
    auto& r = rows[i];
    std::printf("%s{\"road\":\"%s\",\"P\":%u,\"M\":%u,\"schedule\":\"%s\","
                "\"theory\":%.4f,"
                "\"measured\":%.4f,\"samples_per_s\":%.1f,\"held\":%u,"
                "\"act_bytes\":%llu}",
                i ? "," : "", to_string(r.road), r.stages, r.micros,
                to_string(r.schedule), r.theory, r.measured, r.samples_per_s,
                r.peak_held, static_cast<unsigned long long>(r.peak_bytes));
  }
  std::printf("]");
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  if (!parse(argc, argv, opt))
    return 2;
  node_config cfg;
  cfg.load<caf::io::middleman>();
  if (auto err = cfg.finish()) {
    std::fprintf(stderr, "*** pipeline: %s\n", describe(err).c_str());
    return 2;
  }
  caf::actor_system sys{cfg};
  auto synthetic = table(sys, false, shape{spec, rows_per_micro, opt.unit_us},
                         opt.steps, opt.stages, opt.micros);
  if (!synthetic) {
    std::fprintf(stderr, "*** pipeline: %s\n",
                 describe(synthetic.error()).c_str());
    return 1;
  }
  std::vector<row> real;
  if (opt.real) {
    // One BLAS thread per stage, as a stage process per core would have:
    // several stages' BLAS threads spinning on two cores distort the
    // figures more than the schedule does.
    set_blas_threads(1);
    for (auto road : opt.real_roads) {
      auto r = table(sys, true, shape{real_spec, 32, 0, road}, opt.steps,
                     opt.stages, opt.real_micros);
      if (!r) {
        std::fprintf(stderr, "*** pipeline: real stages, %s: %s\n",
                     to_string(road), describe(r.error()).c_str());
        return 1;
      }
      real.insert(real.end(), r->begin(), r->end());
    }
  }
  // Checks before printing: 1f1b holds at most P micro-batches, measured.
  for (auto* rows : {&*synthetic, &real})
    for (auto& r : *rows)
      if (r.schedule == pipeline_schedule::one_f_one_b &&
          r.peak_held > r.stages) {
        std::fprintf(stderr, "*** pipeline: 1f1b P=%u M=%u held %u > P\n",
                     r.stages, r.micros, r.peak_held);
        return 1;
      }
  std::printf("pipeline bubble, synthetic stages (%s, one actor system):"
              " asleep %u us per F, B or W; mean of %u mini-batches\n\n",
              spec.c_str(), opt.unit_us, opt.steps);
  print_table(*synthetic);
  double worst = 0;
  for (auto& r : *synthetic)
    if (r.schedule != pipeline_schedule::zb_h1)
      worst = std::max(worst, std::abs(r.measured - r.theory));
  std::printf("\ngpipe and 1f1b: measured within %.1f points of theory\n",
              100 * worst);
  if (opt.real) {
    for (auto road : opt.real_roads) {
      std::printf(
          "\nreal stages (%s, %u rows per micro-batch, each stage in"
          " an actor system of its own linked over loopback TCP,"
          " tensors %s, one BLAS thread each, sharing this"
          " machine's cores): idle share measured\n\n",
          real_spec.c_str(), 32u,
          road == road_kind::middleman
              ? "over CAF"
              : (std::string{"on the "} + to_string(road) + " road").c_str());
      std::vector<row> these;
      for (auto& r : real)
        if (r.road == road)
          these.push_back(r);
      print_table(these);
    }
  }
  std::printf("{\"bench\":\"pipeline\",\"unit_us\":%u,\"worst_points\":%.2f,",
              opt.unit_us, 100 * worst);
  print_json_rows("rows", *synthetic);
  std::printf(",");
  print_json_rows("real", real);
  std::printf("}\n");
  return 0;
}

// Pipeline schedules and their simulation: see the header.
#include "actors/pipeline/schedule.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "messages/errors.hpp"

namespace troupe {

const char* to_string(pipeline_schedule x) {
  switch (x) {
  case pipeline_schedule::gpipe:
    return "gpipe";
  case pipeline_schedule::one_f_one_b:
    return "1f1b";
  case pipeline_schedule::zb_h1:
    return "zb-h1";
  }
  return "?";
}

caf::expected<pipeline_schedule> parse_schedule(const std::string& name) {
  for (auto x : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b,
                 pipeline_schedule::zb_h1})
    if (name == to_string(x))
      return x;
  return caf::make_error(errc::invalid_config,
                         "--pipeline.schedule must be gpipe, 1f1b or zb-h1,"
                         " got",
                         name);
}

std::string to_string(const stage_work& x) {
  static const char names[] = {'F', 'B', 'b', 'w'};
  return names[x.kind] + std::to_string(x.micro);
}

namespace {

using work = stage_work;

std::vector<work> gpipe_plan(uint32_t micros) {
  std::vector<work> out;
  for (uint32_t j = 0; j < micros; ++j)
    out.push_back({work::forward, j});
  for (uint32_t j = 0; j < micros; ++j)
    out.push_back({work::backward, j});
  return out;
}

/// 1f1b, and zb-h1 where `split`: each backward is B, and W comes `lag`
/// backwards later (the W's left go at the end).
std::vector<work> one_f_one_b_plan(uint32_t stage, uint32_t stages,
                                   uint32_t micros, bool split, uint32_t lag) {
  std::vector<work> out;
  auto warmup = std::min(stages - 1 - stage, micros);
  uint32_t f = 0, b = 0, w = 0;
  while (f < warmup)
    out.push_back({work::forward, f++});
  auto backward = [&] {
    if (!split) {
      out.push_back({work::backward, b++});
      return;
    }
    out.push_back({work::backward_input, b++});
    if (b > lag) // W of the backward `lag` before this one
      out.push_back({work::backward_weight, w++});
  };
  while (f < micros) { // steady: one forward, one backward
    out.push_back({work::forward, f++});
    backward();
  }
  while (b < micros) // cooldown
    backward();
  while (split && w < micros)
    out.push_back({work::backward_weight, w++});
  return out;
}

} // namespace

std::vector<stage_work> stage_plan(pipeline_schedule s, uint32_t stage,
                                   uint32_t stages, uint32_t micros) {
  switch (s) {
  case pipeline_schedule::gpipe:
    return gpipe_plan(micros);
  case pipeline_schedule::one_f_one_b:
    return one_f_one_b_plan(stage, stages, micros, false, 0);
  case pipeline_schedule::zb_h1:
    // The later the stage, the sooner its B's are needed and the longer
    // it would idle at the end: it runs its W's the most backwards late.
    return one_f_one_b_plan(stage, stages, micros, true, stage);
  }
  return {};
}

double theory_bubble(uint32_t stages, uint32_t micros) {
  return double(stages - 1) / double(micros + stages - 1);
}

// -- simulation ---------------------------------------------------------------

namespace {

double cost_of(const work& x, const work_costs& c) {
  switch (x.kind) {
  case work::forward:
    return c.forward;
  case work::backward:
    return c.backward_input + c.backward_weight;
  case work::backward_input:
    return c.backward_input;
  case work::backward_weight:
    return c.backward_weight;
  }
  return 0;
}

/// The end time of what `x` on `stage` waits for, if that has run: none
/// (0) for the first stage's forwards.
struct done_times {
  uint32_t stages;
  // (stage, micro) -> end of its F, of its B (or whole backward)
  std::map<std::pair<uint32_t, uint32_t>, double> f, b;

  bool ready(uint32_t stage, const work& x, double& at) const {
    auto find = [&at](const std::map<std::pair<uint32_t, uint32_t>, double>& m,
                      uint32_t s, uint32_t j) {
      auto i = m.find({s, j});
      if (i == m.end())
        return false;
      at = i->second;
      return true;
    };
    at = 0;
    switch (x.kind) {
    case work::forward:
      return stage == 0 || find(f, stage - 1, x.micro);
    case work::backward:
    case work::backward_input:
      return stage + 1 == stages ? find(f, stage, x.micro)
                                 : find(b, stage + 1, x.micro);
    case work::backward_weight:
      return find(b, stage, x.micro);
    }
    return false;
  }

  void note(uint32_t stage, const work& x, double end) {
    switch (x.kind) {
    case work::forward:
      f[{stage, x.micro}] = end;
      return;
    case work::backward:
    case work::backward_input:
      b[{stage, x.micro}] = end;
      return;
    case work::backward_weight: // nothing waits for a W
      return;
    }
  }
};

/// Micro-batches held at most while `plan` runs: from a forward to the end
/// of its backward (whole, or its W).
uint32_t peak_held(const std::vector<work>& plan) {
  uint32_t held = 0, peak = 0;
  for (auto& x : plan) {
    if (x.kind == work::forward)
      peak = std::max(peak, ++held);
    else if (x.kind == work::backward || x.kind == work::backward_weight)
      --held;
  }
  return peak;
}

} // namespace

caf::error check_plan(const std::vector<stage_work>& plan, uint32_t micros) {
  // Per micro-batch: the step it is at (0: nothing yet, 1: F, 2: B, 3: W).
  std::vector<uint8_t> at(micros, 0);
  for (auto& x : plan) {
    if (x.micro >= micros)
      return caf::make_error(errc::invalid_config, "plan names micro-batch",
                             x.micro, "of", micros);
    auto& a = at[x.micro];
    bool ok = false;
    switch (x.kind) {
    case work::forward:
      ok = a == 0;
      a = 1;
      break;
    case work::backward:
      ok = a == 1;
      a = 3;
      break;
    case work::backward_input:
      ok = a == 1;
      a = 2;
      break;
    case work::backward_weight:
      ok = a == 2;
      a = 3;
      break;
    }
    if (!ok)
      return caf::make_error(errc::invalid_config, "plan runs", to_string(x),
                             "out of order");
  }
  for (uint32_t j = 0; j < micros; ++j)
    if (at[j] != 3)
      return caf::make_error(errc::invalid_config, "plan leaves micro-batch", j,
                             "unfinished");
  return caf::none;
}

caf::expected<pipeline_run> simulate(pipeline_schedule schedule,
                                     uint32_t stages, uint32_t micros,
                                     work_costs costs, const run_fn& on_run) {
  if (stages == 0 || micros == 0)
    return caf::make_error(errc::invalid_config,
                           "a pipeline needs at least one stage and one"
                           " micro-batch");
  std::vector<std::vector<work>> plans;
  for (uint32_t s = 0; s < stages; ++s) {
    plans.push_back(stage_plan(schedule, s, stages, micros));
    if (auto err = check_plan(plans.back(), micros))
      return err;
  }
  std::vector<size_t> next(stages, 0);
  std::vector<double> free_at(stages, 0), busy(stages, 0);
  done_times done{stages, {}, {}};
  for (bool progress = true; progress;) {
    progress = false;
    for (uint32_t s = 0; s < stages; ++s)
      for (double dep = 0;
           next[s] < plans[s].size() && done.ready(s, plans[s][next[s]], dep);
           ++next[s]) {
        auto& x = plans[s][next[s]];
        if (on_run)
          on_run(s, x);
        auto start = std::max(free_at[s], dep);
        free_at[s] = start + cost_of(x, costs);
        busy[s] += cost_of(x, costs);
        done.note(s, x, free_at[s]);
        progress = true;
      }
  }
  pipeline_run out;
  for (uint32_t s = 0; s < stages; ++s) {
    if (next[s] < plans[s].size())
      return caf::make_error(errc::invalid_config, "pipeline plan deadlocks:",
                             std::string{to_string(schedule)}, "stage", s,
                             "waits at", to_string(plans[s][next[s]]));
    out.makespan = std::max(out.makespan, free_at[s]);
    out.peak_held.push_back(peak_held(plans[s]));
  }
  double idle = 0;
  for (uint32_t s = 0; s < stages; ++s)
    idle += out.makespan - busy[s];
  out.bubble = out.makespan > 0 ? idle / (out.makespan * stages) : 0;
  return out;
}

} // namespace troupe

// Pipeline schedules as plain functions: for stage s of P stages and M
// micro-batches, the ordered work the stage does in one mini-batch. The
// stage actors run these lists; tests and bench/pipeline check them with
// simulate() apart from any actor.
//
//   gpipe  every forward, then every backward (GPipe): M micro-batches'
//          activations held at once.
//   1f1b   P - 1 - s forwards to warm up, then one forward and one backward
//          in turn, then the backwards left (PipeDream's 1F1B, flushed once
//          per mini-batch): at most P - s micro-batches held.
//   zb-h1  1f1b with each backward split into B (the input gradient, which
//          the stage before waits for) and W (the weight gradient, which no
//          one waits for). Stage s runs each W up to s backwards late, so
//          the backward wave crosses the stages at B's pace, and the late
//          W's fill the idle time at the end (Qi et al. 2023, ZB-H1). At
//          most P micro-batches held on any stage, as 1f1b's first stage.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

namespace troupe {

enum class pipeline_schedule : uint8_t { gpipe, one_f_one_b, zb_h1 };

/// "gpipe", "1f1b" or "zb-h1".
const char* to_string(pipeline_schedule x);

/// The schedule named `name`; invalid_config naming the choices otherwise.
caf::expected<pipeline_schedule> parse_schedule(const std::string& name);

/// One piece of a stage's work on one micro-batch.
struct stage_work {
  enum kind_t : uint8_t {
    forward,         ///< F: the stage's layers on the micro-batch
    backward,        ///< B and W together (gpipe, 1f1b)
    backward_input,  ///< B: the gradient the stage before needs
    backward_weight, ///< W: the stage's weight gradient
  };
  kind_t kind = forward;
  uint32_t micro = 0;
  bool operator==(const stage_work& y) const {
    return kind == y.kind && micro == y.micro;
  }
};

/// "F3", "B3" (whole backward), "b3" (input gradient), "w3" (weights).
std::string to_string(const stage_work& x);

/// The work of stage `stage` (0 = the first) of `stages` over `micros`
/// micro-batches, in order. Preconditions: stages >= 1, micros >= 1,
/// stage < stages.
std::vector<stage_work> stage_plan(pipeline_schedule s, uint32_t stage,
                                   uint32_t stages, uint32_t micros);

/// Checks that `plan` runs each of `micros` micro-batches once, in order:
/// F, then a whole backward or B then W.
caf::error check_plan(const std::vector<stage_work>& plan, uint32_t micros);

/// Times of each kind of work, in any unit (the same on every stage).
struct work_costs {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
};

/// What running every stage's plan takes, each stage doing its work in
/// order as soon as what it needs is there: F of a micro-batch needs its F
/// on the stage before; B (or a whole backward) needs the B on the stage
/// after (the last stage: its own F); W needs its own B.
struct pipeline_run {
  /// When the last stage's last work ends.
  double makespan = 0;
  /// The stages' idle share of stages x makespan.
  double bubble = 0;
  /// Per stage: the most micro-batches whose F is done and whose
  /// backward (W) is not, at any moment: activations held.
  std::vector<uint32_t> peak_held;
};

/// Hears each piece of work as a simulation starts it: in an order that
/// respects what each waits for (a single thread can run the stages so).
using run_fn = std::function<void(uint32_t stage, const stage_work& x)>;

/// Runs the plans of `schedule` for `stages` and `micros` with `costs`;
/// an error if a plan is broken (check_plan) or the plans deadlock.
caf::expected<pipeline_run> simulate(pipeline_schedule schedule,
                                     uint32_t stages, uint32_t micros,
                                     work_costs costs = {},
                                     const run_fn& on_run = {});

/// The bubble of gpipe and 1f1b in theory: (P - 1) / (M + P - 1).
double theory_bubble(uint32_t stages, uint32_t micros);

} // namespace troupe

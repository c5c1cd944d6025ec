// A stage actor: one stage of a model-parallel pipeline. It holds layers
// [first, last) of the model, runs its schedule's plan for each mini-batch
// (schedule.hpp), sends activations to the next stage and input gradients
// to the one before as Cap'n Proto StageTensors, and updates its own
// weights once the mini-batch is through.
//
// Messages:
//   (link_atom, prev, next)         its neighbours (a default actor at the
//                                   ends of the pipeline); answered with 0
//   (step_atom, step, frame)        run mini-batch `step`: the first stage
//                                   gets its inputs as a StageTensor (rows:
//                                   the samples), the last its labels (one
//                                   float per sample), a middle one an empty
//                                   frame. Answered once the stage is
//                                   through: the last stage with the sum of
//                                   the micro-batches' mean losses times
//                                   their rows, the others with 0
//   (activation_atom, frame)        from the stage before
//   (gradient_atom, frame)          from the stage after
//   (pull_atom)                     its weights: one named_array per
//                                   array, keyed 2 x (the model's layer
//                                   index) for the weights, + 1 for the
//                                   bias
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/pipeline/schedule.hpp"
#include "kernels/stage.hpp"
#include "messages/frame.hpp"
#include "messages/named_array.hpp"
#include "messages/pipeline.hpp"

namespace troupe {

/// What a stage actor is.
struct stage_settings {
  std::string spec = "mlp:784-256-128-10"; ///< the whole model
  uint64_t seed = 1;                       ///< its initial weights
  std::vector<size_t> cut;                 ///< layer boundaries (cut_layers)
  uint32_t stage = 0;                      ///< which of them
  uint32_t micros = 1;                     ///< micro-batches per mini-batch
  pipeline_schedule schedule = pipeline_schedule::one_f_one_b;
  float lr = 0.05f; ///< SGD on the stage's weights, once per mini-batch
  /// Benchmarks: each F, B and W also takes this long (a whole backward
  /// twice), asleep, so that a schedule's bubble shows apart from how the
  /// stages share cores; spawn such stages detached. 0 = off.
  uint32_t work_us = 0;
};

struct stage_state {
  stage_settings cfg;
  std::unique_ptr<stage_model> model;
  std::vector<stage_work> plan;
  caf::actor prev, next;
  // The mini-batch under way: its number, where the plan is, its inputs
  // (first stage) or labels (last), and who waits for its end.
  uint64_t step = 0;
  bool running = false;
  size_t at = 0;
  stage_tensor batch;
  double loss = 0;
  caf::response_promise done;
  // Tensors from the neighbours, by (step, micro-batch): they may come
  // before this stage starts that step.
  std::map<std::pair<uint64_t, uint32_t>, stage_tensor> acts, grads;
  static inline const char* name = "stage";
};

using stage_ptr = caf::stateful_actor<stage_state>*;

/// The stage actor of `cfg`; an error exits it at once (a bad spec or cut).
caf::behavior stage_actor(stage_ptr self, stage_settings cfg);

} // namespace troupe

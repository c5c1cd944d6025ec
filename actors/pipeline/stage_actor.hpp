// A stage actor: one stage of a model-parallel pipeline. It holds layers
// [first, last) of the model, runs its schedule's plan for each mini-batch
// (schedule.hpp), sends activations to the next stage and input gradients
// to the one before as Cap'n Proto StageTensors, and updates its own
// weights once the mini-batch is through.
//
// Messages:
//   (link_atom, prev, next)         its neighbours (a default actor at the
//                                   ends of the pipeline); answered with 0
//                                   once the roads to them are up or
//                                   given up (a reset does not wait)
//   (step_atom, step, frame)        run mini-batch `step`: the first stage
//                                   gets its inputs as a StageTensor (rows:
//                                   the samples), the last its labels (one
//                                   float per sample), a middle one an empty
//                                   frame. Answered once the stage is
//                                   through: the last stage with the sum of
//                                   the micro-batches' mean losses times
//                                   their rows, the others with 0
//   (activation_atom, frame)        from the stage before, over CAF
//   (gradient_atom, frame)          from the stage after, over CAF
//   (road_atom, rank)               -> (host, port, machine, socket,
//                                   token): a ticket for neighbour `rank`
//                                   to dial this stage's road
//                                   (stage_roads.hpp)
//   (road_atom, road_message_ptr)   what the stage's roads read: a
//                                   neighbour's tensor, or the answer to
//                                   one of ours
//   (road_down_atom, serial)        a road this stage dialled ended
//   (stats_atom, road_atom)         -> (tensors sent on roads, over CAF)
//   (pull_atom)                     its weights: one named_array per
//                                   array, keyed as the built-in trainer
//                                   keys the whole model's (stage_key),
//                                   then its optimizer's state arrays
//                                   (stage_state_key), if it has any
//   (push_atom, gen, step)          with commit_apart: the finished
//                                   mini-batch `step`'s gradients, keyed
//                                   alike, for the shard servers to apply;
//                                   it waits for no commit any more
//   (commit_atom, gen, step)        with commit_apart: apply the finished
//                                   mini-batch `step`'s update; answered
//                                   with the mini-batches applied
//   (reset_atom, gen, step, weights, prev, next, sink)
//                                   a new generation: drop the mini-batch
//                                   under way (its step is answered with
//                                   an error) and every tensor of an older
//                                   generation, take `weights` (as pull
//                                   gives them; none: keep them and the
//                                   optimizer's state) as those after `step`
//                                   mini-batches, and these neighbours;
//                                   answered with `step`
//   (stats_atom)                    -> (peak micro-batches held, peak
//                                   bytes of activations held, ns spent
//                                   working) since the last stats_atom
//   (eval_atom, frame)              an evaluation chunk (StageTensor:
//                                   step = the mini-batches whose weights
//                                   it needs, micro = the chunk): the
//                                   stage's layers on it once those are
//                                   applied, to the next stage, or from the
//                                   last stage its logits to `sink`
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/device/device_settings.hpp"
#include "actors/pipeline/schedule.hpp"
#include "actors/server/optimizer_settings.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/stage_backend.hpp"
#include "messages/frame.hpp"
#include "messages/named_array.hpp"
#include "messages/pipeline.hpp"

namespace troupe {

class road_conn;
class stage_roads;

/// What a stage actor is.
struct stage_settings {
  std::string spec = "mlp:784-256-128-10"; ///< the whole model
  uint64_t seed = 1;                       ///< its initial weights
  std::vector<size_t> cut;                 ///< layer boundaries (cut_layers)
  uint32_t stage = 0;                      ///< which of them
  uint32_t micros = 1;                     ///< micro-batches per mini-batch
  pipeline_schedule schedule = pipeline_schedule::one_f_one_b;
  /// The optimizer applied on commit, once per mini-batch: sgd, momentum,
  /// nesterov or adam (optimizer_step) with its hyper-parameters, and lr
  /// times lr_decay every lr_decay_steps mini-batches (0 = constant),
  /// counted from mini-batch 0, so a pipeline restarted from a checkpoint
  /// goes on with the same step sizes. Its state (a velocity, or adam's two
  /// moments, per array) goes out with the weights (pull_atom) and comes
  /// back with them (reset_atom), keyed by stage_state_key. A hybrid
  /// stage's servers apply the optimizer: it is sgd here, unused.
  optimizer_settings update = sgd_at(0.05f);
  /// Benchmarks: each F, B and W also takes this long (a whole backward
  /// twice), asleep, so that a schedule's bubble shows apart from how the
  /// stages share cores; spawn such stages detached. 0 = off.
  uint32_t work_us = 0;
  /// Update only on (commit_atom): a supervised pipeline applies a
  /// mini-batch once every stage is through it (stage_driver.hpp).
  /// Default off: the update follows the step at once.
  bool commit_apart = false;
  /// Its process's roads (stage_roads.hpp): tensors to and from the
  /// neighbours ride them. None: CAF carries them.
  std::shared_ptr<stage_roads> roads{};
  /// Its worker rank: the neighbours are member - 1 and member + 1.
  uint32_t member = 0;
  /// Fault injection: the stage kills its own process (SIGKILL) right
  /// after its forward of micro-batch 1 (0 if there is one) of this
  /// mini-batch. ~0 = never.
  uint64_t kill_in_step = ~uint64_t{0};
  /// ... or at the first chunk of the evaluation after this mini-batch.
  uint64_t kill_in_eval = ~uint64_t{0};
  /// ... or, in place of the kill in the step, its forward there fails as
  /// a device's would.
  uint64_t device_error_in_step = ~uint64_t{0};
  /// ... or its next work there hangs (SIGUSR1 to itself, as a fault
  /// plan's stall: actors/base/step_watch.hpp).
  uint64_t stall_in_step = ~uint64_t{0};
  /// Where its layers run (actors/device/stage_device.hpp): the CPU, or a
  /// GPU through the plugin. `backend`, if set, is those layers opened
  /// already (the stage driver opens them, to report a device that cannot
  /// be opened before it starts); else the stage actor opens them.
  device_name device{};
  std::shared_ptr<stage_backend> backend{};
};

struct stage_state {
  stage_settings cfg;
  std::shared_ptr<stage_backend> model;
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
  // The optimizer's state per parameter array (stage_settings::update).
  std::vector<momentum_state> velocity;
  std::vector<adam_state> moments;
  // The generation (reset_atom), the mini-batches applied, and whether the
  // finished step waits for its commit (commit_apart).
  uint64_t gen = 0;
  uint64_t applied = 0;
  bool awaiting_commit = false;
  caf::actor sink; // the last stage's evaluation logits go there
  /// A road to a neighbour (stage_roads.hpp): the neighbour it leads to,
  /// and the tensors sent on it and not yet acknowledged, by id (if it
  /// breaks, they go again over CAF).
  struct road_out {
    std::shared_ptr<road_conn> conn;
    caf::actor to;
    uint64_t next_id = 0;
    std::map<uint64_t, frame> unacked;
  };
  road_out to_prev, to_next;
  uint64_t road_tensors = 0, caf_tensors = 0; ///< sent each way
  // Tensors from the neighbours, by (generation, step, micro-batch): they
  // may come before this stage starts that step, or is reset to it.
  using box = std::map<std::tuple<uint64_t, uint64_t, uint32_t>, stage_tensor>;
  box acts, grads;
  std::vector<stage_tensor> evals; // until the weights they need are here
  // Since the last stats_atom: the most micro-batches and bytes of
  // activations held at once, and the time spent working.
  uint32_t peak_held = 0;
  uint64_t peak_bytes = 0;
  std::chrono::nanoseconds busy{0};
  static inline const char* name = "stage";
};

using stage_ptr = caf::stateful_actor<stage_state>*;

/// The key of parameter array `i` (weights, bias, per layer) of a stage
/// whose first layer is the model's `first_layer`: the 1-based index of
/// the array in model::parameters(), as the built-in trainer keys them, so
/// that a pipeline's stages and data-parallel workers name arrays alike.
inline uint64_t stage_key(size_t first_layer, size_t i) {
  return 2 * first_layer + i + 1;
}

/// The key of state array `j` (0: velocity or adam's m, 1: adam's v) of the
/// parameter array keyed `key`, in a stage's pull and checkpoints.
constexpr uint64_t stage_state_key_step = uint64_t{1} << 48;
inline uint64_t stage_state_key(uint64_t key, uint32_t j) {
  return key + (uint64_t{j} + 1) * stage_state_key_step;
}

/// The stage actor of `cfg`; an error exits it at once (a bad spec or cut).
caf::behavior stage_actor(stage_ptr self, stage_settings cfg);

} // namespace troupe

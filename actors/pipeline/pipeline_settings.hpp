// Settings of model-parallel pipelines (INI group "pipeline"): how a model
// is cut into stages, the schedule, and the stages' checkpoints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "actors/pipeline/schedule.hpp"

namespace troupe {

struct pipeline_settings {
  /// Stages P of the model, 2 or more (each a process: --worker.task=stage,
  /// ranks 0 .. P - 1). Default 3.
  uint32_t stages = 3;
  /// Replicas R of the pipeline: R x P stage processes (worker rank
  /// r * P + s is stage s of replica r), each replica training on its
  /// partition of the data; the stages keep their weights in sync through
  /// the shard servers (--cluster.servers > 0). Default 1.
  uint32_t replicas = 1;
  /// gpipe | 1f1b | zb-h1. Default 1f1b.
  std::string schedule_text = "1f1b";
  /// schedule_text, parsed by validate().
  pipeline_schedule schedule = pipeline_schedule::one_f_one_b;
  /// Micro-batches M per mini-batch (--train.batch must be a multiple).
  /// Default 4.
  uint32_t micro_batches = 4;
  /// Layer boundaries between the stages, e.g. "2,3" (P - 1 numbers,
  /// increasing); "" = an even split of the parameters. Default "".
  std::string cut_text;
  /// cut_text, parsed by validate(): the inner boundaries.
  std::vector<size_t> cut_inner;
  /// Each stage writes its weights every this many mini-batches, and at
  /// the end. Default 100.
  uint32_t checkpoint_every = 100;
  /// Folder of the stages' checkpoints; "" = one under the system's
  /// temporary folder, named after the scheduler's process (a new job
  /// starts afresh). A job started again with the same folder resumes
  /// from it. Default "".
  std::string checkpoint_dir;
  /// Stop after this many mini-batches; 0 = --train.epochs epochs.
  uint32_t steps = 0;
  /// How long a stage waits for a stage of its replica that is not in the
  /// cluster (never came, or left and was not brought back) before it ends
  /// with one line and exit_job_stuck (its agent does not restart it: the
  /// restart would wait again), in ms; 0 = for ever. Other replicas train
  /// on. Default 300000 (5 min: an agent restarts a stage in seconds). A
  /// stage its agent gave up (the view's given_up) ends them at once, and
  /// so do stages that ended stuck (the view's ended) where they are all
  /// that is missing; unless 0. The lead waits as long (twice
  /// --kv.request-timeout-ms at least) for a stage in the cluster it
  /// cannot connect to in its sync (a cut between the two alone).
  uint32_t stage_wait_ms = 300000;
  /// Fault injection, "S@K": stage S kills its own process (SIGKILL) in
  /// the middle of mini-batch K, once per checkpoint folder (its agent
  /// restarts it); with replicas, stage S of the first replica to claim
  /// it, or of replica R with "S/R@K". "S@K:push" (with servers): after K
  /// is committed, in the middle of its push of K, once its first server
  /// took its part. "S@K:eval": in the evaluation after mini-batch K (at
  /// an epoch's end, or the last), at its first chunk. "S@K:device": no
  /// kill, but its forward there fails as a device's would (a GPU's
  /// transient fault): the process exits 1, and its agent restarts it.
  /// "S@K:stall": no kill, but its work there hangs for good while its
  /// process answers its peers (actors/base/step_watch.hpp: its
  /// --worker.step-timeout-ms ends it, and its agent restarts it). "" = off.
  std::string fault_kill;
  /// fault_kill, parsed by validate(); fault_step = no_fault: off.
  static constexpr uint64_t no_fault = ~uint64_t{0};
  static constexpr uint32_t any_replica = ~uint32_t{0};
  uint32_t fault_stage = 0;
  uint32_t fault_replica = any_replica;
  uint64_t fault_step = no_fault;
  /// Where in mini-batch fault_step: its middle, its push, the evaluation
  /// after it; or its middle, as a device's failure or a hang.
  enum class fault_at { step, push, eval, device, stall };
  fault_at fault_in = fault_at::step;
  /// Fault injection, "S" or "S/R": stage S (of replica R) leaves the
  /// first sync its lead asks unanswered, as a connection cut loses an
  /// answer; the lead asks again (sync_ask_every). "" = off.
  std::string fault_lose_sync;
  /// fault_lose_sync, parsed by validate(); lose_sync_stage = none: off.
  static constexpr uint32_t none = ~uint32_t{0};
  uint32_t lose_sync_stage = none;
  uint32_t lose_sync_replica = any_replica;
  /// Fault injection, "S@K" or "S/R@K": stage S (of replica R) drops its
  /// lead's commit of mini-batch K, once, as a connection cut loses it;
  /// the lead's stall watch starts the pipeline again. "" = off.
  std::string fault_lose_commit;
  /// fault_lose_commit, parsed by validate(); lose_commit_stage = none:
  /// off.
  uint32_t lose_commit_stage = none;
  uint32_t lose_commit_replica = any_replica;
  uint64_t lose_commit_step = no_fault;
  /// Fault injection, "S" or "S/R": stage S (of replica R) drops the first
  /// finish it gets (stage 0: the last stage's; any other: the lead's),
  /// as a connection cut loses it. "" = off.
  std::string fault_lose_finish;
  /// fault_lose_finish, parsed by validate(); lose_finish_stage = none:
  /// off.
  uint32_t lose_finish_stage = none;
  uint32_t lose_finish_replica = any_replica;
};

/// True if a fault flag's stage `stage` of replica `replica` (any_replica:
/// of any) names stage `rank` of replica `of_replica`.
inline bool fault_names(uint32_t stage, uint32_t replica, uint32_t rank,
                        uint32_t of_replica) {
  return stage == rank &&
         (replica == pipeline_settings::any_replica || replica == of_replica);
}

/// Checks `x` and parses its schedule and cut; one error names the flag
/// that is wrong.
caf::error validate(pipeline_settings& x);

/// The boundaries of `x`'s cut for a model of `layers` layers given the
/// even cut `even` (cut_layers): `even` if no cut was given, else 0, the
/// inner boundaries, `layers`; an error if they do not fit the model.
caf::expected<std::vector<size_t>> cut_for(const pipeline_settings& x,
                                           size_t layers,
                                           const std::vector<size_t>& even);

} // namespace troupe

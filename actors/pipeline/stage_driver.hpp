// A pipeline stage's process: its driver feeds the stage actor
// (stage_actor.hpp) its mini-batches, and the drivers of one pipeline agree
// on when each mini-batch is applied and where to start again after a stage
// died. One stage per process (troupe-node --role=worker
// --worker.task=stage): the process joins the cluster as worker `rank` =
// its stage, and publishes its driver, whose address the view carries.
//
// The lead is stage 0's driver (its side: stage_lead.cpp; a stage's
// files: stage_files.cpp; the process: stage_process.cpp). States of a
// driver, and the transitions the code cites:
//
//   joined -1-> started (generation g) -2-> stepping k -3-> done k
//          -4-> committed k (k + 1 applied) -2-> stepping k + 1 ...
//          -5-> finished
//   any state -6-> stalled (a stage left the view: the mini-batch under
//          way is given up) -1-> started (generation g' > g)
//   stepping k -7-> stalled (no progress, every stage there) -1-> started
//
//   1: start. The lead, on every view where all P stages are present and
//      one of them is new to it (its first view, a restarted process),
//      asks each driver (sync_atom, epoch) for its stage actor and the
//      steps it has checkpoints of, and takes the newest step all have.
//      Then (start_atom, epoch, step, prev, next) to each driver: the
//      stage drops what it was doing, loads that step's weights and links
//      its neighbours. The generation is the view's epoch E, as E << 32,
//      plus n for the n-th start again in that view (7): tensors and
//      messages of older generations are dropped.
//   2: each driver gives its stage mini-batch k (stage 0 the images, the
//      last stage the labels; batches follow from the seed alone).
//   3: the stage is through k: (done_atom, gen, k, rank, loss) to the lead.
//   4: once every stage is done with k, the lead sends (commit_atom, gen,
//      k) to each driver, and the stages apply k's update. No stage
//      applies a mini-batch another has not finished, so a stage that dies
//      leaves no partial update behind.
//   5: after the last commit and the last evaluation, the last stage's
//      driver sends (finish_atom, gen) to the lead (again every half
//      stall_after until the lead's comes), which passes it on to every
//      driver; each ends normally, or, its finish lost, on a view that
//      says the lead finished.
//   6: a view without one of the stages: the mini-batch under way cannot
//      finish and will be dropped by the next start. One its agent gave up
//      (the view's given_up), or ones that ended stuck (the view's ended)
//      where they are all it lacks, end the driver at once; else it ends
//      after --pipeline.stage-wait-ms without it (stage_lead.cpp). The
//      lead also ends after that wait where it cannot connect to a stage
//      in the view in its sync (1).
//   7: the lead's stall watch (on_stall_check): every stage in the view,
//      but no done for stall_after (a start, done, commit or tensor lost
//      with a connection that broke): the lead syncs again (1), in a new
//      generation of the same view. After the last commit it waits so for
//      the last stage's (eval_atom, gen, step): its final evaluation is
//      counted (the line and the finish may wait for replicas below).
//
// Checkpoints: each driver writes its stage's weights after every
// --pipeline.checkpoint-every mini-batches, and at the end, keeping its two
// newest. It writes step j right after commit j - 1, which needed every
// stage through j - 1, so each had written j - every before: the newest
// step every stage has is at most one interval behind any stage's newest.
// Step 0's weights follow from the seed.
//
// Evaluation (stage_reports.cpp): after each epoch's last commit, stage
// 0's driver of the reporting replica (the lowest one still going) sends
// the test images in chunks (eval_atom, step = the mini-batches applied),
// and of every replica after the last commit; each stage runs a chunk once
// it has applied them; the last stage's driver counts the right answers,
// and the reporting replica's prints the epoch's line (and at the end
// "final test accuracy: 0.XXXX").
#pragma once

#include <cstdint>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/device/device_settings.hpp"
#include "actors/kv/kv_settings.hpp"
#include "actors/pipeline/pipeline_settings.hpp"
#include "actors/server/optimizer_settings.hpp"
#include "actors/worker/worker_settings.hpp"

namespace troupe {

/// What a stage process runs under.
struct stage_run_settings {
  pipeline_settings pipeline;
  train_settings train; ///< model, epochs, batch, seed, data
  /// Stages without servers: each stage's optimizer, with its lr, weight
  /// decay and lr schedule (--optimizer.*).
  optimizer_settings optimizer;
  kv_settings kv; ///< joining the cluster
  /// --cluster.servers: above 0, the stages keep their weights on the
  /// shard servers (hybrid with data parallelism), else each its own.
  uint32_t servers = 0;
  std::string host;  ///< where the driver is published
  uint16_t port = 0; ///< 0 = any free port
  /// --device: one device for the stage's layers (auto: cuda:0 where a GPU
  /// is found, else the CPU).
  device_settings device;
};

/// Joins the cluster of `scheduler` as one stage of a pipeline and trains
/// to the end; returns a process exit code (one line on stderr if it
/// failed). `cfg` is as node_config::finish() checked it (node_config's
/// stage()): the batch splits into the micro-batches, replicas and
/// `:push` faults have servers.
int run_stage(caf::actor_system& sys, caf::actor scheduler,
              const stage_run_settings& cfg);

} // namespace troupe

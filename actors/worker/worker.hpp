// The worker base users extend: a data-parallel worker is an actor that
// loops pull -> step -> push on the kv store; what a step computes (model,
// data, loss) is the user's worker_logic.
//
//   start -1-> initialising -2-> waiting at "start" -3-> stepping
//   stepping: pull(t) -4-> step(t) -5-> push(t) -6-> t + 1 (or done -7->)
//   pipelined stepping (worker_options::pipeline): push(t) goes out, then
//   step(t + 1) runs on the weights of step t; push(t)'s reply brings the
//   weights for step t + 2
//   overlapped stepping (worker_options::overlap): step(t) hands over its
//   blocks one by one, each pushed (clock t * B + b) with the pull of its
//   keys; the next step starts when all B replies are in
//   done: barrier "end", pull the final weights -8-> finish() -> stopped
//   any error (a kv call, a step) stops the actor with that error.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "actors/kv/kv_settings.hpp"
#include "messages/named_array.hpp"

namespace troupe {

/// What a worker computes. Runs on the worker actor: one call at a time.
class worker_logic {
public:
  virtual ~worker_logic() = default;

  /// The parameter arrays with their first values; the first worker to
  /// declare a key initialises it, every worker starts from those values.
  virtual std::vector<named_array> parameters() = 0;

  /// Called once every expected worker has joined, with this worker's rank
  /// and the number of workers (the job's --cluster.workers, or more if
  /// more are live): pick the data partition here. A restarted worker gets
  /// its old rank back and the same count, so it keeps its partition.
  virtual void start(uint32_t rank, uint32_t workers) = 0;

  /// True when the worker should stop before step `clock`. Also asked one
  /// clock ahead (to send the next pull with the push): no side effects.
  virtual bool done(uint64_t clock) = 0;

  /// One step at `clock` on the current `weights` (same keys and order as
  /// parameters()): returns what to push, e.g. the gradients.
  virtual caf::expected<std::vector<named_array>>
  step(uint64_t clock, const std::vector<named_array>& weights) = 0;
  /// As step(), given weights the worker no longer needs: an implementation
  /// may take their storage (swap it into its model, hand the gradients
  /// back in it) and save two copies of the model per step. The default
  /// calls step().
  virtual caf::expected<std::vector<named_array>>
  step_taking(uint64_t clock, std::vector<named_array>& weights) {
    return step(clock, weights);
  }

  /// Called with the final weights once every worker finished.
  virtual void finish(const std::vector<named_array>& weights) = 0;

  /// Hands over one block's arrays to push (the block's keys, in order).
  using emit_fn = std::function<void(size_t block, std::vector<named_array>)>;

  /// Overlapped steps (worker_options::overlap): the keys of the blocks
  /// step_blocked() pushes, in the order it hands them over; each key of
  /// parameters() in exactly one block. Empty (the default): no blocks,
  /// the worker steps whole.
  virtual std::vector<std::vector<uint64_t>> blocks() { return {}; }

  /// As step_taking(), but hands each block's arrays to `emit` as soon as
  /// they are ready, every block once and in blocks() order, so that the
  /// push of the first blocks overlaps the computing of the others. The
  /// default runs step_taking() and then hands the blocks over.
  virtual caf::error step_blocked(uint64_t clock,
                                  std::vector<named_array>& weights,
                                  const emit_fn& emit);

  /// Overlapped steps: block `b`'s weights for the step at `clock` came
  /// back (its keys, in order) while others may still be on their way: a
  /// logic may take their storage and start that step on them (the
  /// trainer runs its first layer's forward on each row block that is
  /// in). What it leaves in `weights` reaches step_blocked() with the
  /// other blocks' weights once all are back. The default does nothing.
  virtual void weights_arrived(uint64_t /*clock*/, size_t /*b*/,
                               std::vector<named_array>& /*weights*/) {
    // nothing taken, nothing begun
  }

  /// Overlapped steps: this worker came back (restarted, or resumed) in
  /// the middle of the step at `clock`, whose weights are gone: its part
  /// in the blocks left is given up, and no step() of any kind runs for
  /// `clock`; the next step is clock + 1. Whatever a logic does once per
  /// step (a progress report) it may do there. The default does nothing.
  virtual void step_skipped(uint64_t /*clock*/) {
    // nothing to make up for
  }
};

/// How the worker actor drives its logic.
struct worker_options {
  /// Gives up on a barrier after this long, ms.
  uint32_t barrier_timeout_ms = 60000;
  /// Pipelined steps (async and ssp modes only): the worker computes step
  /// t + 1 on the weights of step t while step t's push is in flight, so
  /// that the push, the servers' update and the pull overlap its own work.
  /// Each gradient then misses the worker's own last one (one more step of
  /// staleness); step(), not step_taking(), runs on the first weights,
  /// which serve two steps. A sync round needs every step's fresh weights.
  bool pipeline = false;
  /// Overlapped steps (sync and async modes; the logic must have blocks()):
  /// each block's push (and its pull for the next step) leaves as soon as
  /// step_blocked() hands it over, while the step goes on computing; the
  /// next step starts once every block's weights are back. Block b of step
  /// t is clock t * B + b on the servers (B blocks), so a sync round is
  /// one block of one step and weights stay exactly those of whole steps.
  /// The kv client must run on a thread of its own meanwhile: give the
  /// actor system two scheduler threads or more.
  bool overlap = false;
  /// A call of the logic (start, step, weights_arrived, finish) that runs
  /// this long, in ms, is hung: the process ends so that its agent
  /// restarts it (actors/base/step_watch.hpp: the first watch of a process
  /// counts). 0: see step_bound_of (--worker.step-timeout-ms).
  uint32_t step_timeout_ms = 0;
};

/// The step watch's bound for a worker that joins with `kv` and `opts`:
/// opts.step_timeout_ms, or where it is 0 half the longest the others wait
/// on one step of it: the request timeout in sync and ssp (their pulls wait
/// for its push), the barrier's timeout in async (only the end barrier
/// waits for it), so that it ends before they give up.
std::chrono::milliseconds step_bound_of(const worker_options& opts,
                                        const kv_settings& kv);

/// Spawns a worker actor driving `logic` through the kv client `kv_client`
/// (see actors/kv/kv.hpp: spawn_kv_client). A pipelined worker gets a thread
/// of its own: its steps must not hold up the kv client's sends.
caf::actor spawn_worker(caf::actor_system& sys, caf::actor kv_client,
                        std::shared_ptr<worker_logic> logic,
                        worker_options opts = {});

/// 0 if the scheduler's event log has no "lost" event, else
/// exit_job_failed (exit_codes.hpp), with one line on stderr that says
/// what was lost, or exit_failed if the log cannot be read: a job whose values
/// are gone does not end as if it had trained (at bc0f027 it printed its
/// accuracy and exit 0). Workers call it at their end unless
/// --cluster.allow-loss.
int check_nothing_lost(caf::actor_system& sys, const caf::actor& scheduler,
                       uint32_t timeout_ms);

/// Joins the cluster of `scheduler` as a worker, runs `logic` to the end
/// and returns a process exit code (one line on stderr if it failed).
int run_worker(caf::actor_system& sys, caf::actor scheduler,
               const kv_settings& cfg, std::shared_ptr<worker_logic> logic,
               worker_options opts = {});

} // namespace troupe

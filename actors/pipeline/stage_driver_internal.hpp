// Shared by the stage driver's files only (stage_driver.hpp says what the
// driver does): its state, its data, and its checkpoint files.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/expected.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/pipeline/stage_driver.hpp"
#include "kernels/idx.hpp"
#include "messages/membership.hpp"
#include "messages/named_array.hpp"
#include "messages/pipeline.hpp"

namespace troupe::pipe {

/// What a stage reads of the data set: stage 0 the images, the last stage
/// the labels, every stage the counts.
struct stage_data {
  dataset train, test;
  size_t train_n = 0;
  size_t test_n = 0;  ///< evaluated: --train.eval-samples, or all
  size_t cols = 0;    ///< floats per image
  size_t classes = 0; ///< the largest label + 1
};

/// Loads what stage `stage` of `stages` needs; "" or one line. (Every
/// replica reads the whole set and trains its partition.)
std::string load_stage_data(const train_settings& t, uint32_t stage,
                            uint32_t stages, stage_data& out);

/// Stage `stage`'s checkpoints in `dir`, by step.
std::string checkpoint_path(const std::string& dir, uint32_t stage,
                            uint64_t step);
/// The steps stage `stage` has checkpoints of in `dir` (0 always: the
/// seed's weights), ascending.
std::vector<uint64_t> checkpoint_steps(const std::string& dir, uint32_t stage);
/// As checkpoint_steps, less the steps whose file does not read whole (torn,
/// corrupt: each said in a warning), so that the stages agree on one every
/// stage can load. A torn newest file had the stage fail the same way at
/// every restart, and the others wait out --pipeline.stage-wait-ms.
std::vector<uint64_t> whole_checkpoint_steps(const std::string& dir,
                                             uint32_t stage);
/// Removes stage `stage`'s checkpoints from `dir`, then `dir` if that
/// leaves it empty (the last stage of a job to end): the end of a job
/// whose folder no later job finds.
void remove_stage_checkpoints(const std::string& dir, uint32_t stage);
/// Writes `x` to its file and removes all but the two newest of its stage.
caf::error write_stage_checkpoint(const std::string& dir,
                                  const stage_checkpoint& x);
/// Reads stage `want.stage`'s checkpoint of `want.step`, checking that it
/// is of the same model, layers and optimizer as `want`: its arrays (the
/// weights, then the optimizer's state). A file of another model, cut or
/// optimizer is errc::invalid_config; one missing, torn or of another
/// stage, errc::bad_file.
caf::expected<std::vector<named_array>>
read_stage_checkpoint(const std::string& dir, const stage_checkpoint& want);

/// The driver's state.
struct driver_state {
  static inline const char* name = "stage-driver";
  stage_run_settings cfg;
  caf::actor scheduler;
  uint32_t rank = 0; ///< the stage within its replica
  uint32_t stages = 0;
  uint32_t replica = 0, replicas = 1;
  /// Hybrid (--cluster.servers > 0): the weights live on the shard
  /// servers, reached through this kv client; else in the stage, with
  /// checkpoints in `dir`.
  caf::actor kv;
  std::vector<uint64_t> keys; ///< the stage's arrays
  std::string optimizer;      ///< the stage's own (stage_settings)
  caf::actor prev, next;      ///< the neighbours' stage actors
  std::vector<size_t> cut;
  std::string dir; ///< checkpoints
  caf::actor stage;
  std::vector<named_array> initial; ///< step 0's weights
  stage_data data;
  uint64_t steps_per_epoch = 0, total_steps = 0;
  std::vector<size_t> order; ///< the epoch's sample order
  uint64_t order_epoch = ~uint64_t{0};
  // The generation in force, its lead, and the mini-batch under way.
  uint64_t gen = 0;
  caf::actor lead;
  uint64_t step = 0;
  bool running = false;
  bool finished = false;
  /// --pipeline.fault-kill=S@K:push, claimed here: the push of K dies
  /// halfway (kv_client_state::kill_in_push). ~0 = none.
  uint64_t kill_in_push = ~uint64_t{0};
  /// --pipeline.fault-lose-sync names this stage: its next sync from the
  /// lead is left unanswered (once).
  bool lose_sync = false;
  /// --pipeline.fault-lose-commit=S@K names this stage: the lead's commit
  /// of mini-batch K is dropped here (once). ~0 = none.
  uint64_t lose_commit = ~uint64_t{0};
  /// --pipeline.fault-lose-finish names this stage: the first finish it
  /// gets is dropped.
  bool lose_finish = false;
  cluster_view view;
  // The last stage: each mini-batch's mean loss, and the evaluations
  // under way by the mini-batches they follow.
  std::map<uint64_t, double> losses;
  struct count {
    size_t right = 0, seen = 0;
  };
  std::map<uint64_t, count> evals;
  std::chrono::steady_clock::time_point began;
  /// The reporting last stage with --train.metrics-file: a JSON line per
  /// epoch; and where the generation under way began (its mini-batch, its
  /// seconds since `began`), whence the epoch line's rate.
  std::ofstream metrics;
  bool metrics_failed = false; ///< it could not be opened: not tried again
  uint64_t rate_step = 0;
  double rate_secs = 0;
  std::optional<uint64_t> reported; ///< the mini-batch of the last line
  /// The last stage of a replica above 0, its final evaluation counted:
  /// the final line, held until the replicas below have left (end_job).
  struct final_line {
    uint64_t epoch = 0, step = 0;
    double loss = 0, acc = 0;
    /// Since when no replica below is live (none: one is, or not seen).
    std::chrono::steady_clock::time_point below_left{};
  };
  std::optional<final_line> final_held;
  /// Syncs that came before the stage was built (and, hybrid, declared),
  /// answered once it is ready.
  bool ready = false;
  /// With servers: what follows the declaration, and its tries left.
  std::function<void()> declared;
  int declare_tries = 20;
  using sync_promise =
      caf::typed_response_promise<caf::actor, std::vector<uint64_t>>;
  struct early_sync {
    caf::actor_addr from;
    sync_promise rp;
  };
  std::vector<early_sync> early_syncs;
  /// The replica's lead as the last view with every stage names it (its
  /// stage 0): start, sync, commit and finish count only from its process
  /// (at the lead: done and finish only from its replica's drivers). What
  /// came before such a view waits for it.
  node_info lead_node;
  bool lead_known = false;
  struct early_start {
    caf::actor_addr from;
    uint64_t gen = 0, step = 0;
    caf::actor prev, next;
  };
  std::vector<early_start> early_starts;
  // The lead: the drivers of the generation (by rank), the sync under way
  // (its epoch, the answers), who is done with its step, and since when a
  // stage is missing.
  std::map<uint32_t, node_info> members; ///< as the last start saw them
  std::map<uint32_t, caf::actor> drivers;
  uint64_t syncing = 0;
  struct answer {
    caf::actor stage;
    std::vector<uint64_t> steps;
  };
  std::map<uint32_t, answer> answers;
  /// Since when each stage of the sync was asked, unanswered (its warning
  /// comes once a request timeout passed without an answer).
  std::map<uint32_t, std::chrono::steady_clock::time_point> asked_since;
  /// Since when each stage of the sync under way could not be connected
  /// to (every try failed since: from the first failed try's start).
  std::map<uint32_t, std::chrono::steady_clock::time_point> unreachable_since;
  /// Those were named on stdout in this sync (watch_sync).
  bool sync_late = false;
  uint64_t lead_step = 0;
  std::set<uint32_t> done;
  /// Since when the pipeline waits to start again, and why ("a stage
  /// left", "the pipeline stalled"); {} = it does not.
  std::chrono::steady_clock::time_point missing_since{};
  const char* restart_why = "";
  /// The lead's stall watch (on_stall_check): the sync whose generation
  /// runs (== syncing once every stage has answered it; 0 = none), when a
  /// stage last made progress in it (a start, a done), and whether the
  /// watch's check is due (one at a time).
  uint64_t started = 0;
  std::chrono::steady_clock::time_point progress_at{};
  bool stall_watch = false;
  /// Stalls that count (stall_wait, stalls_after_commit), and when the
  /// mini-batch under way began (the last commit, or the start).
  uint32_t stalls = 0;
  std::chrono::steady_clock::time_point step_began{};
  /// The last stage counted the generation's final evaluation: nothing
  /// more to watch.
  bool final_counted = false;
  // Every driver: since when a stage of its replica is out of the view
  // (before the first generation too; {} = none), the stages out of every
  // view since, and how many such absences began, which names the check
  // at the end of each one's wait.
  std::chrono::steady_clock::time_point absent_since{};
  std::set<uint32_t> absent;
  uint64_t absences = 0;
  /// Every driver: the stages of its replica it saw in a view (a stage
  /// that ended stuck ends it at once only if it saw that stage live: one
  /// started again by hand waits for the others).
  std::set<uint32_t> seen;
  /// The last stage: its finish sent again this many times (finish_again).
  uint32_t finish_resends = 0;
};

using driver_ptr = caf::stateful_actor<driver_state>*;

// -- shared by stage_driver.cpp and stage_lead.cpp --------------------------

/// How long the lead waits before it asks a stage again.
constexpr std::chrono::milliseconds sync_retry{500};

/// How long the lead waits for one answer to a sync before it asks again
/// (at most the request timeout). An answer can be lost with a connection:
/// on a loaded machine peers are cut at --middleman.connection-timeout, and
/// a request in flight on the cut connection neither completes nor fails.
/// Waiting the whole request timeout for it held the replica back, and in
/// sync mode the other replicas' rounds timed out waiting for its pushes
/// (pipeline_hybrid_test under load).
constexpr std::chrono::milliseconds sync_ask_every{1000};

/// How long the lead lets the generation under way go without any
/// stage's progress (a done) before it takes a message for lost (to a cut
/// connection, which neither delivers nor fails it) and starts the
/// generation again: twice the request timeout, the longest a stage waits
/// legitimately between two mini-batches (a sync round on the servers)
/// and more.
caf::timespan stall_after(driver_ptr self);

/// How long the stall watch waits after `stalls` stalls: `base`
/// (stall_after) doubled for each, up to 64 times, so that mini-batches
/// slower than `base` are not started again for ever.
inline caf::timespan stall_wait(caf::timespan base, uint32_t stalls) {
  return base * (int64_t{1} << std::min<uint32_t>(stalls, 6));
}

/// The stalls that count after a commit of a mini-batch that took `took`:
/// one fewer where it fit the wait of one fewer (a lost message, not a
/// slow step), so the wait shrinks back as mini-batches come quickly
/// again, and stays long while they take long.
inline uint32_t stalls_after_commit(uint32_t stalls, caf::timespan took,
                                    caf::timespan base) {
  return stalls > 0 && took < stall_wait(base, stalls - 1) ? stalls - 1
                                                           : stalls;
}

/// Generation `g` for logs: "E" (the view's epoch that began it) or
/// "E.n" (its n-th start again after a stall in that view).
std::string generation_name(uint64_t g);

/// The generation a lead starts in the view of `epoch` after generation
/// (or sync) `last`: above every one before, from any lead of the replica
/// (a lead restarted in a newer view starts above what its predecessor
/// started in older ones: n stays below 2^32).
inline uint64_t next_generation(uint64_t epoch, uint64_t last) {
  return std::max(epoch << 32, last + 1);
}

/// "stage S" (or "replica R stage S"), for logs.
std::string who(driver_ptr self);
/// True if the stages keep their weights on the shard servers.
bool hybrid(driver_ptr self);
/// True for the lead of a replica: its stage 0.
bool is_lead(driver_ptr self);
bool is_last(driver_ptr self);
/// True for the replica that evaluates and reports: the lowest one still
/// going (replica 0 unless it ended: stage_reports.cpp).
bool reports(driver_ptr self);
/// kv.request-timeout-ms.
caf::timespan timeout(driver_ptr self);
/// True if every stage of our replica is in `v`; fills `out` with them by
/// stage.
bool all_stages(driver_ptr self, const cluster_view& v,
                std::map<uint32_t, node_info>& out);
/// Connects this stage's process to the previous stage's (stage 2 and on;
/// the lead connects to every stage itself), then `then`, if generation
/// `gen` is still in force; a connection that fails is logged, and `then`
/// runs all the same. CAF carries messages between two nodes that only a
/// third (the lead's) introduced through that third, and once the third's
/// connection broke and anything was sent that way meanwhile, CAF drops
/// the route for good: whatever a stage sent its neighbour later was lost,
/// in every generation, though every process was up (a cut, or the lead's
/// process restarted, with tensors over CAF: --kv.road=middleman or a
/// road that failed). A connection of their own carries it, directly.
void meet_previous(driver_ptr self, uint64_t gen, std::function<void()> then);

/// Seconds since the driver began.
inline double seconds_running(const driver_state& st) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       st.began)
      .count();
}

/// The last stage, `reporting` (reports(), or an evaluation to report
/// came): opens --train.metrics-file for appending, if set and not open
/// yet; "" or one line.
std::string open_metrics(driver_ptr self, bool reporting);
/// True where this replica evaluates once mini-batch `at` is applied: the
/// reporting replica at an epoch's end, every one at the last.
bool evaluated_after(driver_ptr self, uint64_t at);
/// Mini-batch `at` is applied: stage 0 sends the test images through the
/// pipeline where evaluated_after (each stage's finish waits for the last
/// evaluation).
void evaluate_at(driver_ptr self, uint64_t at);
/// The last stage: a chunk of logits of an evaluation.
void count_eval(driver_ptr self, const frame& f);
/// The last stage, its final evaluation counted (or held, and a view
/// came): the final line and the finish, once it is known who says the
/// line. Not this replica where one below finished (its last stage did its
/// work and left: it said the line, or one below it did); this replica
/// where every one below is over (given up or ended). Else held: while a
/// replica below is live, and then --pipeline.stage-wait-ms at most, after
/// which those out are taken for over (the line is said). Before, a
/// replica that counted its final evaluation before it saw replica 0 given
/// up said nothing, and the job ended without its accuracy.
void end_job(driver_ptr self);
/// The reporting last stage: the line of `epoch`, whose evaluation after
/// mini-batch `step` found `acc`, with the mean loss of its mini-batches
/// (NaN: none since the last line); printed, and as JSON to the metrics
/// file if open. Once per mini-batch: a replay of `step` after a stage
/// came back reports nothing again.
void report_epoch(driver_ptr self, uint64_t epoch, double loss, double acc,
                  uint64_t step);

/// 5: the pipeline is through: the stage ends, then the driver (the lead
/// tells every driver first).
void finish(driver_ptr self);
/// 5: a finish of generation `gen` came (at the lead, from the last stage;
/// else from the lead).
void on_finish(driver_ptr self, uint64_t gen);
/// The last stage, its finish sent (end_job) and the lead's not come: its
/// own again, and again in half stall_after.
void finish_again(driver_ptr self);
/// A view from the scheduler: a stage gone (6), or, the lead, all there
/// with one new (1); a lead that finished (5, its finish to this driver
/// lost).
void on_view(driver_ptr self, const frame& f);
/// The end of absence `n`'s wait (--pipeline.stage-wait-ms): if a stage of
/// the replica is out of the view still, the driver ends with
/// member_missing, naming it (the process exits exit_job_stuck).
void on_wait_over(driver_ptr self, uint64_t n);
/// Takes the lead the last view names (stage 0 of the replica), and then
/// answers what waited for it (flush_early).
void find_lead(driver_ptr self);
/// True if `from` is the lead: this driver itself at the lead, else an
/// actor of another process whose process id is the lead's in the view.
/// (Not a connection to the lead's published port to compare handles:
/// a second connection between two CAF 0.17 nodes already connected
/// breaks the first.)
bool is_lead_addr(driver_ptr self, const caf::actor_addr& from);
/// True if the message being handled comes from the lead (or, with
/// `or_driver`, at the lead, from one of its replica's drivers); else
/// logs that `what` was ignored.
bool from_lead(driver_ptr self, const char* what, bool or_driver = false);
/// The lead: true if the message being handled comes from the driver of
/// stage `rank` of this generation.
bool from_driver(driver_ptr self, uint32_t rank);
/// Answers the syncs and runs the starts that came before the stage was
/// ready or the lead resolved: those from the lead; the others are
/// refused.
void flush_early(driver_ptr self);
/// 1: a generation begins here at `step`, as `lead` says.
void on_start(driver_ptr self, caf::actor lead, uint64_t gen, uint64_t step,
              caf::actor prev, caf::actor next);
/// The lead: asks stage `rank` again in sync `epoch`, if it has not
/// answered and no newer sync began.
void retry(driver_ptr self, uint64_t epoch, uint32_t rank);
/// The lead: stage `rank` is through mini-batch `k` of generation `gen`
/// (3); once all are, the commit (4).
void on_done(driver_ptr self, uint64_t gen, uint64_t k, uint32_t rank);
/// The lead's stall watch, every half stall_after from its first sync:
/// where no stage made progress for stall_after while every
/// stage is in the view, a start, done, commit or tensor was lost on a
/// connection that broke (the scheduler still sees every process, so no
/// view comes to end the wait): the lead syncs again, and the stages start
/// a new generation from the newest step all have, as after a stage that
/// died. After the last commit, until the last stage says it counted the
/// final evaluation (on_final_counted). During a sync it watches the
/// stages the lead cannot connect to instead (watch_sync, stage_lead.cpp).
void on_stall_check(driver_ptr self);
/// The lead: the last stage counted generation `gen`'s final evaluation,
/// after mini-batch `step` (its line may wait for the replicas below).
void on_final_counted(driver_ptr self, uint64_t gen, uint64_t step);

/// The driver of `cfg`'s stage in the cluster of `scheduler`. Its first
/// message, from its process once it has joined: (start_atom, worker rank,
/// cut, checkpoint folder, kv client), answered with the mini-batches it
/// will run.
caf::behavior stage_driver(driver_ptr self, stage_run_settings cfg,
                           caf::actor scheduler);

} // namespace troupe::pipe

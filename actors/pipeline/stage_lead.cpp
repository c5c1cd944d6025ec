// The lead of a pipeline replica (stage 0's driver): the generations it
// starts and the commits it sends (stage_driver.hpp, transitions 1, 4, 6).
#include <algorithm>
#include <cstdio>
#include <iterator>

#include "actors/base/log.hpp"
#include "actors/cluster/connect.hpp"
#include "actors/pipeline/stage_driver_internal.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::pipe {

bool all_stages(driver_ptr self, const cluster_view& v,
                std::map<uint32_t, node_info>& out) {
  auto& st = self->state;
  out.clear();
  for (auto& w : v.workers)
    if (w.rank / st.stages == st.replica)
      out[w.rank % st.stages] = w;
  return out.size() == st.stages;
}

namespace {

/// The ranks of the replica's stages not in `members`.
std::set<uint32_t> lacking(driver_ptr self,
                           const std::map<uint32_t, node_info>& members) {
  std::set<uint32_t> out;
  for (uint32_t r = 0; r < self->state.stages; ++r)
    if (members.count(r) == 0)
      out.insert(r);
  return out;
}

/// `ranks` as "1, 2", for lines.
std::string listed(const std::set<uint32_t>& ranks) {
  std::string out;
  for (auto r : ranks)
    out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

/// Ends the driver with member_missing: stages `out` of the replica are
/// `why` (the process exits exit_job_stuck, not restarted); `remedy` says
/// what to do before the job starts again ("" = bring them back).
void end_stuck(driver_ptr self, const std::set<uint32_t>& out,
               const std::string& why, const std::string& remedy = "") {
  auto& st = self->state;
  auto gone = listed(out);
  auto them = out.size() == 1 ? "it" : "them";
  // Where the weights to resume from are: the stages' own checkpoints, or
  // (hybrid) the servers'.
  auto resume = hybrid(self) ? " with --resume to go on from the servers'"
                               " last checkpoint (--checkpoint.dir)"
                             : " with the same --pipeline.checkpoint-dir to"
                               " resume from the stages' checkpoints";
  self->quit(caf::make_error(
      errc::member_missing,
      who(self) + (out.size() == 1 ? ": stage " : ": stages ") + gone +
          " of replica " + std::to_string(st.replica) + " " + why +
          ": the replica cannot go on without " + them +
          ", so this stage ends too (not restarted); " +
          (remedy.empty() ? "bring " + std::string{them} + " back" : remedy) +
          " and start the job again" + resume));
}

/// The stages of the replica in `lacks` that the view names in `ranks`
/// (its given_up, or its ended).
std::set<uint32_t> named_in(driver_ptr self, const std::vector<uint32_t>& ranks,
                            const std::set<uint32_t>& lacks) {
  auto& st = self->state;
  std::set<uint32_t> out;
  for (auto rank : ranks)
    if (rank / st.stages == st.replica && lacks.count(rank % st.stages) != 0)
      out.insert(rank % st.stages);
  return out;
}

/// Every driver: the clock of --pipeline.stage-wait-ms. A view without a
/// stage of the replica starts it (if it is not running), each later one
/// keeps in `absent` only the stages it lacks too, and a view with every
/// stage stops it. A stage its agent gave up on ends the driver at once
/// (returns false): no restart will come to wait for; so do stages that
/// ended stuck (the view's ended: each waited out its own bound), where
/// they are all it lacks (else its own wait names the stages merely out,
/// which the first to end waited for, and ends at about the same time).
/// But 0 (wait for ever) waits for one started again by hand.
bool watch_absence(driver_ptr self,
                   const std::map<uint32_t, node_info>& members) {
  auto& st = self->state;
  auto lacks = lacking(self, members);
  auto wait = st.cfg.pipeline.stage_wait_ms;
  auto gone = named_in(self, st.view.given_up, lacks);
  auto ended = named_in(self, st.view.ended, lacks);
  for (auto it = ended.begin(); it != ended.end();)
    it = st.seen.count(*it) != 0 ? std::next(it) : ended.erase(it);
  bool by_agent = !gone.empty();
  if ((by_agent || (!ended.empty() && ended == lacks)) && !st.finished &&
      wait != 0) {
    auto& out = by_agent ? gone : ended;
    bool one = out.size() == 1;
    end_stuck(self, out,
              by_agent
                  ? std::string{one ? "was given up by its agent"
                                    : "were given up by their agents"} +
                        " (no restart will come)"
                  : std::string{"ended stuck ("} + (one ? "its" : "their") +
                        " output says why; no restart will come)");
    return false;
  }
  if (lacks.empty()) {
    st.absent_since = {};
    st.absent.clear();
    return true;
  }
  if (st.absent_since != std::chrono::steady_clock::time_point{}) {
    std::set<uint32_t> still;
    std::set_intersection(st.absent.begin(), st.absent.end(), lacks.begin(),
                          lacks.end(), std::inserter(still, still.end()));
    st.absent = std::move(still);
    return true;
  }
  if (wait == 0 || st.finished)
    return true;
  st.absent_since = std::chrono::steady_clock::now();
  st.absent = std::move(lacks);
  self->delayed_send(self, std::chrono::milliseconds{wait}, tick_atom_v,
                     ++st.absences);
  return true;
}

void lead_sync(driver_ptr self, uint64_t epoch);
void reach(driver_ptr self, uint64_t sync, uint32_t rank);

/// The lead: checks for a stall in half stall_after, if no check is due.
void watch_stall(driver_ptr self) {
  auto& st = self->state;
  if (st.stall_watch)
    return;
  st.stall_watch = true;
  self->delayed_send(self, stall_after(self) / 2, stale_atom_v);
}

/// The lead: every answer to sync `sync` is in: start its generation.
void lead_start(driver_ptr self, uint64_t sync) {
  auto& st = self->state;
  // The newest step every stage has a checkpoint of; with servers, the
  // smallest clock: a stage that pushed it already is dropped there as a
  // duplicate.
  auto common = st.answers.begin()->second.steps;
  if (hybrid(self)) {
    common = {~uint64_t{0}};
    for (auto& [rank, a] : st.answers)
      common[0] = std::min(common[0], a.steps.empty() ? 0 : a.steps.front());
  }
  for (auto& [rank, a] : st.answers) {
    if (hybrid(self))
      break;
    std::vector<uint64_t> both;
    std::set_intersection(common.begin(), common.end(), a.steps.begin(),
                          a.steps.end(), std::back_inserter(both));
    common = std::move(both);
  }
  uint64_t step = common.empty() ? 0 : common.back();
  st.lead_step = step;
  st.done.clear();
  for (uint32_t r = 0; r < st.stages; ++r) {
    auto prev = r > 0 ? st.answers[r - 1].stage : caf::actor{};
    auto next = r + 1 < st.stages ? st.answers[r + 1].stage : caf::actor{};
    self->send(st.drivers[r], start_atom_v, sync, step, prev, next);
  }
  st.started = sync;
  st.progress_at = st.step_began = std::chrono::steady_clock::now();
  watch_stall(self);
  auto since = st.missing_since;
  if (since != std::chrono::steady_clock::time_point{}) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - since)
                  .count();
    TROUPE_LOG(info, who(self), "pipeline restarts at mini-batch ", step, ", ",
               ms, " ms after ", st.restart_why);
    std::printf("pipeline: every stage is back; resuming at mini-batch %llu,"
                " %lld ms after %s\n",
                static_cast<unsigned long long>(step),
                static_cast<long long>(ms), st.restart_why);
    std::fflush(stdout);
    st.missing_since = {};
  }
}

/// The lead: asks driver `rank` (in sync `sync`) for its stage and
/// checkpoints, again every sync_ask_every while no answer came; says so
/// once a request timeout passed without one.
void ask(driver_ptr self, uint64_t sync, const caf::actor& d, uint32_t rank) {
  self->request(d, std::min<caf::timespan>(sync_ask_every, timeout(self)),
                sync_atom_v, sync)
      .then(
          [self, sync, rank](caf::actor& stage, std::vector<uint64_t>& steps) {
            auto& st = self->state;
            // An answer to an earlier ask of this sync starts nothing again.
            if (st.syncing != sync || st.answers.count(rank) != 0)
              return;
            st.answers[rank] = {std::move(stage), std::move(steps)};
            if (st.answers.size() == st.stages)
              lead_start(self, sync);
          },
          [self, sync, rank](caf::error& err) {
            auto& st = self->state;
            if (st.syncing != sync || st.answers.count(rank) != 0)
              return;
            auto now = std::chrono::steady_clock::now();
            auto& since = st.asked_since[rank];
            if (err == caf::sec::request_timeout &&
                now - since < timeout(self)) {
              reach(self, sync, rank); // its answer may have been lost
              return;
            }
            TROUPE_LOG(warning, who(self), "stage ", rank,
                       " did not answer: ", describe(err));
            since = now;
            self->delayed_send(self, sync_retry, sync_atom_v, sync, rank);
          });
}

/// The lead: 1, for the view of `epoch`.
void lead_sync(driver_ptr self, uint64_t epoch) {
  auto& st = self->state;
  if (st.finished || st.view.epoch != epoch)
    return; // a newer view syncs for itself
  std::map<uint32_t, node_info> members;
  if (!all_stages(self, st.view, members))
    return;
  st.syncing = next_generation(epoch, st.syncing);
  st.members = members;
  st.answers.clear();
  st.asked_since.clear();
  st.unreachable_since.clear();
  st.sync_late = false;
  st.final_counted = false; // of the generation this sync starts
  watch_stall(self);        // also watches the sync (watch_sync)
  for (auto& m : members) {
    st.asked_since[m.first] = std::chrono::steady_clock::now();
    reach(self, st.syncing, m.first);
  }
}

/// The lead: connects to driver `rank` of sync `sync` and asks it.
void reach(driver_ptr self, uint64_t sync, uint32_t rank) {
  auto& st = self->state;
  auto& n = st.members[rank];
  if (rank == st.rank) {
    st.drivers[rank] = caf::actor{self};
    ask(self, sync, st.drivers[rank], rank);
    return;
  }
  auto tried = std::chrono::steady_clock::now(); // unreachable since then
  connect_actor(
      self, n.host, n.port, timeout(self),
      [self, sync, rank](caf::strong_actor_ptr& ptr) {
        auto& st = self->state;
        if (st.syncing != sync || !ptr)
          return;
        st.unreachable_since.erase(rank);
        st.drivers[rank] = caf::actor_cast<caf::actor>(ptr);
        ask(self, sync, st.drivers[rank], rank);
      },
      [self, sync, rank, tried](caf::error& err) {
        TROUPE_LOG(warning, who(self), "cannot reach stage ", rank, ": ",
                   describe(err));
        auto& st = self->state;
        if (st.syncing != sync)
          return;
        st.unreachable_since.emplace(rank, tried);
        self->delayed_send(self, sync_retry, sync_atom_v, sync, rank);
      });
}

/// The ranks of the replica's stages not through the mini-batch under
/// way.
std::set<uint32_t> not_done(driver_ptr self) {
  auto& st = self->state;
  std::set<uint32_t> out;
  for (uint32_t r = 0; r < st.stages; ++r)
    if (st.done.count(r) == 0)
      out.insert(r);
  return out;
}

/// What is said of stages `ranks` the lead could not connect to for `ms`:
/// "is in the cluster, but the lead could not connect to it for N ms".
std::string unreachable_words(const std::set<uint32_t>& ranks,
                              std::chrono::milliseconds ms) {
  bool one = ranks.size() == 1;
  return std::string{one ? "is" : "are"} +
         " in the cluster, but the lead could not connect to " +
         (one ? "it" : "them") + " for " + std::to_string(ms.count()) + " ms";
}

/// The lead, its sync under way (every stage in the view, the same
/// processes): names on stdout the stages that have not answered it and
/// it could not connect to for a request timeout, and ends the driver stuck
/// once one of them stayed so for --pipeline.stage-wait-ms, but twice the
/// request timeout at least (unless 0: a streak of failed connects to a
/// healthy stage on a starved machine must not end a job). A stage the
/// scheduler sees but the lead cannot reach (a cut between the two alone)
/// was asked again for ever, and the job hung. A stage slow to answer
/// (still building its layers) can be connected to: not counted.
void watch_sync(driver_ptr self) {
  auto& st = self->state;
  auto now = std::chrono::steady_clock::now();
  auto wait = std::chrono::milliseconds{st.cfg.pipeline.stage_wait_ms};
  auto bound = std::max<caf::timespan>(wait, stall_after(self));
  std::set<uint32_t> cut, over;
  std::chrono::milliseconds longest{0};
  for (auto& [rank, since] : st.unreachable_since) {
    auto out =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - since);
    if (st.answers.count(rank) != 0 || out < timeout(self))
      continue;
    cut.insert(rank);
    longest = std::max(longest, out);
    if (wait.count() != 0 && out >= bound)
      over.insert(rank);
  }
  if (!over.empty()) {
    end_stuck(self, over,
              unreachable_words(over, longest) + " (--pipeline.stage-wait-ms)",
              std::string{"let this host reach "} +
                  (over.size() == 1 ? "its host" : "their hosts") +
                  " again (a network cut?)");
    return;
  }
  if (cut.empty() || st.sync_late)
    return;
  st.sync_late = true;
  auto which = (cut.size() == 1 ? "stage " : "stages ") + listed(cut) + " " +
               unreachable_words(cut, longest);
  auto until = wait.count() == 0
                   ? std::string{"for ever (--pipeline.stage-wait-ms=0)"}
                   : "at most " + std::to_string(wait.count()) +
                         " ms (--pipeline.stage-wait-ms)";
  TROUPE_LOG(warning, who(self), which, "; waiting ", until);
  std::printf("pipeline: %s (a network cut between them?); waiting %s\n",
              which.c_str(), until.c_str());
  std::fflush(stdout);
  if (st.missing_since == std::chrono::steady_clock::time_point{}) {
    st.missing_since = now - longest; // "every stage is back" at the start
    st.restart_why = "the lead could not connect to a stage";
  }
}

} // namespace

/// The lead: driver `rank` of sync `sync` again, if it has not answered.
void retry(driver_ptr self, uint64_t sync, uint32_t rank) {
  auto& st = self->state;
  // A newer view of the same members leaves this sync in force: only new
  // members start another.
  if (!st.finished && st.syncing == sync && st.answers.count(rank) == 0)
    reach(self, sync, rank);
}

void on_stall_check(driver_ptr self) {
  auto& st = self->state;
  st.stall_watch = false;
  if (st.finished || st.final_counted)
    return; // the finish is not watched
  watch_stall(self);
  // A stage out of the view is the absence's wait (on_view, 6).
  std::map<uint32_t, node_info> members;
  if (!all_stages(self, st.view, members) || members != st.members)
    return;
  if (st.started != st.syncing) { // a sync under way retries by itself
    watch_sync(self);
    return;
  }
  auto quiet = std::chrono::steady_clock::now() - st.progress_at;
  if (quiet < stall_wait(stall_after(self), st.stalls))
    return;
  ++st.stalls;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(quiet);
  bool end = st.lead_step >= st.total_steps;
  auto what = end ? "the final evaluation"
                  : "mini-batch " + std::to_string(st.lead_step);
  auto waiting =
      end ? "stage " + std::to_string(st.stages - 1) + " has not counted it"
          : "stages " + listed(not_done(self)) + " not through it";
  TROUPE_LOG(warning, who(self), what, ": no progress for ", ms.count(),
             " ms (", waiting,
             "), though every stage is in the cluster (a message lost with"
             " a connection that broke, or a stage that hangs): starting"
             " the stages again");
  std::printf("pipeline: %s made no progress for %lld ms (%s) while every"
              " stage is in the cluster; starting the stages again\n",
              what.c_str(), static_cast<long long>(ms.count()),
              waiting.c_str());
  std::fflush(stdout);
  st.missing_since = st.progress_at;
  st.restart_why = "the pipeline stalled";
  lead_sync(self, st.view.epoch);
}

/// A view from the scheduler: 6 where a stage is gone, 1 (the lead) where
/// all are there and one is new.
void on_view(driver_ptr self, const frame& f) {
  auto& st = self->state;
  auto from = self->current_sender();
  if (from == nullptr ||
      caf::actor_cast<caf::actor_addr>(from) != st.scheduler.address())
    return; // views come from the scheduler only
  cluster_view v;
  if (auto err = decode(f, v); err || v.epoch <= st.view.epoch)
    return;
  st.view = std::move(v);
  end_job(self); // if the final line waits for replicas below to leave
  // 5 without its message: the lead finishes only once the final
  // evaluation went through every stage, so the pipeline is through. (Its
  // finish to this driver was lost: the driver waited out the stage wait,
  // and ended with exit 5.)
  auto& done = st.view.finished;
  if (!is_lead(self) && !st.finished &&
      std::count(done.begin(), done.end(), st.replica * st.stages) != 0) {
    TROUPE_LOG(info, who(self),
               "its lead finished, and its finish did not"
               " come: the pipeline is through");
    finish(self);
    return;
  }
  std::map<uint32_t, node_info> members;
  bool all = all_stages(self, st.view, members);
  for (auto& m : members)
    st.seen.insert(m.first);
  if (!watch_absence(self, members))
    return; // ended
  auto wait = st.cfg.pipeline.stage_wait_ms;
  if (!all) { // 6 (at the end: the others are leaving, done)
    if (st.missing_since == std::chrono::steady_clock::time_point{} &&
        st.gen > 0 && st.step < st.total_steps) {
      st.missing_since = std::chrono::steady_clock::now();
      st.restart_why = "a stage left";
      TROUPE_LOG(info, who(self), "a stage left: mini-batch ", st.step,
                 " will be dropped; waiting for it to come back",
                 wait > 0 ? " (at most " + std::to_string(wait) +
                                " ms, --pipeline.stage-wait-ms)"
                          : std::string{});
    }
    return;
  }
  find_lead(self);
  if (is_lead(self) && members != st.members)
    lead_sync(self, st.view.epoch);
}

void on_wait_over(driver_ptr self, uint64_t n) {
  auto& st = self->state;
  auto since = st.absent_since;
  auto wait = std::chrono::milliseconds{st.cfg.pipeline.stage_wait_ms};
  if (n != st.absences || since == std::chrono::steady_clock::time_point{} ||
      st.finished || std::chrono::steady_clock::now() - since < wait)
    return; // back in time, or not this absence's check
  // The stages out all along; else (each came for a while, never all at
  // once) those out now.
  auto out = st.absent;
  if (out.empty()) {
    std::map<uint32_t, node_info> members;
    all_stages(self, st.view, members);
    out = lacking(self, members);
  }
  end_stuck(self, out,
            "not in the cluster for " + std::to_string(wait.count()) +
                " ms (--pipeline.stage-wait-ms)");
}

void find_lead(driver_ptr self) {
  auto& st = self->state;
  std::map<uint32_t, node_info> members;
  if (!all_stages(self, st.view, members))
    return;
  st.lead_node = members[0];
  st.lead_known = true;
  flush_early(self);
}

bool is_lead_addr(driver_ptr self, const caf::actor_addr& from) {
  auto& st = self->state;
  if (!from || !st.lead_known)
    return false;
  if (is_lead(self))
    return from == self->address();
  auto node = from.node();
  if (!node || node == self->node() ||
      node->implementation_id() != caf::node_id::default_data::class_id)
    return false;
  auto& id = static_cast<const caf::node_id::default_data&>(*node);
  return id.process_id() == st.lead_node.pid;
}

bool from_driver(driver_ptr self, uint32_t rank) {
  auto& st = self->state;
  auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto d = st.drivers.find(rank);
  return from && d != st.drivers.end() && d->second.address() == from;
}

bool from_lead(driver_ptr self, const char* what, bool or_driver) {
  auto& st = self->state;
  auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (is_lead_addr(self, from))
    return true;
  if (or_driver && is_lead(self))
    for (auto& [rank, d] : st.drivers)
      if (from_driver(self, rank))
        return true;
  TROUPE_LOG_LIMITED(warning, who(self), "ignored ", what,
                     " from another than its lead");
  return false;
}

void on_final_counted(driver_ptr self, uint64_t gen, uint64_t step) {
  auto& st = self->state;
  if (gen == st.syncing && step == st.total_steps &&
      from_driver(self, st.stages - 1))
    st.final_counted = true;
}

void on_done(driver_ptr self, uint64_t gen, uint64_t k, uint32_t rank) {
  auto& st = self->state;
  if (gen != st.syncing || k != st.lead_step || rank >= st.stages)
    return;
  st.progress_at = std::chrono::steady_clock::now();
  st.done.insert(rank);
  if (st.done.size() < st.stages)
    return;
  st.done.clear();
  auto now = std::chrono::steady_clock::now();
  st.stalls =
      stalls_after_commit(st.stalls, now - st.step_began, stall_after(self));
  st.step_began = now;
  ++st.lead_step;
  for (auto& [r, d] : st.drivers) // 4
    self->send(d, commit_atom_v, gen, k);
}

} // namespace troupe::pipe

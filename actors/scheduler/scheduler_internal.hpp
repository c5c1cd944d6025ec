// The scheduler's steps, shared by the files of actors/scheduler/ and by
// nothing else: each group names the file that defines it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/response_promise.hpp>
#include <caf/result.hpp>
#include <caf/system_messages.hpp>

#include "actors/scheduler/scheduler.hpp"
#include "messages/membership.hpp"

namespace troupe::sched {

using self_ptr = scheduler_actor*;

// -- membership and views (scheduler_membership.cpp) --------------------------

/// The members of role `kind`, by rank.
std::vector<node_info> nodes_of(self_ptr self, role kind);

/// The view as it stands now.
cluster_view current_view(self_ptr self);

/// Bumps the epoch and sends the new view to every member and watcher.
void publish(self_ptr self);

/// The ranks of the live servers, in order.
std::vector<uint32_t> server_ranks(self_ptr self);

/// Places every key's slices on the live servers (none if there are none).
void replace_placement(self_ptr self);

/// Whether worker `rank` is a member now.
bool is_live_worker(self_ptr self, uint32_t rank);

/// The rank a node of role `kind` that registers now takes (a worker's:
/// given_up_ranks::pick).
uint32_t lowest_free_rank(self_ptr self, role kind);

/// Worker ranks below --cluster.workers with no live process, finished ones
/// aside.
std::set<uint32_t> free_worker_ranks(self_ptr self);

/// Why a node of role `kind` cannot join now (none: it can).
caf::error check_room(self_ptr self, role kind);

caf::result<frame> on_register(self_ptr self, const frame& f);

/// Makes the node `handle` that sent `req` a member: its RegisterReply.
frame admit(self_ptr self, const register_request& req, caf::actor handle);

caf::result<uint64_t> on_stale(self_ptr self, uint32_t backup, uint64_t link);

/// A member leaves the view: done (no `why`: a "left" event; a worker's
/// rank is not given to another, and the last one's leave takes the job's
/// final checkpoint), or ending before its work is done for reason `why`
/// (an "ended" event, not "crashed"; otherwise as a crash: its rank is
/// free, and a stage's replica is cut with it).
uint64_t on_leave(self_ptr self, std::optional<std::string> why = {});

/// The one down handler (transitions 1 and 3).
void on_down(self_ptr self, const caf::down_msg& dm);

/// Adds the sender to the watchers; returns the view now.
frame on_watch(self_ptr self);

// -- atomic pushes (scheduler_cuts.cpp) ---------------------------------------

/// Worker `rank` left: asks every server how many of its clocks it took
/// whole, and sends them all the least (its cut) once each answered. A
/// pipeline stage that crashed (`stage_group` > 1 stages per replica)
/// holds its cut until its replica's other stages said whether they
/// pushed beyond it (those that did leave, and are cut with it:
/// scheduler_state::replica_cut).
void start_cut(self_ptr self, uint32_t rank, uint32_t stage_group = 0,
               bool crashed = false);

/// A replica's cut waited too long for its stages' answers or departures:
/// those still live are left out (the timer `serial` of the replica from
/// `first`).
void replica_cut_overdue(self_ptr self, uint32_t first, uint64_t serial);

/// A server left: the cuts under way ask the servers of the new view (a
/// promoted backup answers for its primary's stores), and the cuts decided
/// go to every server again (a primary may have died before it forwarded
/// one to the backup now serving its stores).
void servers_changed(self_ptr self);

/// Asks the servers again about worker `rank`, after one failed to answer.
void retry_cut(self_ptr self, uint32_t rank);

/// True while the cut of worker rank `rank` is not known.
bool cut_pending(self_ptr self, uint32_t rank);

/// The cut of a departed worker from the servers' `answers` (server rank ->
/// the clocks it took whole of it, or no_whole_clocks): the least, but
/// never below the rank's cut `before` (a process of it before). A
/// process resumes at or above that, so none of its parts lies below it;
/// a store that met it only by a view, and placed it at a lower clock
/// (async, ssp: a server restarted meanwhile), would otherwise report a
/// cut below what the cluster kept before (counter_demo_async_test, seed
/// 2, once in CI: "worker 1's cut at 0 is below what it kept before,
/// 822"). At `before` every part of the process goes, as the lower cut
/// would have dropped them too.
uint64_t worker_cut(const std::map<uint32_t, uint64_t>& answers,
                    std::optional<uint64_t> before);

/// The cut of each stage of a replica whose stages left together, from
/// their own cuts `own` (rank -> cut, or no_whole_clocks) and floors
/// `before`: the least of the cuts (a mini-batch one stage did not push
/// whole goes on every stage), never below a rank's floor.
std::map<uint32_t, uint64_t>
replica_stage_cuts(const std::map<uint32_t, uint64_t>& own,
                   const std::map<uint32_t, uint64_t>& before);

// -- declares: keys and their initialisers (scheduler_keys.cpp) ---------------

caf::result<frame> on_declare(self_ptr self, const frame& f);

/// Answers the parked declares once the servers they wait for have joined.
void flush_parked(self_ptr self);

// -- barriers (scheduler_barriers.cpp) ----------------------------------------

/// Releases every barrier that all its live nodes have reached.
void check_barriers(self_ptr self);

/// Says, every few seconds while barriers or declares are held, what they
/// wait for ("waiting for workers: 1 of 2 joined (--cluster.workers=2)");
/// arm_waiting_report starts that (once) when something is held.
void report_waiting(self_ptr self);
void arm_waiting_report(self_ptr self);

caf::result<uint64_t> on_barrier(self_ptr self, const frame& f);

// -- events (scheduler_events.cpp) --------------------------------------------

/// The host part of CAF node id `n` (its hash of the machine; "" for none):
/// what tells the processes of one machine or container from another's.
std::string host_of(const caf::node_id& n);

/// Keeps `e` and logs it as one JSON line.
void record(self_ptr self, event_record e);

/// Records an event of kind `kind` about node `n`.
void record(self_ptr self, const char* kind, const node_info& n,
            std::string detail);

/// Tells worker `to` of the job's first "lost" event, if there was one:
/// a worker whose job checks for losses ends at once (errc::values_lost)
/// rather than train on to the same failure at its end.
void tell_loss(self_ptr self, const caf::actor& to);

void on_event(self_ptr self, const frame& f);

/// The events after the first `n`, now if there are any, else once the
/// next one is recorded (a long poll).
caf::result<frame> on_events_poll(self_ptr self, uint64_t n);

// -- checkpoints (scheduler_checkpoints.cpp) ----------------------------------

/// Takes a checkpoint now (or joins the one under way); `rp` (if valid)
/// gets its generation.
void start_checkpoint(self_ptr self, caf::response_promise rp);

/// The periodic checkpoint: only while workers change the state.
void checkpoint_tick(self_ptr self);

/// (checkpoint_atom, finish_atom): the job's final checkpoint, once no
/// worker is live: the one under way when it is written, else the last
/// one written since; an error if there is none (invalid_config: no
/// --checkpoint.dir) or workers are still live.
caf::result<uint64_t> on_final_checkpoint(self_ptr self);

/// At start: loads the checkpoint to resume from (--resume) or numbers
/// after an earlier job's, and starts the periodic ticks. Logs and returns
/// what makes the scheduler unable to start.
caf::error prepare_checkpoints(self_ptr self);

} // namespace troupe::sched

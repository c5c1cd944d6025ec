// The scheduler: membership, ranks, the cluster view, key placement and
// barriers. One per cluster; the root of supervision.
//
// Files: scheduler.cpp (the behavior), scheduler_membership.cpp (joins,
// departures, ranks, views, placement), scheduler_keys.cpp (declares),
// scheduler_barriers.cpp, scheduler_events.cpp, scheduler_checkpoints.cpp
// (cuts and resuming); scheduler_internal.hpp is shared by them only.
//
// Messages (all bytes are frames of messages/membership.capnp):
//   (register_atom, frame Register)  -> frame RegisterReply
//   (declare_atom, frame Declare)    -> frame DeclareReply  [waits for
//                                        the expected servers]
//   (barrier_atom, frame Barrier)    -> uint64_t epoch      [waits for all]
//   (view_atom)                      -> frame ClusterView
//   (watch_atom)                     -> frame ClusterView, then
//                                       (view_atom, frame) on every change
//   (leave_atom)                     -> uint64_t epoch  [a member that is done
//                                       leaves the view now: its process
//                                       may exit without looking crashed]
//   (leave_atom, string why)         -> uint64_t epoch  [a member that is
//                                       not done but must end (a stage
//                                       without its replica) leaves so: an
//                                       "ended" event, cut as a crash]
//   (event_atom, frame Event)        an agent or server reports an event
//   (stale_atom, uint32_t backup, uint64_t link) -> uint64_t epoch
//                                    a server dropped its replica link
//                                    `link` to `backup`, which stays in the
//                                    view: passed on to the backup as
//                                    (stale_atom, primary rank, link),
//                                    before any view that would promote,
//                                    then answered; refused (not_a_member)
//                                    to a server that is no member
//                                    (actors/server/replication.hpp, N1)
//   (events_atom)                    -> frame EventLog  [every event so far]
//   (events_atom, uint64_t n)        -> frame EventLog  [the events after the
//                                       first n, once there is one: a
//                                       long poll]
//   (checkpoint_atom)                -> uint64_t generation  [takes a
//                                       checkpoint now; answers once the
//                                       manifest names it]
//   (checkpoint_atom, finish_atom)   -> uint64_t generation  [the job's
//                                       final checkpoint (no worker live),
//                                       once written: an agent stops its
//                                       servers after it]
//   scheduler -> every member and watcher: (view_atom, frame ClusterView)
//
// Checkpoints (--checkpoint.dir): every --checkpoint.every-ms while workers
// are live, when the last worker leaves, and on request. The scheduler asks
// each server for its version, picks a version above the largest (sync:
// every server snapshots its stores as they complete that round, so the
// files form one consistent cut; other modes snapshot at once), waits for
// every file, then writes the manifest (write, fsync, rename) and removes
// files older than the previous generation. A server that passed the cut
// meanwhile fails the attempt, which is retried higher. With --resume the
// scheduler checks the last checkpoint before it starts and numbers new
// generations after it.
//
// Barriers: a barrier is released once every live node of its role has
// arrived (and the expected number has ever joined). A released name stays
// passed: a node arriving later (a restarted worker) goes through at once.
// Use a new name for each synchronisation point.
//
// Events (membership.capnp Event), each logged as one JSON line and kept:
//   joined / rejoined   a node registered (rejoined: its role and rank had
//                       been in the cluster before)
//   left / crashed      a member's actor ended normally / abnormally (a
//                       killed process, or one whose heartbeats stopped)
//   agent-down          an agent that had reported events is gone
//   anything reported   restarts, give-ups, resumed rounds, ...
// An agent's gave-up of a worker puts its rank in the view's given_up
// (given_up_ranks.hpp), a worker that ends saying why in its ended.
//
// Failure handling: each node the scheduler monitors is in one of these
// states; the numbered transitions are cited in the code.
//
//   member:   (register) -> in the view -1-> out (crashed, or left)
//                                       -leave-> out (left; a worker's
//                                                rank counts as finished)
//   reporter: (first event) -> reporting -3-> forgotten
//
//   1: member down (monitor, or heartbeat timeout closing its connection):
//      it leaves the view; a server's slices go to its backup or are
//      placed on the survivors; epoch + 1; the view is published; a
//      checkpoint under way fails (a server) or is cut again (the last
//      worker); barriers are re-checked.
//   2: malformed request: answered with errc::malformed_message and logged.
//   3: reporter (agent) down: an agent-down event; its processes stay in
//      the view until their own monitors fire.
#pragma once

#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/base/member_secret.hpp"
#include "actors/scheduler/given_up_ranks.hpp"
#include "actors/scheduler/scheduler_settings.hpp"
#include "actors/scheduler/status_page.hpp"
#include "messages/membership.hpp"

namespace troupe {

struct scheduler_state {
  static inline const char* name = "scheduler";
  /// The cluster's road key (scheduler_settings::road_key): servers get
  /// it at registration, workers a token derived from it.
  secret road_key;
  struct member {
    node_info info;
    caf::actor handle;
    /// A pipeline stage with servers: stages per replica
    /// (register_request::stage_group); 0 = none.
    uint32_t stage_group = 0;
    /// Its optimizer (register_request::optimizer); "" = said nothing.
    std::string optimizer;
    /// A worker's work (register_request::work); "" = said nothing.
    std::string work;
  };
  struct barrier {
    role kind = role::worker;
    std::set<uint32_t> arrived;
    std::vector<caf::response_promise> waiting;
  };
  struct parked_declare {
    declare_request req;
    caf::response_promise rp;
  };
  scheduler_settings cfg;
  uint64_t epoch = 1; // the empty cluster's view
  std::vector<member> members;
  std::vector<caf::actor> watchers;
  std::vector<key_info> keys;
  std::vector<slice_place> placement;
  std::map<uint64_t, uint32_t> initialiser; // key -> first declaring worker
  /// Servers' clocks per training step each worker rank declared (its
  /// blocks, overlapped; else 1): live workers must agree, and sync
  /// checkpoints cut at a multiple, between steps.
  std::map<uint32_t, uint32_t> clocks_per_step;
  /// The count the job's workers declared last, kept after they leave: the
  /// manifest records it (0: none declared yet).
  uint32_t job_clocks_per_step = 0;
  /// Resuming: the layout the checkpoint was written with. Workers must
  /// step in the same count (0: an older manifest, not checked) and declare
  /// checkpointed keys at their sizes: else the servers would restore the
  /// steps' rounds wrongly, or skip slices and train them afresh.
  uint32_t resume_clocks_per_step = 0;
  std::map<uint64_t, uint64_t> resume_sizes; // key -> floats checkpointed
  std::vector<parked_declare> parked;        // until servers have joined
  std::map<role, uint32_t> joined;           // registrations ever, per role
  std::map<std::string, barrier> barriers;
  /// A report of what the held barriers and declares wait for is due
  /// (report_waiting): at most one is ever armed.
  bool waiting_report_armed = false;
  std::set<std::string> passed;             // released barrier names
  std::set<std::pair<role, uint32_t>> seen; // (role, rank) ever joined
  std::vector<event_record> events;         // oldest first
  /// The first "lost" event, if any: every worker that joins later is
  /// told of it, as the live ones were (tell_loss).
  std::optional<event_record> first_loss;
  /// cfg.events_file, open to append; null: none.
  std::shared_ptr<std::ofstream> events_out;
  /// cfg.status_port's page, fed each view and event; null: none.
  std::shared_ptr<status_page> page;
  uint64_t events_dropped = 0; // oldest ones no longer kept
  std::vector<std::pair<uint64_t, caf::response_promise>> event_polls;
  std::map<caf::actor_addr, std::string> reporters; // non-members reporting
  /// The rank of every process admitted, by pid, for the agents' events
  /// (which name their children by the agent's slots).
  agent_ranks ranks_of_agents;
  /// Worker ranks no process will come back to (the view's given_up and
  /// ended), until a process takes the rank again.
  sched::given_up_ranks given_up;
  /// Ranks of workers that finished their share and left: a worker that
  /// registers later takes a dead worker's rank (its data partition and its
  /// clock) before one of these.
  std::set<uint32_t> finished_workers;
  /// Atomic pushes (scheduler_cuts.cpp): the cuts of departed workers
  /// being gathered, by worker rank (the servers that answered, and what),
  /// and those decided (the clocks every server keeps).
  struct cut_gather {
    uint64_t serial = 0; // of the latest asking; older answers are stale
    std::set<uint32_t> asked;
    std::map<uint32_t, uint64_t> answers; // server rank -> whole clocks
    /// The rank's cut before (a process of it before): the floor.
    std::optional<uint64_t> before;
  };
  std::map<uint32_t, cut_gather> cuts_pending;
  std::map<uint32_t, uint64_t> cuts;
  /// Decided cuts some server has not yet said it applied: their `cut`
  /// events wait, so that a worker that reads one (the counter's
  /// accounting) reads the servers after it, and so do registrations
  /// under their ranks.
  std::set<uint32_t> cuts_applying;
  uint64_t cut_serial = 0;
  /// Pipeline replicas with servers (member::stage_group): once a crashed
  /// stage's cut is known, the replica's other stages that pushed a clock
  /// it lacks leave too, the rest push no such clock until it is back, and
  /// the cuts of those that left are decided together, the least for all,
  /// so that each mini-batch of the replica is kept on every stage's keys
  /// or on none (docs/pipelines.md). By the replica's first rank.
  struct replica_cut {
    uint32_t stages = 0;       // per replica
    std::set<uint32_t> ranks;  // its stages that left: cut together
    std::set<uint32_t> asking; // live stages not yet answered
    bool asked = false;        // the first cut is known, the others asked
    struct own {
      uint64_t keep = 0;              // the rank's own cut
      std::optional<uint64_t> before; // its floor
      std::string said;               // the servers' answers
    };
    std::map<uint32_t, own> decided;
    uint64_t serial = 0; // of the overdue timer
  };
  std::map<uint32_t, replica_cut> replica_cuts;
  /// Workers registering under a rank whose cut is pending, until it is
  /// known.
  struct parked_register {
    register_request req;
    caf::actor handle;
    caf::response_promise rp;
  };
  std::vector<parked_register> parked_registers;
  uint64_t generation = 0; // last checkpoint generation started
  /// The last generation written while no worker was live (the job's
  /// final state); 0 = none.
  uint64_t final_checkpoint = 0;
  /// Why the last checkpoint taken while no worker was live failed, for
  /// the agents that ask for the job's final one after it ended.
  caf::error final_failure;
  /// Generations that failed since the last one written: files of theirs
  /// a slow server renamed after the failure go with the next manifest.
  std::vector<uint64_t> failed_generations;
  bool checkpointing = false;
  std::function<void(caf::error)> abort_checkpoint; // fails the attempt
  std::vector<caf::response_promise> checkpoint_waiting;
};

using scheduler_actor = caf::stateful_actor<scheduler_state>;

/// Spawnable behavior of the scheduler.
caf::behavior scheduler(scheduler_actor* self, scheduler_settings cfg);

} // namespace troupe

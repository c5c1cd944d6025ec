// The worker ranks no process comes back to (given up by their agent, or
// ended), for the view's given_up and ended (scheduler.hpp), and which
// free rank a joining worker takes.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

namespace troupe::sched {

/// Worker ranks whose process its agent gave up on (no restart). A pipeline
/// replica lacking a stage given up ends at once instead of waiting
/// --pipeline.stage-wait-ms for it (stage_lead.cpp), so in hybrid jobs the
/// other replicas' sync rounds stop waiting for its stages.
///
/// A process given up after it joined names its rank (agent_ranks). One
/// given up before it ever joined (a stage without its data, a crash at
/// start) names none: it is counted, and the free ranks are all taken for
/// given up once there are no more of them than such processes (every
/// other process has joined; this assumes exactly --cluster.workers worker
/// processes were started). Those ranks are then named, so they stay
/// given up when others fall free later (the stages that end without
/// them). A rank joined again (a process started by hand) is no longer
/// given up, and the count goes once every rank is live. Callers call
/// of() after each change of the free ranks (each view).
class given_up_ranks {
public:
  /// An agent gave up on a worker process, last known as worker `rank`
  /// (nullopt: it never joined; it may still hold the rank itself, not yet
  /// seen down). `free`: the worker ranks with no live process (finished
  /// ones are not free).
  void gave_up(std::optional<uint32_t> rank, const std::set<uint32_t>& free);

  /// Worker `rank` left saying why (a stage whose replica cannot go on):
  /// not restarted either.
  void ended(uint32_t rank) { ended_.insert(rank); }

  /// A worker joined as `rank` (no longer given up or ended); `free`: the
  /// free ranks before it did.
  void joined(uint32_t rank, const std::set<uint32_t>& free);

  /// The ranks of `free` given up, ascending (those inferred from the
  /// count are named from now on).
  std::vector<uint32_t> of(const std::set<uint32_t>& free);

  /// The ranks that ended, ascending.
  std::vector<uint32_t> ended() const { return {ended_.begin(), ended_.end()}; }

  /// The rank a joining worker takes: the lowest of `free` neither given up
  /// nor ended (a restart must not land in a replica that is over, nor
  /// wipe its mark), else the lowest of `free` (one started by hand where
  /// nothing else is free). `free` is not empty.
  uint32_t pick(const std::set<uint32_t>& free);

private:
  std::set<uint32_t> named_; // ranks of processes given up after joining
  uint32_t unnamed_ = 0;     // processes given up before they joined
  std::set<uint32_t> ended_; // ranks that left saying why
};

} // namespace troupe::sched

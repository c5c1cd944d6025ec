// Fault injection plans, carried out by a node agent
// (actors/supervision/agent.hpp) on its own children: kill (SIGKILL), hang
// (SIGSTOP, then SIGCONT after a while), terminate (SIGTERM) or cut off the
// network (the child runs in a network namespace of its own,
// actors/supervision/netns.hpp, whose link goes down, then up again after a
// while) a chosen process at a chosen time, or kill random ones at random
// times. A stall (SIGUSR1, workers only) hangs the worker's next step
// while its process goes on answering its peers, as a deadlock in a step
// would; its --worker.step-timeout-ms ends it (actors/base/step_watch.hpp).
//
//   --fault.plan=kill:worker-1@3000,hang:worker-0@5000+4000,term:server-0@9000
//       kill worker-1 3 s after the agent started; stop worker-0 at 5 s and
//       continue it 4 s later; SIGTERM server-0 at 9 s
//   --fault.plan=stall:worker-1@3000
//       worker-1's step from 3 s on never ends
//   --fault.plan=cut:worker-1@3000+2000
//       cut worker-1 off the network at 3 s and reconnect it 2 s later
//   --fault.random-kills=2 --fault.random-targets=worker
//   --fault.random-from-ms=3000 --fault.random-to-ms=15000 --fault.seed=7
//       kill 2 distinct workers at uniform random times in [3 s, 15 s)
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/expected.hpp>

namespace troupe {

/// One planned signal to one child of the agent.
struct fault_action {
  enum kind_t { kill, hang, resume, term, cut, heal, stall } kind = kill;
  /// Child name, e.g. "worker-1" (role and index within the agent).
  std::string target;
  /// When, measured from the agent's start.
  std::chrono::milliseconds at{0};
  bool operator==(const fault_action& y) const {
    return kind == y.kind && target == y.target && at == y.at;
  }
};

/// "kill", "hang", "resume", "term", "cut", "heal" or "stall".
const char* to_string(fault_action::kind_t x);

/// The signal an action sends: SIGKILL, SIGSTOP, SIGCONT, SIGTERM or
/// SIGUSR1 (stall); 0 for cut and heal, which are not signals.
int signal_of(fault_action::kind_t x);

/// Parses a comma-separated plan (see above); "" is the empty plan. A hang
/// with "+MS" adds the resume action, a cut the heal action. Sorted by time.
caf::expected<std::vector<fault_action>>
parse_fault_plan(const std::string& text);

/// The children a plan cuts off at some point (each needs a network
/// namespace of its own from its start), without repeats.
std::vector<std::string> cut_targets(const std::vector<fault_action>& plan);

/// `count` kills at uniform times in [from, to), each on a distinct target
/// while targets last (then targets repeat), drawn with `seed`. Sorted.
std::vector<fault_action> random_kills(uint32_t count,
                                       const std::vector<std::string>& targets,
                                       std::chrono::milliseconds from,
                                       std::chrono::milliseconds to,
                                       uint64_t seed);

} // namespace troupe

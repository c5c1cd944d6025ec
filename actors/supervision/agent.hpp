// The node agent (troupe-node --role=agent): one per machine. It starts
// that machine's server and worker processes, watches them and restarts
// them one-for-one (actors/supervision/supervisor.hpp: at most N restarts
// in T, with back-off), carries out fault-injection plans
// (actors/supervision/fault_plan.hpp),
// and reports every start, exit, restart, give-up and injected fault to
// the scheduler as an event. The scheduler supervises the agents: it
// monitors each one that reports.
//
//   starting -1-> running     1: connected to the scheduler, children up
//   running -2-> running      2: a child exited abnormally: restarted
//                                after the back-off (event "exited",
//                                "restarting", then "restarted")
//   running -3-> running      3: the policy gave up on a child: event
//                                "gave-up"; its siblings go on
//   running -4-> finished     4: every worker exited normally (or was
//                                given up on, or ended the job: exit 4, its
//                                check failed; 5, a member it needs stayed
//                                away): servers get SIGTERM; exit 0, or 1
//                                with one line per such child
//   any -5-> finished         5: scheduler down, or SIGINT/SIGTERM to the
//                                agent: every child is stopped; exit 1
//                                (scheduler down) or 0
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "actors/supervision/agent_settings.hpp"

namespace troupe {

/// What an agent runs under: its own settings, the faults it injects, and
/// the scheduler it reports to.
struct agent_run_settings {
  agent_settings agent;
  fault_settings fault;
  /// The scheduler's address and port (--scheduler-host, --scheduler-port).
  std::string scheduler_host;
  uint16_t scheduler_port = 0;
  /// How long to wait for the scheduler to come up, ms
  /// (--kv.request-timeout-ms).
  uint32_t connect_wait_ms = 10000;
};

/// Runs an agent until it finishes; returns the process exit code.
/// `child_args` are the flags every child gets (the agent's own, less
/// --role, --agent.* and --fault.*); `self_path` is troupe-node's path.
/// `stop` turning true (SIGINT/SIGTERM, set by troupe-node) stops every
/// child and ends the agent. Call from the main thread (children are tied
/// to the thread that forks them).
int run_agent(caf::actor_system& sys, const agent_run_settings& cfg,
              const std::string& self_path,
              const std::vector<std::string>& child_args,
              const std::atomic<bool>& stop);

/// The flags of `args` a child of an agent gets: all but --role=...,
/// --agent.* and the --fault.* the agent carries out itself (the message
/// faults --fault.drop-pushes, --fault.duplicate-pushes and their
/// --fault.seed are the children's).
std::vector<std::string> child_flags(const std::vector<std::string>& args);

} // namespace troupe

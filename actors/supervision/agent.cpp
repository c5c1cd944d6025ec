// The node agent's loop; see the header for its states.
#include "actors/supervision/agent.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include "actors/base/exit_codes.hpp"
#include "actors/base/log.hpp"
#include "actors/base/stray_errors.hpp"
#include "actors/cluster/connect.hpp"
#include "actors/supervision/fault_plan.hpp"
#include "actors/supervision/netns.hpp"
#include "actors/supervision/supervisor.hpp"
#include "messages/errors.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

using namespace std::chrono;

/// Forwards events to the scheduler as itself, so that the scheduler can
/// monitor it (agent-down), and the question of the job's final
/// checkpoint; raises `scheduler_down` when the scheduler goes (5).
caf::behavior agent_link(caf::event_based_actor* self, caf::actor scheduler,
                         std::shared_ptr<std::atomic<bool>> scheduler_down) {
  self->monitor(scheduler);
  log_stray_errors(self, [] { return std::string{"agent"}; });
  self->set_down_handler([self, scheduler_down](const caf::down_msg& dm) {
    TROUPE_LOG(error, "agent",
               "scheduler down: ", self->system().render(dm.reason));
    *scheduler_down = true;
    self->quit();
  });
  return {
      [self, scheduler](event_atom, const frame& f) {
        self->send(scheduler, event_atom_v, f);
      },
      [self, scheduler](checkpoint_atom, finish_atom) {
        return self->delegate(scheduler, checkpoint_atom_v, finish_atom_v);
      },
  };
}

/// How long an agent whose workers finished waits for one answer about the
/// job's final checkpoint (the scheduler answers once it is written or
/// failed), and how often it asks while other agents' workers still train.
constexpr auto final_checkpoint_wait = std::chrono::seconds{30};
constexpr auto final_checkpoint_poll = std::chrono::milliseconds{500};

/// "worker-1" -> (worker, 1).
std::pair<role, uint32_t> parse_child(const std::string& name) {
  auto dash = name.rfind('-');
  auto kind =
      name.compare(0, dash, "server") == 0 ? role::server : role::worker;
  return {kind, static_cast<uint32_t>(std::stoul(name.substr(dash + 1)))};
}

class agent {
public:
  agent(caf::actor_system& sys, const agent_run_settings& cfg, caf::actor link)
      : sys_(sys), cfg_(cfg), link_(std::move(link)),
        source_("agent " + std::to_string(::getpid())),
        sup_(policy_of(cfg.agent),
             [this](const child_event& e) { on_child_event(e); }) {
    // nothing else
  }

  /// Starts every child, those in `cut` (the plan cuts them off the
  /// network) each in a network namespace of its own; false (with a line
  /// on stderr) if one cannot start.
  bool start_children(const std::string& self_path,
                      const std::vector<std::string>& flags,
                      const std::vector<std::string>& cut) {
    auto names = child_names();
    for (auto& c : cut)
      if (std::find(names.begin(), names.end(), c) == names.end()) {
        stderr_line() << "*** agent: --fault.plan cuts " << c
                      << ", which this agent does not run\n";
        return false;
      }
    if (!cut.empty()) {
      if (auto err = netns_unavailable()) {
        stderr_line() << "*** agent: " << describe(err) << '\n';
        return false;
      }
      if (auto n = remove_stale_netns())
        TROUPE_LOG(info, "agent", "removed ", n,
                   " network namespaces of agents that are gone");
    }
    for (auto& name : names) {
      bool own_netns = std::find(cut.begin(), cut.end(), name) != cut.end();
      if (!add(name, name.substr(0, name.rfind('-')), self_path, flags,
               own_netns))
        return false;
    }
    return true;
  }

  void plan_faults(std::vector<fault_action> planned) {
    auto& f = cfg_.fault;
    auto seed = f.seed != 0 ? f.seed : std::random_device{}();
    std::vector<std::string> targets;
    for (auto& [name, pid] : started_) {
      auto kind = parse_child(name).first;
      if (f.random_targets == "any" || f.random_targets == to_string(kind))
        targets.push_back(name);
    }
    auto random =
        random_kills(f.random_kills, targets, milliseconds{f.random_from_ms},
                     milliseconds{f.random_to_ms}, seed);
    if (!random.empty())
      TROUPE_LOG(info, "agent", f.random_kills, " random kills, seed ", seed);
    else if (f.random_kills > 0) // another agent's children may be targets
      TROUPE_LOG(warning, "agent", "--fault.random-kills=", f.random_kills,
                 ": this agent runs no ", f.random_targets,
                 " (--fault.random-targets): no random kill here");
    planned.insert(planned.end(), random.begin(), random.end());
    std::stable_sort(planned.begin(), planned.end(),
                     [](const fault_action& a, const fault_action& b) {
                       return a.at < b.at;
                     });
    faults_.clear();
    auto names = child_names();
    for (auto& a : planned) {
      // deploy/cluster.sh gives every agent one plan: a child another
      // agent runs is said now, not at its time.
      if (std::find(names.begin(), names.end(), a.target) == names.end()) {
        TROUPE_LOG(warning, "agent", "--fault.plan names ", a.target,
                   ", which this agent does not run (--agent.servers=",
                   cfg_.agent.servers, ", --agent.workers=", cfg_.agent.workers,
                   "): its ", to_string(a.kind), " is skipped");
        continue;
      }
      TROUPE_LOG(info, "agent", "planned: ", to_string(a.kind), " ", a.target,
                 " at ", a.at.count(), " ms");
      faults_.push_back(a);
    }
  }

  /// Runs until finished (4) or stopped (5); the exit code.
  int run(const std::atomic<bool>& scheduler_down,
          const std::atomic<bool>& stop_requested) {
    while (!stop_requested && !scheduler_down && !workers_finished())
      supervise_once();
    if (stop_requested)
      TROUPE_LOG(info, "agent", "stop requested: stopping every child");
    else if (!scheduler_down)
      await_final_checkpoint(scheduler_down, stop_requested);
    sup_.stop_all(milliseconds{3000}); // 4, 5
    if (scheduler_down) {
      stderr_line()
          << "*** agent: the scheduler is down; stopped every child\n";
      return 1;
    }
    for (auto& line : given_up_)
      stderr_line() << "*** agent: " << line << '\n';
    for (auto& line : job_failed_)
      stderr_line() << "*** agent: " << line << '\n';
    return given_up_.empty() && job_failed_.empty() ? 0 : 1;
  }

private:
  /// One round of supervision: faults due, children that exited (50 ms).
  void supervise_once() {
    inject_due_faults();
    sup_.run_once(milliseconds{50});
  }

  /// The workers finished: the scheduler checkpoints the job's final state
  /// when its last worker leaves, from our servers. They stop once it is
  /// written (or failed, or none is kept), not while it is under way, nor
  /// while other agents' workers still train on them (their slices would
  /// move, and the final checkpoint be taken without them): meanwhile the
  /// agent goes on supervising.
  void await_final_checkpoint(const std::atomic<bool>& scheduler_down,
                              const std::atomic<bool>& stop_requested) {
    if (cfg_.agent.servers == 0)
      return;
    caf::scoped_actor self{sys_};
    bool told = false;
    auto stopped = [&] { return stop_requested || scheduler_down; };
    // Supervises for `d` (our servers may die meanwhile), or until stopped.
    auto supervise = [&](milliseconds d) {
      auto until = steady_clock::now() + d;
      while (!stopped() && steady_clock::now() < until)
        supervise_once();
    };
    while (!stopped()) {
      // The scheduler answers once the checkpoint is written or failed; a
      // scheduler that dies never does: wait in slices, watching for that
      // (it held the agent 30 s, then read as "other workers still train").
      auto h =
          self->request(link_, caf::infinite, checkpoint_atom_v, finish_atom_v);
      std::optional<caf::error> failed;
      bool answered = false, again = false;
      auto start = steady_clock::now();
      while (!answered && !stopped() &&
             steady_clock::now() - start < final_checkpoint_wait) {
        caf::blocking_actor::accept_one_cond once;
        self->varargs_receive(
            once, h.id(),
            [&](uint64_t gen) {
              answered = true;
              TROUPE_LOG(info, "agent", "the final checkpoint (generation ",
                         gen, ") is written: stopping the servers");
            },
            [&](caf::error& err) {
              answered = true;
              // Other agents' workers still train.
              again = err == errc::timeout;
              if (!again)
                failed = std::move(err);
            },
            caf::after(milliseconds{0}) >> [] {});
        if (!answered)
          supervise(milliseconds{50});
      }
      if (stopped())
        return;
      if (failed)
        return final_checkpoint_failed(*failed);
      if (answered && !again)
        return;
      if (!told) // still training elsewhere, or a long checkpoint
        TROUPE_LOG(info, "agent",
                   "our workers are done; our servers stay for the job's"
                   " final checkpoint (other workers still train, or it is"
                   " under way)");
      told = true;
      supervise(final_checkpoint_poll);
    }
  }

  /// The scheduler's answer `err` to the final checkpoint: the job failed
  /// where its checkpoints were asked for and not written (the servers stop
  /// with its weights).
  void final_checkpoint_failed(const caf::error& err) {
    // No --checkpoint.dir, or no key to keep: nothing to wait for.
    if (err == errc::invalid_config || err == errc::unknown_key) {
      TROUPE_LOG(debug, "agent", "no final checkpoint to wait for (",
                 describe(err), "): stopping the servers");
      return;
    }
    TROUPE_LOG(warning, "agent", "no final checkpoint (", describe(err),
               "): stopping the servers");
    job_failed_.push_back("the job's final checkpoint was not written (" +
                          describe(err) +
                          "): its trained weights are not in"
                          " --checkpoint.dir");
  }

  /// `flag`, or for --metrics.port=P (P > 0) the port of the agent's
  /// `n`-th child: P + n (the agent serves on P).
  static std::string child_metrics_port(const std::string& flag, size_t n) {
    const std::string key = "--metrics.port=";
    if (flag.rfind(key, 0) != 0)
      return flag;
    auto p = std::strtoul(flag.c_str() + key.size(), nullptr, 10);
    if (p == 0)
      return flag;
    return key + std::to_string(p + n); // node_config::finish checked it
  }

  static restart_policy policy_of(const agent_settings& a) {
    return restart_policy{a.max_restarts, milliseconds{a.restart_window_ms},
                          milliseconds{a.backoff_ms},
                          milliseconds{a.backoff_max_ms}};
  }

  /// Its children's names: server-0.., then worker-0...
  std::vector<std::string> child_names() const {
    std::vector<std::string> names;
    for (uint32_t i = 0; i < cfg_.agent.servers; ++i)
      names.push_back("server-" + std::to_string(i));
    for (uint32_t i = 0; i < cfg_.agent.workers; ++i)
      names.push_back("worker-" + std::to_string(i));
    return names;
  }

  bool add(const std::string& name, const std::string& role_name,
           const std::string& self_path, const std::vector<std::string>& flags,
           bool own_netns) {
    child_spec spec{name, {self_path, "--role=" + role_name}, ""};
    ++children_;
    for (auto& f : flags) // in a namespace of its own, it has its own --host
      if (!own_netns || f.rfind("--host=", 0) != 0)
        spec.argv.push_back(child_metrics_port(f, children_));
    if (own_netns) {
      auto ns = child_netns::make(name);
      if (!ns) {
        stderr_line() << "*** agent: " << describe(ns.error()) << '\n';
        return false;
      }
      spec.argv.push_back("--host=" + (*ns)->address());
      spec.argv = (*ns)->wrap(spec.argv);
      TROUPE_LOG(info, "agent", name, " runs in network namespace ",
                 (*ns)->name(), " at ", (*ns)->address(), " (link ",
                 (*ns)->link(), ")");
      netns_[name] = std::move(*ns);
    }
    if (!cfg_.agent.logs.empty())
      spec.log_file = cfg_.agent.logs + "/" + name + ".log";
    if (auto err = sup_.add(std::move(spec)); !err.empty()) {
      stderr_line() << "*** agent: cannot start " << name << ": " << err
                    << '\n';
      return false;
    }
    return true;
  }

  bool workers_finished() const {
    if (cfg_.agent.workers == 0)
      return false; // a servers-only agent runs until stopped
    for (uint32_t i = 0; i < cfg_.agent.workers; ++i)
      if (sup_.pid_of("worker-" + std::to_string(i)) != 0 ||
          restarting_.count("worker-" + std::to_string(i)) != 0)
        return false;
    return true;
  }

  void inject_due_faults() {
    auto now = steady_clock::now() - began_;
    while (next_fault_ < faults_.size() && faults_[next_fault_].at <= now) {
      auto& a = faults_[next_fault_++];
      auto pid = sup_.pid_of(a.target);
      std::string detail = std::string{to_string(a.kind)} + " " + a.target;
      auto at = system_clock::now(); // before the fault: it comes first
      if (a.kind == fault_action::cut || a.kind == fault_action::heal) {
        // The namespace outlives restarts: cut even while none runs.
        auto& ns = netns_.at(a.target); // made at start for every cut target
        auto err = a.kind == fault_action::cut ? ns->cut() : ns->heal();
        if (err) {
          TROUPE_LOG(error, "agent", "fault ", detail,
                     " failed: ", describe(err));
          continue;
        }
        detail += " (link " + ns->link() +
                  (a.kind == fault_action::cut ? " down)" : " up)");
      } else if (pid == 0 || !sup_.signal(a.target, signal_of(a.kind))) {
        TROUPE_LOG(warning, "agent", "fault ", detail,
                   ": no such live child, skipped");
        continue;
      } else {
        detail += " (signal " + std::to_string(signal_of(a.kind)) + ")";
      }
      TROUPE_LOG(warning, "agent", "injected: ", detail, " (pid ", pid, ")");
      report("injected", a.target, pid, detail, at);
    }
  }

  void on_child_event(const child_event& e) {
    switch (e.kind) {
    case child_event::started: {
      bool again = started_.count(e.child) != 0;
      started_[e.child] = e.pid;
      restarting_.erase(e.child);
      TROUPE_LOG(info, "agent", e.child, again ? " restarted" : " started",
                 " (pid ", e.pid, ")");
      report(again ? "restarted" : "started", e.child, e.pid, "", e.at);
      return;
    }
    case child_event::exited:
      if (e.detail == describe_exit(0)) { // 1: done, not restarted
        TROUPE_LOG(info, "agent", e.child, " (pid ", e.pid, ") finished");
        report("finished", e.child, e.pid, e.detail, e.at);
        return;
      }
      // 1 as well: the job's end, not a fault; the agent ends non-zero.
      for (auto& end : job_ends)
        if (e.detail == describe_exit(end.code << 8)) {
          job_failed_.push_back(e.child + end.summary + ": not restarted");
          TROUPE_LOG(error, "agent", e.child, " (pid ", e.pid, ")", end.log);
          report(end.kind, e.child, e.pid, e.detail, e.at);
          return;
        }
      TROUPE_LOG(warning, "agent", e.child, " (pid ", e.pid,
                 ") exited: ", e.detail);
      report("exited", e.child, e.pid, e.detail, e.at);
      return;
    case child_event::restarting:
      restarting_.insert(e.child);
      report("restarting", e.child, e.pid, e.detail, e.at);
      return;
    case child_event::gave_up:
      restarting_.erase(e.child);
      given_up_.push_back(e.child + " gave up: " + e.detail);
      TROUPE_LOG(error, "agent", e.child, " given up: ", e.detail);
      report("gave-up", e.child, e.pid, e.detail, e.at);
      return;
    case child_event::stopped:
      restarting_.erase(e.child);
      return;
    }
  }

  void report(const char* kind, const std::string& child, int pid,
              std::string detail, system_clock::time_point at) {
    auto [about, index] = parse_child(child);
    event_record e{duration_cast<milliseconds>(at.time_since_epoch()).count(),
                   kind,
                   about,
                   index,
                   static_cast<uint32_t>(pid),
                   detail.empty() ? child : child + ": " + detail,
                   source_};
    if (e.detail.size() > max_event_text)
      e.detail.resize(max_event_text);
    caf::anon_send(link_, event_atom_v, encode(e));
  }

  caf::actor_system& sys_;
  const agent_run_settings& cfg_;
  caf::actor link_;
  std::string source_;
  /// Namespaces of the children the plan cuts off; declared before sup_,
  /// so they are removed after every child is gone.
  std::map<std::string, std::unique_ptr<child_netns>> netns_;
  size_t children_ = 0; // added so far
  process_supervisor sup_;
  std::map<std::string, int> started_; // child -> latest pid
  std::set<std::string> restarting_;   // waiting for a restart
  std::vector<std::string> given_up_;
  /// Children that reached the job's end and failed its check, or could
  /// not go on without a member.
  std::vector<std::string> job_failed_;
  std::vector<fault_action> faults_;
  size_t next_fault_ = 0;
  steady_clock::time_point began_ = steady_clock::now();
};

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

} // namespace

std::vector<std::string> child_flags(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (auto& a : args) {
    // Message faults are carried out by the children themselves.
    bool childs_fault = starts_with(a, "--fault.drop-pushes") ||
                        starts_with(a, "--fault.duplicate-pushes") ||
                        starts_with(a, "--fault.seed");
    if (!starts_with(a, "--role=") && !starts_with(a, "--agent.") &&
        (!starts_with(a, "--fault.") || childs_fault))
      out.push_back(a);
  }
  return out;
}

int run_agent(caf::actor_system& sys, const agent_run_settings& cfg,
              const std::string& self_path,
              const std::vector<std::string>& child_args,
              const std::atomic<bool>& stop) {
  auto planned = parse_fault_plan(cfg.fault.plan);
  if (!planned) { // checked by finish() already
    stderr_line() << "*** agent: " << describe(planned.error()) << '\n';
    return 2;
  }
  auto sched = connect_scheduler(sys, cfg.scheduler_host, cfg.scheduler_port,
                                 cfg.connect_wait_ms, &stop);
  if (!sched && stop)
    return 0; // told to stop before it joined: nothing started
  if (!sched) {
    stderr_line() << "*** agent: connecting to the scheduler failed: "
                  << describe(sched.error()) << '\n';
    return 1;
  }
  auto scheduler_down = std::make_shared<std::atomic<bool>>(false);
  auto link = sys.spawn(agent_link, *sched, scheduler_down);
  int rc = 0;
  {
    agent a{sys, cfg, link};
    std::printf("troupe-node: agent starting %u servers and %u workers "
                "(pid %d)\n",
                cfg.agent.servers, cfg.agent.workers,
                static_cast<int>(::getpid()));
    std::fflush(stdout);
    if (!a.start_children(self_path, child_args, cut_targets(*planned)))
      rc = 1;
    else {
      a.plan_faults(std::move(*planned));
      rc = a.run(*scheduler_down, stop);
    }
  }
  caf::anon_send_exit(link, caf::exit_reason::user_shutdown);
  return rc;
}

} // namespace troupe

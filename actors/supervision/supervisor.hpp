// A CAF-free, one-for-one process supervisor (Erlang/OTP style): the node
// agent uses it to start, watch and restart the server and worker processes
// of one machine.
//
// Each child is a small state machine; the code cites the numbers:
//
//   running -1-> done       1: exited with code 0 (transient: not restarted)
//                              or one of job_ends (exit_codes.hpp: the job's
//                              check failed, or a member it needs is gone;
//                              a restart changes neither)
//   running -2-> waiting    2: any other exit; the tracker says restart after
//                              a back-off delay
//   waiting -3-> running    3: delay over, started again (if the start fails
//                              that counts as an exit at once: 2 or 4)
//   running -4-> given_up   4: any other exit, but max_restarts restarts
//                              already happened within the window
//   running|waiting -5-> stopped   5: stop_all
//
// Exits are noticed through a SIGCHLD handler (SA_RESTART) that writes a byte
// to a self-pipe, so it works in a process full of threads (CAF): SIGCHLD
// need not be blocked anywhere, but must not be blocked in *every* thread.
// Only the supervisor's own children are reaped, by pid; never waitpid(-1).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace troupe {

/// One-for-one restart policy: at most `max_restarts` restarts within any
/// `window`; before restart k (1-based, counted within the window) wait
/// backoff_initial * 2^(k-1), capped at backoff_max.
struct restart_policy {
  /// Restarts allowed within `window`; 0 = never restart.
  uint32_t max_restarts = 3;
  /// Sliding window over which restarts are counted.
  std::chrono::milliseconds window{30000};
  /// Delay before the first restart in the window; doubles each time.
  std::chrono::milliseconds backoff_initial{200};
  /// Upper bound of the delay.
  std::chrono::milliseconds backoff_max{5000};
};

/// "exit code 3" / "killed by signal 9 (Killed)" from a waitpid status.
std::string describe_exit(int wait_status);

/// What the supervisor decides when a child exits. Deterministic, no
/// processes: unit-testable with made-up times.
class restart_tracker {
public:
  explicit restart_tracker(restart_policy p);

  /// The verdict on one exit.
  struct decision {
    enum kind_t { done, restart, give_up } kind = done;
    /// restart: wait this long first.
    std::chrono::milliseconds delay{0};
    /// give_up: one readable line, e.g.
    /// "exited 4 times within 30 s (last: killed by signal 9 (Killed))".
    std::string reason;
  };

  /// Judges an exit with waitpid status `wait_status` observed at `now`.
  /// Code 0 is done (transient children: a normal exit is not restarted),
  /// and so are the codes of job_ends (actors/base/exit_codes.hpp);
  /// exit_bad_config gives up at once (the same flags fail again);
  /// any other exit (non-zero code or a signal) is restarted unless
  /// max_restarts restarts already happened within the window ending at
  /// `now` (a restart at t counts while now - t < window). `what` is how the
  /// exit reads in the reason; empty = describe_exit(wait_status).
  decision on_exit(std::chrono::steady_clock::time_point now, int wait_status,
                   const std::string& what = {});

private:
  restart_policy policy_;
  /// Times of the restarts granted, oldest first, pruned to the window.
  std::deque<std::chrono::steady_clock::time_point> restarts_;
};

/// A child to run.
struct child_spec {
  /// For logs and events, e.g. "worker-1"; unique among live children.
  std::string name;
  /// argv[0] is the executable's path (no PATH search).
  std::vector<std::string> argv;
  /// "" = inherit stdout/stderr, else a file to append stdout+stderr to.
  std::string log_file;
};

/// What happened to a child, for the caller's log and events.
struct child_event {
  enum kind_t { started, exited, restarting, gave_up, stopped } kind;
  /// child_spec::name.
  std::string child;
  /// The process (exited/stopped: the one that ended; gave_up: the last
  /// one); 0 if there was none.
  int pid = 0;
  /// exited/stopped: describe_exit or "cannot execute <path>: <strerror>";
  /// restarting: "in 400 ms"; gave_up: the tracker's reason.
  std::string detail;
  /// When it was observed.
  std::chrono::system_clock::time_point at;
};

/// Starts children with fork/exec, notices exits at once and restarts them by
/// policy. Single-threaded: the owner calls run_once() in a loop, and calls
/// every member from one thread that lives as long as the supervisor (e.g.
/// main): children get SIGKILL when the thread that forked them ends
/// (PR_SET_PDEATHSIG is per thread), so that a SIGKILLed supervisor leaves no
/// children behind. on_event may call add/signal/pid_of, not run_once or
/// stop_all. At most 64 supervisors may be alive at once.
class process_supervisor {
public:
  process_supervisor(restart_policy p,
                     std::function<void(const child_event&)> on_event);

  /// SIGKILLs and reaps every live child by pid; emits no events.
  ~process_supervisor();

  process_supervisor(const process_supervisor&) = delete;
  process_supervisor& operator=(const process_supervisor&) = delete;

  /// Starts the child now and returns "" once it has exec'd; else an error
  /// message ("cannot execute <path>: <strerror>", "cannot open log file
  /// ...", a live child of that name exists) and the child is not kept.
  /// A finished child (done, given up, stopped) of the same name is replaced.
  std::string add(child_spec spec);

  /// Waits at most `limit` for something to happen (a child exit, a due
  /// restart), handles it, and returns. Emits events through on_event.
  void run_once(std::chrono::milliseconds limit);

  /// True when no child is running or waiting to restart.
  bool idle() const;

  /// True if some child was given up on.
  bool gave_up() const;

  /// pid of the live child called `name`, or 0.
  int pid_of(const std::string& name) const;

  /// Sends `sig` to the live child `name`; false if none.
  bool signal(const std::string& name, int sig);

  /// Sends SIGTERM to every child, waits up to `grace` for them to exit, then
  /// SIGKILLs the rest; reaps all. No restarts after this (5); events:
  /// stopped (pid 0 for a child that was waiting to restart).
  void stop_all(std::chrono::milliseconds grace);

private:
  struct child;
  using clock = std::chrono::steady_clock;

  // -- the main path of run_once, in the order it runs --
  bool handle_pending();
  bool reap(child& c);
  void on_exit(child& c, int wait_status, const std::string& what);
  void start(child& c);
  clock::time_point next_due(clock::time_point deadline) const;
  void wait_for_wakeup(clock::time_point until);

  // -- helpers --
  void drain_wakeups();
  void mark_stopped(child& c, std::string detail);
  child* find(const std::string& name) const;
  void emit(child_event::kind_t kind, const child& c, int pid,
            std::string detail);

  restart_policy policy_;
  std::function<void(const child_event&)> on_event_;
  /// Stable addresses: on_event may add children while we hold a child&.
  std::vector<std::unique_ptr<child>> children_;
  int wake_read_ = -1;  // self-pipe, read end; the handler writes the other
  int wake_write_ = -1; // registered in a slot the handler reads
};

} // namespace troupe

// The one-for-one process supervisor: the restart policy, fork/exec with a
// CLOEXEC error pipe, and a SIGCHLD self-pipe so exits are noticed at once.
// Over 400 lines: the async-signal-safe parts (the handler, the child's side
// of fork) stay next to their only user. TODO(cleanup): spawn() could move
// to its own file once a second user appears.
#include "actors/supervision/supervisor.hpp"

#include "actors/base/exit_codes.hpp"
#include "actors/base/metrics.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace troupe {

namespace {

using std::chrono::milliseconds;

/// waitpid status of a start that failed before any program ran.
constexpr int failed_start_status = 127 << 8;

std::string format_ms(milliseconds d) {
  if (d.count() % 1000 == 0)
    return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}

// -- SIGCHLD self-pipes -------------------------------------------------------

// Signal dispositions are per process, so one handler serves every
// supervisor: it writes a byte to each registered pipe (fd + 1; 0 = free).
constexpr int max_supervisors = 64;
std::atomic<int> wake_slots[max_supervisors];
static_assert(std::atomic<int>::is_always_lock_free, "used in a handler");
/// Handlers inside the loop over wake_slots; a pipe is closed only at 0.
std::atomic<int> handlers_running{0};
/// The disposition before ours, called after ours (if it was a function).
struct sigaction previous_sigchld;

/// Silences warn_unused_result where a failure leaves nothing to do.
void ignore_result(ssize_t) {
  // nop
}

/// SIGCHLD: wakes every supervisor. Async-signal-safe: lock-free atomics
/// and write() only.
void on_sigchld(int sig, siginfo_t* info, void* ctx) {
  int saved_errno = errno;
  handlers_running.fetch_add(1);
  for (auto& slot : wake_slots) {
    int fd = slot.load() - 1;
    char byte = 0;
    // A full pipe already holds a wake-up; EAGAIN is fine.
    if (fd >= 0)
      ignore_result(write(fd, &byte, 1));
  }
  handlers_running.fetch_sub(1);
  if (previous_sigchld.sa_flags & SA_SIGINFO) {
    if (previous_sigchld.sa_sigaction != nullptr)
      previous_sigchld.sa_sigaction(sig, info, ctx);
  } else if (previous_sigchld.sa_handler != SIG_DFL &&
             previous_sigchld.sa_handler != SIG_IGN) {
    previous_sigchld.sa_handler(sig);
  }
  errno = saved_errno;
}

/// Installs on_sigchld once per process; it stays installed.
void install_sigchld_handler() {
  static std::mutex mtx;
  static bool installed = false;
  std::lock_guard<std::mutex> guard{mtx};
  if (installed)
    return;
  struct sigaction sa {};
  sa.sa_sigaction = on_sigchld;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: other threads' blocking calls are not cut short by EINTR.
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NOCLDSTOP;
  installed = sigaction(SIGCHLD, &sa, &previous_sigchld) == 0;
}

/// Registers `fd` with the handler; false if all slots are taken.
bool register_wake_fd(int fd) {
  for (auto& slot : wake_slots) {
    int expected = 0;
    if (slot.compare_exchange_strong(expected, fd + 1))
      return true;
  }
  return false;
}

/// After this returns, no handler writes to `fd` any more.
void unregister_wake_fd(int fd) {
  for (auto& slot : wake_slots) {
    int expected = fd + 1;
    slot.compare_exchange_strong(expected, 0);
  }
  // A handler may have loaded fd just before; it counts itself first.
  while (handlers_running.load() != 0)
    sched_yield();
}

// -- fork/exec ----------------------------------------------------------------

/// Outcome of one start: running if `error` is empty.
struct spawn_result {
  int pid = 0;                           // 0 if fork itself failed
  int wait_status = failed_start_status; // of a failed start
  std::string error;
};

/// In the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(char* const* argv, int log_fd, int err_fd,
                             pid_t parent) {
  // Our parent blocked every signal around fork; reset the dispositions
  // (SIG_IGN survives exec) before unblocking, so the program starts clean.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP)
      sigaction(sig, &dfl, nullptr);
  // Die with the supervisor; if it died before prctl, nobody will do it.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
    _exit(127);
  if (log_fd >= 0 && (dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0)) {
    int err = errno;
    ignore_result(write(err_fd, &err, sizeof err));
    _exit(127);
  }
  // Don't leak the supervisor's sockets and files into the program (e.g. a
  // listening port that would outlive a restarted agent). Best effort:
  // needs Linux 5.11.
  syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execv(argv[0], argv);
  int err = errno;
  ignore_result(write(err_fd, &err, sizeof err));
  _exit(127);
}

/// Waits for `pid` (which has ended or is about to); EINTR-safe.
int wait_blocking(int pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return st;
}

/// Opens `path` for the child's stdout+stderr; -1 with errno on failure.
int open_log(const std::string& path) {
  return open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

/// Reads the child's errno from the CLOEXEC pipe: EOF means it exec'd.
spawn_result await_exec(pid_t pid, int err_read, const std::string& path) {
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(err_read, &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(err_read);
  if (n == static_cast<ssize_t>(sizeof child_errno))
    return {pid, wait_blocking(pid),
            "cannot execute " + path + ": " + std::strerror(child_errno)};
  return {pid, 0, {}};
}

/// Starts `spec` and returns once it has exec'd or failed to.
spawn_result spawn(const child_spec& spec) {
  if (spec.argv.empty())
    return {0, failed_start_status, "child '" + spec.name + "' has no argv"};
  const std::string& path = spec.argv[0];
  int log_fd = spec.log_file.empty() ? -1 : open_log(spec.log_file);
  if (!spec.log_file.empty() && log_fd < 0)
    return {0, failed_start_status,
            "cannot open log file " + spec.log_file + ": " +
                std::strerror(errno)};
  std::vector<char*> argv; // built before fork: the child may not allocate
  for (auto& arg : spec.argv)
    argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  int err_pipe[2];
  int pipe_rc = pipe2(err_pipe, O_CLOEXEC);
  int pipe_errno = errno;
  pid_t pid = -1;
  if (pipe_rc == 0) {
    // Block all signals so no handler of ours runs in the child.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    pid = fork();
    if (pid == 0)
      exec_child(argv.data(), log_fd, err_pipe[1], parent);
    pipe_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    close(err_pipe[1]);
  }
  if (log_fd >= 0)
    close(log_fd);
  if (pid < 0) {
    if (pipe_rc == 0)
      close(err_pipe[0]);
    return {0, failed_start_status,
            "cannot start " + path + ": " + std::strerror(pipe_errno)};
  }
  return await_exec(pid, err_pipe[0], path);
}

/// Reaps `pid` if it has ended: true with its status and how it reads.
bool try_reap(int pid, int& st, std::string& what) {
  pid_t r;
  do {
    r = waitpid(pid, &st, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0)
    return false;
  if (r < 0) {
    // ECHILD: someone else reaped it (waitpid(-1) elsewhere, SIG_IGN).
    st = 255 << 8;
    what = "vanished (reaped outside the supervisor)";
    return true;
  }
  what = describe_exit(st);
  return true;
}

} // namespace

// -- describe_exit and restart_tracker ----------------------------------------

std::string describe_exit(int wait_status) {
  if (WIFEXITED(wait_status))
    return "exit code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    const char* name = sigdescr_np(sig); // thread-safe, unlike strsignal
    std::string s = "killed by signal " + std::to_string(sig) + " (" +
                    (name ? name : "unknown") + ")";
    if (WCOREDUMP(wait_status))
      s += ", core dumped";
    return s;
  }
  return "wait status " + std::to_string(wait_status);
}

restart_tracker::restart_tracker(restart_policy p) : policy_(p) {
  // nop
}

restart_tracker::decision
restart_tracker::on_exit(std::chrono::steady_clock::time_point now,
                         int wait_status, const std::string& what) {
  if (WIFEXITED(wait_status) && ends_the_job(WEXITSTATUS(wait_status)))
    return {decision::done, milliseconds{0}, {}};
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == exit_bad_config)
    return {decision::give_up, milliseconds{0},
            "exit code 2: a bad configuration, which a restart cannot mend"
            " (the child's last line says what)"};
  while (!restarts_.empty() && now - restarts_.front() >= policy_.window)
    restarts_.pop_front();
  auto exits = restarts_.size() + 1; // within the window, this one included
  if (restarts_.size() >= policy_.max_restarts) {
    std::string reason =
        "exited " + std::to_string(exits) + (exits == 1 ? " time" : " times") +
        " within " + format_ms(policy_.window) +
        " (last: " + (what.empty() ? describe_exit(wait_status) : what) + ")";
    return {decision::give_up, milliseconds{0}, std::move(reason)};
  }
  // Delay of restart k = exits: initial * 2^(k-1), doubling without overflow.
  auto delay = std::min(policy_.backoff_initial, policy_.backoff_max);
  for (size_t k = 1; k < exits && delay < policy_.backoff_max; ++k)
    delay = std::min(delay * 2, policy_.backoff_max);
  restarts_.push_back(now);
  return {decision::restart, delay, {}};
}

// -- process_supervisor -------------------------------------------------------

struct process_supervisor::child {
  enum state_t { running, waiting, done, given_up, stopped };
  child(child_spec s, restart_policy p) : spec(std::move(s)), tracker(p) {
    // nop
  }
  child_spec spec;
  restart_tracker tracker;
  state_t state = running;
  int pid = 0;
  clock::time_point restart_at; // waiting: when to start again
};

process_supervisor::process_supervisor(
    restart_policy p, std::function<void(const child_event&)> on_event)
    : policy_(p), on_event_(std::move(on_event)) {
  install_sigchld_handler();
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
    return; // no wake-ups: exits are then noticed when run_once's limit ends
  wake_read_ = fds[0];
  wake_write_ = fds[1];
  // With all slots taken, the same degradation as above.
  register_wake_fd(wake_write_);
}

process_supervisor::~process_supervisor() {
  for (auto& c : children_) {
    if (c->state == child::running) {
      kill(c->pid, SIGKILL);
      wait_blocking(c->pid);
    }
  }
  if (wake_write_ >= 0) {
    unregister_wake_fd(wake_write_);
    close(wake_write_);
    close(wake_read_);
  }
}

std::string process_supervisor::add(child_spec spec) {
  child* c = find(spec.name);
  if (c && (c->state == child::running || c->state == child::waiting))
    return "child '" + spec.name + "' is already supervised";
  auto r = spawn(spec);
  if (!r.error.empty())
    return r.error;
  if (c) {
    // Replace a finished child of that name, with a fresh restart history.
    c->spec = std::move(spec);
    c->tracker = restart_tracker{policy_};
  } else {
    children_.push_back(std::make_unique<child>(std::move(spec), policy_));
    c = children_.back().get();
  }
  c->state = child::running;
  c->pid = r.pid;
  emit(child_event::started, *c, r.pid, {});
  return {};
}

void process_supervisor::run_once(std::chrono::milliseconds limit) {
  auto deadline = clock::now() + limit;
  while (!handle_pending()) {
    if (clock::now() >= deadline)
      return;
    wait_for_wakeup(next_due(deadline));
  }
}

/// Reaps ended children and starts due ones; true if anything happened.
bool process_supervisor::handle_pending() {
  // Drain before reaping: a SIGCHLD after the sweep leaves a byte for poll.
  drain_wakeups();
  bool any = false;
  // By index: on_event may add children.
  for (size_t i = 0; i < children_.size(); ++i)
    if (children_[i]->state == child::running && reap(*children_[i]))
      any = true;
  auto now = clock::now();
  for (size_t i = 0; i < children_.size(); ++i) {
    child& c = *children_[i];
    if (c.state == child::waiting && c.restart_at <= now) {
      start(c);
      any = true;
    }
  }
  return any;
}

bool process_supervisor::reap(child& c) {
  int st = 0;
  std::string what;
  if (!try_reap(c.pid, st, what))
    return false;
  on_exit(c, st, what);
  return true;
}

void process_supervisor::on_exit(child& c, int wait_status,
                                 const std::string& what) {
  int pid = c.pid;
  auto now = clock::now();
  auto d = c.tracker.on_exit(now, wait_status, what);
  // Update the state before emitting: on_event may look at us.
  c.pid = 0;
  switch (d.kind) {
  case restart_tracker::decision::done: // 1
    c.state = child::done;
    break;
  case restart_tracker::decision::restart: // 2
    c.state = child::waiting;
    c.restart_at = now + d.delay;
    break;
  case restart_tracker::decision::give_up: // 4
    c.state = child::given_up;
    break;
  }
  emit(child_event::exited, c, pid,
       what.empty() ? describe_exit(wait_status) : what);
  if (d.kind == restart_tracker::decision::restart) {
    metrics::counter("troupe_restarts_total",
                     "child processes this agent restarted",
                     {{"child", c.spec.name}})
        .Increment();
    emit(child_event::restarting, c, 0, "in " + format_ms(d.delay));
  } else if (d.kind == restart_tracker::decision::give_up)
    emit(child_event::gave_up, c, pid, d.reason); // its last process
}

void process_supervisor::start(child& c) {
  auto r = spawn(c.spec);
  if (r.error.empty()) { // 3
    c.state = child::running;
    c.pid = r.pid;
    emit(child_event::started, c, r.pid, {});
    return;
  }
  // A failed start counts as an exit at once (2 or 4), with a reason that
  // says why, so a missing binary ends in gave_up rather than a silent loop.
  c.pid = r.pid;
  on_exit(c, r.wait_status, r.error);
}

/// The earlier of `deadline` and the first due restart.
process_supervisor::clock::time_point
process_supervisor::next_due(clock::time_point deadline) const {
  for (auto& c : children_)
    if (c->state == child::waiting)
      deadline = std::min(deadline, c->restart_at);
  return deadline;
}

/// Sleeps until `until` or until SIGCHLD writes to the self-pipe.
void process_supervisor::wait_for_wakeup(clock::time_point until) {
  auto left = until - clock::now();
  if (left <= clock::duration::zero())
    return;
  // Round up: rounding down would spin on the last sub-millisecond.
  auto ms = std::chrono::ceil<milliseconds>(left).count();
  pollfd pfd{wake_read_, POLLIN, 0};
  poll(&pfd, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
}

bool process_supervisor::idle() const {
  return std::none_of(children_.begin(), children_.end(), [](auto& c) {
    return c->state == child::running || c->state == child::waiting;
  });
}

bool process_supervisor::gave_up() const {
  return std::any_of(children_.begin(), children_.end(),
                     [](auto& c) { return c->state == child::given_up; });
}

int process_supervisor::pid_of(const std::string& name) const {
  child* c = find(name);
  return c && c->state == child::running ? c->pid : 0;
}

bool process_supervisor::signal(const std::string& name, int sig) {
  // Safe from pid reuse: an ended child stays a zombie until we reap it.
  int pid = pid_of(name);
  return pid != 0 && kill(pid, sig) == 0;
}

void process_supervisor::stop_all(std::chrono::milliseconds grace) {
  for (size_t i = 0; i < children_.size(); ++i) {
    child& c = *children_[i];
    if (c.state == child::waiting)
      mark_stopped(c, "restart cancelled"); // 5
    else if (c.state == child::running)
      kill(c.pid, SIGTERM);
  }
  auto deadline = clock::now() + grace;
  for (;;) {
    drain_wakeups();
    size_t live = 0;
    for (size_t i = 0; i < children_.size(); ++i) {
      child& c = *children_[i];
      int st = 0;
      std::string what;
      if (c.state != child::running)
        continue;
      if (try_reap(c.pid, st, what))
        mark_stopped(c, what); // 5
      else
        ++live;
    }
    if (live == 0 || clock::now() >= deadline)
      break;
    wait_for_wakeup(deadline);
  }
  for (size_t i = 0; i < children_.size(); ++i) {
    child& c = *children_[i];
    if (c.state != child::running)
      continue;
    kill(c.pid, SIGKILL);
    mark_stopped(c, describe_exit(wait_blocking(c.pid)) + " after " +
                        format_ms(grace) + " grace"); // 5
  }
}

// -- helpers ------------------------------------------------------------------

void process_supervisor::drain_wakeups() {
  char buf[64];
  while (wake_read_ >= 0 && read(wake_read_, buf, sizeof buf) > 0) {
  }
}

void process_supervisor::mark_stopped(child& c, std::string detail) {
  int pid = c.pid;
  c.state = child::stopped;
  c.pid = 0;
  emit(child_event::stopped, c, pid, std::move(detail));
}

process_supervisor::child*
process_supervisor::find(const std::string& name) const {
  for (auto& c : children_)
    if (c->spec.name == name)
      return c.get();
  return nullptr;
}

void process_supervisor::emit(child_event::kind_t kind, const child& c, int pid,
                              std::string detail) {
  if (on_event_)
    on_event_(child_event{kind, c.spec.name, pid, std::move(detail),
                          std::chrono::system_clock::now()});
}

} // namespace troupe

// The turn machine of road_conn (road_conn.hpp draws it): a blocking
// caller that reads its own replies, and the reader thread that leaves
// the road to it and takes it back.
#include "actors/road/road_caller.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "actors/road/road_internal.hpp"

namespace troupe {

using namespace road_detail;

namespace {

thread_local road_caller_scope* this_threads_scope = nullptr;

/// While it lives, this thread counts as a road's reader: the kv client
/// defers writes here, as on a reader.
struct reader_flag {
  bool before = reading_a_road;
  reader_flag() { reading_a_road = true; }
  ~reader_flag() { reading_a_road = before; }
};

/// A peer that stops in the middle of a frame (a stopped or swapping
/// process) must not hold the caller beyond the connection's timeout,
/// while the reply it waits for may have failed meanwhile: a read that
/// waits that long fails the connection, as a send would. (The reader
/// thread may wait: nothing waits on it.) While it lives, reads of `fd`
/// give up after `ms` (0: never).
struct read_deadline {
  int fd;
  bool set;
  read_deadline(int f, uint32_t ms) : fd(f), set(ms > 0) {
    if (set)
      set_timeout(fd, SO_RCVTIMEO, ms);
  }
  ~read_deadline() {
    if (set)
      set_timeout(fd, SO_RCVTIMEO, 0);
  }
};

} // namespace

// -- road_caller_scope --------------------------------------------------------

road_caller_scope::road_caller_scope() : outer_(this_threads_scope) {
  this_threads_scope = this;
}

road_caller_scope::~road_caller_scope() {
  this_threads_scope = outer_;
  for (size_t i = claimed_ ? 1 : 0; i < conns_.size(); ++i)
    conns_[i]->caller_done(); // nobody here reads it: replies are due
}

road_caller_scope* road_caller_scope::current() {
  return this_threads_scope;
}

void road_caller_scope::note(road_conn_ptr c) {
  if (std::find(conns_.begin(), conns_.end(), c) == conns_.end())
    conns_.push_back(std::move(c));
}

road_conn_ptr road_caller_scope::claim_only_conn() {
  claimed_ = conns_.size() == 1;
  return claimed_ ? conns_.front() : nullptr;
}

// -- the reader thread's side -------------------------------------------------

void road_conn::leave_to_callers_if_asked() {
  // 1: with nothing outstanding, nothing arrives until a caller sends;
  // with replies outstanding, a caller waits for them on the road.
  if (callers_want_ && (outstanding_ == 0 || caller_waiting_) &&
      turn_ == turn::reader) {
    turn_ = turn::callers_idle;
    turn_cv_.notify_all();
  }
}

bool road_conn::await_input() {
  if (spin_until_readable(read_fd_, settings_.spin_us, spins_found))
    return true;
  pollfd p[2] = {{read_fd_, POLLIN, 0}, {wake_efd_, POLLIN, 0}};
  while (::poll(p, 2, -1) < 0 && errno == EINTR) {
  }
  if ((p[1].revents & POLLIN) == 0)
    return true;
  uint64_t n = 0;
  [[maybe_unused]] auto got = ::read(wake_efd_, &n, sizeof(n));
  return false;
}

bool road_conn::wait_for_turn() {
  std::unique_lock<std::mutex> guard{turn_mtx_};
  leave_to_callers_if_asked();
  turn_cv_.wait(guard, [this] { return turn_ == turn::reader || closed_; });
  return !closed_;
}

void road_conn::note_send(road_op op) {
  bool request = is_request(op);
  auto scope = road_caller_scope::current();
  {
    std::lock_guard<std::mutex> guard{turn_mtx_};
    outstanding_ += request ? 1 : 0;
    if (!scope && turn_ == turn::callers_idle) {
      // 2: not a caller that reads its own reply: the reader thread must.
      turn_ = turn::reader;
      callers_want_ = false;
      turn_cv_.notify_all();
    }
  }
  if (scope)
    scope->note(shared_from_this());
}

void road_conn::wake_reader() {
  std::lock_guard<std::mutex> guard{turn_mtx_};
  turn_cv_.notify_all();
}

// -- the caller's side --------------------------------------------------------

bool road_conn::pump_once(std::chrono::milliseconds wait) {
  if (auto stop = take_caller_turn(wait))
    return *stop;
  return caller_read(wait);
}

std::optional<bool>
road_conn::take_caller_turn(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> guard{turn_mtx_};
  if (closed_)
    return false;
  if (turn_ == turn::reader) {
    callers_want_ = true; // the reader thread leaves once it may (1)
    // Amid large frames, a wake-up is nothing beside their copies, and
    // the caller's poll would take a core from them: it waits by mail.
    if (outstanding_ == 0 || large_traffic())
      return false;
    // Replies are due: the reader thread waits for them, woken for us.
    caller_waiting_ = true;
    if (wake_efd_ < 0)
      wake_efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_efd_ < 0)
      return false;
    uint64_t one = 1;
    [[maybe_unused]] auto put = ::write(wake_efd_, &one, sizeof(one));
    if (!turn_cv_.wait_for(guard, wait,
                           [this] { return turn_ != turn::reader || closed_; }))
      return true; // not yet: the caller looks at its mailbox again
    if (closed_)
      return false;
  } else if (outstanding_ == 0 && stream_->buffered() == 0) {
    // 4: every reply has been read (one handed to a scheduler thread, say,
    // a large one): nothing more comes here; the caller's comes by mail.
    turn_ = turn::callers_idle;
    return false;
  }
  turn_ = turn::caller_reading; // 3
  return std::nullopt;
}

bool road_conn::caller_read(std::chrono::milliseconds wait) {
  // A caller looks at its mailbox between pumps, and one that asks
  // without waiting must not wait: it polls no longer than `wait`.
  // Amid large frames, the next (a large pull's next part) is far off:
  // the poll would only take a core from the threads copying them.
  if (stream_->buffered() < sizeof(wire_header) &&
      (large_traffic() ||
       !spin_until_readable(read_fd_, settings_.caller_spin_us, spins_found,
                            wait))) {
    pollfd p{read_fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0)
      return !closed_; // nothing yet (or EINTR): the caller looks again
  }
  reader_flag flag;
  read_deadline deadline{read_fd_, send_timeout_ms_};
  // What arrived together is dispatched together (a push's ack and the
  // reply of the pull sent with it, say).
  bool ok = read_one(false);
  while (ok && stream_->buffered() >= sizeof(wire_header))
    ok = read_one(false);
  return ok;
}

void road_conn::caller_done() {
  std::lock_guard<std::mutex> guard{turn_mtx_};
  caller_waiting_ = false;
  if (turn_ == turn::reader)
    return;
  if (outstanding_ == 0) {
    turn_ = turn::callers_idle; // 4
    return;
  }
  turn_ = turn::reader; // 5: replies still due: the reader thread reads them
  turn_cv_.notify_all();
}

uint64_t road_conn::outstanding() const {
  std::lock_guard<std::mutex> guard{turn_mtx_};
  return outstanding_;
}

bool road_conn::read_by_callers() const {
  std::lock_guard<std::mutex> guard{turn_mtx_};
  return turn_ != turn::reader;
}

} // namespace troupe

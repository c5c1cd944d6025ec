// A road reader hands messages to an idle actor and runs it on its own
// thread; a busy actor gets the message in its mailbox as usual.
#define BOOST_TEST_MODULE run_here_tests
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/road/run_here.hpp"

using namespace troupe;

namespace {

/// What the actors saw: for each value, the thread that handled it.
struct seen_log {
  std::mutex mtx;
  std::condition_variable cv;
  std::map<int, std::thread::id> by;
  bool gate_open = false;
  bool in_gate = false;

  void saw(int x) {
    std::lock_guard<std::mutex> guard{mtx};
    by[x] = std::this_thread::get_id();
    cv.notify_all();
  }
  bool has(int x) {
    std::lock_guard<std::mutex> guard{mtx};
    return by.count(x) != 0;
  }
  /// Waits (at most 10 s) until `x` was handled; its thread.
  std::thread::id await(int x) {
    std::unique_lock<std::mutex> guard{mtx};
    BOOST_REQUIRE_MESSAGE(cv.wait_for(guard, std::chrono::seconds{10},
                                      [&] { return by.count(x) != 0; }),
                          "value " << x << " was never handled");
    return by[x];
  }
};

/// Logs each int; forwards it (+100) to `next` if set; -1 holds the actor
/// until the gate opens; 0 quits.
caf::behavior logger(caf::event_based_actor* self, seen_log* log,
                     caf::actor next) {
  return {[self, log, next](int x) {
    if (x == -1) {
      std::unique_lock<std::mutex> guard{log->mtx};
      log->in_gate = true;
      log->cv.notify_all();
      log->cv.wait_for(guard, std::chrono::seconds{10},
                       [log] { return log->gate_open; });
      return;
    }
    log->saw(x);
    if (x == 0)
      self->quit();
    else if (next)
      self->send(next, x + 100);
  }};
}

/// Logs each int below 100 and sends itself the int + 100, which it logs
/// too; answers with the int.
caf::behavior echo(caf::event_based_actor* self, seen_log* log) {
  return {[self, log](int x) {
    log->saw(x);
    if (x < 100) // anonymous: a reply to it would come back to us
      caf::anon_send(self, x + 100);
    return x;
  }};
}

/// Runs `fn` on a thread of its own (not CAF's); its id.
template <class F> std::thread::id on_own_thread(F fn) {
  std::thread::id id;
  std::thread t{[&] {
    id = std::this_thread::get_id();
    fn();
  }};
  t.join();
  return id;
}

/// Actors are spawned lazily: idle (waiting for a message) from the start,
/// so that the first message finds them so.
struct fixture {
  seen_log log; // outlives the system, which waits for the actors using it
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(run_here_tests, fixture)

BOOST_AUTO_TEST_CASE(an_idle_actor_runs_on_the_sending_thread) {
  auto a = sys.spawn<caf::lazy_init>(logger, &log, caf::actor{});
  for (int x = 1; x <= 50; ++x) {
    bool done_on_return = false;
    auto sender = on_own_thread([&] {
      send_and_run_here(a, caf::make_message(x));
      done_on_return = log.has(x); // ran before the call returned
    });
    BOOST_REQUIRE_MESSAGE(done_on_return, "value " << x << " not run here");
    BOOST_CHECK(log.await(x) == sender);
  }
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_busy_actor_gets_the_message_in_its_mailbox) {
  auto a = sys.spawn<caf::lazy_init>(logger, &log, caf::actor{});
  caf::anon_send(a, -1); // holds the actor on a scheduler thread
  {
    std::unique_lock<std::mutex> guard{log.mtx};
    BOOST_REQUIRE(log.cv.wait_for(guard, std::chrono::seconds{10},
                                  [&] { return log.in_gate; }));
  }
  auto sender = on_own_thread(
      [&] { send_and_run_here(a, caf::make_message(7)); }); // returns
  BOOST_CHECK(!log.has(7));
  {
    std::lock_guard<std::mutex> guard{log.mtx};
    log.gate_open = true;
    log.cv.notify_all();
  }
  BOOST_CHECK(log.await(7) != sender); // handled later, by the scheduler
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(what_the_actor_sends_meanwhile_runs_on_the_scheduler) {
  auto b = sys.spawn<caf::lazy_init>(logger, &log, caf::actor{});
  auto a = sys.spawn<caf::lazy_init>(logger, &log, b);
  auto sender =
      on_own_thread([&] { send_and_run_here(a, caf::make_message(5)); });
  BOOST_CHECK(log.await(5) == sender);
  BOOST_CHECK(log.await(105) != sender); // not nested inside a's run
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_limited_run_leaves_the_rest_to_the_scheduler) {
  auto a = sys.spawn<caf::lazy_init>(echo, &log);
  // Unlimited: what the actor sends itself meanwhile runs here too.
  auto sender =
      on_own_thread([&] { send_and_run_here(a, caf::make_message(1)); });
  BOOST_CHECK(log.await(1) == sender);
  BOOST_CHECK(log.await(101) == sender);
  // One message: the rest of its mailbox goes to the scheduler.
  sender =
      on_own_thread([&] { send_and_run_here(a, caf::make_message(2), 1); });
  BOOST_CHECK(log.await(2) == sender);
  BOOST_CHECK(log.await(102) != sender);
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

namespace {
std::atomic<bool> stop_now{false};
bool stop_when_told() {
  return stop_now.load();
}
} // namespace

BOOST_AUTO_TEST_CASE(a_run_told_to_stop_leaves_the_rest_to_the_scheduler) {
  auto a = sys.spawn<caf::lazy_init>(echo, &log);
  // Never told: as an unlimited run, what it sends itself runs here too.
  stop_now = false;
  auto sender = on_own_thread([&] {
    send_and_run_here(a, caf::make_message(3), SIZE_MAX, stop_when_told);
  });
  BOOST_CHECK(log.await(3) == sender);
  BOOST_CHECK(log.await(103) == sender);
  // Told after the first message: the rest goes to the scheduler.
  stop_now = true;
  sender = on_own_thread([&] {
    send_and_run_here(a, caf::make_message(4), SIZE_MAX, stop_when_told);
  });
  BOOST_CHECK(log.await(4) == sender);
  BOOST_CHECK(log.await(104) != sender);
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_waiting_caller_runs_the_receiver_of_its_request) {
  auto a = sys.spawn<caf::lazy_init>(echo, &log);
  int got = 0;
  int got_later = 0;
  auto sender = on_own_thread([&] {
    caf::scoped_actor self{sys};
    auto ask = [&self, &a](int x) {
      return self->request(a, caf::infinite, x);
    };
    std::optional<decltype(ask(0))> h;
    run_here_while(self.ptr(), [&h, &ask] { h.emplace(ask(3)); });
    h->receive([&got](int x) { got = x; }, [](caf::error&) {});
    // Outside run_here_while, requests go to the scheduler again (the
    // actor ran 103 here as well, and is idle).
    ask(4).receive([&got_later](int x) { got_later = x; }, [](caf::error&) {});
  });
  BOOST_CHECK_EQUAL(got, 3);
  BOOST_CHECK(log.await(3) == sender);
  BOOST_CHECK(log.await(103) == sender);
  BOOST_CHECK_EQUAL(got_later, 4);
  BOOST_CHECK(log.await(4) != sender);
  log.await(104); // nothing left to handle when the case ends
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(an_actor_that_quits_here_ends_cleanly) {
  auto a = sys.spawn<caf::lazy_init>(logger, &log, caf::actor{});
  caf::scoped_actor self{sys};
  self->monitor(a);
  auto sender =
      on_own_thread([&] { send_and_run_here(a, caf::make_message(0)); });
  BOOST_CHECK(log.await(0) == sender);
  bool down = false;
  self->receive([&](const caf::down_msg& dm) { down = dm.source == a; },
                caf::after(std::chrono::seconds{10}) >> [] {});
  BOOST_CHECK(down);
  // A message to the gone actor is dropped, not run.
  on_own_thread([&] { send_and_run_here(a, caf::make_message(9)); });
  BOOST_CHECK(!log.has(9));
}

BOOST_AUTO_TEST_CASE(the_system_outlives_an_actor_that_ends_here) {
  // An actor that quits here leaves the system's count of running actors
  // before its cleanup is done (its attached functors run after, then it
  // uses the system's clock). A system destroyed in that window must wait
  // for this thread, as it waits for its scheduler's: the functor waits
  // (bounded) to hear that the system is gone, and must not hear it.
  std::promise<void> unregistered;
  std::mutex mtx;
  std::condition_variable cv;
  bool system_gone = false;
  bool heard_gone = false;
  std::thread sender;
  {
    caf::actor_system_config cfg;
    caf::actor_system sys{cfg};
    auto a = sys.spawn<caf::lazy_init>(
        [](caf::event_based_actor* self) -> caf::behavior {
          return {[self](int) { self->quit(); }};
        });
    a->attach_functor([&] {
      unregistered.set_value();
      std::unique_lock<std::mutex> guard{mtx};
      heard_gone = cv.wait_for(guard, std::chrono::milliseconds{300},
                               [&] { return system_gone; });
    });
    sender = std::thread{[a] { send_and_run_here(a, caf::make_message(1)); }};
    unregistered.get_future().wait();
    a = nullptr;
  } // ~actor_system
  {
    std::lock_guard<std::mutex> guard{mtx};
    system_gone = true;
    cv.notify_all();
  }
  sender.join();
  BOOST_CHECK_MESSAGE(!heard_gone, "the system ended before the actor did");
}

BOOST_AUTO_TEST_SUITE_END()

// Supervision and worker faults with real processes: a node agent starts
// servers and workers, restarts a SIGKILLed worker that then rejoins and
// carries on, survives a hung worker, carries out a fault plan, gives up
// by its policy with one clear line, and stops when the scheduler dies.
// The scheduler's event log says what happened; tests never assert on time.
#define BOOST_TEST_MODULE supervision_tests
#include <boost/test/unit_test.hpp>

#include <signal.h>

#include <algorithm>
#include <memory>
#include <regex>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/base/exit_codes.hpp"
#include "actors/kv/kv.hpp"
#include "actors/node/node_config.hpp"
#include "messages/errors.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"
#include "tests/system/nodes.hpp"
#include "tests/system/scheduler_client.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

using event_reader = scheduler_client;

/// pid of the agent's child `name` from "NAME started (pid N)".
pid_t child_pid(child_process& agent, const std::string& name) {
  auto line = agent.wait_for_line(name + " started (pid ", 20s);
  BOOST_REQUIRE_MESSAGE(line, agent.output());
  return std::stoi(line->substr(line->find("(pid ") + 5));
}

/// pid of the agent's worker-1 once training is under way (the first
/// progress line is out).
pid_t worker_1_mid_training(child_process& agent) {
  auto victim = child_pid(agent, "worker-1");
  BOOST_REQUIRE_MESSAGE(agent.wait_for_line("epoch 0.25/", 60s),
                        agent.output());
  return victim;
}

bool is(const event_record& e, const char* kind, role about) {
  return e.kind == kind && e.about == about;
}

/// The scheduler's crashed event of the worker process `victim`, once a
/// server has completed a round after it (the live worker alone: nothing
/// waits for the dead).
event_record crash_survived(event_reader& log, pid_t victim) {
  auto crashed = log.wait_for_event([victim](const event_record& e) {
    return is(e, "crashed", role::worker) && e.pid == uint32_t(victim);
  });
  BOOST_REQUIRE_MESSAGE(crashed, dump(log.events()));
  auto resumed = log.wait_for_event([&crashed](const event_record& e) {
    return is(e, "resumed", role::server) && e.at_ms >= crashed->at_ms;
  });
  BOOST_CHECK_MESSAGE(resumed, dump(log.events()));
  return *crashed;
}

/// The agent exits 0 within 2 minutes, its job trained to 0.80 or better.
void trained_to_the_end(child_process& agent) {
  auto rc = agent.wait_exit(120s);
  BOOST_REQUIRE_MESSAGE(rc, "agent did not finish: " << agent.output());
  BOOST_CHECK_MESSAGE(*rc == 0, agent.output());
  BOOST_CHECK_GE(final_accuracy(agent), 0.80);
}

/// The scheduler's log holds an event `pred` accepts.
template <class Pred> void check_event(event_reader& log, Pred pred) {
  auto evs = log.events();
  BOOST_CHECK_MESSAGE(std::any_of(evs.begin(), evs.end(), pred), dump(evs));
}

/// Flags for a short training run of `epochs` epochs.
std::vector<std::string> short_training(uint32_t epochs = 2) {
  return {"--train.epochs=" + std::to_string(epochs),
          "--train.evals-per-epoch=4", "--train.eval-samples=2000"};
}

} // namespace

BOOST_AUTO_TEST_SUITE(supervision_tests)

BOOST_AUTO_TEST_CASE(a_killed_worker_is_restarted_rejoins_and_training_ends) {
  // sync+overlap: workers push each step in blocks, one server clock
  // each; the restarted one may come back in the middle of a step.
  for (std::string mode : {"sync", "async", "ssp:2", "sync+overlap"}) {
    BOOST_TEST_MESSAGE("mode " << mode);
    bool overlap = mode == "sync+overlap";
    auto servers_mode = overlap ? std::string{"sync"} : mode;
    scheduler_process s{2, 2, {"--server.mode=" + servers_mode}};
    event_reader log{s.port};
    // Three epochs, not two: the restart takes about 1.3 s (start, data),
    // in which the survivor trains alone and the victim's steps are lost
    // (it resumes at the others' clock). Two epochs took 3 s here, so the
    // final accuracy hung on how fast the rest of the cluster was (ssp:2:
    // 0.80-0.85, below 0.80 in 3 of 30 runs once training got faster).
    auto flags = short_training(3);
    flags.push_back("--server.mode=" + servers_mode);
    if (overlap)
      flags.push_back("--worker.overlap");
    if (mode != "sync" && !overlap) { // each push is an update: lr / workers
      flags.push_back("--optimizer.lr=0.025");
      flags.push_back("--optimizer.lr-decay-steps=2800");
    }
    auto agent = start_agent(s, 2, 2, flags);
    auto victim = worker_1_mid_training(*agent);
    ::kill(victim, SIGKILL);
    auto rc = agent->wait_exit(120s);
    BOOST_TEST_MESSAGE(agent->output());
    BOOST_REQUIRE_MESSAGE(rc, "agent did not finish: " << agent->output());
    BOOST_CHECK_MESSAGE(*rc == 0, agent->output());
    auto acc = final_accuracy(*agent);
    BOOST_TEST_MESSAGE(mode << ": final test accuracy " << acc);
    BOOST_CHECK_GE(acc, 0.80);
    auto evs = log.events();
    auto find = [&evs](auto pred) {
      return std::find_if(evs.begin(), evs.end(), pred);
    };
    auto crashed = find([victim](const event_record& e) {
      return is(e, "crashed", role::worker) && e.pid == uint32_t(victim);
    });
    BOOST_REQUIRE_MESSAGE(crashed != evs.end(), dump(evs));
    auto rank = crashed->rank;
    auto rejoined = find([rank](const event_record& e) {
      return is(e, "rejoined", role::worker) && e.rank == rank;
    });
    BOOST_CHECK_MESSAGE(rejoined != evs.end() && rejoined > crashed, dump(evs));
    BOOST_CHECK_MESSAGE(find([](const event_record& e) {
                          return is(e, "restarted", role::worker);
                        }) != evs.end(),
                        dump(evs));
    // Each server applied an update without the dead worker: no deadlock.
    BOOST_CHECK_MESSAGE(std::count_if(evs.begin(), evs.end(),
                                      [](const event_record& e) {
                                        return is(e, "resumed", role::server);
                                      }) >= 2,
                        dump(evs));
    // The restarted worker carried on from the servers' clock.
    auto line = agent->wait_for_line("rejoined: resuming at clock ", 1s);
    BOOST_REQUIRE_MESSAGE(line, agent->output());
    BOOST_CHECK_GT(std::stoul(line->substr(line->rfind(' ') + 1)), 0u);
    auto exited = find([victim](const event_record& e) {
      return is(e, "exited", role::worker) && e.pid == uint32_t(victim);
    });
    if (exited != evs.end())
      BOOST_TEST_MESSAGE(mode << ": worker crash seen by the scheduler "
                              << crashed->at_ms - exited->at_ms
                              << " ms after the agent saw the exit");
  }
}

BOOST_AUTO_TEST_CASE(a_hung_worker_leaves_the_view_and_training_goes_on) {
  scheduler_process s{1, 2};
  event_reader log{s.port};
  auto flags = short_training();
  flags.push_back("--server.mode=sync");
  auto agent = start_agent(s, 1, 2, flags);
  auto victim = worker_1_mid_training(*agent);
  ::kill(victim, SIGSTOP);
  // Its heartbeats stop: the scheduler declares it dead, and the server
  // completes rounds with the live worker alone.
  crash_survived(log, victim);
  // Woken up, it finds itself out of the cluster, exits, and is restarted.
  ::kill(victim, SIGCONT);
  trained_to_the_end(*agent);
  check_event(log, [victim](const event_record& e) {
    return is(e, "exited", role::worker) && e.pid == uint32_t(victim);
  });
}

BOOST_AUTO_TEST_CASE(a_worker_stuck_in_its_step_is_ended_and_training_goes_on) {
  // Its process still answers heartbeats, so the scheduler keeps it and
  // the sync rounds wait for it: only its step watch notices.
  scheduler_process s{1, 2};
  event_reader log{s.port};
  auto flags = short_training();
  flags.push_back("--server.mode=sync");
  flags.push_back("--worker.step-timeout-ms=3000");
  auto agent = start_agent(s, 1, 2, flags);
  auto victim = worker_1_mid_training(*agent);
  ::kill(victim, SIGUSR1); // what --fault.plan=stall:worker-1@MS sends
  auto line = agent->wait_for_line(" has run for ", 60s);
  BOOST_REQUIRE_MESSAGE(line, agent->output());
  auto rank = crash_survived(log, victim).rank; // worker-1's, 0 or 1
  BOOST_CHECK_MESSAGE(
      line->find("*** worker " + std::to_string(rank) + ": step ") == 0 &&
          line->find(", past its bound of 3000 ms") != std::string::npos,
      *line);
  trained_to_the_end(*agent);
  check_event(log, [rank](const event_record& e) {
    return is(e, "rejoined", role::worker) && e.rank == rank;
  });
}

BOOST_AUTO_TEST_CASE(a_fault_plan_from_flags_kills_and_the_agent_restarts) {
  scheduler_process s{1, 1};
  event_reader log{s.port};
  // A servers-only agent (its job's worker never comes) runs until
  // stopped: the plan's time always comes.
  auto agent = start_agent(
      s, 1, 0, {"--fault.plan=kill:server-0@300,kill:worker-3@200"});
  // A child it does not run is said at the start (deploy/cluster.sh gives
  // every agent one plan); at fbf4dac only at its time.
  BOOST_CHECK_MESSAGE(
      agent->wait_for_line("--fault.plan names worker-3, which this agent does"
                           " not run (--agent.servers=1, --agent.workers=0):"
                           " its kill is skipped",
                           20s),
      agent->output());
  auto first = child_pid(*agent, "server-0");
  auto injected = log.wait_for_event([first](const event_record& e) {
    return e.kind == "injected" && e.pid == uint32_t(first);
  });
  BOOST_REQUIRE_MESSAGE(injected, dump(log.events()) << agent->output());
  BOOST_CHECK(injected->detail.find("signal 9") != std::string::npos);
  auto restarted = log.wait_for_event(
      [](const event_record& e) { return is(e, "restarted", role::server); });
  BOOST_REQUIRE_MESSAGE(restarted, dump(log.events()));
  BOOST_CHECK_NE(restarted->pid, uint32_t(first));
  // The new process joins the cluster again.
  BOOST_CHECK_MESSAGE(log.wait_for_event([&restarted](const event_record& e) {
    return e.about == role::server && e.pid == restarted->pid &&
           (e.kind == "joined" || e.kind == "rejoined");
  }),
                      dump(log.events()));
  agent->signal(SIGTERM); // stops its children and exits cleanly
  auto rc = agent->wait_exit(20s);
  BOOST_REQUIRE_MESSAGE(rc, agent->output());
  BOOST_CHECK_EQUAL(*rc, 0);
}

BOOST_AUTO_TEST_CASE(a_cluster_whose_every_server_died_takes_a_new_one) {
  // The arrays had no place once the only server died, and every view said
  // so: each restarted server and worker failed with "declared slices
  // without a place" until the agent gave them up. Now the new server takes
  // them, the loss is an event, and the job ends; a trainer's check would
  // name the loss (exit 4), the counter's counts what was kept.
  scheduler_process s{1, 1};
  event_reader log{s.port};
  auto agent = start_agent(s, 1, 1,
                           {"--worker.task=counter", "--optimizer.name=sum",
                            "--worker.steps=40000", "--worker.keys=2",
                            "--worker.key-floats=4096"});
  auto server = child_pid(*agent, "server-0");
  // Once the arrays are placed (declared, on the one server): its kill.
  BOOST_REQUIRE(log.wait_for_view(
      [](const cluster_view& v) { return !v.placement.empty(); }));
  ::kill(server, SIGKILL);
  auto rc = agent->wait_exit(120s);
  BOOST_TEST_MESSAGE(agent->output());
  BOOST_REQUIRE_MESSAGE(rc, agent->output());
  BOOST_CHECK_MESSAGE(*rc == 0 && agent->output().find("sums exact") !=
                                      std::string::npos,
                      agent->output());
  // Nor did the kv client throw out_of_range on a view without servers
  // (its init then waited out 40 s).
  for (auto said : {"without a place", "unhandled exception"})
    BOOST_CHECK_MESSAGE(agent->output().find(said) == std::string::npos,
                        agent->output());
  auto evs = log.events();
  BOOST_CHECK_MESSAGE(std::count_if(evs.begin(), evs.end(),
                                    [](const event_record& e) {
                                      return is(e, "lost", role::server);
                                    }) == 1,
                      dump(evs));
}

BOOST_AUTO_TEST_CASE(a_restart_policy_that_gives_up_says_why_in_one_line) {
  // The cluster's one server never comes (the agent starts none): each
  // start of the worker waits 500 ms for the scheduler's answer to its
  // declare, which comes once every server has joined, and fails ("***
  // worker failed: timeout: declare ...", exit 1: a restart may mend
  // that), until the policy gives up.
  scheduler_process s{1, 1};
  event_reader log{s.port};
  auto agent =
      start_agent(s, 0, 1,
                  {"--kv.request-timeout-ms=500", "--agent.max-restarts=2",
                   "--agent.backoff-ms=20", "--agent.backoff-max-ms=40"});
  auto rc = agent->wait_exit(60s);
  BOOST_REQUIRE_MESSAGE(rc, agent->output());
  BOOST_CHECK_EQUAL(*rc, 1);
  auto line = agent->wait_for_line("*** agent: worker-0 gave up", 1s);
  BOOST_REQUIRE_MESSAGE(line, agent->output());
  BOOST_CHECK_MESSAGE(line->find("3 times") != std::string::npos &&
                          line->find("exit code 1") != std::string::npos,
                      *line);
  auto evs = log.events();
  BOOST_CHECK_EQUAL(std::count_if(evs.begin(), evs.end(),
                                  [](const event_record& e) {
                                    return is(e, "restarted", role::worker);
                                  }),
                    2);
  BOOST_CHECK_MESSAGE(std::any_of(evs.begin(), evs.end(),
                                  [](const event_record& e) {
                                    return is(e, "gave-up", role::worker);
                                  }),
                      dump(evs));
}

BOOST_AUTO_TEST_CASE(a_worker_with_a_bad_configuration_is_not_restarted) {
  // At 461a80d a worker asking for a GPU the machine lacks exited 2 with
  // its line, and its agent restarted it into the same line until its
  // limit. Exit 2 is given up at once, naming the cause.
  // So was one without its data, at 27adb75.
  struct bad_case {
    std::string flag, says;
  };
  for (auto& c : std::vector<bad_case>{
           {"--device=cuda:99", "*** --device=cuda:99: cuda:99: "},
           {"--train.data-dir=/nonexistent", "dataset-fashion-mnist"}}) {
    scheduler_process s{1, 1};
    event_reader log{s.port};
    auto agent = start_agent(s, 1, 1, {c.flag});
    auto rc = agent->wait_exit(60s);
    BOOST_REQUIRE_MESSAGE(rc, agent->output());
    BOOST_CHECK_EQUAL(*rc, 1);
    BOOST_CHECK_MESSAGE(agent->wait_for_line(c.says, 1s),
                        c.flag << ": " << agent->output());
    auto line = agent->wait_for_line("*** agent: worker-0 gave up", 1s);
    BOOST_REQUIRE_MESSAGE(line, agent->output());
    BOOST_CHECK_MESSAGE(line->find("exit code 2: a bad configuration") !=
                            std::string::npos,
                        *line);
    auto evs = log.events();
    BOOST_CHECK_MESSAGE(std::none_of(evs.begin(), evs.end(),
                                     [](const event_record& e) {
                                       return is(e, "restarted", role::worker);
                                     }),
                        c.flag << ": " << dump(evs));
  }
}

BOOST_AUTO_TEST_CASE(a_finished_job_whose_check_failed_ends_once_nonzero) {
  // At bc0f027 a counter worker whose sums differed exited 1 at the job's
  // end and was restarted to run the end again, four times. Here, in
  // async mode, the agent's worker pushes 200 clocks of ones, and the
  // test, the other worker, 300 more that no counter accounts for (it
  // records no start), before the end barrier: the arrays hold 500, the
  // agent's worker expects 200. It reaches the end once, is not
  // restarted, and the agent ends non-zero naming it. (The other worker
  // was a second counter with 300 steps, and the sums differed only if
  // it was still live when the first one counted: under load it left
  // first, its cut of 300 was in the log, and the sums came out exact.)
  scheduler_process s{1, 2, {"--server.mode=async"}};
  event_reader log{s.port};
  auto agent = start_agent(s, 1, 1,
                           {"--worker.task=counter", "--optimizer.name=sum",
                            "--server.mode=async", "--worker.steps=200",
                            "--worker.keys=3",
                            "--worker.key-floats=40000"}); // as start_counter
  scheduler_client other{s.port};
  kv store{*other.sys, other.sched, kv_settings{}};
  std::vector<named_array> ones;
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; key <= 3; ++key) {
    ones.push_back({key, std::vector<float>(40000, 0.0f)});
    keys.push_back(key);
  }
  auto init = store.init(ones);
  BOOST_REQUIRE_MESSAGE(init, why(init));
  for (auto& x : ones)
    std::fill(x.values.begin(), x.values.end(), 1.0f);
  BOOST_REQUIRE(store.barrier("start"));
  for (uint64_t t = 0; t < 300; ++t) {
    auto pushed = store.push(t, ones);
    BOOST_REQUIRE_MESSAGE(pushed, why(pushed));
  }
  auto all = store.pull(300, keys); // every push applied
  BOOST_REQUIRE_MESSAGE(all, why(all));
  BOOST_REQUIRE(store.barrier("end"));
  auto rc = agent->wait_exit(120s);
  BOOST_TEST_MESSAGE(agent->output());
  BOOST_REQUIRE_MESSAGE(rc, agent->output());
  BOOST_CHECK_EQUAL(*rc, 1);
  BOOST_CHECK_MESSAGE(
      agent->wait_for_line("*** agent: worker-0 failed its job's check (the"
                           " sums differed at the end, or the job lost"
                           " values: its output says which): not restarted",
                           1s),
      agent->output());
  BOOST_CHECK_MESSAGE(agent->wait_for_line("the sums differ: key ", 1s),
                      agent->output());
  // The arrays hold both workers' pushes; it expected its own.
  BOOST_CHECK_MESSAGE(agent->wait_for_line("final value 500, expected the"
                                           " pushes kept (accounting above)"
                                           " = 200: MISMATCH",
                                           1s),
                      agent->output());
  auto evs = log.events();
  BOOST_CHECK_MESSAGE(std::none_of(evs.begin(), evs.end(),
                                   [](const event_record& e) {
                                     return is(e, "restarted", role::worker);
                                   }),
                      dump(evs));
  BOOST_CHECK_MESSAGE(std::any_of(evs.begin(), evs.end(),
                                  [](const event_record& e) {
                                    return is(e, "check-failed", role::worker);
                                  }),
                      dump(evs));
  store.leave(); // the agent stopped its server: whatever it answers
}

BOOST_AUTO_TEST_CASE(an_agents_events_name_the_schedulers_rank) {
  // The test's own counter joins first, as worker 0; the agent's worker-0
  // is then worker 1 to the scheduler. Killed, its agent's events about it
  // (exited, restarting, restarted) say worker 1, as the scheduler's do.
  scheduler_process s{1, 2, {"--server.mode=async"}};
  event_reader log{s.port};
  auto counter = std::vector<std::string>{
      "--optimizer.name=sum", "--server.mode=async", "--worker.keys=3",
      "--worker.key-floats=40000"}; // as start_counter
  auto other = start_counter(s, 1000000, counter);
  BOOST_REQUIRE_MESSAGE(log.wait_for_event([&other](const event_record& e) {
    return is(e, "joined", role::worker) && e.pid == uint32_t(other->pid());
  }),
                        dump(log.events()) << other->output());
  counter.insert(counter.begin(),
                 {"--worker.task=counter", "--worker.steps=1000000",
                  "--cluster.workers=2"});
  auto agent = start_agent(s, 1, 1, counter);
  auto victim = child_pid(*agent, "worker-0");
  auto joined = log.wait_for_event([victim](const event_record& e) {
    return is(e, "joined", role::worker) && e.pid == uint32_t(victim);
  });
  BOOST_REQUIRE_MESSAGE(joined, dump(log.events()) << agent->output());
  BOOST_REQUIRE_EQUAL(joined->rank, 1u);
  ::kill(victim, SIGKILL);
  auto restarted = log.wait_for_event(
      [](const event_record& e) { return is(e, "restarted", role::worker); });
  BOOST_REQUIRE_MESSAGE(restarted, dump(log.events()) << agent->output());
  auto evs = log.events();
  for (const char* kind : {"exited", "restarting", "restarted", "crashed"}) {
    auto e =
        std::find_if(evs.begin(), evs.end(), [kind](const event_record& e) {
          return is(e, kind, role::worker);
        });
    BOOST_REQUIRE_MESSAGE(e != evs.end(), kind << " missing: " << dump(evs));
    BOOST_CHECK_MESSAGE(e->rank == 1u, kind << ": " << dump(evs));
  }
  // The agent's own name of it stays in the detail.
  BOOST_CHECK_EQUAL(restarted->detail.rfind("worker-0", 0), 0u);
  agent->signal(SIGTERM);
  BOOST_REQUIRE_MESSAGE(agent->wait_exit(20s), agent->output());
}

BOOST_AUTO_TEST_CASE(an_agent_stops_its_children_when_the_scheduler_dies) {
  auto s = std::make_unique<scheduler_process>(1, 1);
  // Random kills of workers where the agent runs none were planned
  // silently: none.
  auto agent = start_agent(*s, 1, 0, {"--fault.random-kills=2"});
  auto server = child_pid(*agent, "server-0");
  BOOST_REQUIRE(agent->wait_for_line("server listening on", 20s));
  BOOST_CHECK_MESSAGE(
      agent->wait_for_line("--fault.random-kills=2: this agent runs no"
                           " worker (--fault.random-targets): no random kill"
                           " here",
                           20s),
      agent->output());
  s->proc->signal(SIGKILL);
  auto rc = agent->wait_exit(30s);
  BOOST_REQUIRE_MESSAGE(rc, agent->output());
  BOOST_CHECK_EQUAL(*rc, 1);
  BOOST_CHECK(agent->wait_for_line("*** agent: the scheduler is down", 1s));
  BOOST_CHECK(::kill(server, 0) == -1 && errno == ESRCH); // reaped, gone
}

BOOST_AUTO_TEST_SUITE_END()

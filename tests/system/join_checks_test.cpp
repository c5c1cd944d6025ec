// What the scheduler refuses at registration, where a node's settings
// disagree with the cluster's: a loopback server seen from elsewhere,
// another optimizer, another --server.mode, and (sync and ssp) a worker of
// other steps. Each is one line and exit 2, where before such jobs trained
// to a wrong result or waited on each other.
#define BOOST_TEST_MODULE join_checks_tests
#include <boost/test/unit_test.hpp>

#include <caf/scoped_actor.hpp>

#include "actors/base/machine_id.hpp"
#include "messages/errors.hpp"
#include "messages/membership.hpp"
#include "tests/system/nodes.hpp"
#include "tests/system/scheduler_client.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using namespace std::chrono_literals;
using namespace troupe::test;

namespace {

/// A member of `kind` on this machine that says `optimizer`, `mode` and
/// `work` (a server: at 127.0.0.1:4999).
register_request member(role kind, const std::string& optimizer,
                        const std::string& mode, const std::string& work = "") {
  register_request req{kind, "",        0,    1,   {0, machine_id(), ""},
                       0,    optimizer, mode, work};
  if (kind == role::server) {
    req.host = "127.0.0.1";
    req.port = 4999;
  }
  return req;
}

} // namespace

BOOST_AUTO_TEST_SUITE(join_checks_tests)

BOOST_AUTO_TEST_CASE(a_loopback_server_is_refused_where_a_peer_is_elsewhere) {
  // At bc0f027 servers started without --host on three machines advertised
  // 127.0.0.1, and a dead one's slices came back with no replica. Another
  // machine is another boot id or network namespace: the test registers
  // as nodes that say they run on one.
  scheduler_process s{1, 1};
  scheduler_client c{s.port};
  caf::scoped_actor fake{*c.sys};
  auto join = [&](const register_request& req) {
    return register_as(fake, c.sched, req);
  };
  const std::string elsewhere = "another-boot-id/net:[4026531840]";
  auto err = join(
      {role::server, "127.0.0.1", 4999, 1, {0, elsewhere, ""}, 0, "", "", ""});
  BOOST_CHECK(err == errc::invalid_config);
  BOOST_CHECK_MESSAGE(describe(err).find("this server advertises 127.0.0.1") !=
                              std::string::npos &&
                          describe(err).find("the scheduler runs on another") !=
                              std::string::npos,
                      describe(err));
  // The scheduler's line names the refused peer's address, not only its
  // CAF node (at 18d411b only the node id, which ends in its pid).
  auto line = s.proc->wait_for_line("refused a server from ", 10s);
  BOOST_REQUIRE_MESSAGE(line, s.proc->output());
  BOOST_TEST_MESSAGE(*line);
  BOOST_CHECK_MESSAGE(line->find(" at 127.0.0.1:") != std::string::npos, *line);
  // A server of this machine on loopback joins; a worker from elsewhere
  // could not reach it.
  auto srv = start_server(s, "sync");
  BOOST_REQUIRE(c.wait_for_view(
      [](const cluster_view& v) { return v.servers.size() == 1; }));
  err = join({role::worker, "", 0, 2, {0, elsewhere, ""}, 0, "", "", ""});
  BOOST_CHECK(err == errc::invalid_config);
  BOOST_CHECK_MESSAGE(describe(err).find("server 0 advertises 127.0.0.1") !=
                          std::string::npos,
                      describe(err));
  BOOST_CHECK_MESSAGE(describe(err).find("--host=") != std::string::npos,
                      describe(err));
  // Workers of this machine reach it.
  auto w = start_counter(s, 5);
  auto rc = w->wait_exit(60s);
  BOOST_REQUIRE_MESSAGE(rc, w->output());
  BOOST_CHECK_MESSAGE(*rc == 0, w->output());
}

BOOST_AUTO_TEST_CASE(a_node_whose_optimizer_disagrees_is_refused_at_join) {
  // At fbf4dac a server with adam and a worker with --optimizer.on=worker
  // trained to a loss of 1e11, and the worker exited 0.
  scheduler_process s{2, 2};
  scheduler_client c{s.port};
  caf::scoped_actor fake{*c.sys};
  auto join = [&](role kind, const std::string& optimizer) {
    return register_as(fake, c.sched, member(kind, optimizer, ""));
  };
  const std::string adam = "adam@server lr=0.001 weight-decay=0"
                           " betas=0.9,0.999 eps=1e-08";
  BOOST_REQUIRE(!join(role::server, adam));
  auto err = join(role::server, "sgd@server lr=0.1 weight-decay=0");
  BOOST_CHECK(err == errc::invalid_config);
  BOOST_CHECK_EQUAL(describe(err),
                    "invalid_config: this server's optimizer is sgd@server"
                    " lr=0.1 weight-decay=0, server 0's " +
                        adam +
                        ": give every node the same --optimizer flags (where"
                        " it runs, --optimizer.on, above all)");
  err = join(role::worker, "sgd@worker lr=0.1 weight-decay=0");
  BOOST_CHECK(err == errc::invalid_config);
  BOOST_CHECK_MESSAGE(describe(err).find("this worker's optimizer is"
                                         " sgd@worker") != std::string::npos,
                      describe(err));
  // With the optimizer on the servers a worker's own name and rate are
  // not read: it agrees; one that says nothing (a custom worker) too.
  BOOST_CHECK(!join(role::worker, "momentum@server lr=0.5"));
  BOOST_CHECK(!join(role::worker, ""));
  // A server process refused so exits 2, which its agent does not restart.
  check_refused(
      {{node_args({"--role=server", s.flag(), "--optimizer.name=sgd"}),
        "this server's optimizer is sgd@server lr=0.1", 2}});
}

BOOST_AUTO_TEST_CASE(a_node_whose_mode_is_not_the_schedulers_is_refused) {
  // Async servers under sync workers trained silently to 0.845 where
  // either mode alone reached 0.863; a restarted worker resumes at the
  // clock its own mode picks.
  scheduler_process s{2, 2, {"--server.mode=ssp:2"}};
  scheduler_client c{s.port};
  caf::scoped_actor fake{*c.sys};
  auto join = [&](role kind, const std::string& mode) {
    return register_as(fake, c.sched, member(kind, "", mode));
  };
  auto err = join(role::server, "sync");
  BOOST_CHECK(err == errc::invalid_config);
  BOOST_CHECK_EQUAL(describe(err),
                    "invalid_config: this server runs --server.mode=sync, the"
                    " scheduler ssp:2: give every node the same"
                    " --server.mode (the servers keep workers in step by it,"
                    " and checkpoints are cut by it)");
  err = join(role::worker, "ssp:3");
  BOOST_CHECK(err == errc::invalid_config);
  BOOST_CHECK_MESSAGE(describe(err).find("this worker runs --server.mode=ssp:3,"
                                         " the scheduler ssp:2") !=
                          std::string::npos,
                      describe(err));
  // The same mode joins; so does a kv user's own client, which says none.
  BOOST_CHECK(!join(role::server, "ssp:2"));
  BOOST_CHECK(!join(role::worker, ""));
  // A worker process refused so exits 2, which its agent does not
  // restart; it says why.
  check_refused(
      {{node_args({"--role=worker", s.flag(), "--worker.task=counter",
                   "--server.mode=async"}),
        "this worker runs --server.mode=async, the scheduler ssp:2", 2}});
}

BOOST_AUTO_TEST_CASE(a_worker_of_other_steps_is_refused_in_sync) {
  // At ee5f66d counter workers of 5 and 10 steps in sync: the first waited
  // at the end barrier, the second for a round that lacked the first's
  // push, until its 10 s timeout; then the first said a false MISMATCH.
  scheduler_process s{1, 4};
  scheduler_client c{s.port};
  caf::scoped_actor fake{*c.sys};
  auto join = [&](const std::string& work) {
    return register_as(fake, c.sched, member(role::worker, "", "", work));
  };
  BOOST_REQUIRE(!join("--worker.steps=5 --worker.keys=2"));
  auto err = join("--worker.steps=10 --worker.keys=2");
  BOOST_CHECK(err == errc::invalid_config);
  BOOST_CHECK_EQUAL(describe(err),
                    "invalid_config: this worker runs --worker.steps=10"
                    " --worker.keys=2, worker 0 --worker.steps=5"
                    " --worker.keys=2: give every worker the same flags (in"
                    " sync a worker that ends first leaves the others' rounds"
                    " short)");
  // The same work joins; so does a custom worker that says none.
  BOOST_CHECK(!join("--worker.steps=5 --worker.keys=2"));
  BOOST_CHECK(!join(""));
  // A counter process of other steps exits 2, which its agent does not
  // restart, and says why; a trainer says its epochs, batch and samples.
  check_refused(
      {{node_args({"--role=worker", s.flag(), "--worker.task=counter",
                   "--server.mode=sync", "--worker.steps=10",
                   "--worker.keys=2"}),
        "this worker runs --worker.steps=10 --worker.keys=2, worker 0", 2},
       {node_args({"--role=worker", s.flag(), "--server.mode=sync",
                   "--train.epochs=3"}),
        "this worker runs --train.epochs=3 --train.batch=64 on 60000 samples,",
        2}});
}

BOOST_AUTO_TEST_CASE(workers_of_other_steps_join_in_async) {
  // In async a worker that ends first holds no one back.
  scheduler_process s{1, 2, {"--server.mode=async"}};
  scheduler_client c{s.port};
  caf::scoped_actor fake{*c.sys};
  auto join = [&](const std::string& work) {
    return register_as(fake, c.sched, member(role::worker, "", "", work));
  };
  BOOST_CHECK(!join("--worker.steps=5 --worker.keys=2"));
  BOOST_CHECK(!join("--worker.steps=10 --worker.keys=2"));
}

BOOST_AUTO_TEST_SUITE_END()

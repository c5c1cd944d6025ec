// Store ids: unique in the cluster, also between servers that share a pid
// (on other machines, or in containers: PID namespaces).
#define BOOST_TEST_MODULE store_id_tests
#include <boost/test/unit_test.hpp>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <set>

#include "actors/server/shard_server.hpp"

using namespace troupe;

namespace {

/// The first store id of a process that is pid 1 of a PID namespace of its
/// own, or 0 where this process may not make one (not root): errno says.
uint64_t first_id_as_pid_1() {
  int fds[2];
  BOOST_REQUIRE(::pipe(fds) == 0);
  pid_t outer = ::fork();
  BOOST_REQUIRE(outer >= 0);
  if (outer == 0) { // only async-signal-safe calls, pipe writes, _exit
    ::close(fds[0]);
    if (::unshare(CLONE_NEWPID) != 0)
      ::_exit(2);
    pid_t inner = ::fork(); // pid 1 there
    if (inner < 0)
      ::_exit(3);
    if (inner == 0) {
      uint64_t id = ::getpid() == 1 ? new_store_id() : 0;
      ssize_t n = ::write(fds[1], &id, sizeof(id));
      ::_exit(n == sizeof(id) ? 0 : 4);
    }
    int st = 0;
    ::waitpid(inner, &st, 0);
    ::_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 5);
  }
  ::close(fds[1]);
  uint64_t id = 0;
  ssize_t n = ::read(fds[0], &id, sizeof(id));
  ::close(fds[0]);
  int st = 0;
  ::waitpid(outer, &st, 0);
  return n == sizeof(id) && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? id : 0;
}

} // namespace

BOOST_AUTO_TEST_SUITE(store_id_tests)

BOOST_AUTO_TEST_CASE(ids_of_one_process_differ_and_are_never_0) {
  std::set<uint64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    auto id = new_store_id();
    BOOST_REQUIRE_NE(id, 0u);
    BOOST_REQUIRE_MESSAGE(seen.insert(id).second, "id " << id << " twice");
  }
}

BOOST_AUTO_TEST_CASE(two_servers_of_one_pid_get_different_ids) {
  // Two processes, each pid 1 of its own PID namespace, as two servers in
  // containers (or two machines booted alike) are: an id made of the pid
  // was the same in both, and their stores were one on a shared backup.
  auto a = first_id_as_pid_1();
  auto b = first_id_as_pid_1();
  if (geteuid() != 0) {
    BOOST_TEST_MESSAGE("not root: no PID namespace to test in");
    BOOST_CHECK(a == 0 && b == 0);
    return;
  }
  BOOST_REQUIRE_MESSAGE(a != 0 && b != 0, "no pid 1 in a new PID namespace");
  BOOST_CHECK_NE(a, b);
}

BOOST_AUTO_TEST_SUITE_END()

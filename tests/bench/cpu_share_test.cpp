// The benchmarks' CPU shares: busy, idle and stolen time of the CPUs the
// process may run on, from /proc/stat.
#define BOOST_TEST_MODULE cpu_share_tests
#include <boost/test/unit_test.hpp>

#include <sched.h>

#include <string>

#include "bench/cpu_share.hpp"

using namespace troupe::bench;

namespace {

// user nice system idle iowait irq softirq steal guest guest_nice
const std::string stat_text = "cpu  1111 0 222 9999 0 0 0 55 0 0\n"
                              "cpu0 100 1 20 1000 3 4 5 6 0 0\n"
                              "cpu1 200 2 40 2000 7 8 9 10 0 0\n"
                              "cpu2 400 4 80 4000 11 12 13 14 0 0\n"
                              "intr 12345 0 0\n"
                              "ctxt 999\n";

cpu_set_t cpus(std::initializer_list<int> ids) {
  cpu_set_t m;
  CPU_ZERO(&m);
  for (int i : ids)
    CPU_SET(i, &m);
  return m;
}

} // namespace

BOOST_AUTO_TEST_SUITE(cpu_share_tests)

BOOST_AUTO_TEST_CASE(all_cpus_sum_every_cpu_line_not_the_total) {
  auto t = parse_cpu_times(stat_text, cpus({0, 1, 2}));
  BOOST_REQUIRE(t.ok);
  BOOST_CHECK_EQUAL(t.busy, (100 + 1 + 20 + 4 + 5) + (200 + 2 + 40 + 8 + 9) +
                                (400 + 4 + 80 + 12 + 13));
  BOOST_CHECK_EQUAL(t.idle, (1000 + 3) + (2000 + 7) + (4000 + 11));
  BOOST_CHECK_EQUAL(t.steal, 6u + 10u + 14u);
}

BOOST_AUTO_TEST_CASE(a_pinned_process_sees_its_own_cpus_only) {
  auto t = parse_cpu_times(stat_text, cpus({1}));
  BOOST_REQUIRE(t.ok);
  BOOST_CHECK_EQUAL(t.busy, 200u + 2 + 40 + 8 + 9);
  BOOST_CHECK_EQUAL(t.idle, 2000u + 7);
  BOOST_CHECK_EQUAL(t.steal, 10u);
}

BOOST_AUTO_TEST_CASE(the_total_line_never_counts_as_a_cpu) {
  // A young machine: the total's user jiffies (1) read as a CPU number
  // would add the total to CPU 1's.
  const std::string young = "cpu  1 0 2 30 0 0 0 0 0 0\n"
                            "cpu0 0 0 1 10 0 0 0 0 0 0\n"
                            "cpu1 1 0 1 20 0 0 0 0 0 0\n";
  auto t = parse_cpu_times(young, cpus({0, 1}));
  BOOST_REQUIRE(t.ok);
  BOOST_CHECK_EQUAL(t.busy, 3u);
  BOOST_CHECK_EQUAL(t.idle, 30u);
}

BOOST_AUTO_TEST_CASE(no_cpu_of_ours_or_no_cpu_lines_is_unknown) {
  BOOST_CHECK(!parse_cpu_times(stat_text, cpus({5})).ok);
  BOOST_CHECK(!parse_cpu_times("intr 1 2 3\n", cpus({0})).ok);
  BOOST_CHECK(!share_between(cpu_times{}, cpu_times{}).known());
}

BOOST_AUTO_TEST_CASE(shares_between_two_readings_add_up_to_one) {
  cpu_times a = parse_cpu_times(stat_text, cpus({0}));
  cpu_times b = a;
  b.busy += 30;
  b.idle += 60;
  b.steal += 10;
  auto s = share_between(a, b);
  BOOST_REQUIRE(s.known());
  BOOST_CHECK_CLOSE(s.busy, 0.3, 1e-9);
  BOOST_CHECK_CLOSE(s.idle, 0.6, 1e-9);
  BOOST_CHECK_CLOSE(s.steal, 0.1, 1e-9);
}

BOOST_AUTO_TEST_CASE(this_machine_reads) {
  auto t = read_cpu_times();
  BOOST_CHECK(t.ok);
  BOOST_CHECK_GT(t.busy + t.idle, 0u);
}

BOOST_AUTO_TEST_SUITE_END()

// What the CPUs this process may run on (all the machine's, unless it is
// pinned) did between two readings of /proc/stat: busy,
// idle, and stolen by the hypervisor (time a virtual CPU wanted to run and
// did not). Benchmarks print it beside their figures: on a shared virtual
// machine, steal moves rates from run to run, and idle time in a cluster
// run is waiting that no core filled.
#pragma once

#include <sched.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace troupe::bench {

/// Jiffies summed over the CPUs this process may run on since boot; ok =
/// false if unreadable.
struct cpu_times {
  uint64_t busy = 0, idle = 0, steal = 0;
  bool ok = false;
};

/// Sums the `cpuN` lines of /proc/stat text `stat` whose N is in `mask`
/// (a process pinned to 2 of 16 cores, e.g. with taskset, sees its own 2:
/// the others' idle time is not waiting of its cluster).
inline cpu_times parse_cpu_times(const std::string& stat,
                                 const cpu_set_t& mask) {
  cpu_times t;
  std::istringstream in{stat};
  std::string line;
  while (std::getline(in, line)) {
    unsigned cpu = 0;
    unsigned long long user = 0, nice = 0, sys = 0, idle = 0, iowait = 0,
                       irq = 0, softirq = 0, steal = 0;
    int n = std::sscanf(
        line.c_str(), "cpu%u %llu %llu %llu %llu %llu %llu %llu %llu", &cpu,
        &user, &nice, &sys, &idle, &iowait, &irq, &softirq, &steal);
    // "cpu  ..." (the total) would match too: %u skips the blanks.
    bool numbered = line.size() > 3 && std::isdigit((unsigned char)line[3]);
    if (!numbered || n < 5 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &mask))
      continue; // the total line, other lines, CPUs not ours
    t.busy += user + nice + sys + irq + softirq; // guest time is in user
    t.idle += idle + iowait;
    t.steal += steal;
    t.ok = true;
  }
  return t;
}

inline cpu_times read_cpu_times() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0)
    return {};
  std::ifstream f{"/proc/stat"};
  std::stringstream text;
  text << f.rdbuf();
  return f ? parse_cpu_times(text.str(), mask) : cpu_times{};
}

/// Fractions of the CPU time between two readings; negative if unknown.
struct cpu_share {
  double busy = -1, idle = -1, steal = -1;
  bool known() const { return busy >= 0; }
};

inline cpu_share share_between(const cpu_times& a, const cpu_times& b) {
  cpu_share s;
  if (!a.ok || !b.ok)
    return s;
  double busy = double(b.busy - a.busy), idle = double(b.idle - a.idle),
         steal = double(b.steal - a.steal), all = busy + idle + steal;
  if (all <= 0)
    return s;
  s.busy = busy / all;
  s.idle = idle / all;
  s.steal = steal / all;
  return s;
}

/// A share as a whole percentage ("17%"), or `none` if unknown.
inline std::string percent(double share, const char* none = "-") {
  if (share < 0)
    return none;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * share);
  return buf;
}

} // namespace troupe::bench

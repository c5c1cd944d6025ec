// What the machine's CPUs did between two readings of /proc/stat: busy,
// idle, and stolen by the hypervisor (time a virtual CPU wanted to run and
// did not). Benchmarks print it beside their figures: on a shared virtual
// machine, steal moves rates from run to run, and idle time in a cluster
// run is waiting that no core filled.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace troupe::bench {

/// Jiffies summed over all CPUs since boot; ok = false if unreadable.
struct cpu_times {
  uint64_t busy = 0, idle = 0, steal = 0;
  bool ok = false;
};

inline cpu_times read_cpu_times() {
  cpu_times t;
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f)
    return t;
  unsigned long long user = 0, nice = 0, sys = 0, idle = 0, iowait = 0, irq = 0,
                     softirq = 0, steal = 0;
  int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user,
                      &nice, &sys, &idle, &iowait, &irq, &softirq, &steal);
  std::fclose(f);
  if (n < 4)
    return t;
  t.busy = user + nice + sys + irq + softirq; // guest time is in user
  t.idle = idle + iowait;
  t.steal = steal;
  t.ok = true;
  return t;
}

/// Fractions of all CPU time between two readings; negative if unknown.
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

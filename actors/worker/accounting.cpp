// The counter task's accounting; see the header.
#include "actors/worker/accounting.hpp"

#include <algorithm>
#include <map>

#include "actors/base/log.hpp"

namespace troupe {

namespace {

struct incarnation {
  uint64_t start = 0;
  uint64_t end = 0;
  bool open = true; // no cut yet: live, so at the end
};

struct rank_log {
  std::vector<incarnation> runs;
  uint64_t departures = 0;
  uint64_t cuts = 0;
};

} // namespace

push_accounting account_pushes(const std::vector<event_record>& log,
                               uint64_t steps, bool resumed) {
  std::map<uint32_t, rank_log> ranks;
  push_accounting out;
  auto contradiction = [&out](std::string what) {
    if (out.unexplained.empty())
      out.unexplained = std::move(what);
  };
  for (auto& e : log) {
    if (e.about != role::worker)
      continue;
    auto& r = ranks[e.rank];
    if (e.kind == "started" && e.clock) {
      r.runs.push_back(incarnation{*e.clock, *e.clock, true});
    } else if (e.kind == "crashed" || e.kind == "left" || e.kind == "ended") {
      ++r.departures;
    } else if (e.kind == "cut") {
      ++r.cuts;
      // What the processes before kept (below their cuts) must stay.
      bool open = !r.runs.empty() && r.runs.back().open;
      auto runs_before = r.runs.size() - (open ? 1 : 0);
      auto before = runs_before > 0 ? r.runs[runs_before - 1].end : 0;
      if (e.clock && *e.clock < before)
        contradiction(str("worker ", e.rank, "'s cut at ", *e.clock,
                          " is below what it kept before, ", before));
      if (!open) // it died before it started: it pushed nothing
        continue;
      auto& run = r.runs.back();
      run.open = false;
      // Servers place a process where each saw the others, and it starts
      // at the largest: one that placed it lower and took none of its
      // pushes bounds the cut there (the clocks between were never
      // pushed). Then it kept nothing.
      run.end = std::max(e.clock.value_or(run.start), run.start);
    }
  }
  out.complete = true;
  for (auto& [rank, r] : ranks) {
    if (r.cuts < r.departures)
      out.complete = false;
    if (r.runs.empty())
      continue;
    out.explained += str(out.explained.empty() ? "" : "; ", "rank ", rank, ":");
    if (resumed && r.runs.front().start > 0) {
      out.pushes += r.runs.front().start;
      out.explained += str(" 0-", r.runs.front().start, " (checkpoint),");
    }
    for (size_t i = 0; i < r.runs.size(); ++i) {
      auto& run = r.runs[i];
      auto end = run.open ? steps : run.end;
      if (run.open && run.start > steps)
        contradiction(str("worker ", rank, " started at ", run.start,
                          ", past the job's ", steps, " clocks"));
      out.pushes += end > run.start ? end - run.start : 0;
      out.explained += str(i == 0 ? " " : ", ", run.start, "-", end,
                           run.open ? "" : " (cut)");
    }
  }
  return out;
}

} // namespace troupe

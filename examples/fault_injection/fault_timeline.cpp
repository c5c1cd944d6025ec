// Prints the timeline of every failure and recovery of a troupe cluster
// from its scheduler's event log, with per-fault figures: when the fault
// was injected, when the scheduler noticed it, when the servers applied
// the next update without the lost process (training resumed), and when a
// restarted process rejoined. Ends with one line of JSON.
//
// usage: fault_timeline --scheduler-port=PORT [--scheduler-host=HOST]
//        [--middleman.connection-timeout=T] (the cluster's, if not default)
//    or: fault_timeline --events-file=FILE [--middleman.connection-timeout=T]
//        (the scheduler's --cluster.events-file, also after the job ended)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/kv/kv.hpp"
#include "actors/node/node_config.hpp"
#include "messages/errors.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"

using namespace troupe;

namespace {

/// What became of one injected fault.
struct fault_story {
  event_record injected;
  std::string action;                   // kill, term, hang, cut or stall
  std::optional<event_record> noticed;  // the scheduler's crashed event
  std::optional<event_record> resumed;  // first update without it
  std::optional<event_record> rejoined; // the restarted process joined
  /// A hang or cut-off is noticed by heartbeats, a death at once.
  bool silent() const { return action == "hang" || action == "cut"; }
  /// A stalled step is noticed once --worker.step-timeout-ms ends it.
  bool stalled() const { return action == "stall"; }
};

/// First event after `from` (in log order) that `pred` accepts.
template <class Pred>
std::optional<event_record> first_after(const std::vector<event_record>& log,
                                        size_t from, Pred pred) {
  for (size_t i = from; i < log.size(); ++i)
    if (pred(log[i]))
      return log[i];
  return std::nullopt;
}

/// The action of an agent's "injected" event: its detail reads
/// "worker-1: cut worker-1 (link tr7h down)".
std::string action_of(const event_record& e) {
  auto colon = e.detail.find(": ");
  auto from = colon == std::string::npos ? 0 : colon + 2;
  return e.detail.substr(from, e.detail.find(' ', from) - from);
}

std::vector<fault_story> stories_of(const std::vector<event_record>& log) {
  std::vector<fault_story> out;
  for (size_t i = 0; i < log.size(); ++i) {
    auto& e = log[i];
    if (e.kind != "injected")
      continue;
    auto action = action_of(e);
    if (action == "resume" || action == "heal")
      continue; // the end of a hang or cut, which has its own story
    fault_story s{e, action, {}, {}, {}};
    s.noticed = first_after(log, i, [&e](const event_record& x) {
      return x.kind == "crashed" && x.pid == e.pid;
    });
    if (s.noticed) {
      auto rank = s.noticed->rank;
      auto about = s.noticed->about;
      s.resumed = first_after(log, i, [&s](const event_record& x) {
        return x.kind == "resumed" && x.at_ms >= s.noticed->at_ms;
      });
      s.rejoined = first_after(log, i, [rank, about](const event_record& x) {
        return x.kind == "rejoined" && x.rank == rank && x.about == about;
      });
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string after(const std::optional<event_record>& x, int64_t t0) {
  return x ? std::to_string(x->at_ms - t0) + " ms" : std::string{"never"};
}

std::string json_ms(const std::optional<event_record>& x, int64_t t0) {
  return x ? std::to_string(x->at_ms - t0) : std::string{"null"};
}

/// A target line, if any fault was judged by it.
void print_target(const char* what, int judged, int met) {
  if (judged > 0)
    std::printf("target: %s: %s (%d of %d)\n", what,
                met == judged ? "MET" : "MISSED", met, judged);
}

/// Agents' events take the scheduler's rank of their process (agent_ranks):
/// the scheduler did that for those whose process had joined when they came;
/// the whole log knows every process that joined, later ones too. The log
/// has no hosts: a pid that held two ranks (two machines or containers) is
/// left as the scheduler wrote it.
void use_scheduler_ranks(std::vector<event_record>& log) {
  std::map<uint32_t, std::set<std::pair<role, uint32_t>>> held;
  for (auto& e : log)
    if (e.source == "scheduler" && e.pid != 0)
      held[e.pid].insert({e.about, e.rank});
  agent_ranks ranks;
  for (auto& [pid, what] : held)
    if (what.size() == 1)
      ranks.learn("", pid, what.begin()->first, what.begin()->second);
  for (auto& e : log)
    if (e.pid == 0 || held[e.pid].size() <= 1)
      ranks.apply(e, "");
}

/// `heartbeat_timeout_ms`: the cluster's --middleman.connection-timeout,
/// within which (plus 1 s) a hung or cut-off process must be noticed.
void print(std::vector<event_record> log, int64_t heartbeat_timeout_ms) {
  if (log.empty())
    return;
  use_scheduler_ranks(log);
  // The log is in order of arrival at the scheduler; an agent's report of
  // a kill may arrive after the scheduler saw the death. Order by time.
  std::stable_sort(log.begin(), log.end(),
                   [](const event_record& a, const event_record& b) {
                     return a.at_ms < b.at_ms;
                   });
  auto t0 = log.front().at_ms;
  std::printf("timeline (ms since the first event):\n");
  for (auto& e : log) {
    if (e.kind == "started" || e.kind == "finished" || e.kind == "left")
      continue; // the usual life of a job; failures and recoveries remain
    std::printf("  %8lld  %-10s %-6s %u  pid %-7u %s  [%s]\n",
                static_cast<long long>(e.at_ms - t0), e.kind.c_str(),
                to_string(e.about), e.rank, e.pid, e.detail.c_str(),
                e.source.c_str());
  }
  auto stories = stories_of(log);
  std::printf("\nper fault (times after the injection):\n");
  std::string json = "{\"faults\":[";
  int deaths = 0, deaths_noticed = 0, silences = 0, silences_noticed = 0;
  int resumes_judged = 0, resumes_fast = 0;
  for (size_t i = 0; i < stories.size(); ++i) {
    auto& s = stories[i];
    auto at = s.injected.at_ms;
    std::printf("  %-44s noticed %-9s training resumed %-9s rejoined %s\n",
                s.injected.detail.c_str(), after(s.noticed, at).c_str(),
                after(s.resumed, at).c_str(), after(s.rejoined, at).c_str());
    auto noticed_in = s.noticed ? s.noticed->at_ms - at : INT64_MAX;
    if (s.stalled()) {
      // Noticed after the worker's step timeout, which the log does not
      // hold: judged by neither target below.
    } else if (s.silent()) {
      ++silences;
      silences_noticed += noticed_in < heartbeat_timeout_ms + 1000;
    } else {
      ++deaths;
      deaths_noticed += noticed_in < 1000;
    }
    // A death counts from the kill; a hang or cut from being declared dead.
    ++resumes_judged;
    auto from =
        (s.silent() || s.stalled()) && s.noticed ? s.noticed->at_ms : at;
    resumes_fast += s.resumed && s.resumed->at_ms - from < 2000;
    json += std::string{i ? "," : ""} + "{\"fault\":\"" + s.injected.detail +
            "\",\"action\":\"" + s.action +
            "\",\"noticed_ms\":" + json_ms(s.noticed, at) +
            ",\"resumed_ms\":" + json_ms(s.resumed, at) +
            ",\"rejoined_ms\":" + json_ms(s.rejoined, at) + "}";
  }
  print_target("a killed process noticed in under 1 s", deaths, deaths_noticed);
  auto silent_target = "a hung or cut-off process noticed within the"
                       " heartbeat timeout (" +
                       std::to_string(heartbeat_timeout_ms) + " ms) + 1 s";
  print_target(silent_target.c_str(), silences, silences_noticed);
  print_target("training resumed within 2 s of a death (a hang, cut or"
               " stall: of being declared dead)",
               resumes_judged, resumes_fast);
  std::printf("%s]}\n", json.c_str());
}

/// The events of an events.jsonl file, or what is wrong with it (its path
/// and line number).
caf::expected<std::vector<event_record>> read_events(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return caf::make_error(errc::invalid_config,
                           "cannot read " + path +
                               ": a folder (the job's events.jsonl is in it)");
  std::ifstream in{path};
  if (!in)
    return caf::make_error(errc::invalid_config,
                           "cannot read " + path + ": " + std::strerror(errno));
  std::vector<event_record> log;
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty())
      continue;
    auto e = event_from_json(line);
    if (!e)
      return caf::make_error(errc::malformed_message,
                             path + ":" + std::to_string(n) + ": " +
                                 describe(e.error()));
    log.push_back(std::move(*e));
  }
  if (log.empty()) // nothing to tell, and no JSON line: say why
    return caf::make_error(errc::invalid_config,
                           path + " holds no event: the scheduler writes one"
                                  " per line with --cluster.events-file");
  return log;
}

} // namespace

int main(int argc, char** argv) {
  // --events-file is ours alone; the rest are node options.
  std::optional<std::string> events_file;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    constexpr const char* flag = "--events-file=";
    if (i > 0 && std::strncmp(argv[i], flag, std::strlen(flag)) == 0)
      events_file = argv[i] + std::strlen(flag);
    else
      args.push_back(argv[i]);
  }
  if (events_file && events_file->empty()) { // not the scheduler, silently
    std::cerr << "*** --events-file= names no file\n";
    return 2;
  }
  argc = static_cast<int>(args.size());
  argv = args.data();
  node_config cfg; // checked as troupe-node's; --openssl.* loads TLS
  if (auto rc = read_command_line(cfg, argc, argv))
    return *rc;
  auto heartbeat_timeout_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          caf::get_or(cfg, "middleman.connection-timeout", caf::timespan{0}))
          .count();
  if (events_file) {
    auto log = read_events(*events_file);
    if (!log) {
      std::cerr << "*** reading the event log failed: " << describe(log.error())
                << '\n';
      return 1;
    }
    print(*log, heartbeat_timeout_ms);
    return 0;
  }
  caf::actor_system sys{cfg};
  auto sched = connect_scheduler(sys, cfg.scheduler_host, cfg.scheduler_port,
                                 cfg.kv.request_timeout_ms);
  if (!sched) {
    std::cerr << "*** connecting to the scheduler failed: "
              << describe(sched.error()) << '\n';
    return 1;
  }
  caf::scoped_actor self{sys};
  int rc = 0;
  self->request(*sched, std::chrono::seconds{10}, events_atom_v)
      .receive(
          [&rc, heartbeat_timeout_ms](const frame& f) {
            std::vector<event_record> log;
            if (auto err = decode(f, log)) {
              std::cerr << "*** bad event log: " << describe(err) << '\n';
              rc = 1;
              return;
            }
            print(log, heartbeat_timeout_ms);
          },
          [&rc](const caf::error& err) {
            std::cerr << "*** reading the event log failed: " << describe(err)
                      << '\n';
            rc = 1;
          });
  return rc;
}

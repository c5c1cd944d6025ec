// Parsing and drawing fault plans; see the header.
#include "actors/supervision/fault_plan.hpp"

#include <signal.h>

#include <algorithm>
#include <random>

#include "messages/errors.hpp"

namespace troupe {

namespace {

/// Longest time a plan may name: a day, in ms.
constexpr uint64_t max_plan_ms = 24ull * 3600 * 1000;

caf::error bad_item(const std::string& item, const char* why) {
  return caf::make_error(errc::invalid_config, "--fault.plan item", item, why,
                         "(expected ACTION:CHILD@MS, ACTION kill, hang, resume,"
                         " term, cut, heal or stall, e.g. kill:worker-1@3000,"
                         " hang:worker-0@2000+1500 or cut:worker-1@2000+3000)");
}

/// Parses a decimal number of ms in 0..max_plan_ms.
bool parse_ms(const std::string& text, std::chrono::milliseconds& out) {
  if (text.empty() || text.size() > 9 ||
      text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  auto v = std::stoull(text);
  if (v > max_plan_ms)
    return false;
  out = std::chrono::milliseconds{v};
  return true;
}

bool parse_kind(const std::string& text, fault_action::kind_t& out) {
  for (auto k : {fault_action::kill, fault_action::hang, fault_action::resume,
                 fault_action::term, fault_action::cut, fault_action::heal,
                 fault_action::stall})
    if (text == to_string(k)) {
      out = k;
      return true;
    }
  return false;
}

caf::error parse_item(const std::string& item, std::vector<fault_action>& out) {
  auto colon = item.find(':');
  auto at = item.find('@');
  if (colon == std::string::npos || at == std::string::npos || at < colon)
    return bad_item(item, "is malformed");
  fault_action a;
  if (!parse_kind(item.substr(0, colon), a.kind))
    return bad_item(item, "has an unknown action");
  a.target = item.substr(colon + 1, at - colon - 1);
  if (a.target.empty())
    return bad_item(item, "names no child");
  if (a.kind == fault_action::stall && a.target.rfind("worker-", 0) != 0)
    return bad_item(item, "stalls a child that is no worker (only a worker's"
                          " steps are watched; SIGUSR1 would end it)");
  auto when = item.substr(at + 1);
  std::chrono::milliseconds hold{0};
  auto plus = when.find('+');
  if (plus != std::string::npos) {
    bool holds = a.kind == fault_action::hang || a.kind == fault_action::cut;
    if (!holds || !parse_ms(when.substr(plus + 1), hold))
      return bad_item(item, "has a bad +MS (only hang and cut take one)");
    when = when.substr(0, plus);
  }
  if (!parse_ms(when, a.at))
    return bad_item(item, "has a bad time (ms, at most a day)");
  out.push_back(a);
  auto undo =
      a.kind == fault_action::hang ? fault_action::resume : fault_action::heal;
  if (plus != std::string::npos)
    out.push_back(fault_action{undo, a.target, a.at + hold});
  return caf::none;
}

void sort_by_time(std::vector<fault_action>& xs) {
  std::stable_sort(
      xs.begin(), xs.end(),
      [](const fault_action& a, const fault_action& b) { return a.at < b.at; });
}

} // namespace

const char* to_string(fault_action::kind_t x) {
  switch (x) {
  case fault_action::kill:
    return "kill";
  case fault_action::hang:
    return "hang";
  case fault_action::resume:
    return "resume";
  case fault_action::term:
    return "term";
  case fault_action::cut:
    return "cut";
  case fault_action::heal:
    return "heal";
  case fault_action::stall:
    return "stall";
  }
  return "?";
}

int signal_of(fault_action::kind_t x) {
  switch (x) {
  case fault_action::kill:
    return SIGKILL;
  case fault_action::hang:
    return SIGSTOP;
  case fault_action::resume:
    return SIGCONT;
  case fault_action::term:
    return SIGTERM;
  case fault_action::stall:
    return SIGUSR1;
  case fault_action::cut:
  case fault_action::heal:
    return 0;
  }
  return SIGKILL;
}

std::vector<std::string> cut_targets(const std::vector<fault_action>& plan) {
  std::vector<std::string> out;
  for (auto& a : plan)
    if ((a.kind == fault_action::cut || a.kind == fault_action::heal) &&
        std::find(out.begin(), out.end(), a.target) == out.end())
      out.push_back(a.target);
  return out;
}

caf::expected<std::vector<fault_action>>
parse_fault_plan(const std::string& text) {
  std::vector<fault_action> out;
  size_t begin = 0;
  while (begin < text.size()) {
    auto end = text.find(',', begin);
    if (end == std::string::npos)
      end = text.size();
    if (auto err = parse_item(text.substr(begin, end - begin), out))
      return err;
    begin = end + 1;
  }
  sort_by_time(out);
  return out;
}

std::vector<fault_action> random_kills(uint32_t count,
                                       const std::vector<std::string>& targets,
                                       std::chrono::milliseconds from,
                                       std::chrono::milliseconds to,
                                       uint64_t seed) {
  std::vector<fault_action> out;
  if (targets.empty() || count == 0)
    return out;
  std::mt19937_64 gen{seed};
  auto pool = targets;
  std::shuffle(pool.begin(), pool.end(), gen);
  std::uniform_int_distribution<int64_t> when{
      from.count(), std::max(from.count(), to.count() - 1)};
  for (uint32_t i = 0; i < count; ++i)
    out.push_back(fault_action{fault_action::kill, pool[i % pool.size()],
                               std::chrono::milliseconds{when(gen)}});
  sort_by_time(out);
  return out;
}

} // namespace troupe

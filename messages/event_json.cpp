// Event records as the scheduler logs them: one line of JSON each (the
// events.jsonl of --cluster.events-file, which fault_timeline reads back),
// their time stamps, and their equality.
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "messages/errors.hpp"
#include "messages/membership.hpp"

namespace troupe {

namespace {

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

} // namespace

bool event_record::operator==(const event_record& y) const {
  return at_ms == y.at_ms && kind == y.kind && about == y.about &&
         rank == y.rank && pid == y.pid && detail == y.detail &&
         source == y.source && clock == y.clock;
}

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
      .count();
}

std::string to_json(const event_record& x) {
  std::string out = "{\"at_ms\":" + std::to_string(x.at_ms) + ",\"kind\":";
  append_json_string(out, x.kind);
  out += ",\"role\":\"";
  out += to_string(x.about);
  out += "\",\"rank\":" + std::to_string(x.rank) +
         ",\"pid\":" + std::to_string(x.pid) + ",\"detail\":";
  append_json_string(out, x.detail);
  out += ",\"source\":";
  append_json_string(out, x.source);
  if (x.clock)
    out += ",\"clock\":" + std::to_string(*x.clock);
  out += '}';
  return out;
}

caf::expected<event_record> event_from_json(const std::string& line) {
  auto bad = [](const std::string& what) {
    return caf::make_error(errc::malformed_message, "event line: " + what);
  };
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return bad("not a JSON object");
  event_record e;
  try {
    e.at_ms = j.at("at_ms").get<int64_t>();
    e.kind = j.at("kind").get<std::string>();
    auto r = j.at("role").get<std::string>();
    if (r == "scheduler")
      e.about = role::scheduler;
    else if (r == "server")
      e.about = role::server;
    else if (r == "worker")
      e.about = role::worker;
    else
      return bad("unknown role \"" + r + "\"");
    // get<uint32_t> would wrap a negative or large number silently.
    auto count = [&j](const char* key, uint64_t most) {
      return j.at(key).is_number_unsigned() &&
             j.at(key).get<uint64_t>() <= most;
    };
    for (auto key : {"rank", "pid"})
      if (!count(key, UINT32_MAX))
        return bad(std::string{key} + " is not a count in range");
    if (j.contains("clock") && !count("clock", UINT64_MAX))
      return bad("clock is not a count");
    e.rank = j.at("rank").get<uint32_t>();
    e.pid = j.at("pid").get<uint32_t>();
    e.detail = j.at("detail").get<std::string>();
    e.source = j.at("source").get<std::string>();
    if (j.contains("clock"))
      e.clock = j.at("clock").get<uint64_t>();
  } catch (const nlohmann::json::exception& x) {
    return bad(x.what()); // a field missing or of the wrong type
  }
  return e;
}

} // namespace troupe

// The process-wide log sink.
#include "actors/base/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <mutex>
#include <utility>

namespace troupe {

namespace {

std::atomic<int> current_level{static_cast<int>(log_level::info)};
std::mutex out_mtx;
std::mutex observer_mtx;
std::shared_ptr<const log_observer> observer; // under observer_mtx

const char* name_of(log_level lvl) {
  switch (lvl) {
  case log_level::error:
    return "ERROR";
  case log_level::warning:
    return "WARN ";
  case log_level::info:
    return "INFO ";
  case log_level::debug:
    return "DEBUG";
  }
  return "?";
}

} // namespace

bool set_log_level(const std::string& name) {
  static const char* names[] = {"error", "warning", "info", "debug"};
  for (int i = 0; i < 4; ++i)
    if (name == names[i]) {
      current_level = i;
      return true;
    }
  return false;
}

bool log_enabled(log_level lvl) {
  return static_cast<int>(lvl) <= current_level.load();
}

void log_line(log_level lvl, const std::string& who, const std::string& what) {
  using namespace std::chrono;
  auto now = system_clock::now();
  auto t = system_clock::to_time_t(now);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  {
    std::lock_guard<std::mutex> guard{out_mtx};
    std::fprintf(stderr, "%02d:%02d:%02d.%03d %s %s: %s\n", tm.tm_hour,
                 tm.tm_min, tm.tm_sec, static_cast<int>(ms), name_of(lvl),
                 who.c_str(), what.c_str());
  }
  std::shared_ptr<const log_observer> fn;
  {
    std::lock_guard<std::mutex> guard{observer_mtx};
    fn = observer;
  }
  if (fn) // outside the locks: it may log itself
    (*fn)(lvl, who, what);
}

stderr_line::~stderr_line() {
  auto text = out_.str();
  std::fflush(stdout); // as std::cerr, tied to std::cout, did
  std::lock_guard<std::mutex> guard{out_mtx};
  // stderr is unbuffered: one fwrite is one write(2) of the whole text.
  std::fwrite(text.data(), 1, text.size(), stderr);
}

void set_log_observer(log_observer fn) {
  auto next = fn ? std::make_shared<const log_observer>(std::move(fn))
                 : std::shared_ptr<const log_observer>{};
  std::lock_guard<std::mutex> guard{observer_mtx};
  observer = std::move(next);
}

bool log_limiter::admit(std::chrono::steady_clock::time_point now,
                        uint64_t& held) {
  std::lock_guard<std::mutex> guard{mtx_};
  held = 0;
  if (used_ == 0 || now - start_ >= window_) { // a new window
    start_ = now;
    used_ = 0;
    held = std::exchange(held_, 0);
  }
  if (used_ < burst_) {
    ++used_;
    return true;
  }
  ++held_;
  return false;
}

void log_line_limited(log_limiter& lim, log_level lvl, const std::string& who,
                      const std::string& what) {
  uint64_t held = 0;
  if (!lim.admit(std::chrono::steady_clock::now(), held))
    return;
  if (held > 0)
    log_line(lvl, who,
             str("(", held, " more lines like the next were held back in ",
                 lim.window().count(), " s)"));
  log_line(lvl, who, what);
}

} // namespace troupe

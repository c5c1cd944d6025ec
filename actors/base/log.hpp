// troupe's own log (Debian's CAF has its logging compiled out): one line per
// event on stderr, with time, level and the component that speaks.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>

namespace troupe {

/// Severity of a log line; lines above the process's level are dropped.
enum class log_level : int { error = 0, warning = 1, info = 2, debug = 3 };

/// Sets the level for this process; parses "error|warning|info|debug".
bool set_log_level(const std::string& name);

/// True if a line at `lvl` would be written.
bool log_enabled(log_level lvl);

/// Writes one line "HH:MM:SS.mmm LEVEL who: what" to stderr, atomically.
void log_line(log_level lvl, const std::string& who, const std::string& what);

/// Text for stderr gathered until the statement ends, then written in one
/// write (under the log's lock): `stderr_line() << "*** " << what << '\n';`.
/// The lines of an agent's children, which share its output, then never
/// interleave; std::cerr writes each << apart (two stages failing at once
/// wrote "...directory*** stage failed: " and the rest of the line below).
class stderr_line {
public:
  stderr_line() = default;
  stderr_line(const stderr_line&) = delete;
  stderr_line& operator=(const stderr_line&) = delete;
  ~stderr_line();
  template <class T> stderr_line& operator<<(const T& x) {
    out_ << x;
    return *this;
  }

private:
  std::ostringstream out_;
};

/// Called with each line written, after it is written, on the thread that
/// writes it (a test waiting for an event that only the log shows).
using log_observer = std::function<void(log_level lvl, const std::string& who,
                                        const std::string& what)>;

/// Sets the process's observer of log lines; an empty one removes it. A
/// line being written meanwhile may still reach the observer replaced: it
/// must own what it touches (hold it by shared_ptr), not point into a
/// caller's frame.
void set_log_observer(log_observer fn);

/// Lets a line that a peer can repeat at will (one per malformed frame)
/// through at most `burst` times per `window`. What it holds back is
/// counted and said in one line with the first line let through after.
class log_limiter {
public:
  explicit log_limiter(unsigned burst = 5,
                       std::chrono::seconds window = std::chrono::seconds{10})
      : burst_(burst), window_(window) {}
  /// True if a line may be written at `now`; `held` gets how many lines
  /// were held back before it (to be said first), 0 if none.
  bool admit(std::chrono::steady_clock::time_point now, uint64_t& held);
  std::chrono::seconds window() const { return window_; }

private:
  const unsigned burst_;
  const std::chrono::seconds window_;
  std::mutex mtx_;
  std::chrono::steady_clock::time_point start_{};
  unsigned used_ = 0;
  uint64_t held_ = 0;
};

/// Writes a line through `lim`, saying first how many it held back.
void log_line_limited(log_limiter& lim, log_level lvl, const std::string& who,
                      const std::string& what);

/// Concatenates `xs` with operator<<.
template <class... Ts> std::string str(const Ts&... xs) {
  std::ostringstream out;
  (out << ... << xs);
  return out.str();
}

/// `x` as a JSON number, or null where JSON has none (NaN, infinities):
/// a reader rejects a line with "nan" in it, whole.
inline std::string json_number(double x) {
  return std::isfinite(x) ? str(x) : std::string{"null"};
}

} // namespace troupe

#define TROUPE_LOG(lvl, who, ...)                                              \
  do {                                                                         \
    if (::troupe::log_enabled(::troupe::log_level::lvl))                       \
      ::troupe::log_line(::troupe::log_level::lvl, who,                        \
                         ::troupe::str(__VA_ARGS__));                          \
  } while (false)

/// TROUPE_LOG for a line a peer can make repeat: at most 5 per 10 s from
/// this call site, then one line saying how many were held back.
#define TROUPE_LOG_LIMITED(lvl, who, ...)                                      \
  do {                                                                         \
    static ::troupe::log_limiter troupe_limiter_;                              \
    if (::troupe::log_enabled(::troupe::log_level::lvl))                       \
      ::troupe::log_line_limited(troupe_limiter_, ::troupe::log_level::lvl,    \
                                 who, ::troupe::str(__VA_ARGS__));             \
  } while (false)

// troupe's own log (Debian's CAF has its logging compiled out): one line per
// event on stderr, with time, level and the component that speaks.
#pragma once

#include <functional>
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

/// Called with each line written, after it is written, on the thread that
/// writes it (a test waiting for an event that only the log shows).
using log_observer = std::function<void(log_level lvl, const std::string& who,
                                        const std::string& what)>;

/// Sets the process's observer of log lines; an empty one removes it. A
/// line being written meanwhile may still reach the observer replaced: it
/// must own what it touches (hold it by shared_ptr), not point into a
/// caller's frame.
void set_log_observer(log_observer fn);

/// Concatenates `xs` with operator<<.
template <class... Ts> std::string str(const Ts&... xs) {
  std::ostringstream out;
  (out << ... << xs);
  return out.str();
}

} // namespace troupe

#define TROUPE_LOG(lvl, who, ...)                                              \
  do {                                                                         \
    if (::troupe::log_enabled(::troupe::log_level::lvl))                       \
      ::troupe::log_line(::troupe::log_level::lvl, who,                        \
                         ::troupe::str(__VA_ARGS__));                          \
  } while (false)

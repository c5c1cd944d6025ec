// Strict options: CAF 0.17 silently ignores an unknown INI section or key
// and an INI value of the wrong type (the option keeps its default). These
// checks run before CAF reads the options and refuse each such mistake in
// one line that names the file, the line and the key, with "did you mean"
// where a known name is close.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <caf/config_option_set.hpp>
#include <caf/error.hpp>

namespace troupe {

/// Checks the INI text `text` (read from `file`, for the messages) against
/// `opts`: every section a known group, every key one of its options,
/// every value of the option's type. Adds the name of each option it
/// sets ("group.key") to `given`, if any.
caf::error check_ini_text(const std::string& text, const std::string& file,
                          const caf::config_option_set& opts,
                          std::set<std::string>* given = nullptr);

/// Checks the INI file at `path` (a missing file is an error too).
caf::error check_ini_file(const std::string& path,
                          const caf::config_option_set& opts,
                          std::set<std::string>* given = nullptr);

/// Checks the `--group.key=value` flags of `args` against `opts`: each a
/// known option, each value of its type, and nothing else (CAF 0.17 runs on
/// past a word that is no flag). Adds the full name of each option it
/// sets ("group.key") to `given`, if any.
caf::error check_flags(const std::vector<std::string>& args,
                       const caf::config_option_set& opts,
                       std::set<std::string>* given = nullptr);

/// `args` as CAF 0.17's parser takes what they plainly mean: --NAME= of a
/// string option as --NAME="" (none; a shell's --NAME="" gives --NAME=),
/// --SWITCH=true as --SWITCH, and --SWITCH=false taken out, its name
/// ("group.name") put in `off` for the caller to set after the parse
/// (CAF's switches take no value); a later --SWITCH takes it out of `off`
/// again. Anything else as it was.
std::vector<std::string> plain_flags(std::vector<std::string> args,
                                     const caf::config_option_set& opts,
                                     std::vector<std::string>& off);

/// The known name in `names` closest to `name`, if one is close enough to
/// be a likely misspelling; empty if none.
std::string closest_name(const std::string& name,
                         const std::vector<std::string>& names);

} // namespace troupe

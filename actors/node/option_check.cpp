// Strict options: the INI file and the flags checked against the options
// troupe and CAF declare, before CAF reads them.
#include "actors/node/option_check.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <caf/config_option.hpp>
#include <caf/config_value.hpp>

#include "messages/errors.hpp"

namespace troupe {

namespace {

std::string trim(const std::string& s) {
  auto first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos)
    return {};
  auto last = s.find_last_not_of(" \t\r");
  return s.substr(first, last - first + 1);
}

/// `s` as an error shows it: past 120 bytes, its first 100 and its size (a
/// 5 MiB key made a 5 MiB line).
std::string shown(const std::string& s) {
  if (s.size() <= 120)
    return s;
  return s.substr(0, 100) + "... (" + std::to_string(s.size()) + " bytes)";
}

/// `line` without its comment: from the first ';' outside a quoted string.
std::string strip_comment(const std::string& line) {
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && quoted) {
      ++i;
      continue;
    }
    if (line[i] == '"')
      quoted = !quoted;
    else if (line[i] == ';' && !quoted)
      return line.substr(0, i);
  }
  return line;
}

/// How many '[' outnumber ']' outside quoted strings: a list value that
/// goes on over the next lines.
int open_brackets(const std::string& s) {
  int depth = 0;
  bool quoted = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && quoted)
      ++i;
    else if (s[i] == '"')
      quoted = !quoted;
    else if (!quoted && s[i] == '[')
      ++depth;
    else if (!quoted && s[i] == ']')
      --depth;
  }
  return depth;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min(
          {row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

/// " (did you mean OPEN NAME CLOSE?)" for the name closest to `name`.
std::string did_you_mean(const std::string& name,
                         const std::vector<std::string>& names,
                         const std::string& open, const std::string& close) {
  auto near = closest_name(name, names);
  return near.empty() ? std::string{}
                      : " (did you mean " + open + near + close + "?)";
}

/// What values of CAF type `type` look like, for a message.
std::string what_it_takes(const std::string& type) {
  if (type.find("bool") != std::string::npos)
    return "true or false";
  if (type.find("timespan") != std::string::npos ||
      type.find("duration") != std::string::npos)
    return "a duration such as 250ms or 2s";
  if (type.find("real") != std::string::npos ||
      type.find("float") != std::string::npos ||
      type.find("double") != std::string::npos)
    return "a real number (write 5.0, not 5)";
  if (type.find("uint") != std::string::npos)
    return "a whole number of 0 or more";
  if (type.find("int") != std::string::npos)
    return "a whole number";
  if (type.find("string") != std::string::npos)
    return "a quoted string such as \"text\"";
  if (type.find("atom") != std::string::npos) // CAF's words
    return "a word in single quotes such as 'info'";
  return "a value of type " + type;
}

caf::error bad(const std::string& where, const std::string& what) {
  return caf::make_error(errc::invalid_config, where + ": " + what);
}

/// The groups `opts` knows, and the keys of `group`.
std::vector<std::string> groups_of(const caf::config_option_set& opts) {
  std::set<std::string> out;
  for (auto& o : opts)
    out.emplace(o.category().begin(), o.category().end());
  return {out.begin(), out.end()};
}

std::vector<std::string> keys_of(const caf::config_option_set& opts,
                                 const std::string& group) {
  std::vector<std::string> out;
  for (auto& o : opts)
    if (o.category() == group)
      out.emplace_back(o.long_name().begin(), o.long_name().end());
  return out;
}

/// The flag names of `opts`, as given on the command line (global ones
/// without their group).
std::vector<std::string> flag_names(const caf::config_option_set& opts) {
  std::vector<std::string> out;
  for (auto& o : opts) {
    std::string n{o.full_name().begin(), o.full_name().end()};
    const std::string global = "global.";
    out.push_back(n.rfind(global, 0) == 0 ? n.substr(global.size()) : n);
  }
  return out;
}

/// Checks one `key = value` of INI group `group`.
caf::error check_entry(const caf::config_option_set& opts,
                       const std::string& group, const std::string& key,
                       const std::string& value, const std::string& where) {
  auto* opt = opts.qualified_name_lookup(group, key);
  if (opt == nullptr)
    return bad(where, "unknown key '" + shown(key) + "' in [" + group + "]" +
                          did_you_mean(key, keys_of(opts, group), "'", "'"));
  auto name = group + "." + key;
  auto parsed = caf::config_value::parse(value);
  if (!parsed)
    return bad(where, "cannot read the value of " + name + ": " + shown(value));
  std::string type{opt->type_name().begin(), opt->type_name().end()};
  if (caf::holds_alternative<std::string>(*parsed) && value.front() != '"') {
    // CAF's words (--scheduler.policy) take single quotes, strings double.
    if (type.find("atom") != std::string::npos)
      return bad(where, "words are in single quotes in an INI file: " + key +
                            "='" + shown(value) + "'");
    return bad(where, "strings are quoted in an INI file: " + key + "=\"" +
                          shown(value) + "\"");
  }
  if (opt->check(*parsed)) {
    return bad(where, name + " takes " + what_it_takes(type) + ", got " +
                          shown(value));
  }
  return caf::none;
}

} // namespace

std::string closest_name(const std::string& name,
                         const std::vector<std::string>& names) {
  if (name.size() > 120) // no typo, and its distances would be slow
    return {};
  std::string best;
  size_t best_d = SIZE_MAX;
  for (auto& n : names) {
    auto d = edit_distance(name, n);
    if (d < best_d) {
      best_d = d;
      best = n;
    }
  }
  // A typo, a swapped pair, a letter or two more or less.
  size_t allowed = std::max<size_t>(2, name.size() / 4);
  return best_d <= allowed ? best : std::string{};
}

caf::error check_ini_text(const std::string& text, const std::string& file,
                          const caf::config_option_set& opts,
                          std::set<std::string>* given) {
  // CAF's reader takes neither (it said "trailing_character" at a line's
  // end, or an unknown key that looked like a known one).
  if (text.rfind("\xEF\xBB\xBF", 0) == 0)
    return bad(file, "starts with a byte order mark (UTF-8 BOM): save it"
                     " without one");
  // A binary file (a checkpoint named by mistake) was echoed raw, or
  // named as one of Windows line ends.
  auto binary = std::find_if(text.begin(), text.end(), [](char c) {
    return c != '\t' && c != '\n' && c != '\r' &&
           static_cast<unsigned char>(c) < 0x20;
  });
  if (binary != text.end())
    return bad(file + ":" +
                   std::to_string(1 + std::count(text.begin(), binary, '\n')),
               "holds a control byte (" +
                   std::to_string(static_cast<unsigned char>(*binary)) +
                   "): not an INI text file");
  if (auto cr = text.find('\r'); cr != std::string::npos)
    return bad(file + ":" +
                   std::to_string(
                       1 + std::count(text.begin(), text.begin() + cr, '\n')),
               "Windows line ends (CR LF): save it with LF alone (dos2unix)");
  auto groups = groups_of(opts);
  std::istringstream in{text};
  std::string line, group = "global"; // keys before any [section]
  std::map<std::string, size_t> seen; // group.key -> its line

  for (size_t no = 1; std::getline(in, line); ++no) {
    auto where = file + ":" + std::to_string(no);
    auto s = trim(strip_comment(line));
    if (s.empty())
      continue;
    if (s.front() == '[') {
      if (s.back() != ']')
        return bad(where, "a section header must be [name], got " + shown(s));
      group = trim(s.substr(1, s.size() - 2));
      if (std::find(groups.begin(), groups.end(), group) == groups.end())
        return bad(where, "unknown section [" + shown(group) + "]" +
                              did_you_mean(group, groups, "[", "]"));
      continue;
    }
    auto eq = s.find('=');
    if (eq == std::string::npos)
      return bad(where, "expected key=value or [section], got " + shown(s));
    auto key = trim(s.substr(0, eq));
    auto value = trim(s.substr(eq + 1));
    auto first = no;
    while (open_brackets(value) > 0 && std::getline(in, line)) {
      ++no; // a list goes on over the next lines
      value += " " + trim(strip_comment(line));
    }
    if (auto err = check_entry(opts, group, key, value,
                               file + ":" + std::to_string(first)))
      return err;
    if (group == "global" && key == "config-file") // CAF reads no second
      return bad(file + ":" + std::to_string(first),
                 "config-file in an INI file is not read: a node reads one"
                 " INI file, the one --config-file names");
    // CAF takes the last silently: one of the two was meant.
    if (auto [at, fresh] = seen.emplace(group + "." + key, first); !fresh)
      return bad(file + ":" + std::to_string(first),
                 key + " in [" + group + "] is given twice (line " +
                     std::to_string(at->second) + " too): keep one");
    if (given != nullptr)
      given->insert(group + "." + key);
  }
  return caf::none;
}

caf::error check_ini_file(const std::string& path,
                          const caf::config_option_set& opts,
                          std::set<std::string>* given) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) // an ifstream opens one
    return caf::make_error(errc::invalid_config,
                           "the config file " + path +
                               " is a folder: name an INI file");
  std::ifstream in{path};
  if (!in)
    return caf::make_error(errc::invalid_config,
                           "cannot read the config file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return check_ini_text(text.str(), path, opts, given);
}

std::vector<std::string> plain_flags(std::vector<std::string> args,
                                     const caf::config_option_set& opts,
                                     std::vector<std::string>& off) {
  std::vector<std::string> out;
  for (auto& arg : args) {
    auto eq = arg.find('=');
    const caf::config_option* opt = nullptr;
    if (arg.rfind("--", 0) == 0)
      opt = opts.cli_long_name_lookup(
          arg.substr(2, eq == std::string::npos ? eq : eq - 2));
    if (opt == nullptr || (eq == std::string::npos && !opt->is_flag())) {
      out.push_back(std::move(arg));
      continue;
    }
    std::string name{opt->full_name().begin(), opt->full_name().end()};
    if (opt->is_flag()) // the last of --X, --X=true and --X=false wins
      off.erase(std::remove(off.begin(), off.end(), name), off.end());
    auto value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    std::string type{opt->type_name().begin(), opt->type_name().end()};
    if (eq != std::string::npos && value.empty() &&
        type.find("string") != std::string::npos)
      out.push_back(arg + "\"\"");
    else if (opt->is_flag() && value == "true")
      out.push_back(arg.substr(0, eq));
    else if (opt->is_flag() && value == "false")
      off.push_back(name);
    else
      out.push_back(std::move(arg));
  }
  return out;
}

caf::error check_flags(const std::vector<std::string>& args,
                       const caf::config_option_set& opts,
                       std::set<std::string>* given) {
  for (auto& arg : args) {
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0)
      return caf::make_error(
          errc::invalid_config,
          arg.rfind('-', 0) == 0
              ? "unknown flag " + shown(arg) +
                    ": flags are --NAME or --NAME=VALUE; troupe-node"
                    " --help lists them all"
              : "troupe-node takes flags only (--NAME=VALUE), got '" +
                    shown(arg) + "'");
    auto eq = arg.find('=');
    auto name = arg.substr(2, eq == std::string::npos ? eq : eq - 2);
    auto* opt = opts.cli_long_name_lookup(name);
    if (opt == nullptr)
      return caf::make_error(
          errc::invalid_config,
          "unknown flag --" + shown(name) +
              did_you_mean(name, flag_names(opts), "--", "") +
              "; troupe-node --help lists them all");
    if (given != nullptr)
      given->emplace(opt->full_name().begin(), opt->full_name().end());
    if (eq == std::string::npos) {
      if (!opt->is_flag())
        return caf::make_error(errc::invalid_config, "--" + name +
                                                         " needs a value: --" +
                                                         name + "=VALUE");
      continue;
    }
    auto value = arg.substr(eq + 1);
    if (!opt->parse(value)) {
      std::string type{opt->type_name().begin(), opt->type_name().end()};
      return caf::make_error(errc::invalid_config, "--" + name + " takes " +
                                                       what_it_takes(type) +
                                                       ", got " + shown(value));
    }
  }
  return caf::none;
}

} // namespace troupe

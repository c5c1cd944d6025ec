// troupe-node --help: troupe's options by group with their defaults, and
// the few of CAF's that matter to a troupe node; docs/options.md lists the
// same (tests/node/options_doc_test.cpp keeps the two equal).
#include "actors/node/node_config.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <caf/config_value.hpp>
#include <caf/settings.hpp>

namespace troupe {

namespace {

/// troupe's groups, in the order a user meets them. A group not named
/// here still shows, after them (help_text).
constexpr std::array<const char*, 13> troupe_groups{
    "global",     "cluster", "server",  "kv",    "road",
    "optimizer",  "train",   "worker",  "agent", "fault",
    "checkpoint", "metrics", "pipeline"};

/// CAF's options that a troupe node sets or a user may need; the rest of
/// CAF's groups (opencl, work-stealing, logger, ...) do nothing in troupe
/// and stay out of --help.
constexpr std::array<const char*, 9> caf_options{"config-file",
                                                 "scheduler.max-threads",
                                                 "scheduler.policy",
                                                 "middleman.heartbeat-interval",
                                                 "middleman.connection-timeout",
                                                 "openssl.certificate",
                                                 "openssl.key",
                                                 "openssl.passphrase",
                                                 "openssl.cafile"};

std::string str(caf::string_view x) {
  return std::string(x.begin(), x.end());
}

bool is_caf_option_shown(const caf::config_option& x) {
  auto name =
      str(x.category()) == "global" ? str(x.long_name()) : str(x.full_name());
  return std::find(caf_options.begin(), caf_options.end(), name) !=
         caf_options.end();
}

/// "--group.name=<type>" (no group for "global"; no "=<type>" for a flag).
std::string flag_of(const caf::config_option& x) {
  std::string out = "--";
  if (x.category() != "global")
    out += str(x.category()) + ".";
  out += str(x.long_name());
  if (!x.is_flag())
    out += "=<" + str(x.type_name()) + ">";
  return out;
}

/// `x` as --help shows it: a real number in its shortest form (1e-08, not
/// 0.000000), anything else as CAF writes it.
std::string text_of(const caf::config_value& x) {
  if (auto d = caf::get_if<double>(&x)) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", *d);
    return buf;
  }
  return caf::to_string(x);
}

/// The option's value now: its default, where no flag or file was read.
std::string default_of(const caf::config_option& x, const caf::settings& s) {
  if (auto v = x.get())
    return text_of(*v);
  if (auto v = caf::get_if(&s, x.full_name()))
    return text_of(*v);
  return "none";
}

/// Our words for the CAF options shown, whose own descriptions speak of
/// CAF's defaults, not troupe's.
std::string description_of(const caf::config_option& x) {
  auto name = str(x.full_name());
  if (name == "global.config-file")
    return "INI file of options, one section per group";
  if (name == "scheduler.policy")
    return "CAF's scheduler: sharing (troupe's choice) or stealing";
  if (name == "scheduler.max-threads")
    return "CAF scheduler threads per process, 1..256 (1: a message between"
           " two actors of a process runs on the thread that sent it)";
  if (name == "middleman.heartbeat-interval")
    return "heartbeats between nodes this often (a hung peer is noticed),"
           " above 0 and below --middleman.connection-timeout";
  if (name == "middleman.connection-timeout")
    return "a peer silent this long is declared dead (must exceed the"
           " slowest single message)";
  if (name == "openssl.certificate")
    return "this node's certificate (PEM): with --openssl.key and"
           " --openssl.cafile, mutual TLS to every peer (deploy/make-certs.sh)";
  if (name == "openssl.key")
    return "the private key of --openssl.certificate (PEM)";
  if (name == "openssl.passphrase")
    return "passphrase of --openssl.key, if it has one";
  if (name == "openssl.cafile")
    return "the cluster's CA (PEM): peers must hold a certificate it signed";
  return str(x.description());
}

void print_option(std::ostringstream& out, const caf::config_option& x,
                  const caf::settings& s) {
  out << "  " << flag_of(x) << "\n      " << description_of(x)
      << " (default: " << default_of(x, s) << ")\n";
}

} // namespace

std::string node_config::help_text() const {
  std::ostringstream out;
  out << "usage: troupe-node --role=scheduler|server|worker|agent"
         " [--group.option=value ...]\n"
         "Options come from flags and from an INI file (--config-file;"
         " its sections are the groups below).\n"
         "docs/options.md describes each one.\n";
  // troupe's own options (CAF registers its own before them) by group: the
  // groups above, then any other they name, in the order they came.
  auto own = custom_options_.begin() + first_troupe_option_;
  std::vector<std::string> groups{troupe_groups.begin(), troupe_groups.end()};
  for (auto x = own; x != custom_options_.end(); ++x)
    if (std::find(groups.begin(), groups.end(), str(x->category())) ==
        groups.end())
      groups.push_back(str(x->category()));
  for (auto& group : groups) {
    std::ostringstream options;
    for (auto x = own; x != custom_options_.end(); ++x)
      if (str(x->category()) == group)
        print_option(options, *x, content);
    if (!options.str().empty())
      out << '\n' << group << ":\n" << options.str();
  }
  out << "\nCAF (the actor framework under troupe):\n";
  for (auto& x : custom_options_)
    if (is_caf_option_shown(x))
      print_option(out, x, content);
  return out.str();
}

} // namespace troupe

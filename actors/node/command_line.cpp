// A node's command line, read as troupe-node reads it; see node_config.hpp.
#include <iostream>

#include <caf/io/middleman.hpp>

#include "actors/base/exit_codes.hpp"
#include "actors/base/log.hpp"
#include "actors/base/metrics.hpp"
#include "actors/node/node_config.hpp"
#include "messages/errors.hpp"

namespace troupe {

std::optional<int> read_command_line(node_config& cfg, int argc, char** argv) {
  cfg.load<caf::io::middleman>();
  std::vector<std::string> args(argv + 1, argv + argc);
  for (auto& a : args)
    if (a == "--help" || a == "-h" || a == "-?" || a == "--long-help") {
      std::cout << cfg.help_text();
      return exit_done;
    }
  auto bad = [](const char* what, const caf::error& err) {
    stderr_line() << "*** " << what << " failed: " << describe(err) << '\n';
    return exit_bad_config;
  };
  if (auto err = cfg.check_options(args))
    return bad("reading options", err);
  if (auto err = cfg.parse(std::move(args)))
    return bad("reading options", err);
  if (cfg.cli_helptext_printed)
    return exit_done;
  if (auto err = cfg.finish())
    return bad("checking options", err);
  // A role that is none is refused before anything is served.
  if (!cfg.role_name.empty() && cfg.role_name != "agent")
    if (auto r = cfg.node_role(); !r)
      return bad("checking options", r.error());
  // Metrics are for watching: a node that cannot serve them (a restarted
  // one whose port is not free yet, say) says so and goes on. A custom
  // worker's main gives no --role.
  auto role = cfg.role_name.empty() ? "worker" : cfg.role_name;
  if (cfg.metrics_port != 0)
    if (auto why = metrics::serve(cfg.host, cfg.metrics_port, role);
        !why.empty())
      stderr_line() << "*** troupe-node: " << why
                    << "; going on without them\n";
  return std::nullopt;
}

} // namespace troupe

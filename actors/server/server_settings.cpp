// Checks of a shard server's and of the checkpoints' settings.
#include "actors/server/server_settings.hpp"

#include <filesystem>
#include <system_error>

#include "messages/errors.hpp"

namespace troupe {

caf::error validate(const checkpoint_settings& x) {
  if (x.resume && x.dir.empty())
    return caf::make_error(errc::invalid_config,
                           "--resume needs --checkpoint.dir: the folder the"
                           " checkpoints were written to");
  if (x.dir.empty())
    return caf::none;
  if (x.dir.size() > 3000)
    return caf::make_error(errc::invalid_config,
                           "--checkpoint.dir is too long");
  // The folder is ours to make; say if we cannot.
  std::error_code ec;
  std::filesystem::create_directories(x.dir, ec);
  if (ec || !std::filesystem::is_directory(x.dir))
    return caf::make_error(errc::invalid_config,
                           "--checkpoint.dir " + x.dir +
                               " is not a folder we can create: " +
                               (ec ? ec.message() : "a file is in the way"));
  return caf::none;
}

caf::error validate(server_settings& x) {
  if (x.replicas > 1)
    return caf::make_error(errc::invalid_config,
                           "--server.replicas must be 0 or 1 (one backup on"
                           " the next server)");
  if (x.road_send_timeout_ms == 0)
    return caf::make_error(errc::invalid_config,
                           "--server.road-send-timeout-ms must be > 0");
  if (x.helper_threads > 16)
    return caf::make_error(errc::invalid_config,
                           "--server.helper-threads must be 0..16");
  auto replica_road = parse_road(x.replica_road_text);
  if (!replica_road)
    return caf::make_error(errc::invalid_config,
                           "--server.replica-road must be auto, tcp or"
                           " middleman, got",
                           x.replica_road_text);
  x.replica_road = *replica_road;
  auto& t = x.atomic_pushes_text;
  if (t != "auto" && t != "on" && t != "off")
    return caf::make_error(errc::invalid_config,
                           "--server.atomic-pushes must be auto, on or off,"
                           " got",
                           t);
  x.atomic_pushes =
      t == "on" || (t == "auto" && x.mode.kind == consistency::kind_t::sync);
  return caf::none;
}

} // namespace troupe

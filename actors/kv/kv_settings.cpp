// Checks of a kv client's settings.
#include "actors/kv/kv_settings.hpp"

#include <utility>

#include "messages/errors.hpp"

namespace troupe {

namespace {

caf::error validate_faults(const kv_settings& x) {
  auto& f = x.faults;
  if (!(f.drop_pushes >= 0 && f.drop_pushes <= 1) ||
      !(f.duplicate_pushes >= 0 && f.duplicate_pushes <= 1))
    return caf::make_error(errc::invalid_config,
                           "--fault.drop-pushes and --fault.duplicate-pushes"
                           " must be probabilities in [0, 1]");
  if (f.drop_pushes > 0 && x.resend_ms == 0)
    return caf::make_error(errc::invalid_config,
                           "--fault.drop-pushes needs --kv.resend-ms > 0,"
                           " or every dropped push fails its step");
  return caf::none;
}

} // namespace

caf::error validate(kv_settings& x) {
  if (x.request_timeout_ms == 0)
    return caf::make_error(errc::invalid_config,
                           "--kv.request-timeout-ms must be > 0: every"
                           " request needs a finite timeout");
  if (x.request_timeout_ms > 86400000) // 4294967295 waited 49 days
    return caf::make_error(errc::invalid_config,
                           "--kv.request-timeout-ms must be at most 86400000"
                           " (a day): a node waits this long for a"
                           " missing peer before it says so, got",
                           x.request_timeout_ms);
  if (x.max_message_bytes < (1u << 16))
    return caf::make_error(errc::invalid_config,
                           "--kv.max-message-bytes must be >= 65536");
  if (x.helper_threads > 16)
    return caf::make_error(errc::invalid_config,
                           "--kv.helper-threads must be 0..16");
  auto road = parse_road(x.road_text);
  if (!road)
    return std::move(road.error());
  x.road = *road;
  if (x.window_bytes < x.max_message_bytes)
    return caf::make_error(
        errc::invalid_config,
        "--kv.window-bytes must be >= --kv.max-message-bytes");
  if (x.ring_bytes > (1u << 30))
    return caf::make_error(errc::invalid_config,
                           "--kv.ring-bytes must be <= 1 GiB (0 = no rings)");
  return validate_faults(x);
}

} // namespace troupe

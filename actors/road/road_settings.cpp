// Parsing and checks of the road's settings.
#include "actors/road/road_settings.hpp"

#include <utility>

#include "messages/errors.hpp"

namespace troupe {

caf::expected<road_kind> parse_road(const std::string& x) {
  if (x == "auto" || x == "shm")
    return road_kind::shm;
  if (x == "tcp")
    return road_kind::tcp;
  if (x == "middleman")
    return road_kind::middleman;
  return caf::make_error(errc::invalid_config,
                         "--kv.road must be auto, shm, tcp or middleman, got",
                         x);
}

const char* to_string(road_kind x) {
  switch (x) {
  case road_kind::middleman:
    return "middleman";
  case road_kind::tcp:
    return "tcp";
  default:
    return "shm";
  }
}

caf::error validate(const road_settings& x) {
  for (auto [us, flag] : {std::pair{x.spin_us, "--road.spin-us"},
                          std::pair{x.caller_spin_us, "--road.caller-spin-us"},
                          std::pair{x.frame_spin_us, "--road.frame-spin-us"}})
    if (us > 10000)
      return caf::make_error(errc::invalid_config,
                             std::string{flag} + " must be 0..10000, got", us);
  return caf::none;
}

} // namespace troupe

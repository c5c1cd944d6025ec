// Checks of the scheduler's settings.
#include "actors/scheduler/scheduler_settings.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "messages/errors.hpp"

namespace troupe {

caf::error validate(const scheduler_settings& x) {
  auto& p = x.placement;
  if (p.slice_floats == 0 || p.slice_floats > max_slice_floats)
    return caf::make_error(errc::invalid_config,
                           "--cluster.slice-floats must be in 1..2^26");
  if (p.vnodes == 0 || p.vnodes > 4096)
    return caf::make_error(errc::invalid_config,
                           "--cluster.vnodes must be in 1..4096");
  if (!(p.slack >= 0.0 && p.slack <= 10.0))
    return caf::make_error(errc::invalid_config,
                           "--cluster.balance-slack must be in 0..10");
  if (!x.events_file.empty()) { // opened to append: the file is made now
    std::ofstream probe{x.events_file, std::ios::app};
    if (!probe)
      return caf::make_error(errc::invalid_config,
                             "--cluster.events-file: cannot open " +
                                 x.events_file +
                                 " to append: " + std::strerror(errno));
  }
  return caf::none;
}

} // namespace troupe

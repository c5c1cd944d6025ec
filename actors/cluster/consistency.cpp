// Parsing and printing consistency modes.
#include "actors/cluster/consistency.hpp"

#include <cstdlib>

#include "messages/errors.hpp"

namespace troupe {

caf::expected<consistency> parse_consistency(const std::string& text) {
  using kind = consistency::kind_t;
  if (text == "sync")
    return consistency{kind::sync, 0};
  if (text == "sync_device")
    return consistency{kind::sync, 0, true};
  if (text == "async")
    return consistency{kind::async, 0};
  if (text.rfind("ssp:", 0) == 0 && text.size() > 4 && text.size() <= 4 + 9 &&
      text.find_first_not_of("0123456789", 4) == std::string::npos) {
    auto s = std::strtoul(text.c_str() + 4, nullptr, 10);
    return consistency{kind::ssp, static_cast<uint32_t>(s)};
  }
  return caf::make_error(errc::invalid_config,
                         "--server.mode must be sync, sync_device, async or"
                         " ssp:S (S: 0 to 999999999 rounds), got",
                         text);
}

std::string to_string(const consistency& x) {
  switch (x.kind) {
  case consistency::kind_t::sync:
    return x.on_device ? "sync_device" : "sync";
  case consistency::kind_t::async:
    return "async";
  case consistency::kind_t::ssp:
    return "ssp:" + std::to_string(x.staleness);
  }
  return "?";
}

} // namespace troupe

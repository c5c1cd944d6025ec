// Reaching the scheduler, with back-off while it starts.
#include "actors/cluster/connect.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <caf/io/middleman.hpp>

#include "messages/errors.hpp"

namespace troupe {

caf::expected<caf::actor> connect_scheduler(caf::actor_system& sys,
                                            const std::string& host,
                                            uint16_t port, uint32_t wait_ms) {
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + std::chrono::milliseconds{wait_ms};
  caf::error last;
  for (auto delay = std::chrono::milliseconds{20};;
       delay = std::min(delay * 2, std::chrono::milliseconds{500})) {
    auto h = sys.middleman().remote_actor(host, port);
    if (h)
      return std::move(*h);
    last = std::move(h.error());
    if (clock::now() + delay > deadline)
      break;
    std::this_thread::sleep_for(delay); // back-off while it starts
  }
  return caf::make_error(errc::not_connected, "no scheduler at " + host + ":" +
                                                  std::to_string(port) + " (" +
                                                  sys.render(last) + ")");
}

} // namespace troupe

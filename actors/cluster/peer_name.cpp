#include "actors/cluster/peer_name.hpp"

#include <chrono>
#include <cstdint>

#include <caf/io/middleman.hpp>

#include "actors/base/stray_errors.hpp"

namespace troupe {

void with_peer_name(caf::event_based_actor* self,
                    const caf::strong_actor_ptr& from,
                    std::function<void(const std::string&)> say) {
  auto node = sender_node(from);
  if (!from || from->node() == self->node() ||
      !self->system().has_middleman()) {
    say(node);
    return;
  }
  auto mm = self->system().middleman().actor_handle();
  self->request(mm, std::chrono::seconds{1}, caf::get_atom_v, from->node())
      .then(
          [say, node](const caf::node_id&, const std::string& host,
                      uint16_t port) {
            say(host.empty()
                    ? node
                    : node + " at " + host + ":" + std::to_string(port));
          },
          [say, node](const caf::error&) { say(node); });
}

} // namespace troupe

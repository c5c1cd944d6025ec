// A stage's own CAF connection to the stage before it (see
// meet_previous in stage_driver_internal.hpp).
#include <utility>

#include "actors/base/log.hpp"
#include "actors/cluster/connect.hpp"
#include "actors/pipeline/stage_driver_internal.hpp"
#include "messages/errors.hpp"

namespace troupe::pipe {

void meet_previous(driver_ptr self, uint64_t gen, std::function<void()> then) {
  auto& st = self->state;
  std::map<uint32_t, node_info> members;
  // Stage 1's previous is the lead, which connects to it itself (a second
  // connection between two connected nodes can break the first).
  if (st.rank < 2 || !all_stages(self, st.view, members)) {
    then();
    return;
  }
  auto& prev = members[st.rank - 1];
  auto go_on = [self, gen, then = std::move(then)] {
    if (gen == self->state.gen) // else a newer start took over
      then();
  };
  connect_actor(
      self, prev.host, prev.port, timeout(self),
      [go_on](caf::strong_actor_ptr&) { go_on(); },
      [self, go_on, rank = st.rank - 1](caf::error& err) {
        TROUPE_LOG(warning, who(self), "cannot connect to stage ", rank, ": ",
                   describe(err),
                   "; what goes to it over CAF goes through the lead's"
                   " process");
        go_on();
      });
}

} // namespace troupe::pipe

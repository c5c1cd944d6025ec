// Stage tensors on the fast road (actors/pipeline/stage_roads.hpp): with
// roads, every activation and gradient rides a road (none crosses CAF)
// and the weights still equal ordinary training's, on tcp and shm roads,
// in one actor system and across systems. A road takes tensors only from
// the neighbour they come from; tickets go only to neighbours; a forged
// token opens no road.
#define BOOST_TEST_MODULE stage_roads_tests
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/pipeline/stage_actor.hpp"
#include "actors/pipeline/stage_roads.hpp"
#include "messages/errors.hpp"
#include "messages/pipeline.hpp"
#include "messages/type_ids.hpp"
#include "tests/pipeline/pipeline_reference.hpp"
#include "tests/pipeline/stage_pipeline.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

/// (tensors sent on roads, over CAF) by `stage`.
std::pair<uint64_t, uint64_t> sent_by(caf::actor_system& sys,
                                      const caf::actor& stage) {
  std::pair<uint64_t, uint64_t> out;
  caf::scoped_actor self{sys};
  self->request(stage, 10s, stats_atom_v, road_atom_v)
      .receive(
          [&out](uint64_t road, uint64_t caf) {
            out = {road, caf};
          },
          [&](caf::error& err) { BOOST_FAIL(sys.render(err)); });
  return out;
}

/// Runs 3 mini-batches through P = 3 stages (1f1b, M = 4) spread over
/// `systems`, on roads of kind `road`: every tensor on a road, and the
/// weights of ordinary training.
void check_on_roads(std::vector<std::unique_ptr<caf::actor_system>>& systems,
                    road_kind road) {
  auto& driver = *systems[0];
  pipeline pipe{driver, systems, pipeline_schedule::one_f_one_b, 3, 4, road};
  for (uint64_t k = 0; k < 3; ++k)
    BOOST_CHECK_GT(pipe.step(driver, k), 0.0);
  auto rel = worst_relative(ordinary(3), pipe.weights_of(driver));
  BOOST_CHECK_MESSAGE(rel <= 1e-5, to_string(road) << ": " << rel);
  uint64_t sent = 0, read = 0;
  for (size_t i = 0; i < pipe.stages.size(); ++i) {
    auto [on_road, on_caf] = sent_by(driver, pipe.stages[i]);
    // Stage i sends M activations (not the last) and M gradients (not
    // the first) per mini-batch.
    uint64_t want = 3 * 4 * ((i + 1 < 3 ? 1 : 0) + (i > 0 ? 1 : 0));
    BOOST_CHECK_EQUAL(on_road, want);
    BOOST_CHECK_EQUAL(on_caf, 0u);
    sent += on_road;
    read += pipe.roads[i]->tensors_read();
  }
  BOOST_CHECK_EQUAL(read, sent);
}

/// A stage's ticket for `rank`, or the error it answered.
caf::expected<stage_ticket> ticket(caf::actor_system& sys,
                                   const caf::actor& stage, uint32_t rank) {
  caf::expected<stage_ticket> out{
      caf::make_error(errc::peer_down, "no answer")};
  caf::scoped_actor self{sys};
  self->request(stage, 10s, road_atom_v, rank)
      .receive(
          [&out](std::string& host, uint16_t port, std::string& machine,
                 std::string& socket, std::string& token) {
            stage_ticket t{host, road_info{port, machine, socket}, {}};
            BOOST_REQUIRE(secret_from_bytes(token, t.token));
            out = t;
          },
          [&out](caf::error& err) { out = std::move(err); });
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(stage_roads_tests)

BOOST_AUTO_TEST_CASE(tensors_ride_tcp_and_shm_roads_and_train_alike) {
  actor_systems one{1};
  for (auto road : {road_kind::tcp, road_kind::shm})
    check_on_roads(one.systems, road);
}

BOOST_AUTO_TEST_CASE(stages_in_systems_of_their_own_send_tensors_on_roads) {
  // CAF's middleman links the systems; the tensors take the roads.
  actor_systems three{3};
  check_on_roads(three.systems, road_kind::tcp);
}

BOOST_AUTO_TEST_CASE(a_road_takes_tensors_only_from_where_they_come) {
  actor_systems one{1};
  auto& sys = one.first();
  pipeline pipe{sys, one.systems, pipeline_schedule::gpipe,
                3,   1,           road_kind::tcp};
  // Worker 2, stage 1's successor, may dial stage 1's road, for
  // gradients; activations come only from worker 0.
  auto t = ticket(sys, pipe.stages[1], 2);
  if (!t)
    BOOST_FAIL(sys.render(t.error()));
  std::promise<void> answered, ended;
  auto conn = road_dial(
      t->host, t->road, road_kind::tcp, 1u << 20, 5000, road_settings{},
      road_credential{member_id{role::worker, 2}, t->token},
      [&answered](road_message_ptr) { answered.set_value(); },
      [&ended](uint64_t, const caf::error&) { ended.set_value(); });
  if (!conn)
    BOOST_FAIL(sys.render(conn.error()));
  stage_tensor x{0, 0, uint32_t(batch), 20,
                 std::vector<float>(batch * 20, 1.0f)};
  BOOST_REQUIRE(!(*conn)->send(road_op::activation, 1, encode(x)));
  // The stage ends the connection and answers nothing.
  BOOST_REQUIRE_MESSAGE(ended.get_future().wait_for(10s) ==
                            std::future_status::ready,
                        "the road took activations from worker 2");
  BOOST_CHECK(answered.get_future().wait_for(0s) != std::future_status::ready);
  (*conn)->close();
  // The pipeline goes on: its own roads are untouched.
  BOOST_CHECK_GT(pipe.step(sys, 0), 0.0);
  auto [on_road, on_caf] = sent_by(sys, pipe.stages[1]);
  BOOST_CHECK_EQUAL(on_road, 2u);
  BOOST_CHECK_EQUAL(on_caf, 0u);
}

BOOST_AUTO_TEST_CASE(tickets_go_to_neighbours_and_forged_tokens_open_nothing) {
  actor_systems one{1};
  auto& sys = one.first();
  pipeline pipe{sys, one.systems, pipeline_schedule::gpipe,
                3,   1,           road_kind::tcp};
  // Worker 5 is nobody's neighbour, and stage 0 is not its own.
  for (auto [stage, rank] :
       {std::pair{0, 5u}, std::pair{1, 5u}, std::pair{0, 0u}}) {
    auto t = ticket(sys, pipe.stages[stage], rank);
    BOOST_CHECK_MESSAGE(!t && t.error() == errc::not_a_member,
                        "stage " << stage << " gave worker " << rank
                                 << " a ticket");
  }
  // A ticket with another token: the handshake fails, no road opens.
  auto t = ticket(sys, pipe.stages[1], 0);
  if (!t)
    BOOST_FAIL(sys.render(t.error()));
  t->token = random_secret();
  auto conn = road_dial(
      t->host, t->road, road_kind::tcp, 1u << 20, 5000, road_settings{},
      road_credential{member_id{role::worker, 0}, t->token},
      [](road_message_ptr) {}, [](uint64_t, const caf::error&) {});
  BOOST_CHECK_MESSAGE(!conn, "a forged token opened a road");
  // A stage without roads gives no ticket: its tensors go over CAF.
  pipeline plain{sys, one.systems, pipeline_schedule::gpipe, 2, 1};
  auto none = ticket(sys, plain.stages[0], 1);
  BOOST_CHECK(!none && none.error() == errc::invalid_config);
}

BOOST_AUTO_TEST_SUITE_END()

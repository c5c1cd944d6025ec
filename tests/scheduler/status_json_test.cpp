// The status page's /status.json: the view's members, and the worker ranks
// no process comes back to (given up by their agent, or ended), which the
// page shows beside the view's epoch.
#define BOOST_TEST_MODULE status_json_tests
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "actors/scheduler/status_page.hpp"

using namespace troupe;

BOOST_AUTO_TEST_SUITE(status_json_tests)

BOOST_AUTO_TEST_CASE(the_json_names_the_ranks_given_up_ended_and_finished) {
  std::string why;
  auto page = status_page::start("127.0.0.1", 0, why); // any free port
  BOOST_REQUIRE_MESSAGE(page, why);
  cluster_view v;
  v.epoch = 9;
  v.slice_floats = 4;
  v.expected_workers = 6;
  v.workers = {{role::worker, 3, "", 0, 21, {}}};
  v.given_up = {5};
  v.ended = {0, 1};
  v.finished = {2, 4};
  page->set_view(v);
  auto j = nlohmann::json::parse(page->json());
  BOOST_CHECK_EQUAL(j["epoch"], 9);
  BOOST_CHECK_EQUAL(j["members"].size(), 1u);
  BOOST_CHECK(j["given_up"] == nlohmann::json::array({5}));
  BOOST_CHECK(j["ended"] == nlohmann::json::array({0, 1}));
  BOOST_CHECK(j["finished"] == nlohmann::json::array({2, 4}));
  // The page reads the three lists.
  auto& html = status_page::html();
  BOOST_CHECK(html.find("s.given_up") != std::string::npos &&
              html.find("s.ended") != std::string::npos &&
              html.find("s.finished") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

// Encode/decode of the membership conversation, including malformed bytes,
// and CAF's serializer round trip of every registered type.
#define BOOST_TEST_MODULE membership_tests
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/node/node_config.hpp"
#include "messages/errors.hpp"
#include "messages/membership.capnp.h"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"
#include "tests/messages/raw_frame.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>

using namespace troupe;
using troupe::test::raw;

namespace {

cluster_view sample_view() {
  cluster_view v;
  v.epoch = 7;
  v.slice_floats = 4;
  v.expected_workers = 3;
  v.servers = {{role::server,
                0,
                "127.0.0.1",
                4301,
                11,
                {4401, "boot/net:[1]", "troupe-road-11-4401"}},
               {role::server, 1, "127.0.0.1", 4302, 12, {4402, "m", ""}}};
  v.workers = {{role::worker, 0, "", 0, 21, {}}};
  v.given_up = {2};
  v.ended = {1, 4};
  v.finished = {3, 5};
  v.keys = {{1, 10}, {2, 3}};
  v.placement = {{1, 0, 0}, {1, 1, 1}, {1, 2, 0}, {2, 0, 1}};
  return v;
}

} // namespace

BOOST_AUTO_TEST_SUITE(membership_tests)

BOOST_AUTO_TEST_CASE(every_message_survives_a_round_trip) {
  register_request rq{role::server,
                      "10.0.0.1",
                      4301,
                      42,
                      {4402, "m", "s"},
                      0,
                      "sgd@server lr=0.1",
                      "ssp:3",
                      "--worker.steps=7"};
  register_request rq2;
  BOOST_REQUIRE(!decode(encode(rq), rq2));
  BOOST_CHECK(rq2.kind == role::server && rq2.host == "10.0.0.1");
  BOOST_CHECK(rq2.port == 4301 && rq2.pid == 42);
  BOOST_CHECK_EQUAL(rq2.stage_group, 0u);
  BOOST_CHECK_EQUAL(rq2.optimizer, "sgd@server lr=0.1");
  BOOST_CHECK_EQUAL(rq2.mode, "ssp:3");
  BOOST_CHECK_EQUAL(rq2.work, "--worker.steps=7");
  rq.kind = role::worker;
  rq.stage_group = 3; // a pipeline stage: replicas of 3 stages
  BOOST_REQUIRE(!decode(encode(rq), rq2));
  BOOST_CHECK_EQUAL(rq2.stage_group, 3u);
  rq.work.assign(256, 'x'); // longer than a host name: refused
  BOOST_CHECK(decode(encode(rq), rq2) == errc::malformed_message);
  rq.work.pop_back();
  BOOST_REQUIRE(!decode(encode(rq), rq2));
  BOOST_CHECK_EQUAL(rq2.work.size(), 255u);

  register_reply rr{3, sample_view(), {}}, rr2;
  BOOST_REQUIRE(!decode(encode(rr), rr2));
  BOOST_CHECK_EQUAL(rr2.rank, 3u);
  BOOST_CHECK(rr2.view == sample_view());
  BOOST_CHECK(rr2.road_key.empty());
  rr.road_key.assign(road_key_bytes, '\x7f');
  BOOST_REQUIRE(!decode(encode(rr), rr2));
  BOOST_CHECK(rr2.road_key == rr.road_key);
  rr.road_key.pop_back(); // a key of the wrong length is refused
  BOOST_CHECK(decode(encode(rr), rr2) == errc::malformed_message);

  cluster_view v2;
  BOOST_REQUIRE(!decode(encode(sample_view()), v2));
  BOOST_CHECK(v2 == sample_view());

  declare_request d{1, {{5, 100}, {6, 1}}, 3}, d2;
  BOOST_REQUIRE(!decode(encode(d), d2));
  BOOST_CHECK_EQUAL(d2.worker, 1u);
  BOOST_CHECK(d2.keys == d.keys);
  BOOST_CHECK_EQUAL(d2.clocks_per_step, 3u);
  // A Declare without the field (an older worker) means one clock a step.
  BOOST_REQUIRE(!decode(encode(declare_request{1, {{5, 100}}, 0}), d2));
  BOOST_CHECK_EQUAL(d2.clocks_per_step, 1u);

  declare_reply dr{sample_view(), {1, 2}}, dr2;
  BOOST_REQUIRE(!decode(encode(dr), dr2));
  BOOST_CHECK(dr2.view == sample_view());
  BOOST_CHECK(dr2.initialiser == dr.initialiser);

  barrier_request b{"start", role::worker, 2}, b2;
  BOOST_REQUIRE(!decode(encode(b), b2));
  BOOST_CHECK(b2.name == "start" && b2.kind == role::worker && b2.rank == 2);
}

BOOST_AUTO_TEST_CASE(garbage_and_truncated_bytes_are_malformed) {
  cluster_view v;
  BOOST_CHECK(decode(frame{}, v) == errc::malformed_message);
  BOOST_CHECK(decode(frame{std::vector<uint8_t>(13, 0xAB)}, v) ==
              errc::malformed_message);
  BOOST_CHECK(decode(frame{std::vector<uint8_t>(64, 0xFF)}, v) ==
              errc::malformed_message);
  auto f = encode(sample_view());
  for (size_t cut = 8; cut < f.bytes.size(); cut += 8) {
    frame t{std::vector<uint8_t>(f.bytes.begin(), f.bytes.begin() + cut)};
    BOOST_CHECK_MESSAGE(decode(t, v) == errc::malformed_message,
                        "truncated to " << cut << " bytes");
  }
}

BOOST_AUTO_TEST_CASE(a_view_that_breaks_its_invariants_is_refused) {
  cluster_view v;
  auto bad_server = sample_view();
  bad_server.placement[0].server = 9; // not a live server
  BOOST_CHECK(decode(encode(bad_server), v) == errc::malformed_message);
  auto twice = sample_view();
  twice.placement.push_back(twice.placement[0]);
  BOOST_CHECK(decode(encode(twice), v) == errc::malformed_message);
  auto missing = sample_view();
  missing.placement.pop_back();
  BOOST_CHECK(decode(encode(missing), v) == errc::malformed_message);
  auto out_of_range = sample_view();
  out_of_range.placement[0].index = 3; // key 1 has 3 slices of 4
  BOOST_CHECK(decode(encode(out_of_range), v) == errc::malformed_message);
  auto dup_rank = sample_view();
  dup_rank.servers[1].rank = 0;
  BOOST_CHECK(decode(encode(dup_rank), v) == errc::malformed_message);
  auto no_bound = sample_view();
  no_bound.slice_floats = 0;
  BOOST_CHECK(decode(encode(no_bound), v) == errc::malformed_message);
  auto epoch0 = sample_view();
  epoch0.epoch = 0;
  BOOST_CHECK(decode(encode(epoch0), v) == errc::malformed_message);
  auto empty_key = sample_view();
  empty_key.keys.push_back({3, 0});
  BOOST_CHECK(decode(encode(empty_key), v) == errc::malformed_message);
  auto live_given_up = sample_view(); // worker 0 is live
  live_given_up.given_up = {0, 2};
  BOOST_CHECK(decode(encode(live_given_up), v) == errc::malformed_message);
  auto unordered = sample_view();
  unordered.given_up = {2, 1};
  BOOST_CHECK(decode(encode(unordered), v) == errc::malformed_message);
  unordered.given_up = {1, 1};
  BOOST_CHECK(decode(encode(unordered), v) == errc::malformed_message);
  auto live_ended = sample_view();
  live_ended.ended = {0};
  BOOST_CHECK(decode(encode(live_ended), v) == errc::malformed_message);
  live_ended.ended = {4, 1};
  BOOST_CHECK(decode(encode(live_ended), v) == errc::malformed_message);
  auto live_finished = sample_view();
  live_finished.finished = {0, 3};
  BOOST_CHECK(decode(encode(live_finished), v) == errc::malformed_message);
  live_finished.finished = {5, 3};
  BOOST_CHECK(decode(encode(live_finished), v) == errc::malformed_message);
}

BOOST_AUTO_TEST_CASE(out_of_range_fields_are_malformed) {
  capnp::MallocMessageBuilder msg;
  auto r = msg.initRoot<schema::Register>();
  r.setRole(static_cast<schema::Role>(9));
  register_request rq;
  BOOST_CHECK(decode(raw(msg), rq) == errc::malformed_message);

  barrier_request b;
  BOOST_CHECK(decode(encode(barrier_request{"", role::worker, 0}), b) ==
              errc::malformed_message);
  BOOST_CHECK(
      decode(encode(barrier_request{std::string(65, 'x'), role::worker, 0}),
             b) == errc::malformed_message);

  declare_request d;
  BOOST_CHECK(decode(encode(declare_request{0, {{1, 4}, {1, 4}}}), d) ==
              errc::malformed_message);
  BOOST_CHECK(decode(encode(declare_request{0, {{1, max_key_size + 1}}}), d) ==
              errc::malformed_message);
}

BOOST_AUTO_TEST_CASE(events_round_trip_and_bad_events_are_malformed) {
  event_record e{1763712000123,         "crashed",  role::worker, 1, 4242,
                 "worker 1 \"gone\"\n", "scheduler"};
  event_record e2;
  BOOST_REQUIRE(!decode(encode(e), e2));
  BOOST_CHECK(e2 == e);
  std::vector<event_record> log{e, e}, log2;
  log[1].kind = "rejoined";
  BOOST_REQUIRE(!decode(encode(log), log2));
  BOOST_CHECK(log2 == log);
  // JSON for logs and timelines: quotes and control characters escaped.
  BOOST_CHECK_EQUAL(to_json(e), "{\"at_ms\":1763712000123,\"kind\":\"crashed\","
                                "\"role\":\"worker\",\"rank\":1,\"pid\":4242,"
                                "\"detail\":\"worker 1 \\\"gone\\\"\\u000a\","
                                "\"source\":\"scheduler\"}");
  auto bad = e;
  bad.kind = "";
  BOOST_CHECK(decode(encode(bad), e2) == errc::malformed_message);
  bad.kind = std::string(max_event_kind + 1, 'k');
  BOOST_CHECK(decode(encode(bad), e2) == errc::malformed_message);
  bad = e;
  bad.detail = std::string(max_event_text + 1, 'd');
  BOOST_CHECK(decode(encode(bad), e2) == errc::malformed_message);
  capnp::MallocMessageBuilder msg;
  auto r = msg.initRoot<schema::Event>();
  r.setKind("x");
  r.setRole(static_cast<schema::Role>(7));
  BOOST_CHECK(decode(raw(msg), e2) == errc::malformed_message);
}

BOOST_AUTO_TEST_CASE(an_events_jsonl_line_reads_back_and_bad_lines_say_why) {
  // events.jsonl (--cluster.events-file) holds to_json lines; tools read
  // them back with event_from_json: every field, escapes and the optional
  // clock included.
  event_record e{
      1763712000123, "cut", role::worker, 1, 0, "worker 1 \"gone\"\n\t\\",
      "scheduler"};
  for (auto clock : {std::optional<uint64_t>{}, std::optional<uint64_t>{791}}) {
    e.clock = clock;
    auto back = event_from_json(to_json(e));
    BOOST_REQUIRE(back);
    BOOST_CHECK(*back == e);
  }
  for (auto about : {role::scheduler, role::server}) {
    e.about = about;
    auto back = event_from_json(to_json(e));
    BOOST_REQUIRE(back);
    BOOST_CHECK(back->about == about);
  }
  auto says = [](const std::string& line, const std::string& what) {
    auto x = event_from_json(line);
    BOOST_REQUIRE_MESSAGE(!x, line);
    BOOST_CHECK(x.error() == errc::malformed_message);
    BOOST_CHECK_MESSAGE(describe(x.error()).find(what) != std::string::npos,
                        line << ": " << describe(x.error()));
  };
  auto line = to_json(e);
  says(line.substr(0, line.size() / 2), "not a JSON object"); // torn
  says("[1,2]", "not a JSON object");
  says("{\"at_ms\":1,\"kind\":\"x\"}", "role"); // fields missing
  auto swap = [&line](const std::string& from, const std::string& to) {
    auto out = line;
    out.replace(out.find(from), from.size(), to);
    return out;
  };
  says(swap("\"role\":\"server\"", "\"role\":\"agent\""), "unknown role");
  says(swap("\"rank\":1", "\"rank\":-1"), "rank is not a count");
  says(swap("\"pid\":0", "\"pid\":4294967296"), "pid is not a count");
  says(swap("\"kind\":\"cut\"", "\"kind\":7"), "type");
}

BOOST_AUTO_TEST_CASE(an_agents_event_takes_the_rank_the_scheduler_gave) {
  agent_ranks ranks;
  // Agent `source`'s (on host `host`) event about its child `slot`
  // (process `pid`), which the agent numbers 1, as the scheduler names it.
  auto seen = [&ranks](uint32_t pid, std::string slot,
                       std::string source = "agent 77",
                       std::string host = "h1") {
    event_record e{1, "exited", role::worker, 1, pid, slot + ": x", source};
    ranks.apply(e, host);
    BOOST_CHECK_EQUAL(e.detail, slot + ": x");
    return std::make_pair(e.about, e.rank);
  };
  auto worker = [](uint32_t rank) {
    return std::make_pair(role::worker, rank);
  };
  // Not joined yet: the slot's number stays.
  BOOST_CHECK(seen(500, "worker-1") == worker(1));
  // pid 500 joined as worker 0: its events say worker 0.
  ranks.learn("h1", 500, role::worker, 0);
  BOOST_CHECK(seen(500, "worker-1") == worker(0));
  // The slot's next processes (restarting: no pid; restarted, exited: ones
  // that have not joined, crashing in a loop): the rank last found.
  BOOST_CHECK(seen(0, "worker-1") == worker(0));
  BOOST_CHECK(seen(501, "worker-1") == worker(0));
  BOOST_CHECK(seen(501, "worker-1") == worker(0));
  BOOST_CHECK(seen(0, "worker-1") == worker(0));
  BOOST_CHECK(seen(502, "worker-1") == worker(0));
  // One joins as worker 3 after all: its own rank wins, and is the slot's.
  ranks.learn("h1", 502, role::worker, 3);
  BOOST_CHECK(seen(502, "worker-1") == worker(3));
  BOOST_CHECK(seen(0, "worker-1") == worker(3));
  // A server's pid gives the server's role; another agent's slot of the
  // same name is another slot.
  ranks.learn("h1", 600, role::server, 2);
  BOOST_CHECK(seen(600, "server-0") == std::make_pair(role::server, 2u));
  BOOST_CHECK(seen(0, "worker-1", "agent 78") == worker(1));
  // The same pid on another host (a container of its own) is another
  // process.
  ranks.learn("h2", 500, role::worker, 4);
  BOOST_CHECK(seen(500, "worker-0", "agent 77", "h2") == worker(4));
  BOOST_CHECK(seen(500, "worker-1") == worker(0));
  BOOST_CHECK(seen(500, "worker-0", "agent 77", "h3") == worker(1));
  // The scheduler's own events are left alone.
  event_record own{1, "crashed", role::worker, 5, 500, "worker 5", "scheduler"};
  ranks.apply(own, "h1");
  BOOST_CHECK_EQUAL(own.rank, 5u);
  // Where a worker pid joined (a given-up process that joined is no
  // process that never did); a server's pid is no worker's.
  BOOST_CHECK(
      (ranks.worker_pid_hosts(500) == std::vector<std::string>{"h1", "h2"}));
  BOOST_CHECK(ranks.worker_pid_hosts(600).empty());
  BOOST_CHECK(ranks.worker_pid_hosts(501).empty());
  BOOST_CHECK(ranks.worker_pid_hosts(0).empty());
}

BOOST_AUTO_TEST_CASE(a_frame_with_unaligned_bytes_still_decodes) {
  auto f = encode(barrier_request{"x", role::server, 1});
  // Copy into a buffer whose data starts one byte off an 8-byte boundary.
  std::vector<uint8_t> storage(f.bytes.size() + 1);
  std::copy(f.bytes.begin(), f.bytes.end(), storage.begin() + 1);
  frame shifted;
  shifted.bytes.assign(storage.begin() + 1, storage.end());
  barrier_request b;
  BOOST_CHECK(!decode(shifted, b));
  BOOST_CHECK_EQUAL(b.name, "x");
}

BOOST_AUTO_TEST_CASE(registered_types_round_trip_through_the_caf_serializer) {
  node_config cfg;
  caf::actor_system sys{cfg};
  auto f = encode(sample_view());
  named_array a{42, {1.5f, -2.0f, 3.25f}};
  std::vector<named_array> as{a, named_array{7, {}}};
  std::vector<uint64_t> keys{1, 2, 3};
  auto msg = caf::make_message(f, a, as, keys);
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  BOOST_REQUIRE(!sink(msg));
  caf::message copy;
  caf::binary_deserializer source{sys, buf};
  BOOST_REQUIRE(!source(copy));
  bool types_match =
      copy.match_elements<frame, named_array, std::vector<named_array>,
                          std::vector<uint64_t>>();
  BOOST_REQUIRE(types_match);
  BOOST_CHECK(copy.get_as<frame>(0).bytes == f.bytes);
  BOOST_CHECK(copy.get_as<named_array>(1).values == a.values);
  BOOST_CHECK_EQUAL(copy.get_as<std::vector<named_array>>(2).size(), 2u);
  BOOST_CHECK(copy.get_as<std::vector<uint64_t>>(3) == keys);
}

BOOST_AUTO_TEST_SUITE_END()

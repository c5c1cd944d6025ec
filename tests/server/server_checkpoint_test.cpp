// A shard server's checkpointed state without actors: a store cut at a
// version, restored into a fresh store with its optimizer state, continues
// exactly as the original; clocks come back; the last checkpoint of a
// folder is loaded and checked against the cluster's flags.
#define BOOST_TEST_MODULE server_checkpoint_tests
#include <boost/test/unit_test.hpp>

#include "tests/test_support.hpp"

#include <cstdlib>
#include <filesystem>

#include "actors/server/server_checkpoint.hpp"
#include "actors/server/server_optimizer.hpp"
#include "messages/errors.hpp"

using namespace troupe;
using troupe::test::temp_dir;
using troupe::test::why;

namespace {

const slice_id a{1, 0};
const slice_id b{1, 1};

optimizer_settings optimizer(const std::string& name) {
  optimizer_settings s;
  s.name = name;
  s.lr = 0.1f;
  s.lr_decay_steps = 2; // the schedule's position is state too
  s.lr_decay = 0.5f;
  return s;
}

/// A store owning a (3 floats) and b (2 floats) with workers 0 and 1.
shard_store make_store(const std::string& mode, const std::string& opt,
                       bool init = true) {
  shard_store s{*parse_consistency(mode), make_optimizer_fn(optimizer(opt))};
  s.set_owned({{a, 3}, {b, 2}});
  s.set_workers({0, 1});
  if (init)
    BOOST_REQUIRE(
        !s.init(init_request{0, 1, {{a, {1, 2, 3}}, {b, {-1, 0.5f}}}}));
  return s;
}

/// Worker w's push at `clock`: values that differ per worker and clock.
push_request push_of(uint32_t w, uint64_t clock) {
  float x = 0.25f * float(w + 1) + 0.125f * float(clock);
  return push_request{w, clock, 1,
                      0, 1,     {{a, {x, -x, 2 * x}}, {b, {x * x, 1 - x}}}};
}

std::vector<float> values(const shard_store& s, slice_id id) {
  auto r = s.read({id});
  BOOST_REQUIRE(r);
  return r->slices.front().values;
}

checkpoint_settings settings_for(const std::string& dir) {
  checkpoint_settings c;
  c.dir = dir;
  c.resume = true;
  c.mode = "sync";
  c.optimizer = "adam@server";
  return c;
}

} // namespace

BOOST_AUTO_TEST_SUITE(server_checkpoint_tests)

BOOST_AUTO_TEST_CASE(a_restored_store_continues_exactly_like_the_original) {
  for (auto opt : {"sgd", "momentum", "nesterov", "adam"}) {
    BOOST_TEST_CONTEXT("optimizer " << opt) {
      auto first = make_store("sync", opt);
      store_snapshot cut;
      BOOST_REQUIRE(!first.at_version(3, [&] { cut = snapshot_of(first); }));
      for (uint64_t c = 0; c < 6; ++c)
        for (uint32_t w : {0u, 1u})
          BOOST_REQUIRE(first.push(push_of(w, c)));
      BOOST_REQUIRE_EQUAL(first.version(), 6u);
      BOOST_REQUIRE_EQUAL(cut.version, 3u);
      // The cut went through the file format, as a resume reads it.
      checkpoint_data file{1, 0, "sync", opt, {cut}}, read;
      BOOST_REQUIRE(!decode(encode(file), read));
      auto second = make_store("sync", opt, false); // a new process
      auto n = apply_restore(second, read.stores.front());
      BOOST_REQUIRE(n);
      BOOST_CHECK_EQUAL(*n, 2u);
      BOOST_CHECK_EQUAL(second.version(), 3u);
      BOOST_CHECK_EQUAL(second.clock_of(0), 3u);
      BOOST_CHECK_EQUAL(second.clock_of(1), 3u);
      for (uint64_t c = 3; c < 6; ++c)
        for (uint32_t w : {0u, 1u})
          BOOST_REQUIRE(second.push(push_of(w, c)));
      BOOST_CHECK_EQUAL(second.version(), 6u);
      // Bit for bit: values, optimizer state and lr schedule all came back.
      BOOST_CHECK(values(second, a) == values(first, a));
      BOOST_CHECK(values(second, b) == values(first, b));
    }
  }
}

BOOST_AUTO_TEST_CASE(without_the_optimizer_state_the_trajectory_differs) {
  // The control for the test above: restoring values alone is not enough.
  auto first = make_store("sync", "momentum");
  store_snapshot cut;
  BOOST_REQUIRE(!first.at_version(2, [&] { cut = snapshot_of(first); }));
  for (uint64_t c = 0; c < 4; ++c)
    for (uint32_t w : {0u, 1u})
      BOOST_REQUIRE(first.push(push_of(w, c)));
  for (auto& s : cut.slices)
    s.state.clear(), s.updates = 0;
  auto second = make_store("sync", "momentum", false);
  BOOST_REQUIRE(apply_restore(second, cut));
  for (uint64_t c = 2; c < 4; ++c)
    for (uint32_t w : {0u, 1u})
      BOOST_REQUIRE(second.push(push_of(w, c)));
  BOOST_CHECK(values(second, a) != values(first, a));
}

BOOST_AUTO_TEST_CASE(a_sync_cut_leaves_out_the_open_round) {
  auto s = make_store("sync", "sgd");
  BOOST_REQUIRE(s.push(push_of(0, 0)));
  BOOST_REQUIRE(s.push(push_of(1, 0)));
  BOOST_REQUIRE(s.push(push_of(0, 1))); // worker 0 runs ahead
  BOOST_REQUIRE(s.push(push_of(0, 2)));
  store_snapshot cut;
  std::vector<float> at_cut;
  BOOST_REQUIRE(!s.at_version(2, [&] {
    cut = snapshot_of(s);
    at_cut = values(s, a);
  }));
  BOOST_CHECK(cut.slices.empty());      // not yet: version 1
  BOOST_REQUIRE(s.push(push_of(1, 1))); // completes round 1 only
  BOOST_CHECK_EQUAL(cut.version, 2u);
  BOOST_CHECK_EQUAL(cut.rounds, 2u);
  for (auto& w : cut.workers) { // clocks cut at the rounds applied
    BOOST_CHECK_EQUAL(w.clock, 2u);
    BOOST_CHECK(w.parts.empty());
  }
  BOOST_CHECK(cut.slices.front().values == at_cut);
  BOOST_REQUIRE(s.push(push_of(1, 2)));
  BOOST_CHECK(values(s, a) != at_cut); // round 2 came after the cut
  // A version already passed cannot be cut at.
  auto err = s.at_version(1, [] {});
  BOOST_CHECK(err == errc::clock_gap);
}

BOOST_AUTO_TEST_CASE(every_call_at_a_version_runs_and_rounds_show_when_open) {
  // A checkpoint and a backup's copy may wait for the same round.
  auto s = make_store("sync", "sgd");
  BOOST_CHECK(s.between_rounds());
  BOOST_REQUIRE(s.push(push_of(0, 0)));
  BOOST_CHECK(!s.between_rounds()); // worker 0's push waits in round 0
  std::vector<int> ran;
  BOOST_REQUIRE(!s.at_version(1, [&] { ran.push_back(1); }));
  BOOST_REQUIRE(!s.at_version(1, [&] { ran.push_back(2); }));
  BOOST_REQUIRE(s.push(push_of(1, 0)));
  BOOST_CHECK((ran == std::vector<int>{1, 2}));
  BOOST_CHECK(s.between_rounds());
  auto t = make_store("async", "sgd");
  BOOST_REQUIRE(t.push(push_of(0, 0)));
  BOOST_CHECK(t.between_rounds()); // applied at once
}

BOOST_AUTO_TEST_CASE(async_clocks_come_back_and_duplicates_stay_dropped) {
  auto s = make_store("async", "sgd");
  for (uint64_t c = 0; c < 5; ++c)
    BOOST_REQUIRE(s.push(push_of(0, c)));
  for (uint64_t c = 0; c < 2; ++c)
    BOOST_REQUIRE(s.push(push_of(1, c)));
  auto cut = snapshot_of(s);
  BOOST_CHECK_EQUAL(cut.version, 7u);
  // Not sync: a cut is now or never.
  BOOST_CHECK(s.at_version(9, [] {}) == errc::clock_gap);
  shard_store t{*parse_consistency("async"),
                make_optimizer_fn(optimizer("sgd"))};
  t.set_owned({{a, 3}, {b, 2}});
  BOOST_REQUIRE(apply_restore(t, cut)); // before the workers join
  t.set_workers({0, 1});
  BOOST_CHECK_EQUAL(t.clock_of(0), 5u);
  BOOST_CHECK_EQUAL(t.clock_of(1), 2u);
  BOOST_CHECK_EQUAL(t.version(), 7u);
  auto before = values(t, a);
  auto dup = t.push(push_of(0, 3)); // pushed before the cut
  BOOST_REQUIRE(dup);
  BOOST_CHECK(dup->duplicate);
  BOOST_CHECK(values(t, a) == before);
  auto next = t.push(push_of(0, 5));
  BOOST_REQUIRE(next);
  BOOST_CHECK(!next->duplicate);
}

BOOST_AUTO_TEST_CASE(a_store_restores_only_slices_it_owns_and_lacks) {
  auto full = make_store("sync", "sgd");
  auto cut = snapshot_of(full);
  resume_set set;
  set.files.push_back(checkpoint_data{4, 0, "sync", "sgd@server", {cut}});
  for (auto& s : set.files.front().stores.front().slices)
    set.slices[s.id] = {&set.files.front().stores.front(), &s};
  shard_store t{*parse_consistency("sync")};
  t.set_owned({{b, 2}, {slice_id{9, 0}, 4}});
  auto r = restorable(set, t);
  BOOST_REQUIRE_EQUAL(r.slices.size(), 1u);
  BOOST_CHECK(r.slices.front().id == b);
  BOOST_REQUIRE(apply_restore(t, r));
  BOOST_CHECK(t.initialised({b}));
  BOOST_CHECK(!t.initialised({slice_id{9, 0}}));
  BOOST_CHECK(restorable(set, t).slices.empty()); // b is initialised now
}

BOOST_AUTO_TEST_CASE(optimizer_state_of_another_optimizer_is_refused) {
  auto s = make_store("sync", "adam");
  BOOST_REQUIRE(s.push(push_of(0, 0)));
  BOOST_REQUIRE(s.push(push_of(1, 0)));
  auto cut = snapshot_of(s);
  BOOST_REQUIRE_EQUAL(cut.slices.front().state.size(), 2u); // m and v
  BOOST_CHECK_EQUAL(cut.slices.front().step, 1u);
  auto t = make_store("sync", "momentum", false);
  auto r = apply_restore(t, cut);
  BOOST_REQUIRE(!r);
  BOOST_CHECK(r.error() == errc::bad_file);
}

BOOST_AUTO_TEST_CASE(the_last_checkpoint_of_a_folder_is_loaded_and_checked) {
  temp_dir d;
  auto cfg = settings_for(d.path);
  auto none = load_resume_set(cfg);
  BOOST_REQUIRE(!none);
  BOOST_CHECK(none.error() == errc::bad_file);
  BOOST_CHECK_MESSAGE(describe(none.error()).find("start without --resume") !=
                          std::string::npos,
                      describe(none.error()));
  auto s = make_store("sync", "adam");
  auto cut = snapshot_of(s);
  cut.slices.pop_back(); // server 0 holds a, server 1 holds b
  auto other = snapshot_of(s);
  other.slices.erase(other.slices.begin());
  other.id = 7;
  std::vector<std::string> files{checkpoint_file_name(3, 0),
                                 checkpoint_file_name(3, 1)};
  BOOST_REQUIRE(!write_checked_file(
      d.path + "/" + files[0],
      encode(checkpoint_data{3, 0, "sync", "adam@server", {cut}})));
  BOOST_REQUIRE(!write_checked_file(
      d.path + "/" + files[1],
      encode(checkpoint_data{3, 1, "sync", "adam@server", {other}})));
  checkpoint_manifest m{3, 0, "sync", "adam@server", files, 1};
  BOOST_REQUIRE(!write_checked_file(d.path + "/" + manifest_name, encode(m)));
  auto set = load_resume_set(cfg);
  BOOST_REQUIRE_MESSAGE(set, (set ? "" : describe(set.error())));
  BOOST_CHECK_EQUAL((*set)->manifest.generation, 3u);
  BOOST_REQUIRE_EQUAL((*set)->slices.size(), 2u);
  BOOST_CHECK((*set)->slices.at(b).first->id == 7u);
  // Another mode or optimizer than the checkpoint's: one clear line.
  auto async = cfg;
  async.mode = "async";
  auto bad = load_resume_set(async);
  BOOST_REQUIRE(!bad);
  BOOST_CHECK(bad.error() == errc::invalid_config);
  BOOST_CHECK(describe(bad.error()).find("--server.mode=sync") !=
              std::string::npos);
  // The scheduler runs no optimizer: it checks the files, not its flags.
  BOOST_CHECK(load_resume_set(async, false));
  // A file of another generation than the manifest names.
  BOOST_REQUIRE(!write_checked_file(
      d.path + "/" + files[1],
      encode(checkpoint_data{2, 1, "sync", "adam@server", {other}})));
  auto mixed = load_resume_set(cfg);
  BOOST_REQUIRE(!mixed);
  BOOST_CHECK(mixed.error() == errc::bad_file);
  // A named file that is missing.
  std::filesystem::remove(d.path + "/" + files[1]);
  BOOST_CHECK(!load_resume_set(cfg));
}

BOOST_AUTO_TEST_SUITE_END()

// A backup fences its primaries' links (replication.hpp, "Fencing"): it
// refuses operations of a link older than the newest it has seen, and
// operations on a store it serves itself, and it reports a replica
// promoted while a newer link still owed it a copy as "lost". The test
// plays a primary (ranks the view does not hold) that sends replica
// operations over CAF to the one server of a local cluster.
#define BOOST_TEST_MODULE replica_fencing_tests
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/server/server_checkpoint.hpp"
#include "actors/server/shard_server.hpp"
#include "messages/checkpoint.hpp"
#include "messages/errors.hpp"
#include "messages/kv.hpp"
#include "messages/named_array.hpp"
#include "messages/type_ids.hpp"
#include "tests/local_cluster.hpp"
#include "tests/test_support.hpp"

using namespace std::chrono_literals;
using namespace troupe;
using namespace troupe::test;

namespace {

constexpr uint64_t key = 9;     // the replicated store's one slice: (9, 0)
constexpr uint32_t floats = 10; // of 10 floats
constexpr uint32_t worker = 0;

/// The one server of a local cluster, and a primary played by the test.
struct backup_under_test {
  cluster c{"async", 1, 1};
  cluster_view view;
  uint32_t rank = 0;
  caf::actor server;
  std::vector<uint64_t> keys; // of the views the test sends, after the first

  backup_under_test() {
    // An init of its own waits for the server to join: the view has it.
    auto got = c.worker(0).init({named_array{1, std::vector<float>(8)}});
    if (!got)
      BOOST_FAIL("init: " << describe(got.error()));
    auto v = c.worker(0).view();
    BOOST_REQUIRE(v);
    view = v->second;
    BOOST_REQUIRE_EQUAL(view.servers.size(), 1u);
    rank = view.servers.front().rank;
    // Its own handle, asked from its own node (cluster::self_for), as
    // replica_acks_test says why.
    server = c.servers.front();
  }

  /// Sends one replica operation as `primary`'s link `link` would: the
  /// replica's version, or the server's refusal.
  caf::expected<uint64_t> replicate(uint32_t primary, uint64_t link,
                                    uint64_t store, replica_op op, frame f = {},
                                    std::vector<uint64_t> xs = {}) {
    caf::expected<uint64_t> out{caf::make_error(errc::timeout, "no answer")};
    c.self_for(server)
        ->request(server, 10s, replicate_atom_v, primary, link, store, primary,
                  static_cast<uint8_t>(op), std::move(f), std::move(xs))
        .receive([&out](uint64_t v) { out = v; },
                 [&out](caf::error& err) { out = std::move(err); });
    return out;
  }

  /// The layout (slice (k, 0)), live worker, first values and `pushes`
  /// pushes of store `store` as `primary`'s link `link` sends them: the
  /// version reached.
  uint64_t feed(uint32_t primary, uint64_t link, uint64_t store,
                uint64_t pushes, uint64_t k = key) {
    auto ok = [](const caf::expected<uint64_t>& x) {
      if (!x)
        BOOST_FAIL("refused: " << describe(x.error()));
      return *x;
    };
    layout(primary, link, store, k);
    ok(replicate(primary, link, store, op_init,
                 encode(init_request{worker,
                                     view.epoch,
                                     {{{k, 0}, std::vector<float>(floats)}}})));
    uint64_t version = 0;
    for (uint64_t clock = 0; clock < pushes; ++clock)
      version = ok(replicate(primary, link, store, op_push, push_at(clock, k)));
    return version;
  }

  /// The layout (slice (k, 0)) and live worker of store `store`, as
  /// `primary`'s link `link` sends them: a replica still pristine.
  void layout(uint32_t primary, uint64_t link, uint64_t store,
              uint64_t k = key) {
    for (auto r :
         {replicate(primary, link, store, op_owned, {}, {k, 0, floats}),
          replicate(primary, link, store, op_workers, {}, {worker})})
      if (!r)
        BOOST_FAIL("refused: " << describe(r.error()));
  }

  /// A newer link's first operation, on another store of the primary
  /// (its layout, slice (k, 0)): the primary's replicas become stale.
  void open_link(uint32_t primary, uint64_t link, uint64_t other_store,
                 uint64_t k) {
    auto r =
        replicate(primary, link, other_store, op_owned, {}, {k, 0, floats});
    if (!r)
      BOOST_FAIL("refused: " << describe(r.error()));
  }

  frame push_at(uint64_t clock, uint64_t k = key) const {
    return encode(push_request{worker,
                               clock,
                               view.epoch,
                               0,
                               1,
                               {{{k, 0}, std::vector<float>(floats, 1.0f)}}});
  }

  /// The whole store as a primary's op_copy carries it: initialised, no
  /// push applied (version 0).
  frame fresh_copy(uint64_t store, uint32_t origin) const {
    shard_store s;
    s.set_owned({{slice_id{key, 0}, floats}});
    s.set_workers({worker});
    BOOST_REQUIRE(!s.init(init_request{
        worker, view.epoch, {{{key, 0}, std::vector<float>(floats)}}}));
    auto snap = snapshot_of(s);
    snap.id = store;
    snap.origin = origin;
    checkpoint_data x;
    x.stores.push_back(std::move(snap));
    return encode(x);
  }

  /// Sends the server a view in which the primaries are gone and slice
  /// (k, 0) is its own (with those of earlier calls): it promotes the
  /// replica that holds it.
  void promote(uint64_t k = key) {
    keys.push_back(k);
    auto v = view;
    v.epoch += keys.size();
    for (auto x : keys) {
      v.keys.push_back(key_info{x, floats});
      v.placement.push_back(slice_place{x, 0, rank});
    }
    caf::send_as(c.remote_sched, server, view_atom_v, encode(v));
    // A pull of that epoch is answered once the server has the view.
    pull_request probe{worker, 0, v.epoch, {}};
    bool answered = false;
    c.self_for(server)
        ->request(server, 10s, pull_atom_v, encode(probe))
        .receive([&answered](const frame&) { answered = true; },
                 [&answered](const caf::error&) { answered = true; });
    BOOST_REQUIRE(answered);
  }
};

/// Waits for the server's "lost" event: exactly one, saying `says`.
void expect_one_lost(backup_under_test& t, const std::string& says) {
  auto lost = t.c.events_of("lost", 10s);
  BOOST_REQUIRE_EQUAL(lost.size(), 1u);
  BOOST_TEST_MESSAGE(lost.front().detail);
  BOOST_CHECK_EQUAL(lost.front().rank, t.rank);
  BOOST_CHECK_MESSAGE(lost.front().detail.find(says) != std::string::npos,
                      lost.front().detail);
}

/// A replica made stale (a newer link's first operation, on another
/// store) and promoted: its "lost" event, the first the test expects, comes
/// after any the server sent before (one sender, one receiver: in order).
/// So the events say whether the server reported anything else as lost.
void expect_no_other_lost(backup_under_test& t) {
  constexpr uint32_t primary = 90;
  constexpr uint64_t k = 90;
  BOOST_REQUIRE_EQUAL(t.feed(primary, replica_link_tag(3, 1), 9090, 1, k), 1u);
  t.open_link(primary, replica_link_tag(3, 2), 9091, k + 1);
  t.promote(k);
  expect_one_lost(t, "of server 90's store");
}

void expect_refused(const caf::expected<uint64_t>& x, const std::string& why) {
  if (x)
    BOOST_FAIL("taken, at version " << *x);
  BOOST_TEST_MESSAGE(describe(x.error()));
  BOOST_CHECK(x.error() == errc::not_a_member);
  BOOST_CHECK_MESSAGE(describe(x.error()).find(why) != std::string::npos,
                      describe(x.error()));
}

} // namespace

BOOST_AUTO_TEST_SUITE(replica_fencing_tests)

BOOST_AUTO_TEST_CASE(
    an_operation_of_an_older_link_is_refused_and_changes_nothing) {
  // The primary dropped link 1 (a timeout) and replicates on link 2. A copy
  // link 1 sent before it went arrives late: taken, it rolled the replica
  // back over what link 2 had brought, pushes the primary acknowledged.
  backup_under_test t;
  constexpr uint32_t primary = 77;
  constexpr uint64_t store = 4242;
  auto one = replica_link_tag(3, 1), two = replica_link_tag(3, 2);
  BOOST_REQUIRE_EQUAL(t.feed(primary, one, store, 1), 1u);
  auto at = t.replicate(primary, two, store, op_push, t.push_at(1));
  BOOST_REQUIRE(at);
  BOOST_REQUIRE_EQUAL(*at, 2u);
  expect_refused(t.replicate(primary, one, store, op_copy,
                             t.fresh_copy(store, primary), {key, 0, floats}),
                 "newer link");
  auto now = t.replicate(primary, two, store, op_workers, {}, {worker});
  BOOST_REQUIRE(now);
  BOOST_CHECK_EQUAL(*now, 2u); // not rolled back to the copy's 0
  // A process that took the rank in a later view outranks every link of
  // the one before, whatever their serials.
  auto later = replica_link_tag(4, 1);
  BOOST_CHECK_GT(later, replica_link_tag(3, 1000));
  BOOST_CHECK(t.replicate(primary, later, store, op_workers, {}, {worker}));
  expect_refused(t.replicate(primary, two, store, op_push, t.push_at(2)),
                 "newer link");
}

BOOST_AUTO_TEST_CASE(a_store_served_here_takes_no_replica_operation) {
  // The scheduler declared the primary dead while it was not: its store
  // is promoted here, and it keeps sending. A copy it sends on a new link
  // made a replica of the store beside the one served (promoted a second
  // time in the next view); a push would go to a replica no one reads.
  backup_under_test t;
  constexpr uint32_t primary = 78;
  constexpr uint64_t store = 4343;
  auto one = replica_link_tag(3, 1);
  BOOST_REQUIRE_EQUAL(t.feed(primary, one, store, 2), 2u);
  t.promote();
  expect_refused(t.replicate(primary, one, store, op_push, t.push_at(2)),
                 "served here");
  expect_refused(t.replicate(primary, replica_link_tag(3, 2), store, op_copy,
                             t.fresh_copy(store, primary), {key, 0, floats}),
                 "served here");
  // The replica was up to date when promoted: nothing was lost.
  expect_no_other_lost(t);
}

BOOST_AUTO_TEST_CASE(a_replica_promoted_before_its_copy_is_reported_lost) {
  // The primary dropped its link, acknowledged pushes alone, and opened a
  // new one; it died before the new link's copy of this store came. The
  // replica is the best there is, and is promoted, but what the primary
  // acknowledged alone is gone: said as a "lost" event, not in silence.
  backup_under_test t;
  constexpr uint32_t primary = 79;
  constexpr uint64_t store = 4444, other = 4445;
  BOOST_REQUIRE_EQUAL(t.feed(primary, replica_link_tag(3, 1), store, 3), 3u);
  t.open_link(primary, replica_link_tag(3, 2), other, key + 1);
  t.promote();
  expect_one_lost(t, "since version 3");
}

BOOST_AUTO_TEST_CASE(a_copy_on_the_new_link_makes_the_replica_current_again) {
  backup_under_test t;
  constexpr uint32_t primary = 80;
  constexpr uint64_t store = 4546;
  BOOST_REQUIRE_EQUAL(t.feed(primary, replica_link_tag(3, 1), store, 3), 3u);
  auto two = replica_link_tag(3, 2);
  BOOST_REQUIRE(t.replicate(primary, two, store, op_copy,
                            t.fresh_copy(store, primary), {key, 0, floats}));
  BOOST_REQUIRE(t.replicate(primary, two, store, op_workers, {}, {worker}));
  t.promote();
  expect_no_other_lost(t);
}

BOOST_AUTO_TEST_CASE(a_pristine_replica_is_stale_too_until_its_copy) {
  // Link 1 brought only the layout; the primary then lost the link, and
  // took the Init and a push alone. The store is no longer pristine there,
  // so the new link owes a copy (in sync, at the end of the round): the
  // primary dies first. The replica promoted holds no values at all.
  backup_under_test t;
  constexpr uint32_t primary = 81;
  t.layout(primary, replica_link_tag(3, 1), 4747);
  t.open_link(primary, replica_link_tag(3, 2), 4748, key + 1);
  t.promote();
  expect_one_lost(t, "of server 81's store");
}

BOOST_AUTO_TEST_CASE(a_replica_pristine_at_the_new_link_is_current_once_fed) {
  // The store was pristine at the primary too when the new link came: the
  // link feeds it without a copy, and nothing was acknowledged alone.
  backup_under_test t;
  constexpr uint32_t primary = 82;
  constexpr uint64_t store = 4849;
  t.layout(primary, replica_link_tag(3, 1), store);
  t.layout(primary, replica_link_tag(3, 2), store);
  t.promote();
  expect_no_other_lost(t);
}

BOOST_AUTO_TEST_CASE(a_failed_copy_keeps_the_replica_and_ends_its_link) {
  // A copy that cannot be applied (here: no checkpoint frame) replaced the
  // replica with an empty one of the same layout, promoted in silence; and
  // the link's next operations were taken on it.
  backup_under_test t;
  constexpr uint32_t primary = 83;
  constexpr uint64_t store = 4950;
  BOOST_REQUIRE_EQUAL(t.feed(primary, replica_link_tag(3, 1), store, 3), 3u);
  auto two = replica_link_tag(3, 2);
  auto copy =
      t.replicate(primary, two, store, op_copy,
                  frame{std::vector<uint8_t>(64, 0x5A)}, {key, 0, floats});
  BOOST_REQUIRE(!copy);
  BOOST_CHECK(copy.error() == errc::malformed_message);
  expect_refused(t.replicate(primary, two, store, op_workers, {}, {worker}),
                 "refused an operation already");
  // A newer link is taken again; the replica is the one link 1 fed.
  auto now = t.replicate(primary, replica_link_tag(3, 3), store, op_workers, {},
                         {worker});
  BOOST_REQUIRE(now);
  BOOST_CHECK_EQUAL(*now, 3u);
  t.promote();
  expect_one_lost(t, "promoted at version 3");
}

BOOST_AUTO_TEST_CASE(a_refused_operation_makes_the_replicas_stale) {
  // The primary drops the link at the refusal, and acknowledges alone what
  // it had sent on it after (refused here too): until the next link's
  // first operation marked them, its replicas were promoted in silence.
  backup_under_test t;
  constexpr uint32_t primary = 84;
  constexpr uint64_t store = 5051;
  auto one = replica_link_tag(3, 1);
  BOOST_REQUIRE_EQUAL(t.feed(primary, one, store, 3), 3u);
  auto gap = t.replicate(primary, one, store, op_push, t.push_at(5));
  BOOST_REQUIRE(!gap); // clock 5 after 2: a gap
  BOOST_TEST_MESSAGE(describe(gap.error()));
  t.promote();
  expect_one_lost(t, "promoted at version 3");
}

BOOST_AUTO_TEST_CASE(a_pull_operation_is_taken_and_a_malformed_one_refused) {
  // op_pulled (shard_store::pulled on the replica) carries a worker, a
  // clock and its acked: three numbers, the rank within 32 bits.
  backup_under_test t;
  constexpr uint32_t primary = 78;
  constexpr uint64_t store = 4343;
  auto link = replica_link_tag(3, 1);
  BOOST_REQUIRE_EQUAL(t.feed(primary, link, store, 1), 1u);
  auto ok = t.replicate(primary, link, store, op_pulled, {}, {worker, 1, 1});
  BOOST_REQUIRE(ok); // (a _MESSAGE would render ok.error() on success)
  BOOST_CHECK_EQUAL(*ok, 1u);
  for (auto numbers : {std::vector<uint64_t>{worker, 1},
                       std::vector<uint64_t>{uint64_t{1} << 40, 1, 1}}) {
    backup_under_test u;
    BOOST_REQUIRE_EQUAL(u.feed(primary, link, store, 1), 1u);
    auto bad = u.replicate(primary, link, store, op_pulled, {}, numbers);
    BOOST_REQUIRE(!bad);
    BOOST_CHECK_MESSAGE(describe(bad.error()).find("a pull of") !=
                            std::string::npos,
                        describe(bad.error()));
  }
}

BOOST_AUTO_TEST_SUITE_END()

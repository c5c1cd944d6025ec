// A pipeline of stage actors for the tests: spawned over one or several
// actor systems, linked, stepped through mini-batches, and its weights
// pulled. With a road kind, each stage gets roads of its own
// (actors/pipeline/stage_roads.hpp), on loopback.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/node/node_config.hpp"
#include "actors/pipeline/stage_actor.hpp"
#include "actors/pipeline/stage_roads.hpp"
#include "messages/pipeline.hpp"
#include "messages/type_ids.hpp"
#include "tests/pipeline/pipeline_reference.hpp"

namespace troupe::test {

inline std::unique_ptr<node_config> config() {
  auto cfg = std::make_unique<node_config>();
  cfg->load<caf::io::middleman>();
  BOOST_REQUIRE(!cfg->finish());
  return cfg;
}

/// `n` actor systems of their own configs (CAF's middleman loaded).
struct actor_systems {
  std::vector<std::unique_ptr<node_config>> cfgs;
  std::vector<std::unique_ptr<caf::actor_system>> systems;
  explicit actor_systems(int n) {
    for (int i = 0; i < n; ++i) {
      cfgs.push_back(config());
      systems.push_back(std::make_unique<caf::actor_system>(*cfgs.back()));
    }
  }
  caf::actor_system& first() { return *systems.front(); }
};

/// P stage actors, each in the actor system `systems[i % systems.size()]`,
/// reached from `driver` (over the network where the systems differ).
struct pipeline {
  std::vector<caf::actor> stages;
  std::vector<std::shared_ptr<stage_roads>> roads; ///< with a road kind

  /// `road`: middleman = no roads (CAF carries the tensors), else each
  /// stage listens on a road of that kind and dials its neighbours'.
  /// `plan`: each stage's update beside lr.
  pipeline(caf::actor_system& driver,
           std::vector<std::unique_ptr<caf::actor_system>>& systems,
           pipeline_schedule s, uint32_t p, uint32_t m,
           road_kind road = road_kind::middleman,
           const update_plan& plan = {}) {
    using namespace std::chrono_literals;
    auto whole = fresh_model();
    auto cut = cut_of(whole, p);
    for (uint32_t i = 0; i < p; ++i) {
      stage_settings cfg{spec, 7, cut, i, m, s, sgd_at(lr)};
      cfg.member = i;
      cfg.update.weight_decay = plan.weight_decay;
      cfg.update.lr_decay_steps = plan.every;
      cfg.update.lr_decay = plan.decay;
      cfg.update.name = plan.optimizer;
      if (road != road_kind::middleman) {
        kv_settings kv;
        kv.road = road;
        kv.ring_bytes = 1u << 20;
        auto r = stage_roads::listen("127.0.0.1", kv);
        if (!r)
          BOOST_FAIL(driver.render(r.error()));
        cfg.roads = *r;
        roads.push_back(*r);
      }
      auto& sys = *systems[i % systems.size()];
      auto a = sys.spawn(stage_actor, cfg);
      if (cfg.roads)
        cfg.roads->deliver_to(a);
      if (&sys != &driver) { // reach it over the network
        auto port = sys.middleman().publish(a, 0, "127.0.0.1");
        BOOST_REQUIRE(port);
        auto remote = driver.middleman().remote_actor("127.0.0.1", *port);
        if (!remote)
          BOOST_FAIL(driver.render(remote.error()));
        a = *remote;
      }
      stages.push_back(a);
    }
    caf::scoped_actor self{driver};
    for (uint32_t i = 0; i < p; ++i)
      self->request(stages[i], 10s, link_atom_v,
                    i > 0 ? stages[i - 1] : caf::actor{},
                    i + 1 < p ? stages[i + 1] : caf::actor{})
          .receive([](uint64_t) {},
                   [&](caf::error& err) { BOOST_FAIL(driver.render(err)); });
  }

  ~pipeline() { // a test that failed half way leaves no stage waiting
    for (auto& st : stages)
      caf::anon_send_exit(st, caf::exit_reason::kill);
  }

  /// Runs mini-batch `k` through every stage; the last stage's loss sum.
  double step(caf::actor_system& driver, uint64_t k) {
    using namespace std::chrono_literals;
    mini_batch b{k};
    stage_tensor x{k, 0, uint32_t(batch), 20, b.x};
    stage_tensor y{k, 0, uint32_t(batch), 1, {}};
    for (auto l : b.labels)
      y.values.push_back(float(l));
    caf::scoped_actor self{driver};
    // Every stage at once (each waits for its neighbours), then the
    // answers, as plain messages to the sender.
    for (size_t i = 0; i < stages.size(); ++i) {
      frame f = i == 0                   ? encode(x)
                : i + 1 == stages.size() ? encode(y)
                                         : frame{};
      self->send(stages[i], step_atom_v, k, f);
    }
    double loss = 0;
    for (size_t i = 0; i < stages.size(); ++i)
      self->receive([&loss](double l) { loss += l; },
                    [&](caf::error& err) { BOOST_FAIL(driver.render(err)); },
                    caf::after(20s) >> [] { BOOST_FAIL("a stage is stuck"); });
    return loss;
  }

  /// What each stage's pull gives (its weights, then its optimizer's
  /// state), by stage.
  std::vector<std::vector<named_array>> pulled(caf::actor_system& driver) {
    using namespace std::chrono_literals;
    std::vector<std::vector<named_array>> out;
    caf::scoped_actor self{driver};
    for (auto& st : stages)
      self->request(st, 10s, pull_atom_v)
          .receive(
              [&out](std::vector<named_array>& xs) {
                out.push_back(std::move(xs));
              },
              [&](caf::error& err) { BOOST_FAIL(driver.render(err)); });
    return out;
  }

  /// Every stage takes `arrays` (by stage, as pulled() gives them) as its
  /// weights after `step` mini-batches, as a restarted pipeline's do.
  void reset(caf::actor_system& driver,
             const std::vector<std::vector<named_array>>& arrays,
             uint64_t step) {
    using namespace std::chrono_literals;
    BOOST_REQUIRE_EQUAL(arrays.size(), stages.size());
    caf::scoped_actor self{driver};
    for (size_t i = 0; i < stages.size(); ++i)
      self->request(stages[i], 10s, reset_atom_v, uint64_t{0}, step, arrays[i],
                    i > 0 ? stages[i - 1] : caf::actor{},
                    i + 1 < stages.size() ? stages[i + 1] : caf::actor{},
                    caf::actor{})
          .receive([](uint64_t) {},
                   [&](caf::error& err) { BOOST_FAIL(driver.render(err)); });
  }

  /// Every stage's weights, named as ordinary() names them.
  weights weights_of(caf::actor_system& driver) {
    using namespace std::chrono_literals;
    weights got;
    caf::scoped_actor self{driver};
    for (auto& st : stages)
      self->request(st, 10s, pull_atom_v)
          .receive(
              [&got](std::vector<named_array>& xs) {
                for (auto& x : xs)
                  if (x.key < stage_state_key_step) // not optimizer state
                    got["dense" + std::to_string((x.key - 1) / 2) +
                        ((x.key - 1) % 2 ? ".b" : ".w")] = std::move(x.values);
              },
              [&](caf::error& err) { BOOST_FAIL(driver.render(err)); });
    return got;
  }
};

} // namespace troupe::test

// A custom troupe worker: data-parallel linear regression on generated data,
// written against troupe's public API only (actors/worker/worker.hpp,
// actors/kv/kv.hpp). Each worker makes its own samples of y = x . w_true +
// noise and pushes the gradient of the mean squared error; the servers'
// optimizer applies it.
//
// usage (with a scheduler and a server running, see README.md):
//   linear_regression --scheduler-port=PORT [--worker.steps=N]
// The server should run e.g. --optimizer.name=sgd --optimizer.lr=0.1.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>

#include <caf/actor_system.hpp>

#include "actors/kv/kv.hpp"
#include "actors/node/node_config.hpp"
#include "actors/worker/worker.hpp"
#include "messages/errors.hpp"

namespace {

constexpr size_t features = 8;
constexpr size_t samples_per_worker = 2000;
constexpr uint64_t weights_key = 1;

/// The model the data comes from: w_true[i] = i + 1 (last: the bias).
float true_weight(size_t i) {
  return float(i + 1) / float(features);
}

class linear_regression : public troupe::worker_logic {
public:
  explicit linear_regression(uint32_t steps) : steps_(steps) {}

  std::vector<troupe::named_array> parameters() override {
    return {{weights_key, std::vector<float>(features, 0.0f)}};
  }

  void start(uint32_t rank, uint32_t workers) override {
    rank_ = rank;
    std::mt19937 gen{1234 + rank}; // each worker its own samples
    std::normal_distribution<float> x_dist{0.0f, 1.0f}, noise{0.0f, 0.01f};
    xs_.resize(samples_per_worker * features);
    ys_.resize(samples_per_worker);
    for (size_t s = 0; s < samples_per_worker; ++s) {
      float y = noise(gen);
      for (size_t i = 0; i < features; ++i) {
        float x = i + 1 == features ? 1.0f : x_dist(gen); // last: bias
        xs_[s * features + i] = x;
        y += x * true_weight(i);
      }
      ys_[s] = y;
    }
    std::printf("worker %u of %u: %zu samples\n", rank, workers,
                samples_per_worker);
  }

  bool done(uint64_t clock) override { return clock >= steps_; }

  caf::expected<std::vector<troupe::named_array>>
  step(uint64_t, const std::vector<troupe::named_array>& weights) override {
    auto& w = weights.front().values;
    std::vector<float> grad(features, 0.0f);
    for (size_t s = 0; s < samples_per_worker; ++s) {
      const float* x = &xs_[s * features];
      float err = -ys_[s];
      for (size_t i = 0; i < features; ++i)
        err += x[i] * w[i];
      for (size_t i = 0; i < features; ++i) // d/dw of mean err^2 / 2
        grad[i] += err * x[i] / float(samples_per_worker);
    }
    return std::vector<troupe::named_array>{{weights_key, std::move(grad)}};
  }

  void finish(const std::vector<troupe::named_array>& weights) override {
    double dist = 0;
    for (size_t i = 0; i < features; ++i) {
      double d = weights.front().values[i] - true_weight(i);
      dist += d * d;
    }
    converged_ = std::sqrt(dist) < 0.05;
    std::printf("worker %u: |w - w_true| = %.5f after %u steps: %s\n", rank_,
                std::sqrt(dist), steps_,
                converged_ ? "converged" : "NOT converged");
  }

  bool converged() const { return converged_; }

private:
  uint32_t steps_;
  uint32_t rank_ = 0;
  std::vector<float> xs_, ys_;
  bool converged_ = false;
};

} // namespace

int main(int argc, char** argv) {
  // --scheduler-port, --worker.steps, ... read and checked as troupe-node
  // does (--openssl.* loads TLS, --metrics.port serves metrics).
  troupe::node_config cfg;
  if (auto rc = troupe::read_command_line(cfg, argc, argv))
    return *rc;
  caf::actor_system sys{cfg};
  auto sched = troupe::connect_scheduler(sys, cfg.scheduler_host,
                                         cfg.scheduler_port, 10000);
  if (!sched) {
    std::cerr << "*** " << troupe::describe(sched.error()) << '\n';
    return 1;
  }
  auto logic = std::make_shared<linear_regression>(cfg.worker.steps);
  // Said at joining: in sync the scheduler refuses a worker of other steps,
  // which would leave the others' rounds short.
  auto join = cfg.kv;
  join.work = "--worker.steps=" + std::to_string(cfg.worker.steps);
  troupe::worker_options opts; // a step hung past it ends the process
  opts.step_timeout_ms = cfg.worker.step_timeout_ms;
  auto rc = troupe::run_worker(sys, *sched, join, logic, opts);
  return rc != 0 ? rc : (logic->converged() ? 0 : 1);
}

// The trainer worker's loop: see the header.
#include "actors/trainer.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include "actors/kv.hpp"
#include "actors/log.hpp"
#include "actors/server_optimizer.hpp"
#include "kernels/blas.hpp"
#include "kernels/idx.hpp"
#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "kernels/partition.hpp"
#include "messages/errors.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;

/// Everything one trainer worker holds.
struct trainer {
  trainer(const node_config& c, kv& s, model m)
      : cfg(c.train), store(s), net(std::move(m)),
        local_opt(c.optimizer.on == "worker"),
        optimizer(make_optimizer_fn(c.optimizer)) {
    // nop
  }
  const train_settings& cfg;
  kv& store;
  model net;
  dataset train, test;
  uint32_t rank = 0;
  uint32_t workers = 1;
  uint64_t clock = 0;    // global step: the kv clock
  double train_secs = 0; // time in steps, without evaluations
  // Optimizer on the workers: the kv holds each sync round's mean gradient,
  // which every worker applies once to its own replica.
  bool local_opt;
  update_fn optimizer;
  uint64_t rounds_applied = 0;
  std::vector<uint64_t> keys;
  std::vector<float> xs;
  std::vector<uint8_t> ys;
  std::ofstream metrics;
  clock_type::time_point start;
};

int fail(const std::string& what) {
  std::cerr << "*** " << what << '\n';
  return 1;
}

std::vector<named_array> to_arrays(const std::vector<param_ref>& ps) {
  std::vector<named_array> out;
  for (size_t i = 0; i < ps.size(); ++i)
    out.push_back(named_array{
        i + 1, std::vector<float>(ps[i].data, ps[i].data + ps[i].size)});
  return out;
}

void set_parameters(model& net, const std::vector<named_array>& xs) {
  auto ps = net.parameters();
  for (size_t i = 0; i < ps.size(); ++i)
    std::memcpy(ps[i].data, xs[i].values.data(), ps[i].size * sizeof(float));
}

/// Accuracy of `net` on the first `limit` samples of `d` (0 = all).
double evaluate(model& net, const dataset& d, size_t limit) {
  size_t n = limit == 0 ? d.labels.size() : std::min(limit, d.labels.size());
  size_t per = net.input_size(), correct = 0;
  for (size_t first = 0; first < n; first += 1000) {
    size_t b = std::min<size_t>(1000, n - first);
    net.forward(d.images.data() + first * per, b);
    size_t c = 0;
    accuracy_count_cpu(net.logits().data(), d.labels.data() + first, b,
                       net.output_size(), &c);
    correct += c;
  }
  return double(correct) / double(n);
}

/// Takes what a pull at t.clock returned: the weights, or (optimizer on the
/// workers) the mean gradient of round clock - 1, applied once.
void take_pulled(trainer& t, const std::vector<named_array>& xs) {
  if (!t.local_opt) {
    set_parameters(t.net, xs);
    return;
  }
  if (t.clock == 0 || t.rounds_applied == t.clock)
    return;
  auto ps = t.net.parameters();
  std::vector<float> w;
  for (size_t i = 0; i < ps.size(); ++i) {
    w.assign(ps[i].data, ps[i].data + ps[i].size);
    t.optimizer(slice_id{xs[i].key, 0}, w, xs[i].values, 1);
    std::memcpy(ps[i].data, w.data(), ps[i].size * sizeof(float));
  }
  t.rounds_applied = t.clock;
}

/// Gathers the samples `idx[first .. first + batch)` into t.xs and t.ys.
void gather_batch(trainer& t, const std::vector<size_t>& idx, size_t first) {
  size_t per = t.net.input_size();
  t.xs.resize(t.cfg.batch * per);
  t.ys.resize(t.cfg.batch);
  for (size_t i = 0; i < t.cfg.batch; ++i) {
    auto s = idx[first + i];
    std::memcpy(t.xs.data() + i * per, t.train.images.data() + s * per,
                per * sizeof(float));
    t.ys[i] = t.train.labels[s];
  }
}

/// One step: pull weights for our clock, compute gradients, push them.
caf::error step(trainer& t, const std::vector<size_t>& idx, size_t first,
                double& loss_sum) {
  auto weights = t.store.pull(t.clock, t.keys);
  if (!weights)
    return std::move(weights.error());
  take_pulled(t, *weights);
  gather_batch(t, idx, first);
  float loss = 0;
  auto st =
      t.net.compute_gradients(t.xs.data(), t.ys.data(), t.cfg.batch, &loss);
  if (st != kernel_status::ok)
    return caf::make_error(errc::bad_shape, "gradients", to_string(st));
  loss_sum += loss;
  auto pushed = t.store.push(t.clock++, to_arrays(t.net.gradients()));
  return pushed ? caf::error{} : std::move(pushed.error());
}

/// Rank 0: pulls the weights every push so far went into, evaluates, and
/// prints one progress line (and a metrics line).
caf::error report(trainer& t, double epoch, double loss, double secs,
                  size_t samples) {
  auto weights = t.store.pull(t.clock, t.keys);
  if (!weights)
    return std::move(weights.error());
  take_pulled(t, *weights);
  auto acc = evaluate(t.net, t.test, t.cfg.eval_samples);
  auto elapsed =
      std::chrono::duration<double>(clock_type::now() - t.start).count();
  double rate = double(samples) * t.workers / secs;
  std::printf("epoch %.*f/%u  train loss %.4f  test accuracy %.4f  "
              "samples/s %.0f  elapsed %.1f s\n",
              t.cfg.evals_per_epoch > 1 ? 2 : 0, epoch, t.cfg.epochs, loss, acc,
              rate, elapsed);
  std::fflush(stdout);
  if (t.metrics)
    t.metrics << "{\"epoch\":" << epoch << ",\"train_loss\":" << loss
              << ",\"test_accuracy\":" << acc << ",\"samples_per_s\":" << rate
              << ",\"train_s\":" << t.train_secs << ",\"elapsed_s\":" << elapsed
              << "}\n"
              << std::flush;
  return caf::none;
}

caf::error run_epoch(trainer& t, uint32_t epoch) {
  std::vector<size_t> idx;
  epoch_partition(t.train.labels.size(), epoch, t.cfg.seed, t.rank, t.workers,
                  idx);
  // Every worker runs the same number of steps, or sync rounds would stall.
  size_t steps = (t.train.labels.size() / t.workers) / t.cfg.batch;
  uint32_t parts = t.cfg.evals_per_epoch;
  for (uint32_t p = 0; p < parts; ++p) {
    size_t first = steps * p / parts, last = steps * (p + 1) / parts;
    auto begin = clock_type::now();
    double loss_sum = 0;
    for (size_t s = first; s < last; ++s)
      if (auto err = step(t, idx, s * t.cfg.batch, loss_sum))
        return err;
    auto secs =
        std::chrono::duration<double>(clock_type::now() - begin).count();
    t.train_secs += secs;
    if (t.rank == 0 && last > first)
      if (auto err = report(t, epoch + double(p + 1) / parts,
                            loss_sum / double(last - first), secs,
                            (last - first) * t.cfg.batch))
        return err;
  }
  return caf::none;
}

/// Loads data and model, declares and initialises the parameters.
int prepare(trainer& t) {
  set_blas_threads(1); // several processes share the cores
  if (auto err = load_fashion_mnist(t.cfg.data_dir, "train", t.train);
      !err.empty())
    return fail(err);
  if (auto err = load_fashion_mnist(t.cfg.data_dir, "t10k", t.test);
      !err.empty())
    return fail(err);
  t.net.init_parameters(t.cfg.seed);
  auto params = to_arrays(t.net.parameters());
  for (auto& p : params) {
    t.keys.push_back(p.key);
    if (t.local_opt) // the kv holds gradients; replicas start alike (seed)
      std::fill(p.values.begin(), p.values.end(), 0.0f);
  }
  auto init = t.store.init(std::move(params));
  if (!init)
    return fail("init failed: " + describe(init.error()));
  if (!t.local_opt)
    set_parameters(t.net, *init);
  if (auto b = t.store.barrier("start"); !b)
    return fail("barrier start failed: " + describe(b.error()));
  auto v = t.store.view();
  if (!v)
    return fail("view failed: " + describe(v.error()));
  t.rank = v->first;
  t.workers = static_cast<uint32_t>(v->second.workers.size());
  if (!t.cfg.metrics_file.empty() && t.rank == 0)
    t.metrics.open(t.cfg.metrics_file, std::ios::app);
  return 0;
}

} // namespace

int run_training(caf::actor_system& sys, caf::actor scheduler,
                 const node_config& cfg) {
  std::string err;
  auto net = model::from_spec(cfg.train.model, &err);
  if (!net)
    return fail("--train.model: " + err);
  kv store{sys, std::move(scheduler), cfg.kv};
  trainer t{cfg, store, std::move(*net)};
  if (auto rc = prepare(t); rc != 0)
    return rc;
  if (t.rank == 0)
    std::printf("training %s on Fashion-MNIST: %u workers, batch %u each, "
                "%u epochs\n",
                cfg.train.model.c_str(), t.workers, cfg.train.batch,
                cfg.train.epochs);
  t.start = clock_type::now();
  for (uint32_t e = 0; e < cfg.train.epochs; ++e)
    if (auto err = run_epoch(t, e))
      return fail("training failed: " + describe(err));
  if (auto b = store.barrier("end"); !b)
    return fail("barrier end failed: " + describe(b.error()));
  if (t.rank == 0) {
    auto w = store.pull(t.clock, t.keys);
    if (!w)
      return fail("final pull failed: " + describe(w.error()));
    take_pulled(t, *w);
    std::printf("final test accuracy: %.4f\n", evaluate(t.net, t.test, 0));
  } else { // rank 0 speaks for the job on stdout
    TROUPE_LOG(info, "worker " + std::to_string(t.rank), cfg.train.epochs,
               " epochs done");
  }
  std::fflush(stdout);
  return 0;
}

} // namespace troupe

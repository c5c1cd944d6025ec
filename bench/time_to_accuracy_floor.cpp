// The compute-only floor: the model's step in this process without a
// cluster, and the machine's limit for a step's exchange beside it.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "bench/memcpy_rate.hpp"
#include "bench/round_trips.hpp"
#include "bench/time_to_accuracy.hpp"
#include "kernels/idx.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/partition.hpp"

namespace troupe::bench::time_to_accuracy {

namespace {

exchange_limit measure_exchange() {
  exchange_limit x;
  auto rt = bench::round_trips_per_s(bench::rt_socket::unix_pair, 1, 0.5);
  if (rt.per_s <= 0) {
    x.why = "raw round trips: " + rt.why;
    return x;
  }
  x.round_trips_per_s = rt.per_s;
  x.memcpy_gbps = bench::memcpy_gbps(0.5);
  if (x.memcpy_gbps <= 0)
    x.why = "the memcpy check failed";
  return x;
}

/// What a floor step keeps between steps: optimizer state, batch buffers.
struct floor_state {
  std::vector<momentum_state> opt;
  std::vector<float> xs;
  std::vector<uint8_t> ys;
};

/// One trainer step without a cluster: gather the batch at idx, forward,
/// backward, then momentum SGD on every parameter array.
kernel_status floor_step(model& net, floor_state& st, const dataset& d,
                         const size_t* idx, float* loss) {
  size_t per = net.input_size();
  st.xs.resize(batch * per);
  st.ys.resize(batch);
  for (size_t i = 0; i < batch; ++i) {
    std::memcpy(&st.xs[i * per], d.images.data() + idx[i] * per,
                per * sizeof(float));
    st.ys[i] = d.labels[idx[i]];
  }
  auto s = net.compute_gradients(st.xs.data(), st.ys.data(), batch, loss);
  auto ps = net.parameters(), gs = net.gradients();
  st.opt.resize(ps.size());
  for (size_t i = 0; s == kernel_status::ok && i < ps.size(); ++i)
    s = momentum_update_cpu(ps[i].data, gs[i].data, ps[i].size, st.opt[i],
                            momentum_params{lr, mu, 0.0f});
  return s;
}

/// Steps for floor_seconds on the training set (a seeded shuffle per epoch)
/// and checks that the loss fell; returns "" or what went wrong.
std::string measure_floor(const dataset& train, floor_result& out) {
  std::string err;
  auto net = model::from_spec(model_spec, &err);
  if (!net)
    return "model: " + err;
  net->init_parameters(1);
  for (auto& p : net->parameters())
    out.model_bytes += double(p.size * sizeof(float));
  floor_state st;
  std::vector<float> losses;
  std::vector<size_t> idx;
  size_t steps_per_epoch = train.labels.size() / batch;
  auto t0 = steady::now();
  for (size_t s = 0; since(t0) < floor_seconds || s < 100; ++s) {
    if (s % steps_per_epoch == 0)
      epoch_partition(train.labels.size(), s / steps_per_epoch, 1, 0, 1, idx);
    float loss = 0;
    auto k =
        floor_step(*net, st, train, &idx[(s % steps_per_epoch) * batch], &loss);
    if (k != kernel_status::ok || !std::isfinite(loss))
      return std::string{"step failed: "} + to_string(k);
    losses.push_back(loss);
  }
  out.samples_per_s = double(losses.size()) * batch / since(t0);
  out.steps = losses.size();
  out.first_loss =
      std::accumulate(losses.begin(), losses.begin() + 50, 0.0) / 50;
  out.last_loss = std::accumulate(losses.end() - 50, losses.end(), 0.0) / 50;
  if (!(out.last_loss < 0.8 * out.first_loss))
    return strf("the loss did not fall: %.4f -> %.4f", out.first_loss,
                out.last_loss);
  return "";
}

} // namespace

exchange_limit best_of(const exchange_limit& a, const exchange_limit& b) {
  if (!a.why.empty() || !b.why.empty())
    return a.why.empty() ? a : b;
  return {std::max(a.round_trips_per_s, b.round_trips_per_s),
          std::max(a.memcpy_gbps, b.memcpy_gbps), ""};
}

std::string floor_once(floor_result& out) {
  dataset train;
  if (auto err = load_fashion_mnist(fashion_mnist_dir, "train", train);
      !err.empty())
    return "loading the data: " + err;
  auto cpu0 = bench::read_cpu_times();
  auto err = measure_floor(train, out);
  out.cpu = bench::share_between(cpu0, bench::read_cpu_times());
  if (err.empty()) // after the CPU share: it forks
    out.exchange = measure_exchange();
  return err;
}

} // namespace troupe::bench::time_to_accuracy

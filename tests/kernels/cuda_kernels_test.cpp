// Every CUDA twin against its CPU kernel on fresh random inputs: within
// 1e-5 relative (||gpu - cpu|| / ||cpu|| per array) in fp32. Where the
// driver finds no GPU (every CI machine here) it checks that asking for one
// is a plain error, says why it skips the rest, and exits 77 (CTest:
// skipped, label gpu).
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/activations.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_device.hpp"
#include "kernels/cuda/cuda_model.hpp"
#include "kernels/cuda/cuda_stage.hpp"
#include "kernels/cuda/nccl_group.hpp"
#include "kernels/dense.hpp"
#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/random.hpp"
#include "kernels/stage.hpp"

using namespace troupe;
using troupe::cuda::buffer;
using troupe::cuda::cuda_status;

namespace {

constexpr double tolerance = 1e-5;

double relative(const std::vector<float>& cpu, const std::vector<float>& gpu) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    double a = cpu[i], b = gpu[i];
    diff += (a - b) * (a - b);
    norm += a * a;
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

#define REQUIRE_OK(call)                                                       \
  do {                                                                         \
    cuda_status st_ = (call);                                                  \
    if (!st_.ok())                                                             \
      BOOST_FAIL(#call << ": " << st_.error);                                  \
  } while (false)

/// One GPU, and host arrays moved to and from it.
struct gpu {
  std::unique_ptr<cuda::device> dev;
  gpu() {
    cuda_status st;
    dev = cuda::device::open(0, st);
    if (!dev)
      BOOST_FAIL("opening cuda:0: " << st.error);
    BOOST_TEST_MESSAGE("on " << dev->describe());
  }
  buffer<float> put(const std::vector<float>& v) {
    buffer<float> b;
    REQUIRE_OK(dev->alloc(b, v.size()));
    REQUIRE_OK(dev->to_device(b.data(), v.data(), v.size()));
    return b;
  }
  buffer<uint8_t> put(const std::vector<uint8_t>& v) {
    buffer<uint8_t> b;
    REQUIRE_OK(dev->alloc(b, v.size()));
    REQUIRE_OK(dev->to_device(b.data(), v.data(), v.size()));
    return b;
  }
  buffer<float> zeros(size_t n) {
    buffer<float> b;
    REQUIRE_OK(dev->alloc(b, n));
    REQUIRE_OK(dev->zero(b.data(), n));
    return b;
  }
  std::vector<float> get(const buffer<float>& b) {
    std::vector<float> v(b.size());
    REQUIRE_OK(dev->to_host(v.data(), b.data(), v.size()));
    return v;
  }
};

void check_close(const std::vector<float>& cpu, const std::vector<float>& gpu,
                 const std::string& what) {
  auto r = relative(cpu, gpu);
  BOOST_TEST_MESSAGE(what << ": relative " << r);
  BOOST_CHECK_MESSAGE(r <= tolerance, what << ": relative " << r);
}

/// check_close over two models' arrays, pairwise (model::gradients() or
/// parameters() of the same spec), each named `array name, what`.
void check_arrays(const std::vector<param_ref>& want,
                  const std::vector<param_ref>& have, const std::string& what) {
  BOOST_REQUIRE_EQUAL(want.size(), have.size());
  for (size_t i = 0; i < want.size(); ++i)
    check_close(std::vector<float>(want[i].data, want[i].data + want[i].size),
                std::vector<float>(have[i].data, have[i].data + have[i].size),
                want[i].name + ", " + what);
}

/// `spec` with weights from `seed` into `m`, and its twin on `dev`.
std::unique_ptr<cuda::cuda_model> twin(cuda::device& dev,
                                       const std::string& spec, uint32_t seed,
                                       std::optional<model>& m) {
  std::string why;
  m = model::from_spec(spec, &why);
  if (!m)
    BOOST_FAIL(spec << ": " << why);
  m->init_parameters(seed);
  cuda_status st;
  auto g = cuda::cuda_model::load(dev, *m, st);
  if (!g)
    BOOST_FAIL("cuda_model::load: " << st.error);
  return g;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(cuda_kernels, gpu)

BOOST_AUTO_TEST_CASE(dense_forward_and_both_backward_halves) {
  struct shape {
    size_t batch, in, out;
  };
  uint32_t seed = 1;
  for (auto s : {shape{64, 784, 256}, shape{1024, 256, 128},
                 shape{1024, 4096, 10}, shape{7, 13, 5}, shape{1, 1, 1}}) {
    auto x = random_floats(s.batch * s.in, seed++);
    auto w = random_floats(s.in * s.out, seed++);
    auto b = random_floats(s.out, seed++);
    auto dy = random_floats(s.batch * s.out, seed++);
    std::vector<float> y(s.batch * s.out), dx(x.size()), dw(w.size()),
        db(s.out);
    BOOST_REQUIRE(dense_forward_cpu(x.data(), w.data(), b.data(), y.data(),
                                    s.batch, s.in, s.out) == kernel_status::ok);
    BOOST_REQUIRE(dense_backward_cpu(x.data(), w.data(), dy.data(), dx.data(),
                                     dw.data(), db.data(), s.batch, s.in,
                                     s.out) == kernel_status::ok);
    auto gx = put(x), gw = put(w), gb = put(b), gdy = put(dy);
    // Both paths: cuBLASLt with the bias fused (where it has a kernel),
    // and cuBLAS then our kernels.
    for (bool fuse : {true, false}) {
      dev->fuse_bias(fuse);
      auto fused_before = dev->fused_gemms();
      auto gy = zeros(y.size()), gdx = zeros(dx.size()), gdw = zeros(dw.size()),
           gdb = zeros(db.size());
      REQUIRE_OK(dev->dense_forward(gx.data(), gw.data(), gb.data(), gy.data(),
                                    s.batch, s.in, s.out));
      REQUIRE_OK(dev->dense_backward(gx.data(), gw.data(), gdy.data(),
                                     gdx.data(), gdw.data(), gdb.data(),
                                     s.batch, s.in, s.out));
      auto fused = dev->fused_gemms() - fused_before;
      if (!fuse)
        BOOST_CHECK_EQUAL(fused, 0u);
      auto name =
          std::to_string(s.batch) + "x" + std::to_string(s.in) + "x" +
          std::to_string(s.out) +
          (fuse ? " (" + std::to_string(fused) + " of 2 fused)" : " (unfused)");
      check_close(y, get(gy), "dense forward " + name);
      check_close(dx, get(gdx), "dense input gradient " + name);
      check_close(dw, get(gdw), "dense weight gradient " + name);
      check_close(db, get(gdb), "dense bias gradient " + name);
    }
    dev->fuse_bias(true);
  }
  BOOST_CHECK(
      !dev->dense_forward(nullptr, nullptr, nullptr, nullptr, 1, 1, 1).ok());
}

BOOST_AUTO_TEST_CASE(relu_both_ways) {
  auto x = random_floats(100003, 11), dy = random_floats(100003, 12);
  std::vector<float> y(x.size()), dx(x.size());
  BOOST_REQUIRE(relu_forward_cpu(x.data(), y.data(), x.size()) ==
                kernel_status::ok);
  BOOST_REQUIRE(relu_backward_cpu(x.data(), dy.data(), dx.data(), x.size()) ==
                kernel_status::ok);
  auto gx = put(x), gdy = put(dy), gy = zeros(x.size()), gdx = zeros(x.size());
  REQUIRE_OK(dev->relu_forward(gx.data(), gy.data(), x.size()));
  REQUIRE_OK(dev->relu_backward(gx.data(), gdy.data(), gdx.data(), x.size()));
  BOOST_CHECK(get(gy) == y); // selections: exact
  BOOST_CHECK(get(gdx) == dx);
}

BOOST_AUTO_TEST_CASE(softmax_cross_entropy_and_accuracy) {
  for (size_t batch : {1u, 64u, 1024u}) {
    const size_t classes = 10;
    auto logits = random_floats(batch * classes, 21 + uint32_t(batch), -4, 4);
    std::vector<uint8_t> labels(batch);
    std::mt19937 gen{uint32_t(batch)};
    for (auto& l : labels)
      l = uint8_t(gen() % classes);
    float loss = 0;
    std::vector<float> dl(logits.size());
    size_t correct = 0;
    BOOST_REQUIRE(softmax_xent_cpu(logits.data(), labels.data(), batch, classes,
                                   &loss, dl.data()) == kernel_status::ok);
    BOOST_REQUIRE(accuracy_count_cpu(logits.data(), labels.data(), batch,
                                     classes, &correct) == kernel_status::ok);
    auto gl = put(logits);
    auto glab = put(labels);
    auto gloss = zeros(1), gdl = zeros(dl.size());
    buffer<uint32_t> gcorrect;
    REQUIRE_OK(dev->alloc(gcorrect, 1));
    REQUIRE_OK(dev->softmax_xent(gl.data(), glab.data(), batch, classes,
                                 gloss.data(), gdl.data()));
    REQUIRE_OK(dev->accuracy_count(gl.data(), glab.data(), batch, classes,
                                   gcorrect.data()));
    uint32_t hits = 0;
    REQUIRE_OK(dev->to_host(&hits, gcorrect.data(), 1));
    auto name = "batch " + std::to_string(batch);
    check_close({loss}, get(gloss), "loss, " + name);
    check_close(dl, get(gdl), "loss gradient, " + name);
    BOOST_CHECK_EQUAL(hits, correct);
  }
  // A label out of range is refused, and the next call is not.
  auto gl = put(random_floats(20, 3));
  auto glab = put(std::vector<uint8_t>{1, 12});
  auto gloss = zeros(1);
  auto st =
      dev->softmax_xent(gl.data(), glab.data(), 2, 10, gloss.data(), nullptr);
  BOOST_CHECK_MESSAGE(!st.ok() && st.error.find("label") != std::string::npos,
                      st.error);
  auto fine = put(std::vector<uint8_t>{1, 2});
  REQUIRE_OK(
      dev->softmax_xent(gl.data(), fine.data(), 2, 10, gloss.data(), nullptr));
}

BOOST_AUTO_TEST_CASE(every_optimizer_three_steps) {
  const size_t n = 70001;
  auto w0 = random_floats(n, 31);
  std::vector<std::vector<float>> grads;
  for (uint32_t k = 0; k < 3; ++k)
    grads.push_back(random_floats(n, 40 + k));
  sgd_params sp{0.1f, 0.01f, 2.0f};
  momentum_params mp{0.1f, 0.9f, 0.01f, 2.0f};
  adam_params ap{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 2.0f};
  for (int kind = 0; kind < 4; ++kind) {
    auto w = w0;
    momentum_state ms;
    adam_state as;
    auto gw = put(w0), gv = zeros(n), gm = zeros(n), gg = zeros(n);
    for (uint64_t k = 0; k < grads.size(); ++k) {
      auto& g = grads[k];
      REQUIRE_OK(dev->to_device(gg.data(), g.data(), n));
      switch (kind) {
      case 0:
        BOOST_REQUIRE(sgd_update_cpu(w.data(), g.data(), n, sp) ==
                      kernel_status::ok);
        REQUIRE_OK(dev->sgd_update(gw.data(), gg.data(), n, sp));
        break;
      case 1:
      case 2: {
        bool nesterov = kind == 2;
        BOOST_REQUIRE((nesterov ? nesterov_update_cpu : momentum_update_cpu)(
                          w.data(), g.data(), n, ms, mp) == kernel_status::ok);
        REQUIRE_OK(dev->momentum_update(gw.data(), gg.data(), gv.data(), n, mp,
                                        nesterov));
        break;
      }
      default:
        BOOST_REQUIRE(adam_update_cpu(w.data(), g.data(), n, as, ap) ==
                      kernel_status::ok);
        REQUIRE_OK(dev->adam_update(gw.data(), gg.data(), gm.data(), gv.data(),
                                    n, k, ap));
      }
    }
    const char* names[] = {"sgd", "momentum", "nesterov", "adam"};
    // The change each made, compared: the weights alone would hide it.
    auto got = get(gw);
    std::vector<float> moved(n), moved_gpu(n);
    for (size_t i = 0; i < n; ++i) {
      moved[i] = w[i] - w0[i];
      moved_gpu[i] = got[i] - w0[i];
    }
    check_close(moved, moved_gpu, std::string{names[kind]} + ", 3 steps");
  }
}

BOOST_AUTO_TEST_CASE(gradient_sums) {
  const size_t n = 123457;
  auto a = random_floats(n, 51), b = random_floats(n, 52);
  auto ga = put(a), gb = put(b);
  REQUIRE_OK(dev->add(ga.data(), gb.data(), n));
  for (size_t i = 0; i < n; ++i)
    a[i] += b[i];
  BOOST_CHECK(get(ga) == a); // one addition each: exact
}

BOOST_AUTO_TEST_CASE(a_gpu_that_is_not_there_is_a_plain_error) {
  cuda_status st;
  auto none = cuda::device::open(cuda::device_count(), st);
  BOOST_CHECK(!none);
  BOOST_CHECK_MESSAGE(st.error.find("no GPU cuda:") != std::string::npos,
                      st.error);
}

BOOST_AUTO_TEST_CASE(a_gpu_backends_batch_memory_is_pinned) {
  // What a trainer gathers its batches into (device_team::batch_memory):
  // pinned, so a batch goes up without a staging copy, and still pinned
  // at an offset (a device's rows of a shared batch).
  std::string why;
  auto m = model::from_spec("mlp:784-256-128-10", &why);
  BOOST_REQUIRE(m);
  device_status st;
  auto backend = cuda::make_cuda_backend(0, *m, st);
  BOOST_REQUIRE_MESSAGE(backend, st.error);
  auto x = backend->host_floats(64 * 784);
  BOOST_REQUIRE(x);
  BOOST_CHECK(dev->is_pinned(x.get()));
  BOOST_CHECK(dev->is_pinned(x.get() + 32 * 784));
  BOOST_CHECK(!dev->is_pinned(make_cpu_backend(*m)->host_floats(16).get()));
}

BOOST_AUTO_TEST_CASE(a_training_step_on_the_gpu_matches_the_cpu) {
  std::optional<model> m, m2;
  auto g = twin(*dev, "mlp:784-256-128-10", 7, m);
  // Another model's step, recorded at batch 16 before the steps below grow
  // the device's row-loss buffer, replays after them (then below).
  auto g2 = twin(*dev, "mlp:784-32-10", 8, m2);
  auto x2 = random_floats(16 * 784, 5, 0.0f, 1.0f);
  std::vector<uint8_t> y2(16, 4);
  float loss2 = 0, cpu_loss2 = 0;
  for (int call = 0; call < 2; ++call)
    REQUIRE_OK(g2->compute_gradients(x2.data(), y2.data(), 16, &loss2));
  for (size_t batch : {64u, 1024u}) {
    auto x = random_floats(batch * 784, uint32_t(71 + batch), 0.0f, 1.0f);
    std::vector<uint8_t> labels(batch);
    std::mt19937 gen{uint32_t(batch)};
    for (auto& l : labels)
      l = uint8_t(gen() % 10);
    auto cpu = *m;
    float cpu_loss = 0;
    BOOST_REQUIRE(cpu.compute_gradients(x.data(), labels.data(), batch,
                                        &cpu_loss) == kernel_status::ok);
    // The same batch in pinned memory: it goes up without a host copy.
    cuda::pinned<float> px;
    REQUIRE_OK(dev->alloc_pinned(px, x.size()));
    std::copy(x.begin(), x.end(), px.data());
    BOOST_CHECK(dev->is_pinned(px.data()));
    BOOST_CHECK(!dev->is_pinned(x.data()));
    // The first step at a batch launches each kernel, the second records
    // the step as a CUDA graph and replays it, the third replays it (at
    // 1024, graphs off and on: recorded anew), the fourth replays it on the
    // pinned batch: all match the CPU.
    for (int call = 0; call < 4; ++call) {
      if (call == 2 && batch == 1024) {
        g->use_graphs(false);
        g->use_graphs(true);
      }
      float gpu_loss = 0;
      REQUIRE_OK(g->compute_gradients(call == 3 ? px.data() : x.data(),
                                      labels.data(), batch, &gpu_loss));
      BOOST_CHECK_EQUAL(g->replayed(), call > 0);
      auto got = *m;
      REQUIRE_OK(g->download_gradients(got));
      auto name = "batch " + std::to_string(batch) +
                  (call == 3  ? " (graph, pinned batch)"
                   : call > 0 ? " (graph)"
                              : " (kernels)");
      check_close({cpu_loss}, {gpu_loss}, "step loss, " + name);
      check_arrays(cpu.gradients(), got.gradients(), name);
    }
  }
  REQUIRE_OK(g2->compute_gradients(x2.data(), y2.data(), 16, &loss2));
  BOOST_CHECK(g2->replayed());
  auto cpu2 = *m2, got2 = *m2;
  BOOST_REQUIRE(cpu2.compute_gradients(x2.data(), y2.data(), 16, &cpu_loss2) ==
                kernel_status::ok);
  REQUIRE_OK(g2->download_gradients(got2));
  check_close({cpu_loss2}, {loss2}, "another model's graph, after: loss");
  check_arrays(cpu2.gradients(), got2.gradients(), "another model's, after");
  // Graphs off: each kernel launched, as the first step.
  g->use_graphs(false);
  auto x = random_floats(64 * 784, 3, 0.0f, 1.0f);
  std::vector<uint8_t> labels(64, 3);
  float loss = 0;
  REQUIRE_OK(g->compute_gradients(x.data(), labels.data(), 64, &loss));
  REQUIRE_OK(g->compute_gradients(x.data(), labels.data(), 64, &loss));
  BOOST_CHECK(!g->replayed());
  // A label out of range is refused on the host, before the GPU runs.
  labels[5] = 10;
  auto refused = g->compute_gradients(x.data(), labels.data(), 64, &loss);
  BOOST_CHECK_EQUAL(refused.error, "bad input: cuda_model::compute_gradients:"
                                   " label 10 of row 5 >= 10 classes");
}

BOOST_AUTO_TEST_CASE(a_whole_step_with_its_copies_matches_the_cpu) {
  // A device alone's step (full_step): weights up, the step, gradients
  // down. The first layer (784 x 2048) is two chunks of the overlapped
  // copies; the parameters are past overlap_floats, so `automatic`
  // overlaps them.
  std::optional<model> m;
  auto g = twin(*dev, "mlp:784-2048-10", 11, m);
  BOOST_REQUIRE_GE(g->parameter_floats(), cuda::cuda_model::overlap_floats);
  using mode = cuda::cuda_model::transfers;
  size_t batch = 256;
  std::mt19937 gen{5};
  int round = 0;
  for (auto how : {mode::automatic, mode::overlapped, mode::sequential,
                   mode::overlapped}) {
    ++round;
    g->set_transfers(how);
    // New weights each round, as a pull brings: the CPU's and the GPU's.
    auto cpu = *m;
    for (auto& p : cpu.parameters()) {
      auto fresh =
          random_floats(p.size, uint32_t(round * 100 + p.size), -0.05f, 0.05f);
      std::copy(fresh.begin(), fresh.end(), p.data);
    }
    auto x = random_floats(batch * 784, uint32_t(round), 0.0f, 1.0f);
    std::vector<uint8_t> labels(batch);
    for (auto& l : labels)
      l = uint8_t(gen() % 10);
    auto host = *m; // gradients land in its arrays
    float gpu_loss = 0, cpu_loss = 0;
    REQUIRE_OK(g->full_step(cpu.parameters(), x.data(), labels.data(), batch,
                            &gpu_loss, host.gradients()));
    BOOST_CHECK_EQUAL(g->overlapped(), how != mode::sequential);
    BOOST_REQUIRE(cpu.compute_gradients(x.data(), labels.data(), batch,
                                        &cpu_loss) == kernel_status::ok);
    auto name = "round " + std::to_string(round) +
                (g->overlapped() ? " (overlapped)" : " (sequential)");
    check_close({cpu_loss}, {gpu_loss}, "whole step loss, " + name);
    check_arrays(cpu.gradients(), host.gradients(), name);
  }
  // No weights in and no gradients out: the step on the weights there.
  g->set_transfers(mode::overlapped);
  auto x = random_floats(batch * 784, 9, 0.0f, 1.0f);
  std::vector<uint8_t> labels(batch, 4);
  float loss = 0;
  REQUIRE_OK(g->full_step({}, x.data(), labels.data(), batch, &loss, {}));
  auto host = *m;
  REQUIRE_OK(g->download_gradients(host));
  // Another model's arrays are refused before anything moves, either way.
  std::string why;
  auto other = model::from_spec("mlp:784-256-10", &why);
  BOOST_REQUIRE_MESSAGE(other, why);
  for (auto how : {mode::overlapped, mode::sequential}) {
    g->set_transfers(how);
    auto refused = g->full_step({}, x.data(), labels.data(), batch, &loss,
                                other->gradients());
    BOOST_CHECK_EQUAL(refused.error, "cuda_model: another model's gradients");
    BOOST_CHECK(!g->overlapped());
  }
  auto after = *m;
  REQUIRE_OK(g->download_gradients(after));
  auto a = after.gradients(), b = host.gradients();
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_CHECK(std::equal(a[i].data, a[i].data + a[i].size, b[i].data));
  // A small model's whole step stays sequential, with its graph.
  std::optional<model> small;
  auto s = twin(*dev, "mlp:784-256-128-10", 3, small);
  for (int call = 0; call < 3; ++call) {
    REQUIRE_OK(s->full_step(small->parameters(), x.data(), labels.data(), batch,
                            &loss, small->gradients()));
    BOOST_CHECK(!s->overlapped());
    BOOST_CHECK_EQUAL(s->replayed(), call > 0);
  }
}

BOOST_AUTO_TEST_CASE(a_pipeline_stage_on_the_gpu_matches_the_cpu) {
  std::string why;
  auto m = model::from_spec("mlp:784-256-128-64-10", &why);
  BOOST_REQUIRE_MESSAGE(m, why);
  m->init_parameters(9);
  auto as_vector = [](const tensor& t) {
    return std::vector<float>(t.data(), t.data() + t.size());
  };
  // A first stage (its output through a relu), a middle one of two
  // layers, and the last (logits); two micro-batches of 32 rows each.
  const size_t rows = 32;
  for (auto [first, last] : {std::pair<size_t, size_t>{0, 1}, {1, 3}, {3, 4}}) {
    auto name =
        "layers [" + std::to_string(first) + ", " + std::to_string(last) + ")";
    stage_model cpu{*m, first, last};
    cuda_status st;
    auto gpu = cuda::make_cuda_stage(0, *m, first, last, st);
    BOOST_REQUIRE_MESSAGE(gpu, st.error);
    BOOST_CHECK_EQUAL(gpu->input_size(), cpu.input_size());
    BOOST_CHECK_EQUAL(gpu->output_size(), cpu.output_size());
    BOOST_CHECK_EQUAL(gpu->is_last(), cpu.is_last());
    BOOST_CHECK_EQUAL(gpu->first_layer(), cpu.first_layer());
    bool want_dx = first > 0;
    for (uint32_t micro = 0; micro < 2; ++micro) {
      auto x = random_floats(rows * cpu.input_size(), 80 + micro, 0.0f, 1.0f);
      BOOST_REQUIRE(cpu.forward(micro, x.data(), rows) == kernel_status::ok);
      REQUIRE_OK(gpu->forward(micro, x.data(), rows));
      check_close(as_vector(cpu.output(micro)), as_vector(gpu->output(micro)),
                  "stage forward, " + name);
    }
    for (uint32_t micro = 0; micro < 2; ++micro) {
      auto dy = random_floats(rows * cpu.output_size(), 90 + micro);
      BOOST_REQUIRE(cpu.backward_input(micro, dy.data(), want_dx) ==
                    kernel_status::ok);
      REQUIRE_OK(gpu->backward_input(micro, dy.data(), want_dx));
      if (want_dx)
        check_close(as_vector(cpu.input_grad()), as_vector(gpu->input_grad()),
                    "stage B (input gradient), " + name);
    }
    BOOST_CHECK_EQUAL(gpu->held(), 2u);
    BOOST_CHECK_EQUAL(gpu->held_bytes(), cpu.held_bytes());
    for (uint32_t micro = 0; micro < 2; ++micro) {
      BOOST_REQUIRE(cpu.backward_weight(micro) == kernel_status::ok);
      REQUIRE_OK(gpu->backward_weight(micro));
    }
    BOOST_CHECK_EQUAL(gpu->held(), 0u);
    REQUIRE_OK(gpu->download_gradients());
    check_arrays(cpu.gradients(), gpu->gradients(),
                 "stage W (summed over 2 micro-batches)");
    // Weights written on the host go up; an evaluation sees them.
    auto cw = cpu.parameters(), gw = gpu->parameters();
    for (size_t i = 0; i < cw.size(); ++i)
      for (size_t k = 0; k < cw[i].size; ++k) {
        cw[i].data[k] *= 0.5f;
        gw[i].data[k] *= 0.5f;
      }
    REQUIRE_OK(gpu->upload_parameters());
    auto x = random_floats(rows * cpu.input_size(), 99, 0.0f, 1.0f);
    tensor a, b;
    BOOST_REQUIRE(cpu.infer(x.data(), rows, a) == kernel_status::ok);
    REQUIRE_OK(gpu->infer(x.data(), rows, b));
    check_close(as_vector(a), as_vector(b),
                "stage infer, new weights, " + name);
    // Out of order: a plain error, nothing held.
    auto refused = gpu->backward_weight(7);
    BOOST_CHECK_MESSAGE(refused.error.find("bad input") != std::string::npos,
                        refused.error);
    REQUIRE_OK(gpu->zero_gradients());
    REQUIRE_OK(gpu->download_gradients());
    BOOST_CHECK_EQUAL(gpu->gradients()[0].data[0], 0.0f);
  }
}

BOOST_AUTO_TEST_CASE(nccl_as_one_rank) {
  // One GPU here: NCCL runs as one rank (the multi-device logic is
  // communicator_test's, on the CPU stand-in).
  std::string why;
  auto group = cuda::make_nccl_group({0}, why);
  BOOST_REQUIRE_MESSAGE(group.size() == 1, why);
  auto v = random_floats(4099, 61);
  auto gv = put(v);
  auto st = group[0]->all_reduce_sum(gv.data(), v.size());
  BOOST_REQUIRE_MESSAGE(st.ok(), st.error);
  BOOST_CHECK(get(gv) == v); // a sum of one
  st = group[0]->broadcast(gv.data(), v.size(), 0);
  BOOST_REQUIRE_MESSAGE(st.ok(), st.error);
  BOOST_CHECK(get(gv) == v);
  BOOST_CHECK(cuda::make_nccl_group({cuda::device_count()}, why).empty());
  BOOST_CHECK_MESSAGE(why.find("no GPU cuda:") != std::string::npos, why);
}

BOOST_AUTO_TEST_SUITE_END()

bool init_unit_test() {
  return true;
}

int main(int argc, char* argv[]) {
  std::string why;
  if (cuda::device_count(&why) == 0) {
    // Asking for a GPU here must fail plainly, naming it and the reason.
    // Each way to a GPU fails plainly, saying there is none.
    auto refused = [](const char* what, bool made, const std::string& error) {
      if (!made && error.find("no GPU cuda:0") != std::string::npos)
        return true;
      std::cerr << what << " on a machine without a GPU: expected a plain"
                << " error, got '" << error << "'\n";
      return false;
    };
    cuda_status st;
    bool opened = cuda::device::open(0, st) != nullptr;
    std::string nccl_why;
    bool grouped = !cuda::make_nccl_group({0}, nccl_why).empty();
    auto m = model::from_spec("mlp:4-3-2", nullptr);
    cuda_status stage_st;
    bool staged = !m || cuda::make_cuda_stage(0, *m, 0, 2, stage_st);
    if (!refused("cuda:0", opened, st.error) ||
        !refused("an NCCL group", grouped, nccl_why) ||
        !refused("a stage", staged, stage_st.error))
      return 1;
    std::cout << "SKIPPED: no GPU (" << why << "); cuda:0 refused: " << st.error
              << "; an NCCL group refused: " << nccl_why
              << "; a stage refused: " << stage_st.error << '\n';
    return 77;
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}

// gpu_step (issue 38): one GPU's training step, each figure beside a limit
// measured in the same run on the same GPU:
//   1. the dense layers' GEMM rate (forward, and backward's two GEMMs)
//      against raw cublasSgemm calls of the same shapes;
//   2. training samples/s (forward, loss, backward, momentum update on the
//      GPU, the batch copied up from the host each step, as a worker's) of
//      mlp:784-256-128-10 at batch 64 and 1024 and of a large MLP, the
//      step replayed as a CUDA graph; batch 64 also kernel by kernel;
//   3. a worker's whole step (weights up, the step, gradients down), the
//      copies one after the other and overlapped with the step;
//   4. host-to-device copy bandwidth of the step's copies (from pageable
//      memory) against cudaMemcpy from pinned memory.
// Before any figure it checks a step against the CPU (1e-5 relative) and
// ends on one line of JSON. No GPU: "SKIPPED: ..." and exit 77.
// Usage: gpu_step [--reps=N] [--steps=N] [--large=SPEC]
#include <cuda_runtime.h>

#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_device.hpp"
#include "kernels/cuda/cuda_model.hpp"
#include "kernels/model.hpp"
#include "kernels/random.hpp"

using namespace troupe;
using troupe::cuda::buffer;
using troupe::cuda::cuda_status;

namespace {

struct options {
  int reps = 50;   ///< GEMMs per timing
  int steps = 200; ///< training steps per timing (after 20 to warm up)
  std::string large = "mlp:784-4096-4096-4096-10";
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "*** gpu_step: %s\n", what.c_str());
  std::exit(1);
}

void must(const cuda_status& st, const char* what) {
  if (!st.ok())
    die(std::string{what} + ": " + st.error);
}

void must(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    die(std::string{what} + ": " + cudaGetErrorName(e) + ": " +
        cudaGetErrorString(e));
}

void must(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS)
    die(std::string{what} + ": " + cublasGetStatusString(e));
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&a](const char* flag) -> const char* {
      auto n = std::strlen(flag);
      return a.compare(0, n, flag) == 0 ? a.c_str() + n : nullptr;
    };
    if (auto v = value("--reps="))
      o.reps = std::atoi(v);
    else if (auto v = value("--steps="))
      o.steps = std::atoi(v);
    else if (auto v = value("--large="))
      o.large = v;
    else
      die("unknown flag " + a + " (--reps=N --steps=N --large=SPEC)");
  }
  if (o.reps < 1 || o.steps < 1)
    die("--reps and --steps must be at least 1");
  return o;
}

std::vector<uint8_t> random_labels(size_t n, size_t classes, uint32_t seed) {
  std::mt19937 gen{seed};
  std::vector<uint8_t> v(n);
  for (auto& x : v)
    x = uint8_t(gen() % classes);
  return v;
}

model make_model(const std::string& spec) {
  std::string err;
  auto m = model::from_spec(spec, &err);
  if (!m)
    die(spec + ": " + err);
  m->init_parameters(1);
  return std::move(*m);
}

/// Seconds for `n` runs of `body` once `wait` says the queued work is
/// done (after one run to warm up: the first call may pick an algorithm).
template <class Body, class Wait>
double time_runs(int n, Body body, Wait wait) {
  body();
  wait();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i)
    body();
  wait();
  std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
  return s.count();
}

/// Graph replays per timing (one replay of a small shape is short).
constexpr int graph_replays = 5;

/// Seconds for `reps` runs of `body` recorded as one graph on the device's
/// stream, per replay (after a run outside the capture: it picks the
/// kernels).
template <class Body>
double graph_time_ours(cuda::device& dev, int reps, Body body) {
  body();
  must(dev.sync(), "sync");
  cuda::graph g;
  must(dev.begin_capture(), "begin_capture");
  for (int i = 0; i < reps; ++i)
    body();
  must(dev.end_capture(g), "end_capture");
  return time_runs(
             graph_replays, [&] { must(dev.launch(g), "launch"); },
             [&] { must(dev.sync(), "sync"); }) /
         graph_replays;
}

/// As graph_time_ours, for the raw calls on `stream`.
template <class Body>
double graph_time_raw(cudaStream_t stream, int reps, Body body) {
  auto wait = [stream] {
    must(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  };
  body();
  wait();
  cudaGraph_t g = nullptr;
  cudaGraphExec_t e = nullptr;
  must(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
       "cudaStreamBeginCapture");
  for (int i = 0; i < reps; ++i)
    body();
  must(cudaStreamEndCapture(stream, &g), "cudaStreamEndCapture");
  must(cudaGraphInstantiate(&e, g, 0), "cudaGraphInstantiate");
  double s =
      time_runs(
          graph_replays,
          [&] { must(cudaGraphLaunch(e, stream), "cudaGraphLaunch"); }, wait) /
      graph_replays;
  cudaGraphExecDestroy(e);
  cudaGraphDestroy(g);
  return s;
}

// -- 0. the check -------------------------------------------------------------

/// ||b - a|| / ||a||.
double relative_error(const float* a, const float* b, size_t n) {
  double d = 0, norm = 0;
  for (size_t k = 0; k < n; ++k) {
    d += std::pow(double(a[k]) - b[k], 2);
    norm += std::pow(double(a[k]), 2);
  }
  return std::sqrt(d / std::max(norm, 1e-30));
}
double relative_error(const std::vector<float>& a,
                      const std::vector<float>& b) {
  return a.size() == b.size() ? relative_error(a.data(), b.data(), a.size())
                              : INFINITY;
}

/// One step of `spec` at `batch` on the GPU against the CPU; the worst
/// relative error over every gradient array, and the loss's.
double check_step(cuda::device& dev, const std::string& spec, size_t batch) {
  auto cpu = make_model(spec);
  auto gpu_host = make_model(spec);
  auto x = random_floats(batch * cpu.input_size(), 5);
  auto y = random_labels(batch, cpu.output_size(), 6);
  float want = 0, got = 0;
  if (cpu.compute_gradients(x.data(), y.data(), batch, &want) !=
      kernel_status::ok)
    die("the CPU step failed");
  cuda_status st;
  auto g = cuda::cuda_model::load(dev, gpu_host, st);
  must(st, "cuda_model::load");
  must(g->compute_gradients(x.data(), y.data(), batch, &got),
       "compute_gradients");
  must(g->download_gradients(gpu_host), "download_gradients");
  double worst = std::abs(double(got) - want) / std::abs(double(want));
  auto a = cpu.gradients(), b = gpu_host.gradients();
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, relative_error(a[i].data, b[i].data, a[i].size));
  return worst;
}

// -- 1. GEMM rates ------------------------------------------------------------

struct gemm_row {
  size_t batch, in, out;
  double fwd, fwd_raw, bwd, bwd_raw; // GFLOP/s, calls launched one by one
  double fwd_graph, fwd_raw_graph, bwd_graph, bwd_raw_graph; // as graphs
  bool fwd_fused, bwd_fused; // every call of ours took cuBLASLt's epilogue
};

gemm_row gemm_rates(cuda::device& dev, cudaStream_t stream, cublasHandle_t h,
                    size_t batch, size_t in, size_t out, int reps) {
  buffer<float> x, w, b, y, dy, dx, dw, db;
  for (auto [buf, n] : {std::pair{&x, batch * in},
                        {&w, in * out},
                        {&b, out},
                        {&y, batch * out},
                        {&dy, batch * out},
                        {&dx, batch * in},
                        {&dw, in * out},
                        {&db, out}}) {
    must(dev.alloc(*buf, n), "alloc");
    auto v = random_floats(n, uint32_t(n));
    must(dev.to_device(buf->data(), v.data(), n), "to_device");
  }
  double flop = 2.0 * double(batch) * double(in) * double(out);
  const float one = 1.0f, zero = 0.0f;
  int m_ = int(out), n_ = int(batch), k_ = int(in);
  gemm_row r{};
  r.batch = batch;
  r.in = in;
  r.out = out;
  // Ours queue on the device's stream, the raw calls on `stream`.
  auto ours = [&dev] { must(dev.sync(), "sync"); };
  auto raw = [stream] {
    must(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  };
  auto ours_fwd = [&] {
    must(dev.dense_forward(x.data(), w.data(), b.data(), y.data(), batch, in,
                           out),
         "dense_forward");
  };
  // The same product, raw: y^T (out x batch) = w^T x^T, beta 0.
  auto raw_fwd = [&] {
    must(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m_, n_, k_, &one, w.data(),
                     m_, x.data(), k_, &zero, y.data(), m_),
         "cublasSgemm");
  };
  auto ours_bwd = [&] {
    must(dev.dense_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(),
                            db.data(), batch, in, out),
         "dense_backward");
  };
  // dw^T (out x in) = dy^T x; dx^T (in x batch) = w dy^T.
  auto raw_bwd = [&] {
    must(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, m_, k_, n_, &one, dy.data(),
                     m_, x.data(), k_, &zero, dw.data(), m_),
         "cublasSgemm");
    must(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, k_, n_, m_, &one, w.data(),
                     m_, dy.data(), m_, &zero, dx.data(), k_),
         "cublasSgemm");
  };
  auto unfused = dev.unfused_gemms();
  r.fwd = flop * reps / 1e9 / time_runs(reps, ours_fwd, ours);
  r.fwd_fused = dev.unfused_gemms() == unfused;
  r.fwd_raw = flop * reps / 1e9 / time_runs(reps, raw_fwd, raw);
  unfused = dev.unfused_gemms();
  r.bwd = 2 * flop * reps / 1e9 / time_runs(reps, ours_bwd, ours);
  r.bwd_fused = dev.unfused_gemms() == unfused;
  r.bwd_raw = 2 * flop * reps / 1e9 / time_runs(reps, raw_bwd, raw);
  // The same calls recorded as graphs: the GPU's rate, without the host's
  // launch cost (which bounds the small shapes above).
  r.fwd_graph = flop * reps / 1e9 / graph_time_ours(dev, reps, ours_fwd);
  r.fwd_raw_graph = flop * reps / 1e9 / graph_time_raw(stream, reps, raw_fwd);
  r.bwd_graph = 2 * flop * reps / 1e9 / graph_time_ours(dev, reps, ours_bwd);
  r.bwd_raw_graph =
      2 * flop * reps / 1e9 / graph_time_raw(stream, reps, raw_bwd);
  return r;
}

// -- 2. training steps --------------------------------------------------------

struct step_row {
  std::string spec;
  size_t batch;
  bool graphs, pinned;
  double samples_per_s;
};

/// `pinned`: the host batches in pinned memory, as gpu_step.py's (a loader
/// that pins its batches); else pageable, staged by the step.
step_row train_rate(cuda::device& dev, const std::string& spec, size_t batch,
                    bool graphs, bool pinned, int steps) {
  auto host = make_model(spec);
  cuda_status st;
  auto g = cuda::cuda_model::load(dev, host, st);
  must(st, "cuda_model::load");
  g->use_graphs(graphs);
  auto ws = g->parameter_arrays();
  auto gs = g->gradient_arrays();
  std::vector<buffer<float>> vs(ws.size());
  for (size_t i = 0; i < ws.size(); ++i) {
    must(dev.alloc(vs[i], ws[i].size), "alloc");
    must(dev.zero(vs[i].data(), ws[i].size), "zero");
  }
  // A few batches on the host, taken in turn, as a worker's would be.
  std::vector<std::vector<float>> xs;
  std::vector<cuda::pinned<float>> pxs(4);
  std::vector<std::vector<uint8_t>> ys;
  for (uint32_t k = 0; k < 4; ++k) {
    xs.push_back(random_floats(batch * host.input_size(), 10 + k));
    ys.push_back(random_labels(batch, host.output_size(), 20 + k));
    if (pinned) {
      must(dev.alloc_pinned(pxs[k], xs[k].size()), "alloc_pinned");
      std::copy(xs[k].begin(), xs[k].end(), pxs[k].data());
    }
  }
  momentum_params p;
  p.lr = 0.01f;
  float loss = 0;
  auto step = [&](int i) {
    auto k = size_t(i) % xs.size();
    must(g->compute_gradients(pinned ? pxs[k].data() : xs[k].data(),
                              ys[k].data(), batch, &loss),
         "compute_gradients");
    for (size_t a = 0; a < ws.size(); ++a)
      must(dev.momentum_update(ws[a].data, gs[a].data, vs[a].data(), ws[a].size,
                               p, false),
           "momentum_update");
  };
  for (int i = 0; i < 20; ++i)
    step(i);
  must(dev.sync(), "sync");
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i)
    step(i);
  must(dev.sync(), "sync");
  std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
  if (!std::isfinite(loss))
    die(spec + ": the loss is not finite after the timed steps");
  if (g->replayed() != graphs)
    die(spec + ": the steps did not run as asked (graphs " +
        (graphs ? "on" : "off") + ")");
  return {spec, batch, graphs, pinned,
          double(steps) * double(batch) / s.count()};
}

// -- 3. a worker's whole step
// --------------------------------------------------

/// Samples/s of a device alone's whole step as a trainer runs it: host
/// weights up (pageable, as a pull leaves them), the step, the gradients
/// down into host arrays, with the copies `how`; the gradients of the last
/// step into `grads`.
double whole_rate(cuda::device& dev, const std::string& spec, size_t batch,
                  cuda::cuda_model::transfers how, int steps,
                  std::vector<float>& grads) {
  auto host = make_model(spec);
  cuda_status st;
  auto g = cuda::cuda_model::load(dev, host, st);
  must(st, "cuda_model::load");
  g->set_transfers(how);
  auto x = random_floats(batch * host.input_size(), 30);
  auto y = random_labels(batch, host.output_size(), 31);
  float loss = 0;
  auto step = [&] {
    must(g->full_step(host.parameters(), x.data(), y.data(), batch, &loss,
                      host.gradients()),
         "full_step");
  };
  step(); // the sequential step records its graph at the second
  double s = time_runs(steps, step, [] {});
  if (g->overlapped() != (how == cuda::cuda_model::transfers::overlapped))
    die(spec + ": the whole step did not move its copies as asked");
  grads.clear();
  for (auto& a : host.gradients())
    grads.insert(grads.end(), a.data, a.data + a.size);
  return double(steps) * double(batch) / s;
}

// -- 4. copies ----------------------------------------------------------------

/// GB/s of the step's copies (from pageable memory, through to_device) and
/// of cudaMemcpy from pinned memory, `bytes` each, `reps` times.
std::pair<double, double> copy_rates(cuda::device& dev, size_t bytes,
                                     int reps) {
  size_t n = bytes / sizeof(float);
  buffer<float> d;
  must(dev.alloc(d, n), "alloc");
  std::vector<float> pageable(n, 1.0f);
  float* pinned = nullptr;
  must(cudaMallocHost(reinterpret_cast<void**>(&pinned), bytes),
       "cudaMallocHost");
  std::memset(pinned, 0, bytes);
  auto rate = [&](auto body) {
    body();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i)
      body();
    std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
    return double(bytes) * reps / 1e9 / s.count();
  };
  double ours = rate([&] {
    must(dev.to_device(d.data(), pageable.data(), n), "to_device");
    must(dev.sync(), "sync");
  });
  double peak = rate([&] {
    must(cudaMemcpy(d.data(), pinned, bytes, cudaMemcpyHostToDevice),
         "cudaMemcpy");
  });
  cudaFreeHost(pinned);
  return {ours, peak};
}

} // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0); // each figure out as measured
  auto opt = parse(argc, argv);
  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::printf("SKIPPED: no GPU (%s)\n", why.c_str());
    return 77;
  }
  cuda_status st;
  auto dev = cuda::device::open(0, st);
  must(st, "open cuda:0");
  std::printf("gpu_step on %s\n", dev->describe().c_str());

  // 0. Nothing is timed unless the step is right.
  for (size_t batch : {size_t{64}, size_t{1024}}) {
    auto err = check_step(*dev, "mlp:784-256-128-10", batch);
    std::printf("check: a step of mlp:784-256-128-10 at batch %zu against "
                "the CPU: relative error %.2e\n",
                batch, err);
    if (!(err <= 1e-5))
      die("the GPU's step differs from the CPU's by more than 1e-5");
  }

  // 1. GEMM rates. A stream and handle of our own for the raw calls.
  cudaStream_t stream;
  must(cudaSetDevice(0), "cudaSetDevice");
  must(cudaStreamCreate(&stream), "cudaStreamCreate");
  cublasHandle_t h;
  must(cublasCreate(&h), "cublasCreate");
  must(cublasSetStream(h, stream), "cublasSetStream");
  // A workspace of its own, as the device's handle has (graph-safe).
  buffer<uint8_t> raw_space;
  must(dev->alloc(raw_space, size_t{32} << 20), "alloc");
  must(cublasSetWorkspace(h, raw_space.data(), raw_space.size()),
       "cublasSetWorkspace");
  // Ours: GEMM and bias (fused: one cuBLASLt call with its epilogue);
  // raw: the GEMMs alone. Backward: dw, db and dx against dw and dx.
  // "as graphs": the ratios of the same calls recorded as graphs.
  std::printf("\n%-22s %10s %10s %6s %10s %10s %6s  %-14s %s\n",
              "dense layer b x in x out", "fwd GF/s", "raw GF/s", "ratio",
              "bwd GF/s", "raw GF/s", "ratio", "bias (fwd/bwd)",
              "as graphs: fwd, bwd ratio");
  std::vector<gemm_row> gemms;
  const size_t shapes[][3] = {{64, 784, 256},     {64, 256, 128},
                              {1024, 784, 256},   {1024, 784, 4096},
                              {1024, 4096, 4096}, {1024, 4096, 10}};
  for (auto& s : shapes) {
    auto r = gemm_rates(*dev, stream, h, s[0], s[1], s[2], opt.reps);
    gemms.push_back(r);
    std::printf(
        "%5zu x %5zu x %5zu    %10.0f %10.0f %6.3f %10.0f %10.0f %6.3f  "
        "%-14s %6.3f %6.3f\n",
        r.batch, r.in, r.out, r.fwd, r.fwd_raw, r.fwd / r.fwd_raw, r.bwd,
        r.bwd_raw, r.bwd / r.bwd_raw,
        (std::string{r.fwd_fused ? "fused" : "kernel"} + "/" +
         (r.bwd_fused ? "fused" : "kernel"))
            .c_str(),
        r.fwd_graph / r.fwd_raw_graph, r.bwd_graph / r.bwd_raw_graph);
  }

  // 2. Training steps.
  // Each with the step replayed as a CUDA graph (as the device actors run
  // it) from pinned batches (as gpu_step.py's); the small batch kernel by
  // kernel too, and the large from pageable memory: what each costs.
  std::printf("\n%-32s %6s %-8s %-8s %14s\n", "model", "batch", "step",
              "batch in", "samples/s");
  std::vector<step_row> steps;
  const std::string small = "mlp:784-256-128-10";
  for (auto [spec, batch, graphs, pinned] :
       {std::tuple<std::string, size_t, bool, bool>{small, 64, true, true},
        {small, 64, false, true},
        {small, 1024, true, true},
        {opt.large, 1024, true, true},
        {opt.large, 1024, true, false}}) {
    auto r = train_rate(*dev, spec, batch, graphs, pinned, opt.steps);
    steps.push_back(r);
    std::printf("%-32s %6zu %-8s %-8s %14.0f\n", r.spec.c_str(), r.batch,
                r.graphs ? "graph" : "kernels",
                r.pinned ? "pinned" : "pageable", r.samples_per_s);
  }

  // 3. A worker's whole step: weights up and gradients down each step,
  // one after the other or overlapped with the step, against the step
  // alone (2.'s graph row of the same model and batch from pinned memory:
  // what the copies cost at most). Both ways must agree first. Between
  // them, models of 0.5 to 5.6 Mi parameters at batch 256 (no step alone
  // measured: 0), where overlapping starts to pay (overlap_floats).
  std::printf("\n%-32s %6s %14s %14s %6s %8s\n", "whole step", "batch",
              "sequential/s", "overlapped/s", "ratio", "of step");
  std::vector<std::tuple<std::string, size_t, double, double, double>> wholes;
  for (auto [spec, batch, alone] :
       {std::tuple{small, size_t{64}, steps[0].samples_per_s},
        std::tuple{std::string{"mlp:784-512-256-10"}, size_t{256}, 0.0},
        std::tuple{std::string{"mlp:784-1024-512-10"}, size_t{256}, 0.0},
        std::tuple{std::string{"mlp:784-2048-2048-10"}, size_t{256}, 0.0},
        std::tuple{opt.large, size_t{1024}, steps[3].samples_per_s}}) {
    using how = cuda::cuda_model::transfers;
    std::vector<float> one, other;
    int n = batch > 64 ? std::max(opt.steps / 4, 1) : opt.steps;
    auto seq = whole_rate(*dev, spec, batch, how::sequential, n, one);
    auto ovl = whole_rate(*dev, spec, batch, how::overlapped, n, other);
    auto err = relative_error(one, other);
    if (!(err <= 1e-6))
      die(spec + ": the overlapped step's gradients differ by " +
          std::to_string(err));
    wholes.emplace_back(spec, batch, seq, ovl, alone);
    std::printf("%-32s %6zu %14.0f %14.0f %6.3f %8.3f\n", spec.c_str(), batch,
                seq, ovl, ovl / seq,
                alone > 0 ? std::max(seq, ovl) / alone : 0);
  }

  // 4. Copies: the large batch's size (1024 x 784 floats) and 64 MiB.
  std::printf("\n%-14s %12s %12s %6s\n", "copy up", "ours GB/s", "pinned GB/s",
              "ratio");
  std::vector<std::pair<size_t, std::pair<double, double>>> copies;
  for (size_t bytes : {size_t{1024 * 784 * 4}, size_t{64} << 20}) {
    auto c = copy_rates(*dev, bytes, 20);
    copies.push_back({bytes, c});
    std::printf("%10zu B   %12.2f %12.2f %6.3f\n", bytes, c.first, c.second,
                c.first / c.second);
  }

  std::string json = "{\"bench\":\"gpu_step\",\"device\":\"" + dev->describe() +
                     "\",\"gemm\":[";
  char buf[512];
  for (size_t i = 0; i < gemms.size(); ++i) {
    auto& r = gemms[i];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"shape\":[%zu,%zu,%zu],\"fwd_gflops\":%.1f,"
                  "\"fwd_raw_gflops\":%.1f,\"bwd_gflops\":%.1f,"
                  "\"bwd_raw_gflops\":%.1f,\"fwd_graph_gflops\":%.1f,"
                  "\"fwd_raw_graph_gflops\":%.1f,\"bwd_graph_gflops\":%.1f,"
                  "\"bwd_raw_graph_gflops\":%.1f,\"fwd_fused\":%s,"
                  "\"bwd_fused\":%s}",
                  i ? "," : "", r.batch, r.in, r.out, r.fwd, r.fwd_raw, r.bwd,
                  r.bwd_raw, r.fwd_graph, r.fwd_raw_graph, r.bwd_graph,
                  r.bwd_raw_graph, r.fwd_fused ? "true" : "false",
                  r.bwd_fused ? "true" : "false");
    json += buf;
  }
  json += "],\"train\":[";
  for (size_t i = 0; i < steps.size(); ++i) {
    std::snprintf(buf, sizeof(buf),
                  "%s{\"model\":\"%s\",\"batch\":%zu,\"graph\":%s,"
                  "\"pinned\":%s,\"samples_per_s\":%.0f}",
                  i ? "," : "", steps[i].spec.c_str(), steps[i].batch,
                  steps[i].graphs ? "true" : "false",
                  steps[i].pinned ? "true" : "false", steps[i].samples_per_s);
    json += buf;
  }
  json += "],\"whole_step\":[";
  for (size_t i = 0; i < wholes.size(); ++i) {
    auto& [spec, batch, seq, ovl, alone] = wholes[i];
    auto alone_s = alone > 0 ? std::to_string(std::lround(alone)) : "null";
    std::snprintf(buf, sizeof(buf),
                  "%s{\"model\":\"%s\",\"batch\":%zu,\"sequential_per_s\":"
                  "%.0f,\"overlapped_per_s\":%.0f,\"step_alone_per_s\":%s}",
                  i ? "," : "", spec.c_str(), batch, seq, ovl, alone_s.c_str());
    json += buf;
  }
  json += "],\"copy\":[";
  for (size_t i = 0; i < copies.size(); ++i) {
    std::snprintf(buf, sizeof(buf),
                  "%s{\"bytes\":%zu,\"ours_gbs\":%.2f,\"pinned_gbs\":%.2f}",
                  i ? "," : "", copies[i].first, copies[i].second.first,
                  copies[i].second.second);
    json += buf;
  }
  std::printf("\n%s]}\n", json.c_str());
  cublasDestroy(h);
  cudaStreamDestroy(stream);
  return 0;
}

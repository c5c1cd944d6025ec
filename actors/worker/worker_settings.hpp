// Settings of the built-in workers: the trainer (INI group "train") and
// the worker process (group "worker").
#pragma once

#include <cstdint>
#include <string>

#include <caf/error.hpp>

#include "actors/device/device_settings.hpp"
#include "actors/kv/kv_settings.hpp"
#include "actors/server/optimizer_settings.hpp"

namespace troupe {

/// Settings of the built-in trainer worker (INI group "train").
struct train_settings {
  /// Model spec. Default mlp:784-256-128-10.
  std::string model = "mlp:784-256-128-10";
  /// Passes over the training set. Default 10.
  uint32_t epochs = 10;
  /// Samples per step and worker. Default 64.
  uint32_t batch = 64;
  /// Seed of initialisation and shuffling. Default 1.
  uint64_t seed = 1;
  /// Folder of the IDX files. Default Debian's dataset-fashion-mnist.
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  /// JSON-lines metrics file written by rank 0; "" = none.
  std::string metrics_file;
  /// Test images evaluated after each epoch; 0 = all 10,000.
  uint32_t eval_samples = 0;
  /// Evaluations per epoch (rank 0 pauses for each). Default 1.
  uint32_t evals_per_epoch = 1;
  /// With --worker.overlap: layers with more weights than this are pushed
  /// as row blocks of about this many floats (model::set_row_blocks).
  /// Default 131072 (mlp:784-256-128-10's first layer in 2 blocks: more
  /// pushes per step cost more than they hide on 2 cores); 0 = whole layers.
  uint32_t block_floats = 131072;
};

/// One error naming the --train.* flag that is wrong, or none.
caf::error validate(const train_settings& x);

/// Most floats of the built-in workload's arrays together (4 GiB).
constexpr uint64_t max_workload_floats = uint64_t{1} << 30;

/// Longest --worker.step-timeout-ms: a day.
constexpr uint32_t max_step_timeout_ms = 86400000;

/// Settings of a worker process (INI group "worker").
struct worker_settings {
  /// train (Fashion-MNIST), counter (push/pull check) or stage (one stage
  /// of a model-parallel pipeline: --pipeline.*). Default train.
  std::string task = "train";
  /// Clocks the counter task (and examples' workers) run. Default 20.
  uint32_t steps = 20;
  /// Arrays the counter task pushes and pulls. Default 4.
  uint32_t keys = 4;
  /// Floats per array. Default 65536 (256 KiB).
  uint32_t key_floats = 65536;
  /// Pipelined steps (async and ssp only; worker_options::pipeline).
  /// Default off.
  bool pipeline = false;
  /// Overlapped steps (sync and async; worker_options::overlap): each
  /// block of gradients is pushed as soon as it is made. Default off.
  bool overlap = false;
  /// How long, in microseconds, an unpipelined worker's scheduler thread
  /// watches for work before it sleeps (actors/base/spin_scheduler.hpp):
  /// the weights that end a step's wait then need no thread wake-up. It
  /// yields the core meanwhile. Default 2000; 0 = sleep at once.
  uint32_t watch_us = 2000;
  /// Threads OpenBLAS uses in a worker process (train and stage), set
  /// before it computes. Default 1: the workers of a machine share its
  /// cores, and OpenBLAS's idle threads spin. A pipeline's 3 stages on 2
  /// cores beside one busy process took 52 s an epoch with OpenBLAS's own
  /// choice (2 threads each) and 5.8 s with 1. Raise it for a worker that
  /// has a machine's cores to itself. It overrides OPENBLAS_NUM_THREADS.
  uint32_t blas_threads = 1;
  /// A step of the worker's own work (a training step, an evaluation, a
  /// stage's forward or backward) that runs this long, in ms, is hung: the
  /// process ends so that its agent restarts it (actors/base/step_watch.hpp;
  /// its process still answers peers, so nothing else notices). Default 0:
  /// half what the others wait for it (step_bound_of in worker.hpp), so
  /// that it ends before they give up and end instead; 86400000 (a day)
  /// for never, as under a debugger.
  uint32_t step_timeout_ms = 0;
  /// --device (a flag of its own): where the trainer computes
  /// (actors/device/). Default auto.
  device_settings device;
  /// --server.mode=sync_device: a worker's devices sum their gradients on
  /// the node (set by node_config from the mode).
  bool sum_on_devices = false;
};

/// One error naming the --worker.* flag that is wrong, or none.
caf::error validate(const worker_settings& x);

/// What the built-in trainer runs under: its own settings, its worker
/// process's, its kv client's and the optimizer's (which it applies itself
/// with --optimizer.on=worker).
struct trainer_settings {
  train_settings train;
  worker_settings worker;
  kv_settings kv;
  optimizer_settings optimizer;
};

} // namespace troupe

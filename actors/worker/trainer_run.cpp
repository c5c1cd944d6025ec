// run_training: a trainer worker process's start (actors/worker/trainer.hpp):
// its model, devices and data, then the worker to the end.
#include "actors/worker/trainer.hpp"

#include <unistd.h>

#include <algorithm>

#include <caf/send.hpp>

#include "actors/base/exit_codes.hpp"
#include "actors/base/log.hpp"
#include "actors/base/writable.hpp"
#include "kernels/blas.hpp"
#include "kernels/idx.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

/// A model, data or device that cannot be had: one line, and
/// exit_bad_config (the same flags fail again: its agent does not restart
/// it).
int bad_config(const std::string& what) {
  stderr_line() << "*** " << what << '\n';
  return exit_bad_config;
}

/// The device actors of --device, or none (`out` null) where the trainer
/// computes on the CPU in its own thread: --device=cpu, or auto without a
/// GPU (or with --worker.overlap), unless sync_device sums on devices.
/// exit_bad_config, with one line on stderr, if a device cannot be opened.
int open_devices(caf::actor_system& sys, const trainer_settings& cfg,
                 model& net, std::shared_ptr<device_team>& out) {
  auto& w = cfg.worker;
  std::string why;
  int gpus = w.device.named || w.overlap ? 0 : gpus_found(why);
  auto devices = resolve_devices(w.device, gpus, w.sum_on_devices);
  if (cpu_alone(devices) && !w.sum_on_devices) {
    TROUPE_LOG(info, "trainer", "computing on cpu (", blas_description(), ")",
               auto_note(w.device, w.overlap ? "--worker.overlap" : why));
    return 0;
  }
  std::string err;
  out = device_team::open(sys, devices, w.sum_on_devices, net, cfg.train.batch,
                          err);
  if (!out)
    return bad_config(err);
  TROUPE_LOG(info, "trainer", "computing on ", out->describe());
  return 0;
}

} // namespace

int run_training(caf::actor_system& sys, caf::actor scheduler,
                 const trainer_settings& cfg) {
  std::string err;
  auto net = model::from_spec(cfg.train.model, &err);
  if (!net)
    return bad_config("--train.model: " + err);
  // Checked by every trainer before it joins, though rank 0 writes it:
  // the rank is known only after joining, and a job that trained without
  // its metrics would be found out at its end.
  if (auto bad = unwritable(cfg.train.metrics_file); !bad.empty())
    return bad_config("--train.metrics-file: " + bad);
  if (auto w = blas_core_warning(); !w.empty())
    TROUPE_LOG(warning, "trainer", w);
  std::shared_ptr<device_team> devices; // before the data: fail fast
  if (auto code = open_devices(sys, cfg, *net, devices); code != 0)
    return code;
  dataset train, test;
  if (auto e = load_fashion_mnist(cfg.train.data_dir, "train", train);
      !e.empty())
    return bad_config(e);
  if (auto e = load_fashion_mnist(cfg.train.data_dir, "t10k", test); !e.empty())
    return bad_config(e);
  if (auto e = splits_match(cfg.train.data_dir, train, test); !e.empty())
    return bad_config(e);
  if (auto e = model_fits(cfg.train.model, net->input_size(),
                          net->output_size(), train.images.cols(),
                          std::max(classes_of(train), classes_of(test)));
      !e.empty())
    return bad_config(e);
  // Rank 0's progress to the scheduler's status page, as events, sent
  // without waiting: training never waits for the page.
  auto progress = [scheduler](const std::string& detail) {
    event_record e{now_ms(),
                   "progress",
                   role::worker,
                   0,
                   static_cast<uint32_t>(::getpid()),
                   detail,
                   "worker 0"};
    caf::anon_send(scheduler, event_atom_v, encode(e));
  };
  // Its clocks: epochs x (samples / workers) / batch (trainer.cpp).
  auto work = "--train.epochs=" + std::to_string(cfg.train.epochs) +
              " --train.batch=" + std::to_string(cfg.train.batch) + " on " +
              std::to_string(train.labels.size()) + " samples";
  auto logic = make_trainer(cfg, std::move(*net), std::move(train),
                            std::move(test), progress, std::move(devices));
  worker_options opts;
  opts.pipeline = cfg.worker.pipeline;
  opts.overlap = cfg.worker.overlap;
  opts.step_timeout_ms = cfg.worker.step_timeout_ms;
  auto join = cfg.kv; // says which optimizer it expects, and its work
  join.optimizer = optimizer_fingerprint(cfg.optimizer);
  join.work = work;
  return run_worker(sys, std::move(scheduler), join, logic, opts);
}

} // namespace troupe

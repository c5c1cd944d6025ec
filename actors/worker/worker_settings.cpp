// Checks of the built-in workers' settings.
#include "actors/worker/worker_settings.hpp"

#include "messages/errors.hpp"

namespace troupe {

caf::error validate(const train_settings& x) {
  if (x.block_floats != 0 && x.block_floats < 1024)
    return caf::make_error(errc::invalid_config,
                           "--train.block-floats must be 0 or >= 1024: each"
                           " block is a sync round and a message per server"
                           " and step, got",
                           x.block_floats);
  if (x.epochs == 0 || x.batch == 0 || x.evals_per_epoch == 0)
    return caf::make_error(errc::invalid_config,
                           "--train.epochs, --train.batch and"
                           " --train.evals-per-epoch must be > 0");
  return caf::none;
}

caf::error validate(const worker_settings& x) {
  if (x.overlap && x.pipeline)
    return caf::make_error(errc::invalid_config,
                           "--worker.overlap and --worker.pipeline exclude"
                           " each other: pick one way to overlap");
  if (x.overlap && x.task == "counter")
    return caf::make_error(errc::invalid_config,
                           "--worker.overlap needs --worker.task=train (or a"
                           " worker of your own with blocks()): the counter"
                           " task steps whole");
  if (x.watch_us > 100000)
    return caf::make_error(errc::invalid_config,
                           "--worker.watch-us must be 0..100000, got",
                           x.watch_us);
  if (x.blas_threads == 0 || x.blas_threads > 256)
    return caf::make_error(errc::invalid_config,
                           "--worker.blas-threads must be 1..256, got",
                           x.blas_threads);
  if (x.step_timeout_ms > max_step_timeout_ms)
    return caf::make_error(errc::invalid_config,
                           "--worker.step-timeout-ms must be 0..86400000 (a"
                           " day; 0 = half what the others wait for it), got",
                           x.step_timeout_ms);
  if (x.task != "train" && x.task != "counter" && x.task != "stage")
    return caf::make_error(errc::invalid_config,
                           "--worker.task must be train, counter or stage,"
                           " got",
                           x.task);
  if ((x.overlap || x.pipeline) && x.task == "stage")
    return caf::make_error(errc::invalid_config,
                           "--worker.overlap and --worker.pipeline are for"
                           " data-parallel workers, not --worker.task=stage");
  if (x.keys == 0 || x.key_floats == 0)
    return caf::make_error(errc::invalid_config,
                           "--worker.keys and --worker.key-floats must be"
                           " > 0");
  // Each is held whole by the worker (std::bad_alloc beyond memory).
  if (uint64_t{x.keys} * x.key_floats > max_workload_floats)
    return caf::make_error(errc::invalid_config,
                           "--worker.keys x --worker.key-floats must be at"
                           " most 2^30 floats (4 GiB), got",
                           uint64_t{x.keys} * x.key_floats);
  return caf::none;
}

} // namespace troupe

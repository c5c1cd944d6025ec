// The built-in trainer worker: data-parallel training of a kernels/ model on
// Fashion-MNIST through the kv store: pull -> forward/backward -> push.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <functional>
#include <memory>
#include <string>

#include "actors/device/device_team.hpp"
#include "actors/worker/worker.hpp"
#include "actors/worker/worker_settings.hpp"
#include "kernels/idx.hpp"
#include "kernels/model.hpp"

namespace troupe {

/// Trains as one worker and prints progress; rank 0 evaluates after every
/// epoch and ends with "final test accuracy: 0.XXXX". Returns the process
/// exit code.
int run_training(caf::actor_system& sys, caf::actor scheduler,
                 const trainer_settings& cfg);

/// Hears rank 0's progress lines as "epoch=E loss=L accuracy=A
/// samples_per_s=R" (loss and rate left out where no step was taken):
/// run_training sends them to the scheduler's status page.
using progress_fn = std::function<void(const std::string& detail)>;

/// The trainer's worker_logic on `net` and the given data (run_training
/// loads Fashion-MNIST; tests pass their own). With `devices`, each step's
/// forward and backward run on them (the device actors of --device);
/// without, in the worker's own thread on the CPU.
std::shared_ptr<worker_logic>
make_trainer(const trainer_settings& cfg, model net, dataset train,
             dataset test, progress_fn progress = nullptr,
             std::shared_ptr<device_team> devices = nullptr);

} // namespace troupe

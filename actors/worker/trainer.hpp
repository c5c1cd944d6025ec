// The built-in trainer worker: data-parallel training of a kernels/ model on
// Fashion-MNIST through the kv store: pull -> forward/backward -> push.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <memory>

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

/// The trainer's worker_logic on `net` and the given data (run_training
/// loads Fashion-MNIST; tests pass their own).
std::shared_ptr<worker_logic> make_trainer(const trainer_settings& cfg,
                                           model net, dataset train,
                                           dataset test);

} // namespace troupe

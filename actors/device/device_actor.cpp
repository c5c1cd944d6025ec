// The device actor (device_actor.hpp): a job's collectives and its math,
// on the actor's own thread.
#include "actors/device/device_actor.hpp"

#include <exception>
#include <optional>
#include <string>
#include <utility>

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/base/step_watch.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

/// Every array of `xs` through `op` (a collective), all of them even after
/// a failure (every rank must make the same calls); the first failure.
template <class Op>
device_status each_array(const std::vector<device_array>& xs, Op op) {
  device_status first;
  for (auto& a : xs)
    if (auto st = op(a); !st.ok() && first.ok())
      first = std::move(st);
  return first;
}

} // namespace

device_parts device_parts_of(const std::string& device) {
  return {device + ": its share of the step",
          device + ": a collective, waiting for the other devices"};
}

void run_device_job(device_backend& backend, communicator* comm,
                    device_job& job) {
  device_status st; // the first failure
  auto keep = [&st](device_status next) {
    if (st.ok())
      st = std::move(next);
  };
  // A collective's failure, kept as such (the step names the rank whose
  // own work failed first).
  auto keep_collective = [&st, &job](device_status next) {
    if (st.ok() && !next.ok()) {
      st = std::move(next);
      job.collective_failed = true;
    }
  };
  // The part under way, for the step watch (device_parts).
  std::optional<watched_work> watch;
  auto watch_as = [&watch, &job](std::string device_parts::*part) {
    watch.reset();
    if (job.parts)
      watch.emplace(job.parts->*part);
  };
  watch_as(&device_parts::own);
  if (!comm && job.share == 1.0f) { // a device alone: one call, which a
                                    // GPU overlaps with its copies
    job.status = backend.step_alone(job.weights, job.x, job.labels, job.rows,
                                    &job.loss, job.gradients);
    return;
  }
  if (!job.weights.empty())
    keep(backend.set_parameters(job.weights));
  if (comm) { // rank 0's weights to every rank
    watch_as(&device_parts::collective);
    keep(backend.sync());
    keep_collective(
        each_array(backend.parameter_arrays(), [comm](device_array a) {
          return comm->broadcast(a.data, a.size, 0);
        }));
    watch_as(&device_parts::own);
  }
  if (st.ok())
    keep(backend.compute_gradients(job.x, job.labels, job.rows, &job.loss));
  if (st.ok() && job.share != 1.0f)
    keep(backend.scale_gradients(job.share));
  job.loss *= job.share;
  if (comm) { // the batch's mean gradient on every rank
    watch_as(&device_parts::collective);
    keep(backend.sync());
    keep_collective(
        each_array(backend.gradient_arrays(), [comm](device_array a) {
          return comm->all_reduce_sum(a.data, a.size);
        }));
  }
  if (st.ok() && !job.gradients.empty())
    keep(backend.get_gradients(job.gradients));
  job.status = std::move(st);
}

namespace {

struct device_state {
  static inline const char* name = "device";
  std::shared_ptr<device_backend> backend;
  std::shared_ptr<communicator> comm;
  device_status attached; ///< the backend's attach() on this thread
  bool tried = false;
};

using device_ptr = caf::stateful_actor<device_state>*;

/// Runs one job; a thrown exception (an allocation) becomes its status.
void serve(device_state& s, device_job& job) {
  try {
    if (!s.tried) { // the first job runs on the actor's thread
      s.attached = s.backend->attach();
      s.tried = true;
    }
    if (!s.attached.ok())
      job.status = s.attached;
    else
      run_device_job(*s.backend, s.comm.get(), job);
  } catch (const std::exception& e) {
    job.status = {std::string{"device step: "} + e.what()};
  }
  job.done.set_value();
}

caf::behavior device_actor(device_ptr self,
                           std::shared_ptr<device_backend> backend,
                           std::shared_ptr<communicator> comm) {
  self->state.backend = std::move(backend);
  self->state.comm = std::move(comm);
  return {
      [self](step_atom, const std::shared_ptr<device_job>& job) {
        serve(self->state, *job);
      },
  };
}

} // namespace

caf::actor spawn_device_actor(caf::actor_system& sys,
                              std::shared_ptr<device_backend> backend,
                              std::shared_ptr<communicator> comm) {
  return sys.spawn<caf::detached>(device_actor, std::move(backend),
                                  std::move(comm));
}

} // namespace troupe

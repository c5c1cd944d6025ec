// A worker's device actors and their communicator (device_team.hpp).
#include "actors/device/device_team.hpp"

#include <cstdlib>
#include <future>
#include <utility>

#include <caf/send.hpp>

#include "actors/base/exit_codes.hpp"
#include "actors/base/log.hpp"
#include "actors/device/device_actor.hpp"
#include "actors/device/gpu_plugin.hpp"
#include "kernels/comm/communicator.hpp"
#include "kernels/device_backend.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

/// A replica of `m` on `d`; null with the reason in `why`.
std::shared_ptr<device_backend> open_backend(const device_name& d, model& m,
                                             std::string& why) {
  if (d.kind == device_name::kind_t::cpu)
    return make_cpu_backend(m);
  auto gpu = gpu_plugin(why);
  if (!gpu)
    return nullptr;
  device_status st;
  auto b = gpu->make_backend(d.ordinal, m, st);
  if (!b)
    why = st.error;
  return b;
}

/// The communicator of `ds` (all of one kind); empty with the reason in
/// `why`.
std::vector<std::unique_ptr<communicator>>
make_group(const std::vector<device_name>& ds, std::chrono::milliseconds wait,
           std::string& why) {
  if (ds[0].kind == device_name::kind_t::cpu)
    return make_cpu_group(int(ds.size()), wait);
  auto gpu = gpu_plugin(why);
  if (!gpu)
    return {};
  std::vector<int> ordinals;
  for (auto& d : ds)
    ordinals.push_back(d.ordinal);
  return gpu->make_group(ordinals, why);
}

std::string list(const std::vector<device_name>& ds) {
  std::string out;
  for (auto& d : ds)
    out += (out.empty() ? "" : ",") + to_string(d);
  return out;
}

} // namespace

int gpus_found(std::string& why) {
  auto gpu = gpu_plugin(why);
  return gpu ? gpu->device_count(&why) : 0;
}

std::unique_ptr<device_team>
device_team::open(caf::actor_system& sys,
                  const std::vector<device_name>& devices, bool sum_on_devices,
                  model& m, size_t batch, std::string& error,
                  std::chrono::milliseconds wait) {
  auto flag = "--device=" + list(devices) + ": ";
  if (devices.empty() || (devices.size() > 1 && !sum_on_devices)) {
    error = flag + "several devices of one worker need"
                   " --server.mode=sync_device, which sums their gradients";
    return nullptr;
  }
  if (batch < devices.size()) {
    error = flag + "a batch of " + std::to_string(batch) +
            " rows cannot be shared among " + std::to_string(devices.size()) +
            " devices (raise --train.batch)";
    return nullptr;
  }
  std::vector<std::shared_ptr<device_backend>> backends;
  std::string why;
  for (auto& d : devices) {
    backends.push_back(open_backend(d, m, why));
    if (!backends.back()) {
      error = flag + to_string(d) + ": " + why;
      return nullptr;
    }
  }
  std::vector<std::unique_ptr<communicator>> group;
  if (sum_on_devices) {
    group = make_group(devices, wait, why);
    if (group.size() != devices.size()) {
      error = flag + "the devices' communicator: " + why;
      return nullptr;
    }
  }
  std::string described;
  for (auto& b : backends)
    described += (described.empty() ? "" : ", ") + b->describe();
  auto n = devices.size();
  described = std::to_string(n) + (n == 1 ? " device (" : " devices (") +
              described + ")" +
              (!sum_on_devices ? ""
               : devices[0].kind == device_name::kind_t::cpu
                   ? ", gradients summed by a CPU group"
                   : ", gradients summed by NCCL");
  // On this thread, which opened the devices (a GPU's pinned memory is
  // every GPU's: each device's rows go straight up).
  auto floats = batch * m.input_size();
  auto memory = backends[0]->host_floats(floats);
  auto team = assemble(sys, devices, std::move(backends), std::move(group),
                       wait, std::move(described));
  team->batch_memory_ = std::move(memory);
  team->batch_floats_ = floats;
  return team;
}

std::unique_ptr<device_team>
device_team::assemble(caf::actor_system& sys, std::vector<device_name> names,
                      std::vector<std::shared_ptr<device_backend>> backends,
                      std::vector<std::unique_ptr<communicator>> group,
                      std::chrono::milliseconds wait, std::string description) {
  std::unique_ptr<device_team> team{new device_team};
  team->names_ = std::move(names);
  for (size_t r = 0; r < team->names_.size(); ++r)
    team->parts_.push_back(device_parts_of(team->name_of(r)));
  team->wait_ = wait;
  team->description_ = std::move(description);
  for (size_t r = 0; r < backends.size(); ++r) {
    std::shared_ptr<communicator> comm;
    if (r < group.size())
      comm = std::move(group[r]);
    team->actors_.push_back(
        spawn_device_actor(sys, std::move(backends[r]), std::move(comm)));
  }
  return team;
}

std::string device_team::name_of(size_t rank) const {
  auto name = to_string(names_[rank]);
  if (names_.size() > 1)
    name += " (rank " + std::to_string(rank) + ")";
  return name;
}

device_team::~device_team() {
  for (auto& a : actors_)
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

caf::error device_team::step(model& m, const float* x, const uint8_t* labels,
                             size_t batch, float* loss) {
  auto n = actors_.size();
  auto per = m.input_size();
  std::vector<std::shared_ptr<device_job>> jobs;
  std::vector<std::future<void>> done;
  size_t first = 0;
  for (size_t r = 0; r < n; ++r) {
    auto job = std::make_shared<device_job>();
    job->rows = batch / n + (r < batch % n ? 1 : 0);
    job->x = x + first * per;
    job->labels = labels + first;
    job->share = float(job->rows) / float(batch);
    job->parts = &parts_[r];
    if (r == 0) {
      job->weights = m.parameters();
      job->gradients = m.gradients();
    }
    first += job->rows;
    done.push_back(job->done.get_future());
    jobs.push_back(job);
    caf::anon_send(actors_[r], step_atom_v, std::move(job));
  }
  // Every device is waited for: each reads `x` and `m` until it is done.
  // A collective gives up on a missing rank after wait_ (the CPU group; NCCL
  // never does); a device busy past twice that is hung.
  auto deadline = std::chrono::steady_clock::now() + 2 * wait_;
  for (size_t r = 0; r < n; ++r)
    if (done[r].wait_until(deadline) != std::future_status::ready) {
      stderr_line() << "*** " << name_of(r) << " did not finish a step within "
                    << 2 * wait_.count()
                    << " ms: it is hung, and this worker ends so that its agent"
                       " restarts it\n";
      std::_Exit(exit_failed);
    }
  // The first device whose own work failed, else the first collective's
  // failure (it names the rank that did not come).
  size_t failed = n;
  for (size_t r = 0; r < n; ++r)
    if (!jobs[r]->status.ok() &&
        (failed == n ||
         (jobs[failed]->collective_failed && !jobs[r]->collective_failed)))
      failed = r;
  if (failed < n)
    return caf::make_error(errc::device_failed, name_of(failed),
                           jobs[failed]->status.error);
  float sum = 0;
  for (auto& j : jobs)
    sum += j->loss;
  *loss = sum;
  return caf::none;
}

} // namespace troupe

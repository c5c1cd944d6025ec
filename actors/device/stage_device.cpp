// A pipeline stage's device (stage_device.hpp).
#include "actors/device/stage_device.hpp"

#include "actors/device/device_team.hpp"
#include "actors/device/gpu_plugin.hpp"

namespace troupe {

device_name stage_device(const device_settings& d, std::string& why) {
  if (d.named)
    return d.devices.empty() ? device_name{} : d.devices.front();
  return resolve_devices(d, gpus_found(why), false).front();
}

std::unique_ptr<stage_backend> open_stage(const device_name& d, model& m,
                                          size_t first, size_t last,
                                          std::string& why) {
  if (d.kind == device_name::kind_t::cpu)
    return make_cpu_stage(m, first, last);
  auto gpu = gpu_plugin(why);
  if (!gpu)
    return nullptr;
  device_status st;
  auto s = gpu->make_stage(d.ordinal, m, first, last, st);
  if (!s)
    why = st.error;
  return s;
}

} // namespace troupe

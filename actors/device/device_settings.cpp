// Parsing --device (device_settings.hpp).
#include "actors/device/device_settings.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "messages/errors.hpp"

namespace troupe {

std::string to_string(const device_name& x) {
  if (x.kind == device_name::kind_t::cpu)
    return "cpu";
  return "cuda:" + std::to_string(x.ordinal);
}

namespace {

/// "cpu" or "cuda:N" (N of at most 4 digits), else false.
bool parse_one(const std::string& word, device_name& out) {
  if (word == "cpu") {
    out = {device_name::kind_t::cpu, 0};
    return true;
  }
  const std::string prefix = "cuda:";
  if (word.rfind(prefix, 0) != 0 || word.size() == prefix.size() ||
      word.size() > prefix.size() + 4 ||
      word.find_first_not_of("0123456789", prefix.size()) != std::string::npos)
    return false;
  out = {device_name::kind_t::cuda, std::atoi(word.c_str() + prefix.size())};
  return true;
}

caf::error refuse(const std::string& text, const std::string& why) {
  return caf::make_error(errc::invalid_config, "--device=" + text + ": " + why);
}

} // namespace

caf::error validate(device_settings& x) {
  x.devices.clear();
  x.named = x.text != "auto";
  if (!x.named)
    return caf::none;
  std::stringstream in{x.text};
  std::string word;
  while (std::getline(in, word, ',')) {
    device_name d;
    if (!parse_one(word, d))
      return refuse(x.text, "'" + word +
                                "' is no device: say auto, cpu, cuda:N, or a"
                                " comma list of cpu or of cuda:N");
    x.devices.push_back(d);
  }
  if (x.devices.empty() || x.text.back() == ',')
    return refuse(x.text, "an empty device in the list");
  auto gpus = std::count_if(
      x.devices.begin(), x.devices.end(),
      [](const device_name& d) { return d.kind == device_name::kind_t::cuda; });
  if (gpus != 0 && size_t(gpus) != x.devices.size())
    return refuse(x.text, "cpu and GPUs in one list: one communicator sums"
                          " a node's devices, all of one kind");
  for (size_t i = 0; gpus != 0 && i < x.devices.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (x.devices[i].ordinal == x.devices[j].ordinal)
        return refuse(x.text, to_string(x.devices[i]) +
                                  " named twice: NCCL takes one rank per GPU");
  return caf::none;
}

std::vector<device_name> resolve_devices(const device_settings& x, int gpus,
                                         bool several) {
  if (x.named)
    return x.devices;
  if (gpus <= 0)
    return {device_name{}};
  std::vector<device_name> out;
  for (int i = 0; i < (several ? gpus : 1); ++i)
    out.push_back({device_name::kind_t::cuda, i});
  return out;
}

bool cpu_alone(const std::vector<device_name>& ds) {
  return ds.size() == 1 && ds[0].kind == device_name::kind_t::cpu;
}

std::string auto_note(const device_settings& x, const std::string& why) {
  if (x.named)
    return {};
  return "; --device=auto" + (why.empty() ? "" : ": " + why);
}

} // namespace troupe

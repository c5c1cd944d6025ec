// Loading the GPU plugin (gpu_plugin.hpp).
#include "actors/device/gpu_plugin.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <vector>

namespace troupe {

namespace {

const char* plugin_file = "libtroupe_cuda_plugin.so";

struct loaded {
  const cuda::plugin_api* api = nullptr;
  std::string why;
};

loaded load() {
  loaded out;
#ifndef TROUPE_CUDA_PLUGIN
  out.why = "this troupe was built without CUDA (CMake found no nvcc)";
  return out;
#else
  namespace fs = std::filesystem;
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec).parent_path();
  std::vector<fs::path> places{exe / plugin_file,
                               exe / ".." / TROUPE_PLUGIN_LIBDIR / plugin_file,
                               fs::path{TROUPE_CUDA_PLUGIN}};
  std::string looked;
  for (auto& p : places) {
    looked += (looked.empty() ? "" : ", ") + p.string();
    if (!fs::exists(p, ec))
      continue;
    void* lib = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      out.why = std::string{"cannot load "} + p.string() + ": " + ::dlerror();
      return out;
    }
    using entry = const cuda::plugin_api* (*)();
    auto fn = reinterpret_cast<entry>(::dlsym(lib, "troupe_cuda_plugin"));
    if (fn == nullptr) {
      out.why = p.string() + " has no troupe_cuda_plugin";
      return out;
    }
    auto api = fn(); // the library stays loaded for the process
    if (api == nullptr || api->abi != cuda::plugin_abi) {
      out.why = p.string() + " is of another troupe build (plugin ABI " +
                (api ? std::to_string(api->abi) : std::string{"none"}) +
                ", this troupe-node wants " + std::to_string(cuda::plugin_abi) +
                "): reinstall it";
      return out;
    }
    out.api = api;
    return out;
  }
  out.why = std::string{"no "} + plugin_file + " (looked in " + looked + ")";
  return out;
#endif
}

} // namespace

const cuda::plugin_api* gpu_plugin(std::string& why) {
  static std::once_flag once;
  static loaded result;
  std::call_once(once, [] { result = load(); });
  if (!result.api)
    why = result.why;
  return result.api;
}

} // namespace troupe

// libFuzzer harness of the INI checker (actors/node/option_check.hpp): the
// input is the text of a config file, checked against CAF's own options and
// a copy of troupe's groups with options of each type troupe declares.
//
// The real set lives in node_config, whose constructor needs the whole
// library; the checker asks a set only for groups, names and types, so a
// set with the same groups and types takes it down the same paths.
#include <cstddef>
#include <cstdint>
#include <string>

#include <caf/actor_system_config.hpp>
#include <caf/make_config_option.hpp>

#include "actors/node/option_check.hpp"

namespace {

/// CAF's options (scheduler, middleman, openssl, logger, ...) and troupe's
/// groups, with the names and types of deploy/local.ini and a few more.
struct ini_options : caf::actor_system_config {
  // Targets of the options; the checker never writes them.
  std::string text;
  uint16_t u16 = 0;
  uint32_t u32 = 0;
  uint64_t u64 = 0;
  float f32 = 0;
  double f64 = 0;
  bool flag = false;

  ini_options() {
    opt_group{custom_options_, "global"}
        .add(text, "role", "")
        .add(text, "scheduler-host", "")
        .add(u16, "scheduler-port", "")
        .add(text, "host", "")
        .add(u16, "port", "")
        .add(text, "log-level", "");
    opt_group{custom_options_, "cluster"}
        .add(u32, "servers", "")
        .add(u32, "slice-floats", "")
        .add(u32, "vnodes", "")
        .add(f64, "balance-slack", "");
    opt_group{custom_options_, "server"}
        .add(text, "mode", "")
        .add(u16, "road-port", "")
        .add(u32, "replicas", "");
    opt_group{custom_options_, "kv"}
        .add(u32, "request-timeout-ms", "")
        .add(u32, "max-message-bytes", "")
        .add(flag, "scheduler-only", "");
    opt_group{custom_options_, "road"}
        .add(u32, "spin-us", "")
        .add(u32, "caller-spin-us", "")
        .add(flag, "single-conn", "");
    opt_group{custom_options_, "optimizer"}
        .add(text, "name", "")
        .add(f32, "lr", "")
        .add(u32, "lr-decay-steps", "")
        .add(f32, "lr-decay", "")
        .add(f32, "momentum", "")
        .add(f32, "weight-decay", "");
    opt_group{custom_options_, "train"}
        .add(text, "model", "")
        .add(u32, "epochs", "")
        .add(u32, "batch", "")
        .add(u64, "seed", "")
        .add(text, "data-dir", "");
    opt_group{custom_options_, "fault"}
        .add(text, "plan", "")
        .add(f64, "drop-pushes", "");
    opt_group{custom_options_, "checkpoint"}
        .add(text, "dir", "")
        .add(u32, "every-ms", "");
    opt_group{custom_options_, "worker"}
        .add(text, "task", "")
        .add(u32, "steps", "")
        .add(u32, "keys", "")
        .add(u32, "key-floats", "");
  }

  const caf::config_option_set& options() const { return custom_options_; }
};

/// Initialises this program's copies of the option types' meta states
/// before CAF's library uses them. Both define them (inline templates); the
/// library, built by g++, writes their function pointers at compile time
/// and only their type names at run time, and so leaves the copies of this
/// clang build, which the loader hands it, without function pointers.
bool own_meta_states() {
  using caf::detail::option_meta_state_instance;
  option_meta_state_instance<std::string>();
  option_meta_state_instance<uint16_t>();
  option_meta_state_instance<uint32_t>();
  option_meta_state_instance<uint64_t>();
  option_meta_state_instance<float>();
  option_meta_state_instance<double>();
  option_meta_state_instance<bool>();
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool ready = own_meta_states();
  static const ini_options cfg;
  static_cast<void>(ready);
  std::string text(reinterpret_cast<const char*>(data), size);
  // An error names the line at fault, the answer to a bad file; only a
  // crash or a sanitizer report is a finding.
  static_cast<void>(troupe::check_ini_text(text, "fuzz.ini", cfg.options()));
  return 0;
}

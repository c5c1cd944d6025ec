// Configuration of a troupe node: CAF's INI file plus command-line flags.
// This class alone reads options; actors get the plain settings structs.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>

#include "actors/kv/kv_settings.hpp"
#include "actors/pipeline/stage_driver.hpp"
#include "actors/road/road_settings.hpp"
#include "actors/scheduler/scheduler_settings.hpp"
#include "actors/server/optimizer_settings.hpp"
#include "actors/server/server_settings.hpp"
#include "actors/supervision/agent_settings.hpp"
#include "actors/worker/worker_settings.hpp"
#include "messages/membership.hpp"

namespace troupe {

/// The process-wide settings every troupe process runs under: large
/// blocks stay in the heap, denormal floats are flushed to zero. node_config
/// applies them; a program that computes without one (a benchmark's
/// compute-only floor) calls this first, so that it computes alike.
void apply_process_settings();

/// Base of every node's configuration: registers troupe's message types and
/// error category, turns CAF heartbeats on, and reads every option.
struct node_config : caf::actor_system_config {
  /// scheduler | server | worker | agent. Required for troupe-node.
  std::string role_name;
  /// Scheduler address. Default 127.0.0.1.
  std::string scheduler_host = "127.0.0.1";
  /// Scheduler port; the scheduler publishes on it (0 = any free port).
  uint16_t scheduler_port = 4300;
  /// Address this node publishes its actor on. Default 127.0.0.1.
  std::string host = "127.0.0.1";
  /// Port this node publishes on; 0 = any free port.
  uint16_t port = 0;
  /// Log level: error, warning, info or debug. Default info.
  std::string log_level = "info";
  /// Port of this process's Prometheus metrics (--metrics.port); 0 = off.
  uint16_t metrics_port = 0;
  /// Consistency mode as text (server.mode).
  std::string mode_text = "sync";

  // Each subsystem's settings, one INI group each ("cluster", "server",
  // "optimizer", "train", "kv", "road", "worker", "agent", "fault",
  // "checkpoint"); finish() checks them and copies what several share.
  road_settings road;
  scheduler_settings scheduler;
  server_settings server;
  optimizer_settings optimizer;
  train_settings train;
  kv_settings kv;
  worker_settings worker;
  agent_settings agent;
  fault_settings fault;
  pipeline_settings pipeline;

  node_config();

  /// Checks and converts options after parsing; one error says what is
  /// wrong and how to fix it.
  caf::error finish();

  /// The role parsed from role_name.
  caf::expected<role> node_role() const;

  /// How long this process's scheduler thread watches for work before it
  /// sleeps: --worker.watch-us for an unpipelined worker, else 0.
  std::chrono::microseconds scheduler_watch() const;

  /// The servers' mode as checkpoints name it: sync_device is sync there
  /// (its checkpoints cut the rounds as sync's do, and resume under either).
  std::string checkpoint_mode() const;

  /// What the built-in trainer of this worker runs under.
  trainer_settings trainer() const;

  /// What a pipeline stage process (--worker.task=stage) runs under.
  stage_run_settings stage() const;

  /// troupe's options by group, each with its type, default and meaning;
  /// CAF's own groups only where they matter here (--help).
  std::string help_text() const;

  /// Refuses what CAF 0.17 would ignore or misread: an unknown flag, a
  /// word that is no flag, an unknown INI section or key, a value of the
  /// wrong type. Checks `args` and the INI file CAF reads for them
  /// (--config-file, else caf-application.ini if present), and rewrites
  /// `args` as CAF's parser takes them (plain_flags: --NAME=, --SWITCH=true
  /// and --SWITCH=false; finish() sets the switches turned off). Call
  /// before parse().
  caf::error check_options(std::vector<std::string>& args);

  /// Speaks mutual TLS with the certificates in `dir` (tls_files_in), as
  /// the three --openssl.* flags would say; before finish().
  void use_certificates(const std::string& dir);

private:
  // Option groups, one per subsystem (the constructor calls each).
  void add_global_options();
  void add_cluster_options();
  void add_server_options();
  void add_kv_options();
  void add_road_options();
  void add_optimizer_options();
  void add_train_options();
  void add_agent_options();
  void add_fault_options();
  void add_checkpoint_options();
  void add_worker_options();
  void add_pipeline_options();
  // Checks of finish(): options of several subsystems that must agree.
  /// CAF's own options that troupe needs in bounds: scheduler threads,
  /// heartbeats below the connection timeout.
  caf::error check_caf_settings() const;
  caf::error check_addresses() const;
  caf::error check_modes() const;
  caf::error check_devices() const;
  caf::error check_faults() const;
  caf::error check_checkpoints() const;
  /// A manifest in --checkpoint.dir: there with --resume, readable, of the
  /// flags given (the scheduler's and servers' part of check_checkpoints).
  caf::error check_manifest() const;
  /// --openssl.*: all of certificate, key and cafile, or none; each file
  /// readable. With them, loads CAF's openssl module (mutual TLS).
  caf::error check_tls();
  // What finish() copies into the settings of several subsystems.
  void share_settings();

  /// Where troupe's options start in custom_options_ (CAF's come before):
  /// --help shows each of their groups.
  size_t first_troupe_option_ = 0;
  /// The switches given as --SWITCH=false (check_options), for finish().
  std::vector<std::string> switches_off_;
  /// The options given as flags or in the INI file ("group.key"), as
  /// check_options found them: for an option that does nothing with the
  /// others given, where its default would not say so.
  std::set<std::string> given_;
  bool given(const std::string& name) const { return given_.count(name) > 0; }
};

/// A node's command line, read as troupe-node reads it (its main and a
/// custom worker's call this): loads CAF's network module into `cfg`;
/// --help prints the options; a misspelt option (named with the nearest
/// one), a malformed value or a bad setting is one line on stderr
/// (`*** reading options failed: ...`, `*** checking options failed:
/// ...`); --metrics.port is served (a port that cannot be is said, and the
/// node goes on). The code to exit with (0 after --help, 2 for a bad
/// option), or nothing: go on.
std::optional<int> read_command_line(node_config& cfg, int argc, char** argv);

} // namespace troupe

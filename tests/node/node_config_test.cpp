// Options of troupe-node: defaults, flags, and clear errors for bad values.
#define BOOST_TEST_MODULE node_config_tests
#include <boost/test/unit_test.hpp>

#include <caf/io/middleman.hpp>
#include <caf/settings.hpp>

#include "actors/node/node_config.hpp"
#include "messages/errors.hpp"

using namespace troupe;

namespace {

caf::error parse(node_config& cfg, std::vector<std::string> args) {
  cfg.load<caf::io::middleman>();
  if (auto err = cfg.parse(std::move(args)))
    return err;
  return cfg.finish();
}

/// `args` are refused, with an error that says `says`.
void rejected(std::vector<std::string> args, const std::string& says) {
  node_config cfg;
  auto err = parse(cfg, args);
  BOOST_CHECK_MESSAGE(err, "accepted: " << args.back());
  if (err)
    BOOST_CHECK_MESSAGE(describe(err).find(says) != std::string::npos,
                        describe(err));
}

} // namespace

BOOST_AUTO_TEST_SUITE(node_config_tests)

BOOST_AUTO_TEST_CASE(modes_parse_and_print) {
  BOOST_CHECK(parse_consistency("sync")->kind == consistency::kind_t::sync);
  BOOST_CHECK(parse_consistency("async")->kind == consistency::kind_t::async);
  auto ssp = parse_consistency("ssp:3");
  BOOST_REQUIRE(ssp);
  BOOST_CHECK(ssp->kind == consistency::kind_t::ssp && ssp->staleness == 3);
  BOOST_CHECK_EQUAL(to_string(*ssp), "ssp:3");
  auto on_device = parse_consistency("sync_device"); // sync on the servers
  BOOST_REQUIRE(on_device);
  BOOST_CHECK(on_device->kind == consistency::kind_t::sync &&
              on_device->on_device);
  BOOST_CHECK_EQUAL(to_string(*on_device), "sync_device");
  BOOST_CHECK(!parse_consistency("sync")->on_device);
  for (auto bad : {"", "ssp", "ssp:", "ssp:-1", "ssp:x", "SYNC", "ssp:1e3",
                   "sync_devices", "async_device"})
    BOOST_CHECK_MESSAGE(parse_consistency(bad).error() == errc::invalid_config,
                        bad);
}

BOOST_AUTO_TEST_CASE(defaults_turn_heartbeats_on) {
  node_config cfg;
  BOOST_REQUIRE(!parse(cfg, {}));
  auto hb = caf::get_if<caf::timespan>(&cfg, "middleman.heartbeat-interval");
  BOOST_REQUIRE(hb);
  BOOST_CHECK(*hb > caf::timespan{0});
  auto to = caf::get_if<caf::timespan>(&cfg, "middleman.connection-timeout");
  BOOST_REQUIRE(to);
  BOOST_CHECK(*to > *hb);
  BOOST_CHECK(cfg.server.mode.kind == consistency::kind_t::sync);
}

BOOST_AUTO_TEST_CASE(flags_set_options) {
  node_config cfg;
  BOOST_REQUIRE(!parse(
      cfg, {"--role=server", "--server.mode=ssp:2", "--cluster.servers=4",
            "--port=4411", "--server.helper-threads=3", "--kv.helper-threads=0",
            "--middleman.heartbeat-interval=50ms", "--kv.scheduler-only",
            "--road.spin-us=50", "--road.caller-spin-us=0",
            "--road.frame-spin-us=0", "--fault.cut-road-after=7"}));
  BOOST_CHECK_EQUAL(cfg.kv.faults.cut_road_after, 7u);
  BOOST_CHECK_EQUAL(cfg.server.helper_threads, 3u);
  BOOST_CHECK_EQUAL(cfg.road.spin_us, 50u);
  BOOST_CHECK_EQUAL(node_config{}.road.spin_us, 0u); // off by default
  BOOST_CHECK_EQUAL(cfg.road.caller_spin_us, 0u);
  BOOST_CHECK_EQUAL(node_config{}.road.caller_spin_us, 200u); // the default
  BOOST_CHECK_EQUAL(cfg.road.frame_spin_us, 0u);
  BOOST_CHECK_EQUAL(node_config{}.road.frame_spin_us, 50u); // the default
  BOOST_CHECK(cfg.kv.scheduler_only);
  BOOST_CHECK(!node_config{}.kv.scheduler_only); // off by default
  BOOST_CHECK_EQUAL(cfg.kv.helper_threads, 0u);
  BOOST_CHECK(*cfg.node_role() == role::server);
  BOOST_CHECK(cfg.server.mode.kind == consistency::kind_t::ssp);
  BOOST_CHECK_EQUAL(cfg.server.mode.staleness, 2u);
  BOOST_CHECK_EQUAL(cfg.scheduler.servers, 4u);
  BOOST_CHECK_EQUAL(cfg.port, 4411);
  auto hb = caf::get_if<caf::timespan>(&cfg, "middleman.heartbeat-interval");
  BOOST_REQUIRE(hb);
  BOOST_CHECK(*hb == caf::timespan{std::chrono::milliseconds{50}});
}

BOOST_AUTO_TEST_CASE(only_a_stepping_worker_watches_before_it_sleeps) {
  using us = std::chrono::microseconds;
  auto watch = [](std::vector<std::string> args) {
    node_config cfg;
    BOOST_REQUIRE(!parse(cfg, std::move(args)));
    return cfg.scheduler_watch();
  };
  BOOST_CHECK(watch({"--role=worker"}) == us{2000}); // the default
  BOOST_CHECK(watch({"--role=worker", "--worker.watch-us=300"}) == us{300});
  BOOST_CHECK(watch({"--role=worker", "--worker.watch-us=0"}) == us{0});
  // A pipelined worker steps on a thread of its own, beside the watcher.
  BOOST_CHECK(watch({"--role=worker", "--worker.pipeline",
                     "--server.mode=async"}) == us{0});
  for (auto role : {"server", "scheduler"})
    BOOST_CHECK_MESSAGE(watch({std::string{"--role="} + role}) == us{0}, role);
  BOOST_CHECK(watch({"--role=agent", "--agent.workers=1"}) == us{0});
}

BOOST_AUTO_TEST_CASE(the_road_flag_picks_the_road) {
  for (auto [flag, kind] :
       {std::pair{"auto", road_kind::shm}, std::pair{"shm", road_kind::shm},
        std::pair{"tcp", road_kind::tcp},
        std::pair{"middleman", road_kind::middleman}}) {
    node_config cfg;
    BOOST_REQUIRE(!parse(cfg, {std::string{"--kv.road="} + flag}));
    BOOST_CHECK_MESSAGE(cfg.kv.road == kind, flag);
  }
  node_config defaults;
  BOOST_REQUIRE(!parse(defaults, {}));
  BOOST_CHECK(defaults.kv.road == road_kind::shm); // auto
  BOOST_CHECK_EQUAL(defaults.kv.max_message_bytes, 1u << 20);
}

BOOST_AUTO_TEST_CASE(bad_values_get_an_error_naming_the_flag) {
  rejected({"--server.mode=fast"}, "--server.mode must be");
  rejected({"--log-level=loud"}, "--log-level");
  rejected({"--cluster.slice-floats=0"}, "--cluster.slice-floats");
  rejected({"--pipeline.stages=1"}, "--pipeline.stages");
  rejected({"--pipeline.micro-batches=0"}, "--pipeline.micro-batches");
  rejected({"--pipeline.cut=2,1"}, "--pipeline.cut");
  for (auto opt : {"momentum", "nesterov", "adam"}) { // a stage applies it
    node_config alone;
    BOOST_CHECK(!parse(alone, {"--worker.task=stage", "--cluster.servers=0",
                               std::string{"--optimizer.name="} + opt}));
  }
  rejected(
      {"--worker.task=stage", "--cluster.servers=2", "--optimizer.name=sum"},
      "--worker.task=stage");
  rejected({"--worker.task=stage", "--optimizer.name=sgd",
            "--server.atomic-pushes=on", "--worker.overlap"},
           "--worker.overlap");
  rejected({"--worker.task=stage", "--cluster.servers=2",
            "--optimizer.name=sgd", "--server.atomic-pushes=off"},
           "--server.atomic-pushes");
  rejected({"--worker.task=stage", "--cluster.servers=2",
            "--optimizer.name=sgd", "--server.mode=async"},
           "--server.atomic-pushes");
  for (auto atomic : {"auto", "on"}) { // the same, with atomic pushes
    node_config hybrid;
    BOOST_CHECK(
        !parse(hybrid, {"--worker.task=stage", "--cluster.servers=2",
                        "--optimizer.name=sgd",
                        std::string{"--server.atomic-pushes="} + atomic}));
    BOOST_CHECK(hybrid.server.atomic_pushes);
  }
  rejected({"--kv.request-timeout-ms=0"}, "--kv.request-timeout-ms");
  // At fbf4dac a worker without a scheduler waited 49 days, silently.
  rejected({"--kv.request-timeout-ms=4294967295"}, "--kv.request-timeout-ms");
  // At fbf4dac 0 threads hung without a word, 100000 aborted after 7 s,
  // and a heartbeat past the timeout dropped idle peers as dead.
  rejected({"--scheduler.max-threads=0"}, "--scheduler.max-threads");
  // At fbf4dac such an agent sat for ever, starting nothing.
  rejected({"--role=agent"}, "--agent.servers=0");
  rejected({"--scheduler.max-threads=100000"}, "--scheduler.max-threads");
  rejected({"--middleman.heartbeat-interval=10s"},
           "--middleman.heartbeat-interval");
  rejected({"--middleman.heartbeat-interval=0s"},
           "--middleman.heartbeat-interval");
  rejected({"--middleman.connection-timeout=-5s"},
           "--middleman.connection-timeout");
  rejected({"--middleman.connection-timeout=1ms"},
           "--middleman.heartbeat-interval"); // 250 ms beats
  {
    node_config fast; // the tests' own: beats of 100 ms, 1 s timeout
    BOOST_CHECK(!parse(fast, {"--middleman.heartbeat-interval=100ms",
                              "--middleman.connection-timeout=1s",
                              "--scheduler.max-threads=4"}));
  }
  rejected({"--no-such-flag=1"}, "");
  rejected({"--optimizer.on=worker", "--server.mode=async"},
           "--optimizer.on=worker");
  rejected({"--optimizer.on=gpu"}, "--optimizer.on");
  rejected({"--train.evals-per-epoch=0"}, "--train.evals-per-epoch");
  rejected({"--port=99999"}, "");
  rejected({"--kv.road=fast"}, "--kv.road");
  rejected({"--server.replica-road=fast"}, "--server.replica-road");
  rejected({"--kv.window-bytes=65536"}, "--kv.window-bytes");
  rejected({"--kv.ring-bytes=2147483648"}, "--kv.ring-bytes");
  rejected({"--server.road-send-timeout-ms=0"},
           "--server.road-send-timeout-ms");
  rejected({"--agent.backoff-ms=0"}, "--agent.backoff-ms");
  rejected({"--server.replicas=2"}, "--server.replicas");
  rejected({"--server.helper-threads=17"}, "--server.helper-threads");
  rejected({"--kv.helper-threads=17"}, "--kv.helper-threads");
  rejected({"--road.spin-us=10001"}, "--road.spin-us");
  rejected({"--road.caller-spin-us=10001"}, "--road.caller-spin-us");
  rejected({"--road.frame-spin-us=10001"}, "--road.frame-spin-us");
  rejected({"--worker.pipeline"}, "--worker.pipeline"); // sync by default
  rejected({"--worker.watch-us=100001"}, "--worker.watch-us");
  rejected({"--worker.blas-threads=0"}, "--worker.blas-threads");
  rejected({"--worker.blas-threads=257"}, "--worker.blas-threads");
  rejected({"--worker.step-timeout-ms=86400001"}, "--worker.step-timeout-ms");
  {
    node_config ok; // pipelined steps where the mode allows stale weights
    BOOST_CHECK(!parse(ok, {"--worker.pipeline", "--server.mode=async"}));
    BOOST_CHECK(ok.worker.pipeline);
    node_config ssp;
    BOOST_CHECK(!parse(ssp, {"--worker.pipeline", "--server.mode=ssp:2"}));
  }
  // Overlapped steps: not with ssp (its bound would count blocks), not
  // with pipelining; a worker gets a second scheduler thread for them.
  rejected({"--worker.overlap", "--server.mode=ssp:2"}, "--worker.overlap");
  // An events file that cannot be appended to: one clear error at start.
  rejected({"--cluster.events-file=/nonexistent-dir/events.jsonl"},
           "--cluster.events-file");
  // ssp:0's fused steps would wait for their own held push.
  rejected({"--server.atomic-pushes=on", "--server.mode=ssp:0"},
           "--server.atomic-pushes");
  rejected({"--server.atomic-pushes=yes"}, "--server.atomic-pushes");
  rejected({"--server.atomic-pushes"}, ""); // a word is needed
  for (auto mode : {"sync", "async", "ssp:1"}) {
    node_config ok;
    BOOST_CHECK(!parse(ok, {"--server.atomic-pushes=on",
                            std::string{"--server.mode="} + mode}));
    BOOST_CHECK(ok.server.atomic_pushes);
    BOOST_CHECK(ok.kv.resume_at_largest); // the workers' half
    node_config off;
    BOOST_CHECK(!parse(off, {"--server.atomic-pushes=off",
                             std::string{"--server.mode="} + mode}));
    BOOST_CHECK(!off.server.atomic_pushes);
  }
  // auto: on in sync (its cost is within noise there), off in async and
  // ssp (a push would show one request later); ssp:0 is fine with auto.
  for (auto [mode, on] :
       std::vector<std::pair<std::string, bool>>{{"sync", true},
                                                 {"async", false},
                                                 {"ssp:1", false},
                                                 {"ssp:0", false}}) {
    node_config dflt;
    BOOST_CHECK(!parse(dflt, {"--server.mode=" + mode}));
    BOOST_CHECK_MESSAGE(dflt.server.atomic_pushes == on, mode);
    BOOST_CHECK_EQUAL(dflt.server.atomic_pushes_text, "auto");
  }
  rejected({"--worker.overlap", "--worker.pipeline", "--server.mode=async"},
           "--worker.overlap");
  rejected({"--worker.overlap", "--worker.task=counter"}, "--worker.overlap");
  rejected({"--train.block-floats=1000"}, "--train.block-floats");
  for (auto mode : {"sync", "async"}) {
    node_config ok;
    BOOST_CHECK(!parse(ok, {"--role=worker", "--worker.overlap",
                            std::string{"--server.mode="} + mode}));
    BOOST_CHECK(ok.worker.overlap);
    BOOST_CHECK_EQUAL(caf::get_or(ok, "scheduler.max-threads", size_t{0}), 2u);
    node_config more; // a user's larger count stays
    BOOST_CHECK(!parse(more, {"--role=worker", "--worker.overlap",
                              "--scheduler.max-threads=3"}));
    BOOST_CHECK_EQUAL(caf::get_or(more, "scheduler.max-threads", size_t{0}),
                      3u);
  }
  {
    node_config plain; // one thread otherwise
    BOOST_CHECK(!parse(plain, {"--role=worker"}));
    BOOST_CHECK_EQUAL(caf::get_or(plain, "scheduler.max-threads", size_t{0}),
                      1u);
  }
  rejected({"--agent.backoff-ms=500", "--agent.backoff-max-ms=100"},
           "--agent.backoff-max-ms");
  rejected({"--fault.plan=kill:worker-1"}, "--fault.plan");
  rejected({"--fault.random-targets=everyone"}, "--fault.random-targets");
  rejected({"--fault.random-kills=1", "--fault.random-from-ms=500",
            "--fault.random-to-ms=500"},
           "--fault.random-to-ms");
  rejected({"--worker.task=counter", "--optimizer.name=adam"},
           "--optimizer.name=sum");
  // A cut child lives in a namespace of its own: loopback is its own.
  rejected({"--fault.plan=cut:worker-1@100+100"}, "--scheduler-host=127.0.0.1");
  rejected({"--fault.plan=cut:worker-1@100", "--scheduler-host=10.1.2.3",
            "--agent.servers=1"},
           "--host=127.0.0.1");
  {
    node_config ok; // on another address, or no servers of its own
    BOOST_CHECK(!parse(ok, {"--fault.plan=cut:worker-1@100+100",
                            "--scheduler-host=10.1.2.3", "--agent.servers=0"}));
  }
  node_config cfg;
  BOOST_REQUIRE(!parse(cfg, {"--role=chief"}));
  BOOST_CHECK(cfg.node_role().error() == errc::invalid_config);
  BOOST_CHECK_EQUAL(describe(cfg.node_role().error()),
                    "invalid_config: --role must be scheduler, server, worker"
                    " or agent, got chief");
}

BOOST_AUTO_TEST_CASE(addresses_bounds_and_combinations_that_cannot_work) {
  // An empty host listened on every address and announced "" to peers
  // (troupe-node's "--host=" reaches CAF as below: plain_flags).
  rejected({"--host=\"\""}, "--host= names no host");
  rejected({"--scheduler-host=\"\""}, "--scheduler-host= names no host");
  // Port 0 is "any free" for the scheduler only: the others waited for
  // 127.0.0.1:0 until their request timeout.
  for (auto role : {"server", "worker", "agent"})
    rejected({std::string{"--role="} + role, "--scheduler-port=0",
              "--agent.workers=1"},
             "--scheduler-port=0: a " + std::string{role} + " must be given");
  node_config sched;
  BOOST_CHECK(!parse(sched, {"--role=scheduler", "--scheduler-port=0"}));
  // One port for several children: all but one failed to listen, and were
  // restarted until given up.
  rejected({"--role=agent", "--agent.workers=2", "--worker.task=stage",
            "--port=47111"},
           "--port=47111 with an agent of 2 children that listen");
  rejected({"--role=agent", "--agent.servers=2", "--agent.workers=1",
            "--port=47111"},
           "--port=47111 with an agent of 2 children that listen");
  rejected({"--role=agent", "--agent.servers=2", "--server.road-port=47112"},
           "--server.road-port=47112 with --agent.servers=2");
  node_config one; // one listens: the server (train workers listen nowhere)
  BOOST_CHECK(!parse(one, {"--role=agent", "--agent.servers=1",
                           "--agent.workers=2", "--port=47111"}));
  // A host not this machine's where it listens; a train worker listens
  // nowhere (a shared INI may name another machine's --host).
  rejected({"--role=server", "--scheduler-port=1", "--host=192.0.2.7"},
           "--host=192.0.2.7: cannot listen there");
  node_config trainer;
  BOOST_CHECK(!parse(
      trainer, {"--role=worker", "--scheduler-port=1", "--host=192.0.2.7"}));
  // A stage's flags that cannot work, before it joins.
  rejected({"--worker.task=stage", "--cluster.servers=0", "--train.batch=64",
            "--pipeline.micro-batches=3"},
           "--train.batch 64 must be a multiple of --pipeline.micro-batches 3");
  rejected(
      {"--worker.task=stage", "--cluster.servers=0", "--pipeline.replicas=2"},
      "--pipeline.replicas 2 needs shard servers");
  rejected({"--worker.task=stage", "--cluster.servers=0",
            "--pipeline.fault-kill=1@5:push"},
           "--pipeline.fault-kill=S@K:push needs shard servers");
  // A stage that applied the optimizer itself pushed NaNs.
  rejected({"--worker.task=stage", "--cluster.servers=2",
            "--optimizer.name=sgd", "--optimizer.on=worker"},
           "--optimizer.on=server");
  // No worker could join: the servers waited for ever.
  rejected({"--cluster.workers=0", "--cluster.servers=2"},
           "--cluster.workers=0: the scheduler would refuse every worker");
  rejected({"--role=scheduler", "--scheduler-port=0", "--cluster.workers=0"},
           "--cluster.workers=0");
  // Counts that ended in std::bad_alloc.
  rejected({"--fault.random-kills=4294967295"}, "--fault.random-kills");
  rejected({"--worker.key-floats=4294967295"}, "--worker.keys x");
  // Floats past 3.4e38 are infinite: chance-level accuracy, or a divergence
  // blamed on the rate.
  rejected({"--optimizer.weight-decay=1e39"}, "--optimizer.weight-decay");
  rejected({"--optimizer.name=adam", "--optimizer.eps=1e39"}, "eps finite");
  rejected({"--optimizer.lr=1e39"}, "--optimizer.lr must be finite");
  // CAF took its default policy for any other word.
  rejected({"--scheduler.policy=foo"}, "--scheduler.policy");
  // A log folder that cannot be: its children could not start.
  rejected({"--role=agent", "--agent.workers=1", "--agent.logs=/proc/troupe"},
           "--agent.logs: cannot make /proc/troupe");
}

BOOST_AUTO_TEST_CASE(the_device_flag_names_devices_of_one_kind) {
  rejected({"--device=gpu"}, "--device=gpu: 'gpu' is no device");
  rejected({"--device=cuda:"}, "is no device");
  rejected({"--device=cuda:x"}, "is no device");
  rejected({"--device=cpu,"}, "an empty device");
  rejected({"--device=cuda:0,cpu", "--server.mode=sync_device"},
           "cpu and GPUs in one list");
  rejected({"--device=cuda:1,cuda:1", "--server.mode=sync_device"},
           "cuda:1 named twice");
  // Several devices are summed on the node by sync_device alone.
  rejected({"--device=cpu,cpu"}, "--server.mode=sync_device");
  rejected({"--device=cpu,cpu", "--server.mode=async"},
           "--server.mode=sync_device");
  // Device actors run whole layers: no overlapped blocks.
  rejected({"--device=cuda:0", "--worker.overlap"}, "--worker.overlap");
  rejected({"--server.mode=sync_device", "--worker.overlap"},
           "--worker.overlap");
  // A pipeline stage computes on one device, with nothing to sum.
  {
    node_config ok;
    BOOST_CHECK(!parse(ok, {"--device=cuda:0", "--worker.task=stage",
                            "--optimizer.name=sgd"}));
    BOOST_CHECK_EQUAL(to_string(ok.stage().device.devices.at(0)), "cuda:0");
  }
  rejected(
      {"--device=cuda:0,cuda:1", "--worker.task=stage", "--optimizer.name=sgd"},
      "--device=cuda:0,cuda:1 names several devices: a pipeline stage"
      " computes on one");
  rejected({"--device=cpu", "--server.mode=sync_device", "--worker.task=stage",
            "--optimizer.name=sgd"},
           "--worker.task=stage computes nothing on device actors (train"
           " does, and stage on one device without sync_device): drop"
           " --server.mode=sync_device");
  // The error names the flag given, not the default --device=auto.
  rejected({"--server.mode=sync_device", "--worker.task=counter",
            "--optimizer.name=sum"},
           "drop --server.mode=sync_device");
  rejected({"--server.mode=sync_device", "--worker.overlap"},
           "(--server.mode=sync_device): drop one");
  {
    node_config ok; // the CPU alone is no device actor
    BOOST_CHECK(!parse(ok, {"--device=cpu", "--worker.overlap"}));
  }
  rejected(
      {"--device=cpu,cpu,cpu", "--server.mode=sync_device", "--train.batch=2"},
      "--train.batch");
  node_config dflt;
  BOOST_REQUIRE(!parse(dflt, {}));
  BOOST_CHECK_EQUAL(dflt.worker.device.text, "auto");
  BOOST_CHECK(!dflt.worker.device.named);
  BOOST_CHECK(!dflt.worker.sum_on_devices);
  node_config two;
  BOOST_REQUIRE(
      !parse(two, {"--device=cuda:0,cuda:1", "--server.mode=sync_device"}));
  BOOST_CHECK(two.worker.sum_on_devices);
  // The servers run sync: checkpoints say so (cut rounds, resume under
  // either mode).
  BOOST_CHECK_EQUAL(two.server.checkpoint.mode, "sync");
  BOOST_REQUIRE_EQUAL(two.worker.device.devices.size(), 2u);
  BOOST_CHECK_EQUAL(to_string(two.worker.device.devices[1]), "cuda:1");
  BOOST_CHECK_EQUAL(two.trainer().worker.device.devices.size(), 2u);
  // auto: every GPU found with sync_device, else the first; the CPU
  // where there is none.
  BOOST_CHECK_EQUAL(resolve_devices(dflt.worker.device, 4, true).size(), 4u);
  auto one = resolve_devices(dflt.worker.device, 4, false);
  BOOST_REQUIRE_EQUAL(one.size(), 1u);
  BOOST_CHECK_EQUAL(to_string(one[0]), "cuda:0");
  BOOST_CHECK(cpu_alone(resolve_devices(dflt.worker.device, 0, true)));
}

namespace {

/// A node_config with one more group, as a new subsystem would add.
struct config_with_a_new_group : node_config {
  uint32_t knob = 7;
  config_with_a_new_group() {
    caf::config_option_adder{custom_options_, "newgroup"}.add(
        knob, "knob", "a new subsystem's option");
  }
};

} // namespace

BOOST_AUTO_TEST_CASE(help_shows_every_group_of_troupe_and_none_of_caf_empty) {
  // --help lists its groups in a set order; a group left out of that list
  // still shows, after the others (it once hid --metrics.* until added).
  config_with_a_new_group cfg;
  cfg.load<caf::io::middleman>();
  auto help = cfg.help_text();
  auto at = help.find("\nnewgroup:\n  --newgroup.knob=<uint32>\n"
                      "      a new subsystem's option (default: 7)\n");
  BOOST_CHECK_MESSAGE(at != std::string::npos, help);
  auto pipeline = help.find("\npipeline:\n");
  BOOST_CHECK(pipeline != std::string::npos && pipeline < at);
  // Groups in their order, each once; CAF's own groups only as the
  // options it shows (no empty "logger:" or "middleman:" heading).
  for (auto group : {"global", "cluster", "server", "kv", "road", "optimizer",
                     "train", "worker", "agent", "fault", "checkpoint",
                     "metrics", "pipeline", "newgroup"}) {
    auto heading = "\n" + std::string{group} + ":\n";
    auto first = help.find(heading);
    BOOST_CHECK_MESSAGE(first != std::string::npos, group);
    BOOST_CHECK_MESSAGE(help.find(heading, first + 1) == std::string::npos,
                        group);
  }
  for (auto caf_group : {"logger", "middleman", "scheduler", "openssl",
                         "stream", "work-stealing"})
    BOOST_CHECK_MESSAGE(help.find("\n" + std::string{caf_group} + ":\n") ==
                            std::string::npos,
                        caf_group);
}

BOOST_AUTO_TEST_SUITE_END()

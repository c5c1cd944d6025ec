// A stage process: joins the cluster, publishes its driver and runs it to
// the end (stage_driver.hpp).
#include <cstdio>
#include <filesystem>
#include <functional>

#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/base/exit_codes.hpp"
#include "actors/base/log.hpp"
#include "actors/base/writable.hpp"
#include "actors/kv/kv.hpp"
#include "actors/pipeline/stage_driver_internal.hpp"
#include "kernels/stage.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

/// One line; exit_bad_config (not restarted: the same flags fail again)
/// for a flag, model, data or (`starting`) device that cannot be had,
/// exit_job_stuck (not restarted either) for a stage missing too long,
/// else exit_failed: a device that fails in a step is restarted, as a
/// worker's is.
int fail(const std::string& what, const caf::error& err,
         bool starting = false) {
  stderr_line() << "*** stage failed: " << what << ": " << describe(err)
                << '\n';
  return starting && err == errc::device_failed ? exit_bad_config
                                                : exit_code_of(err);
}

/// The checkpoint folder: --pipeline.checkpoint-dir, else one of this job
/// alone (named after the scheduler's process) in the temporary folder,
/// which no later job finds: it is removed at the job's end.
std::string checkpoint_dir(const stage_run_settings& cfg,
                           const caf::actor& scheduler) {
  if (!cfg.pipeline.checkpoint_dir.empty())
    return cfg.pipeline.checkpoint_dir;
  auto job = std::hash<std::string>{}(to_string(scheduler.node()));
  char name[64];
  std::snprintf(name, sizeof(name), "troupe-pipeline-%016zx", job);
  std::error_code ec;
  auto tmp = std::filesystem::temp_directory_path(ec);
  return ((ec ? std::filesystem::path{"/tmp"} : tmp) / name).string();
}

} // namespace

int run_stage(caf::actor_system& sys, caf::actor scheduler,
              const stage_run_settings& cfg) {
  auto& p = cfg.pipeline;
  std::string why;
  auto m = model::from_spec(cfg.train.model, &why);
  if (!m)
    return fail("--train.model", caf::make_error(errc::invalid_config, why));
  auto cut = cut_for(p, m->layer_count(), cut_model(*m, p.stages));
  if (!cut)
    return fail("cutting the model", cut.error());
  // Checked by every stage before it joins, though the last writes it: a
  // stage that exits alone leaves the others waiting for it.
  if (auto bad = unwritable(cfg.train.metrics_file); !bad.empty())
    return fail("--train.metrics-file",
                caf::make_error(errc::invalid_config, bad));
  // The same for the checkpoints: at fbf4dac a folder that could not be
  // written logged an error at each checkpoint, and a restart found none.
  // Hybrid stages write none (a fault mark at most): the job's own folder
  // is not made for them (every such job left an empty one behind).
  auto dir = checkpoint_dir(cfg, scheduler);
  bool own_dir = p.checkpoint_dir.empty();
  if (auto bad = own_dir && cfg.servers > 0 ? "" : unwritable_folder(dir);
      !bad.empty())
    return fail("--pipeline.checkpoint-dir",
                caf::make_error(errc::invalid_config, bad));
  auto drv = sys.spawn(pipe::stage_driver, cfg, scheduler);
  auto kill = [&drv] { caf::anon_send_exit(drv, caf::exit_reason::kill); };
  auto port = publish_actor(sys, drv, cfg.port, cfg.host, true);
  if (!port) {
    kill();
    return fail("publishing the stage", port.error());
  }
  auto join = cfg.kv;
  join.publish_host = cfg.host;
  join.publish_port = *port;
  // With servers, the scheduler cuts a replica's stages as one: it tells
  // this process's client to leave when another stage of it crashed.
  join.stage_group = cfg.servers > 0 ? p.stages : 0;
  kv client{sys, scheduler, join};
  auto v = client.view();
  if (!v) {
    kill();
    return fail("joining the cluster", v.error());
  }
  auto member = v->first;
  if (member >= p.stages * p.replicas) {
    kill();
    return fail("joining the cluster",
                caf::make_error(errc::invalid_config, "this worker's rank",
                                member, "is no stage of --pipeline.stages",
                                p.stages, "x --pipeline.replicas", p.replicas,
                                ": run exactly that many stage processes"
                                " (--cluster.workers)"));
  }
  auto rank = member % p.stages;
  caf::scoped_actor self{sys};
  self->monitor(drv);
  self->monitor(client.handle());
  int rc = 0;
  self->request(drv, std::chrono::minutes{2}, start_atom_v, member, *cut, dir,
                client.handle())
      .receive(
          [&](uint64_t steps) {
            std::printf("troupe-node: stage %u of %u (replica %u of %u),"
                        " layers %zu..%zu of %s, %llu mini-batches of %u in"
                        " %u micro-batches (%s)\n",
                        rank, p.stages, member / p.stages, p.replicas,
                        (*cut)[rank], (*cut)[rank + 1], cfg.train.model.c_str(),
                        static_cast<unsigned long long>(steps), cfg.train.batch,
                        p.micro_batches, to_string(p.schedule));
            std::fflush(stdout);
          },
          [&](caf::error& err) { rc = fail("starting", err, true); });
  if (rc != 0) {
    kill();
    return rc;
  }
  // The driver's end, or the client's: told to leave with the replica (a
  // stage of it crashed), it ends the process, which its agent restarts.
  caf::error ended; // the driver's reason, if it failed
  self->receive([&](const caf::down_msg& dm) {
    if (dm.source == client.handle().address()) {
      rc = fail("the cluster",
                dm.reason ? dm.reason
                          : caf::make_error(errc::peer_down, "the kv client"
                                                             " ended"));
      kill();
    } else if (dm.reason && dm.reason != caf::exit_reason::normal) {
      ended = dm.reason;
      rc = fail("stage", ended);
    }
  });
  // Done, or stuck (its replica lacks a stage): a departure, not a crash.
  caf::error err;
  if (rc == 0)
    err = client.leave();
  else if (rc == exit_job_stuck && ended) // its client still lives
    err = client.leave("stuck: " + describe(ended));
  if (err)
    stderr_line() << "*** stage: leaving the cluster: " << describe(err)
                  << '\n';
  if (rc == 0 && own_dir) // the pipeline is through (the lead's finish)
    pipe::remove_stage_checkpoints(dir, rank);
  return rc;
}

} // namespace troupe

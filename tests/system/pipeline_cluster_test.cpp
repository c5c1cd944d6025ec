// Pipeline stages as troupe-node processes under an agent: three stages of
// one model train it to the end, and a stage killed in the middle of a
// mini-batch is restarted by its agent while the others drop that
// mini-batch and start again from the stages' checkpoints: the final
// weights are those of a run without the kill, bit for bit; so too after
// a device's failure in a step, after a hang in a step that the
// stage's step watch ends, and after the lead's process is killed with
// CAF carrying the tensors between the other two. Wrong flags,
// missing data and a metrics file that cannot be written are refused in
// one line, with exit 2 (not restarted); a commit lost on its way (as on
// a cut connection) stalls the pipeline until the lead's stall watch
// starts the stages again; a stage that never comes ends the
// others after --pipeline.stage-wait-ms, one given up by its agent (after
// joining or before) at once (exit 5).
#define BOOST_TEST_MODULE pipeline_cluster_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>

#include "actors/base/exit_codes.hpp"
#include "actors/cluster/connect.hpp"
#include "actors/pipeline/stage_driver_internal.hpp"
#include "tests/system/nodes.hpp"
#include "tests/system/scheduler_client.hpp"
#include "tests/system/stage_weights.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t stages = 3;
constexpr uint64_t job_steps = 90;

/// The flags of a small 3-stage job: 90 mini-batches of 32 in 4
/// micro-batches, checkpoints every 20, evaluation on 1000 test images;
/// SGD with L2 and lr halved every 30 mini-batches (a stage restarted from
/// its checkpoint goes on with the same step sizes).
std::vector<std::string> job_flags(const std::string& dir,
                                   std::vector<std::string> extra = {},
                                   uint64_t steps = job_steps) {
  std::vector<std::string> flags{"--optimizer.lr-decay-steps=30",
                                 "--optimizer.lr-decay=0.5",
                                 "--optimizer.weight-decay=0.0001"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return stage_job_flags(dir, steps, "0.1", flags);
}

/// Runs the job under one agent; its output once the agent exited 0.
std::string run_job(const std::string& dir, std::vector<std::string> extra = {},
                    uint64_t steps = job_steps) {
  scheduler_process s{0, stages};
  auto agent =
      start_agent(s, 0, stages, job_flags(dir, std::move(extra), steps));
  auto rc = agent->wait_exit(std::chrono::seconds{150});
  BOOST_REQUIRE_MESSAGE(rc && *rc == 0, "agent: " << agent->output());
  s.proc->signal(SIGTERM);
  s.proc->wait_exit(std::chrono::seconds{10});
  return agent->output();
}

/// The job's output `out` says it started again from mini-batch 40, the
/// checkpoint before the fault (`what`) in mini-batch 47.
void check_resumed_at_40(const std::string& out, const char* what) {
  BOOST_CHECK_MESSAGE(
      out.find("every stage is back; resuming at mini-batch 40") !=
          std::string::npos,
      "after " << what
               << ", the pipeline did not start again from mini-batch 40: "
               << out);
}

/// The job's weights in `a` equal those in `b`, array by array.
void check_same_weights(const std::string& a, const std::string& b,
                        const char* what, uint64_t steps = job_steps) {
  test::check_same_weights(a, b, what, stages, steps);
}

/// After `what` in a stage in mini-batch 47 (the job's output `out`, its
/// folder `dir`): that stage was restarted once, the pipeline started
/// again from mini-batch 40, and the weights are those of the job in
/// `plain`.
void check_recovered(const std::string& out, const std::string& plain,
                     const std::string& dir, const char* what) {
  BOOST_CHECK_MESSAGE(occurrences(out, " restarted (pid ") == 1,
                      "after " << what << ", the stage was not restarted once");
  check_resumed_at_40(out, what);
  check_same_weights(plain, dir, what);
}

double accuracy_in(const std::string& out) {
  auto at = out.find("final test accuracy: ");
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, out);
  return std::stod(out.substr(at + 21));
}

} // namespace

BOOST_AUTO_TEST_CASE(a_stage_killed_mid_mini_batch_changes_no_weight) {
  temp_dir plain, killed;
  auto metrics = plain.path + "/metrics.jsonl";
  auto a = run_job(plain.path, {"--train.metrics-file=" + metrics});
  // Stage 1 kills its process after its forward of micro-batch 1 of
  // mini-batch 47: past the checkpoint of 40, with 2 micro-batches of
  // activations on their way.
  auto b = run_job(killed.path, {"--pipeline.fault-kill=1@47"});
  BOOST_TEST_MESSAGE("with the kill:\n" << b);
  BOOST_CHECK_MESSAGE(b.find("fault injection: killing its process") !=
                          std::string::npos,
                      "the stage did not kill itself");
  check_recovered(b, plain.path, killed.path, "the kill");
  // A device's failure in the same place (a GPU's transient fault): the
  // process exits 1 and is restarted, as a worker's is. It exited 2 at
  // 06858d7, its agent gave it up, and the job ended unfinished.
  temp_dir device;
  auto c = run_job(device.path, {"--pipeline.fault-kill=1@47:device"});
  BOOST_TEST_MESSAGE("with the device error:\n" << c);
  BOOST_CHECK_MESSAGE(
      c.find("*** stage failed: stage: device_failed: ") != std::string::npos &&
          c.find("fault injection: a device error") != std::string::npos,
      "no device error");
  check_recovered(c, plain.path, device.path, "the device error");
  // Its work hung in the same place (a deadlock, a dead file system): the
  // process still answers its peers, so the other stages and the lead
  // would wait for ever; its step watch ends it, and its agent restarts it.
  temp_dir stalled;
  auto d = run_job(stalled.path, {"--pipeline.fault-kill=1@47:stall",
                                  "--worker.step-timeout-ms=2000"});
  BOOST_TEST_MESSAGE("with the stall:\n" << d);
  BOOST_CHECK_MESSAGE(
      d.find("fault injection: its next work hangs, in mini-batch 47") !=
              std::string::npos &&
          d.find(" of mini-batch 47 has run for ") != std::string::npos &&
          d.find("past its bound of 2000 ms") != std::string::npos,
      "no hang ended by the watch");
  check_recovered(d, plain.path, stalled.path, "the stall");
  // Each stage computes with one BLAS thread: the stages share the cores.
  for (uint32_t s = 0; s < stages; ++s) {
    auto at =
        a.find("stage " + std::to_string(s) + " computes on cpu (OpenBLAS ");
    auto kernels = at == std::string::npos ? at : a.find(" kernels, ", at);
    BOOST_CHECK_MESSAGE(kernels != std::string::npos &&
                            kernels == a.find(" kernels, 1 thread)", at),
                        "stage " << s << ": " << a);
  }
  auto acc = accuracy_in(a);
  BOOST_CHECK_EQUAL(acc, accuracy_in(b));
  BOOST_CHECK_MESSAGE(acc > 0.5,
                      "accuracy " << acc << " after 90 mini-batches");
  // The epoch line (the job's end, in its first epoch) as JSON too.
  auto text = read_file(metrics);
  BOOST_REQUIRE_EQUAL(std::count(text.begin(), text.end(), '\n'), 1);
  auto j = nlohmann::json::parse(text, nullptr, false);
  BOOST_REQUIRE_MESSAGE(j.is_object(), text);
  BOOST_CHECK_EQUAL(j.value("epoch", 0), 1);
  BOOST_CHECK_EQUAL(j.value("mini_batch", 0), 90);
  BOOST_CHECK_CLOSE(j.value("test_accuracy", 0.0), acc, 0.01);
  BOOST_CHECK_GT(j.value("samples_per_s", 0.0), 0.0);
  BOOST_CHECK_GT(j.value("train_loss", 0.0), 0.0);
}

BOOST_AUTO_TEST_CASE(the_lead_killed_with_tensors_over_caf_changes_no_weight) {
  // Stages 1 and 2 met through the lead, and CAF sent what went between
  // them through the lead's process. Once it died, CAF had no route
  // between them and never made one again (the restarted lead is a new
  // process): stage 2's gradients were lost in every generation, and the
  // job hung. Now each stage connects to the one before it itself.
  temp_dir plain, killed;
  const std::string caf_only = "--kv.road=middleman";
  run_job(plain.path, {caf_only});
  auto out = run_job(killed.path, {caf_only, "--pipeline.fault-kill=0@47"});
  BOOST_TEST_MESSAGE("with the lead killed:\n" << out);
  BOOST_CHECK_MESSAGE(out.find("stage 0: fault injection: killing its"
                               " process") != std::string::npos,
                      "the lead did not kill itself");
  BOOST_CHECK_MESSAGE(out.find("take the ") == std::string::npos,
                      "a road carried tensors: " << out);
  // The restarted lead is a new process: it has nothing to say "every
  // stage is back" about; the others say where they began again.
  BOOST_CHECK_MESSAGE(occurrences(out, " restarted (pid ") == 1,
                      "the lead was not restarted once: " << out);
  for (auto s : {"stage 1: generation ", "stage 2: generation "}) {
    auto at = out.rfind(s);
    auto line = at == std::string::npos
                    ? std::string{}
                    : out.substr(at, out.find('\n', at) - at);
    BOOST_CHECK_MESSAGE(line.size() > 18 && line.substr(line.size() - 18) ==
                                                ": at mini-batch 40",
                        s << "... did not begin again at mini-batch 40: "
                          << out);
  }
  check_same_weights(plain.path, killed.path, "the lead's kill");
}

BOOST_AUTO_TEST_CASE(a_lost_commit_stalls_the_pipeline_only_a_while) {
  // Stage 1 drops its lead's commit of mini-batch 47, as a connection that
  // breaks while the scheduler still sees every process loses it. Before,
  // stage 1 waited for that commit and the lead for stage 1's next done,
  // for ever: no view came to end the wait. Now the lead's stall watch
  // starts the stages again after twice the request timeout, from the
  // checkpoint of 40, and the weights are those of a run without the loss.
  temp_dir plain, lost;
  run_job(plain.path);
  auto out = run_job(lost.path, {"--pipeline.fault-lose-commit=1@47",
                                 "--kv.request-timeout-ms=2000"});
  BOOST_TEST_MESSAGE("with the lost commit:\n" << out);
  BOOST_CHECK_MESSAGE(occurrences(out, "fault injection: drops the lead's"
                                       " commit of mini-batch 47") == 1,
                      out);
  BOOST_CHECK_MESSAGE(occurrences(out, "pipeline: mini-batch 48 made no"
                                       " progress for ") == 1,
                      out);
  check_resumed_at_40(out, "the lost commit");
  auto at = out.find("every stage is back; resuming at mini-batch 40, ");
  BOOST_CHECK_MESSAGE(at != std::string::npos &&
                          out.find(" ms after the pipeline stalled\n", at) ==
                              out.find('\n', at) - 30,
                      out);
  check_same_weights(plain.path, lost.path, "the lost commit");
  // The last commit lost: stage 1 never applies mini-batch 89, and the
  // final evaluation cannot pass it. The watch goes on after the last
  // commit until the last stage has counted that evaluation, and the
  // stages start again from the checkpoint of 80.
  temp_dir last;
  out = run_job(last.path, {"--pipeline.fault-lose-commit=1@89",
                            "--kv.request-timeout-ms=2000"});
  BOOST_TEST_MESSAGE("with the last commit lost:\n" << out);
  BOOST_CHECK_MESSAGE(occurrences(out, "pipeline: the final evaluation made"
                                       " no progress for ") == 1,
                      out);
  BOOST_CHECK_MESSAGE(out.find("every stage is back; resuming at mini-batch"
                               " 80, ") != std::string::npos,
                      out);
  BOOST_CHECK_MESSAGE(occurrences(out, "final test accuracy: ") == 1, out);
  check_same_weights(plain.path, last.path, "the last commit lost");
}

BOOST_AUTO_TEST_CASE(a_lost_finish_ends_the_job_all_the_same) {
  // The finish is the last one-way message. Stage 1 drops its lead's: it
  // waited out --pipeline.stage-wait-ms for the lead that had left, and
  // exited 5 (a job through, reported stuck); now the view that says the
  // lead finished ends it. The lead drops the last stage's: every stage
  // waited for ever; now the last stage sends its finish again.
  for (auto* stage : {"1", "0"}) {
    temp_dir dir;
    auto out =
        run_job(dir.path, {std::string{"--pipeline.fault-lose-finish="} + stage,
                           "--kv.request-timeout-ms=2000"});
    BOOST_TEST_MESSAGE("stage " << stage << " drops a finish:\n" << out);
    BOOST_CHECK_MESSAGE(
        occurrences(out, "fault injection: drops a finish") == 1, out);
    BOOST_CHECK_MESSAGE(
        occurrences(out, std::string{"stage "} + stage + ": finished after " +
                             std::to_string(job_steps) + " mini-batches") == 1,
        out);
    BOOST_CHECK_MESSAGE(
        out.find(*stage == '1' ? "stage 1: its lead finished, and its finish"
                                 " did not come"
                               : "stage 2: no finish from the lead yet") !=
            std::string::npos,
        out);
    BOOST_CHECK_MESSAGE(occurrences(out, "final test accuracy: ") == 1, out);
  }
}

BOOST_AUTO_TEST_CASE(a_job_without_a_checkpoint_folder_leaves_none_behind) {
  // Its stages checkpoint into a folder of the job's own in the temporary
  // folder, which no later job finds: every job left one there, and in it
  // the stages' last checkpoints. The processes' TMPDIR is a folder of
  // this test's, to see what stays.
  temp_dir tmp;
  ::setenv("TMPDIR", tmp.path.c_str(), 1);
  auto out = run_job("", {}, 40);
  ::unsetenv("TMPDIR");
  BOOST_CHECK_MESSAGE(out.find("final test accuracy: ") != std::string::npos,
                      out);
  std::string left;
  for (auto& e : fs::recursive_directory_iterator{tmp.path})
    left += " " + e.path().string();
  BOOST_CHECK_MESSAGE(left.empty(), "left in TMPDIR:" << left);
}

BOOST_AUTO_TEST_CASE(an_adam_stage_killed_keeps_its_moments_exactly) {
  // Each stage applies adam to its own weights, and keeps its moments in
  // its checkpoints beside them (3 arrays for each of its weights' arrays):
  // restarted from mini-batch 40, the weights and the moments end where a
  // run without the kill ends.
  temp_dir plain, killed;
  std::vector<std::string> adam{"--optimizer.name=adam",
                                "--optimizer.lr=0.003"};
  auto a = run_job(plain.path, adam);
  adam.push_back("--pipeline.fault-kill=1@47");
  auto b = run_job(killed.path, adam);
  check_resumed_at_40(b, "the kill");
  auto w = final_weights(plain.path, stages, job_steps);
  for (uint32_t s = 0; s < stages; ++s) // w and b per layer, m, v of each
    BOOST_CHECK_MESSAGE(w[s].size() >= 6 && w[s].size() % 6 == 0,
                        "stage " << s << ": " << w[s].size() << " arrays");
  check_same_weights(plain.path, killed.path, "the kill");
  auto acc = accuracy_in(a);
  BOOST_CHECK_EQUAL(acc, accuracy_in(b));
  BOOST_TEST_MESSAGE("adam: final test accuracy " << acc);
  BOOST_CHECK_MESSAGE(acc > 0.5,
                      "accuracy " << acc << " after 90 mini-batches of adam");
}

BOOST_AUTO_TEST_CASE(a_metrics_file_that_cannot_be_written_ends_the_job) {
  // Every stage checks --train.metrics-file before it joins (the last one
  // writes it): each exits 2 in one line, a bad configuration its agent
  // does not restart, and the job ends. Had the last stage alone refused
  // it, the others would have waited for it to come back, for ever.
  scheduler_process s{0, stages};
  temp_dir d;
  auto agent = start_agent(
      s, 0, stages,
      job_flags(d.path, {"--train.metrics-file=/nonexistent/m.jsonl"}));
  auto rc = agent->wait_exit(std::chrono::seconds{90});
  BOOST_REQUIRE_MESSAGE(rc, "agent: " << agent->output());
  BOOST_CHECK_NE(*rc, 0);
  const std::string line = "*** stage failed: --train.metrics-file: "
                           "invalid_config: cannot write /nonexistent/m.jsonl:"
                           " No such file or directory";
  auto said = occurrences(agent->output(), line);
  BOOST_CHECK_MESSAGE(said == stages, said << " of " << stages << " stages"
                                           << " said it: " << agent->output());
}

namespace {

/// Runs `agent` to its end: each of `waiting` stages ends in the line of a
/// stage missing (`gone`: which, and why) and exit 5, which the agent names
/// and does not restart, and the agent exits non-zero.
void check_stuck(const scheduler_process& s, child_process& agent,
                 size_t waiting, const std::string& gone) {
  auto rc = agent.wait_exit(90s);
  if (!rc)
    BOOST_FAIL("the agent did not end: "
               << agent.output() << "\nthe scheduler's events: "
               << dump(scheduler_client{s.port}.events()));
  BOOST_TEST_MESSAGE("the agent's output:\n" << agent.output());
  BOOST_CHECK_NE(*rc, 0);
  auto count = [&agent](const std::string& line) {
    return occurrences(agent.output(), line);
  };
  auto said = count("*** stage failed: stage: member_missing: ");
  auto named = count(gone);
  auto ended = count(" could not go on: a member the job needs is gone");
  BOOST_CHECK_MESSAGE(said == waiting && named == waiting && ended == waiting,
                      said << ", " << named << " and " << ended << " of "
                           << waiting << " stages: " << agent.output());
  BOOST_CHECK_MESSAGE(count(" restarted (pid ") == 0, agent.output());
  // To the scheduler, each ended saying why, and none crashed.
  auto evs = scheduler_client{s.port}.events();
  std::set<uint32_t> stuck;
  for (auto& e : evs)
    if (e.kind == "ended" &&
        e.detail.rfind("stuck: member_missing: stage ", 0) == 0)
      stuck.insert(e.pid);
  BOOST_CHECK_MESSAGE(stuck.size() == waiting, dump(evs));
  BOOST_CHECK_MESSAGE(std::none_of(evs.begin(), evs.end(),
                                   [&stuck](const event_record& e) {
                                     return e.kind == "crashed" &&
                                            stuck.count(e.pid) != 0;
                                   }),
                      dump(evs));
}

/// A stage wait no test reaches (10 minutes): a stage given up ends the
/// others without it.
const std::string no_wait = "--pipeline.stage-wait-ms=600000";
const std::string given_up = " was given up by its agent (no restart will"
                             " come)";

} // namespace

BOOST_AUTO_TEST_CASE(a_stage_given_up_ends_the_job_at_once) {
  // Stage 1 kills its process in mini-batch 27 and its agent gives it up
  // (no restart allowed). Before, the two other stages waited for it for
  // ever, and the agent with them; then for --pipeline.stage-wait-ms. Now
  // the scheduler's view names its rank given up and each ends at once
  // with its line and exit 5 (not restarted). Nothing is lost: the job
  // started again resumes from the checkpoint of 20 (each stage writes it
  // while it goes on: 7 mini-batches' time, as the kill test's 47 and 40).
  scheduler_process s{0, stages};
  temp_dir d;
  auto agent =
      start_agent(s, 0, stages,
                  job_flags(d.path, {"--pipeline.fault-kill=1@27",
                                     "--agent.max-restarts=0", no_wait}));
  check_stuck(s, *agent, stages - 1, "stage 1 of replica 0" + given_up);
  BOOST_CHECK_MESSAGE(agent->output().find(" gave up: exited 1 time") !=
                          std::string::npos,
                      agent->output());
  s.proc->signal(SIGTERM);
  s.proc->wait_exit(10s);
  auto again = run_job(d.path);
  BOOST_CHECK_MESSAGE(again.find(": at mini-batch 20") != std::string::npos,
                      again);
  BOOST_CHECK_GT(accuracy_in(again), 0.5);
}

BOOST_AUTO_TEST_CASE(a_stage_that_never_comes_ends_the_job_after_the_wait) {
  // Two of the three stages: the pipeline never starts, and they end.
  scheduler_process s{0, stages};
  temp_dir d;
  auto agent =
      start_agent(s, 0, stages - 1,
                  job_flags(d.path, {"--cluster.workers=3",
                                     "--pipeline.stage-wait-ms=2000"}));
  check_stuck(s, *agent, stages - 1,
              "stage 2 of replica 0 not in the cluster for 2000 ms"
              " (--pipeline.stage-wait-ms)");
}

BOOST_AUTO_TEST_CASE(a_stage_given_up_before_it_joins_ends_the_others_at_once) {
  // The third stage runs under an agent of its own and exits 2 before it
  // joins (its metrics file cannot be written), so it has no rank: the
  // scheduler takes the one rank left free for it once the other two are
  // in, and they end at once, not after the stage wait.
  scheduler_process s{0, stages};
  temp_dir d;
  auto three = std::string{"--cluster.workers=3"};
  auto agent =
      start_agent(s, 0, stages - 1, job_flags(d.path, {three, no_wait}));
  auto lone = start_agent(
      s, 0, 1,
      job_flags(d.path,
                {three, no_wait, "--train.metrics-file=/nonexistent/m.jsonl"}));
  auto rc = lone->wait_exit(90s);
  BOOST_REQUIRE_MESSAGE(rc, "the lone agent did not end: " << lone->output());
  BOOST_CHECK_MESSAGE(*rc != 0 && lone->output().find(" gave up: ") !=
                                      std::string::npos,
                      lone->output());
  check_stuck(s, *agent, stages - 1, "stage 2 of replica 0" + given_up);
}

BOOST_AUTO_TEST_CASE(a_member_that_is_not_the_lead_steers_no_stage) {
  // A cluster member (it passed TLS) that is not the replica's lead sends
  // every driver a start of a far generation, a commit and a finish of the
  // one in force, and tells the lead that each stage is done. Obeyed, the start
  // would stall the pipeline, the finish end it early, the dones commit what is
  // not through. All are ignored: the job ends as a run without them. (They go
  // as soon as the drivers are in the view: the job takes seconds more.)
  constexpr uint64_t long_job = 400;
  temp_dir plain, steered;
  run_job(plain.path, {}, long_job);
  scheduler_process s{0, stages};
  scheduler_client c{s.port};
  auto agent = start_agent(s, 0, stages, job_flags(steered.path, {}, long_job));
  cluster_view v;
  BOOST_REQUIRE_MESSAGE(c.wait_for_view([&v](const cluster_view& x) {
    v = x;
    return x.workers.size() == stages;
  }),
                        agent->output());
  caf::scoped_actor self{*c.sys};
  for (auto& w : v.workers) {
    caf::actor d;
    caf::error err;
    for (int tries = 0; !d && tries < 4; ++tries) // connect.hpp: a tick
      self->request(connector(*c.sys), 10s, caf::connect_atom_v, w.host, w.port)
          .receive(
              [&d](const caf::node_id&, caf::strong_actor_ptr& ptr,
                   const std::set<std::string>&) {
                d = caf::actor_cast<caf::actor>(ptr);
              },
              [&err](caf::error& e) { err = std::move(e); });
    BOOST_REQUIRE_MESSAGE(d, "stage " << w.rank << ": " << describe(err));
    self->send(d, start_atom_v, v.epoch + (uint64_t{1} << 40), uint64_t{0},
               caf::actor{}, caf::actor{});
    // The generation in force: the lead's first in the view of all stages.
    auto gen = pipe::next_generation(v.epoch, 0);
    self->send(d, finish_atom_v, gen);
    for (uint64_t k = 0; k < long_job; ++k) {
      self->send(d, commit_atom_v, gen, k);
      for (uint32_t r = 0; r < stages; ++r)
        self->send(d, done_atom_v, gen, k, r, 1.0);
    }
  }
  auto rc = agent->wait_exit(150s);
  BOOST_REQUIRE_MESSAGE(rc && *rc == 0, "agent: " << agent->output());
  s.proc->signal(SIGTERM);
  s.proc->wait_exit(10s);
  for (auto* what : {"ignored a start from another than its lead",
                     "ignored a commit from another than its lead",
                     "ignored a finish from another than its lead",
                     "ignored a done for stage"})
    BOOST_CHECK_MESSAGE(agent->output().find(what) != std::string::npos,
                        "no \"" << what << "\" in " << agent->output());
  check_same_weights(plain.path, steered.path, "the stranger", long_job);
}

BOOST_AUTO_TEST_CASE(wrong_pipeline_flags_are_refused_in_one_line) {
  scheduler_process s{0, stages};
  auto refused = [&](std::vector<std::string> extra, const std::string& why) {
    extra.insert(extra.begin(), {"--role=worker", s.flag()});
    child_process p{node_args(std::move(extra))};
    auto rc = p.wait_exit(std::chrono::seconds{30});
    BOOST_CHECK_MESSAGE(rc && *rc == exit_bad_config,
                        why << ": exit " << rc.value_or(-1));
    BOOST_CHECK_MESSAGE(p.output().find(why) != std::string::npos,
                        why << ": " << p.output());
  };
  temp_dir d;
  auto flags = job_flags(d.path);
  auto with = [&](std::string flag) {
    auto f = flags;
    f.push_back(std::move(flag));
    return f;
  };
  refused(with("--pipeline.stages=1"), "--pipeline.stages must be in 2..64");
  refused(with("--pipeline.cut=3,2"), "--pipeline.cut must be increasing");
  refused(with("--pipeline.cut=3,4"), "leaves a stage without layers");
  refused(with("--train.batch=30"), "must be a multiple of");
  refused(with("--optimizer.name=adagrad"), "--optimizer.name must be");
  refused(with("--train.evals-per-epoch=2"), "--train.evals-per-epoch");
  refused(with("--pipeline.schedule=2f2b"), "--pipeline.schedule");
}

BOOST_AUTO_TEST_CASE(a_stage_without_its_data_exits_2_with_its_line) {
  // At 27adb75 a stage whose data was missing exited 1, and its agent
  // restarted it into the same line until its limit. A model or data that
  // cannot be had is a bad configuration, as a trainer's.
  scheduler_process s{0, stages};
  temp_dir d;
  auto flags = job_flags(d.path, {"--train.data-dir=/nonexistent"});
  flags.insert(flags.begin(), {"--role=worker", s.flag()});
  child_process st{node_args(std::move(flags))};
  auto rc = st.wait_exit(90s);
  BOOST_REQUIRE_MESSAGE(rc, st.output());
  BOOST_CHECK_EQUAL(*rc, exit_bad_config);
  BOOST_CHECK_MESSAGE(
      st.output().find("*** stage failed: starting: invalid_config: ") !=
              std::string::npos &&
          st.output().find("dataset-fashion-mnist") != std::string::npos,
      st.output());
}

BOOST_AUTO_TEST_CASE(a_fault_in_an_evaluation_that_never_comes_is_said) {
  // Mini-batch 47 is no epoch's end and not the last (90): no evaluation
  // follows it, so --pipeline.fault-kill=1@47:eval never fires; said at
  // the start, and the job trains to its end.
  temp_dir d;
  auto out = run_job(d.path, {"--pipeline.fault-kill=1@47:eval"});
  BOOST_CHECK_MESSAGE(out.find("--pipeline.fault-kill=1@47:eval: no"
                               " evaluation follows mini-batch 47") !=
                              std::string::npos &&
                          out.find("): it never fires") != std::string::npos,
                      out);
  BOOST_CHECK_MESSAGE(out.find("killing its process") == std::string::npos,
                      out);
  BOOST_CHECK_MESSAGE(out.find("final test accuracy: ") != std::string::npos,
                      out);
}

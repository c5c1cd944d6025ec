// troupe-node processes training Fashion-MNIST end to end, and the clear
// errors a worker gives for missing data or a bad model.
#define BOOST_TEST_MODULE training_cluster_tests
#include <boost/test/unit_test.hpp>

#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>

#include "actors/base/exit_codes.hpp"
#include "messages/checkpoint.hpp"
#include "tests/system/nodes.hpp"
#include "tests/system/scheduler_client.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

std::unique_ptr<child_process> start_trainer(const scheduler_process& s,
                                             std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--role=worker", s.flag()});
  return std::make_unique<child_process>(node_args(std::move(extra)));
}

/// The number after `"key":` in a JSON line; NaN if absent.
double json_number(const std::string& line, const std::string& key) {
  auto at = line.find('"' + key + "\":");
  if (at == std::string::npos)
    return std::nan("");
  return std::strtod(line.c_str() + at + key.size() + 3, nullptr);
}

/// A server and two workers training one epoch with `extra` flags on
/// every node (the scheduler gets them too).
struct one_epoch {
  scheduler_process s;
  std::unique_ptr<child_process> srv, w0, w1;
  explicit one_epoch(std::vector<std::string> extra) : s(1, 2, extra) {
    extra.insert(extra.begin(),
                 {"--optimizer.name=momentum", "--optimizer.lr=0.02"});
    srv = start_server(s, "sync", extra);
    extra.insert(extra.end(),
                 {"--train.epochs=1", "--train.eval-samples=2000"});
    w0 = start_trainer(s, extra);
    w1 = start_trainer(s, extra);
  }
};

/// What every node of `job` printed so far (its last 2000 bytes each), to
/// tell why a step of a test failed: the checkpoint request once failed
/// with request_timeout under `ctest -j2`, the cut not reached in 60 s.
std::string said_so_far(one_epoch& job) {
  std::string out;
  std::pair<const char*, child_process*> nodes[] = {
      {"scheduler", job.s.proc.get()},
      {"server", job.srv.get()},
      {"worker 0", job.w0.get()},
      {"worker 1", job.w1.get()}};
  for (auto [name, p] : nodes) {
    p->drain();
    auto& all = p->output();
    out += std::string{"\n--- "} + name + " said:\n" +
           all.substr(all.size() > 2000 ? all.size() - 2000 : 0);
  }
  return out;
}

/// Runs one epoch on a server and two workers with `extra` flags on every
/// node; returns rank 0's "final test accuracy: ..." line.
std::string train_one_epoch(const std::vector<std::string>& extra,
                            std::string* resumed = nullptr) {
  one_epoch job{extra};
  auto& w0 = job.w0;
  auto& w1 = job.w1;
  std::string line;
  for (auto* w : {w0.get(), w1.get()}) {
    auto rc = w->wait_exit(150s);
    // A worker that waited on one that failed fails only later: all say.
    BOOST_REQUIRE_MESSAGE(rc && *rc == 0, said_so_far(job));
    if (auto l = w->wait_for_line("final test accuracy: ", 1s))
      line = *l;
  }
  BOOST_REQUIRE_MESSAGE(!line.empty(), w0->output() << w1->output());
  if (resumed) // what a restarted or resumed worker says
    if (auto l = w0->wait_for_line("resuming at clock", 1s))
      *resumed = *l;
  return line;
}

} // namespace

BOOST_AUTO_TEST_SUITE(training_cluster_tests)

BOOST_AUTO_TEST_CASE(optimizers_on_workers_or_servers_train_the_same_model) {
  // Sync mode, the same mean gradient, the same update: the same weights.
  auto on_servers = train_one_epoch({"--optimizer.on=server"});
  auto on_workers = train_one_epoch({"--optimizer.on=worker"});
  BOOST_TEST_MESSAGE("servers: " << on_servers << "; workers: " << on_workers);
  BOOST_CHECK_EQUAL(on_servers, on_workers);
  BOOST_CHECK_GT(std::stod(on_workers.substr(on_workers.rfind(' ') + 1)), 0.75);
}

BOOST_AUTO_TEST_CASE(overlapped_sync_steps_train_the_model_of_whole_steps) {
  // Each block of gradients is pushed as backward finishes it, a sync
  // round per block: the weights are those of whole steps, up to the float
  // rounding of the first layer's forward, summed in two row blocks.
  auto whole = train_one_epoch({});
  auto overlapped = train_one_epoch({"--worker.overlap"});
  BOOST_TEST_MESSAGE("whole: " << whole << "; overlapped: " << overlapped);
  auto acc = [](const std::string& l) {
    return std::stod(l.substr(l.rfind(' ') + 1));
  };
  BOOST_CHECK_GT(acc(overlapped), 0.75);
  BOOST_CHECK_LE(std::abs(acc(overlapped) - acc(whole)), 0.005);
}

/// Sync training is deterministic: a job killed after a checkpoint and
/// resumed from it must end with the very same accuracy line, which it can
/// only do if weights, momentum and the lr schedule all came back. `extra`
/// goes to every node; a step is `clocks` server clocks (the cut falls
/// between steps).
void check_resume(std::vector<std::string> extra, uint64_t clocks) {
  temp_dir dir;
  std::vector<std::string> flags{"--checkpoint.dir=" + dir.path,
                                 "--checkpoint.every-ms=0"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  auto reference = train_one_epoch(flags);
  uint64_t cut = 0;
  // Under load a checkpoint once took 925 ms, against a 0.9 s epoch: the
  // job may end before one lands well into it. Then the job runs again,
  // from an empty folder, at most 3 times in all; the verdict below is
  // never retried.
  bool mid_epoch = false;
  for (int attempt = 0; attempt < 3 && !mid_epoch; ++attempt) {
    if (attempt > 0)
      for (auto& f : std::filesystem::directory_iterator{dir.path})
        std::filesystem::remove_all(f.path());
    cut = 0;
    one_epoch job{flags};
    scheduler_client client{job.s.port};
    BOOST_REQUIRE(client.wait_for_view(
        [](const troupe::cluster_view& v) { return !v.placement.empty(); }));
    // Checkpoints until one is well into the epoch (468 steps): each is
    // answered once written, so this paces itself.
    caf::expected<uint64_t> gen = uint64_t{0};
    for (int i = 0; i < 1000 && cut < 100 * clocks; ++i) {
      gen = client.checkpoint();
      job.s.proc->drain(); // a log line per checkpoint: keep the pipe open
      BOOST_REQUIRE_MESSAGE(gen, "checkpoint " << i << " after cut " << cut
                                               << ": " << troupe::test::why(gen)
                                               << said_so_far(job));
      auto m = troupe::read_manifest(dir.path);
      BOOST_REQUIRE(m);
      cut = m->version;
    }
    BOOST_TEST_MESSAGE("checkpoint " << *gen << " at clock " << cut);
    job.s.proc->signal(SIGKILL);
    for (auto* p : {job.srv.get(), job.w0.get(), job.w1.get()})
      BOOST_REQUIRE_MESSAGE(p->wait_exit(30s), p->output());
    mid_epoch = !job.w0->wait_for_line("final test accuracy", 1s);
    if (!mid_epoch)
      BOOST_TEST_MESSAGE("attempt " << attempt << ": the job ended before"
                                    << " the kill, its checkpoint at clock "
                                    << cut << "; again");
  }
  BOOST_REQUIRE_MESSAGE(mid_epoch, "the job ended before the kill 3 times");
  BOOST_CHECK_EQUAL(cut % clocks, 0u); // between two steps
  flags.push_back("--resume");
  std::string said;
  auto resumed = train_one_epoch(flags, &said);
  // A fresh start would end alike too: the workers must have resumed.
  BOOST_CHECK_MESSAGE(said.find("resuming at clock " + std::to_string(cut)) !=
                          std::string::npos,
                      "worker 0 said: " << said);
  BOOST_TEST_MESSAGE("uninterrupted: " << reference
                                       << "; resumed: " << resumed);
  BOOST_CHECK_EQUAL(resumed, reference);
  BOOST_CHECK_GE(cut, 100u * clocks);
}

BOOST_AUTO_TEST_CASE(a_resumed_job_ends_exactly_like_an_uninterrupted_one) {
  check_resume({}, 1);
}

BOOST_AUTO_TEST_CASE(a_resumed_overlapped_job_ends_exactly_alike_too) {
  // Overlapped workers push each step in 2 blocks, one server clock each:
  // the cut falls between steps, so no block of a step is lost.
  check_resume({"--worker.overlap"}, 2);
}

BOOST_AUTO_TEST_CASE(a_resumed_sync_device_job_ends_exactly_alike_too) {
  // Two CPU devices per worker sum in rank order, so sync_device is as
  // deterministic as sync; its checkpoints cut the rounds as sync's do.
  check_resume({"--server.mode=sync_device", "--device=cpu,cpu"}, 1);
}

/// Resumes the checkpoint in `dir` with `other` flags on every node: both
/// workers must stop with exit code 2 (a bad configuration: the same flags
/// fail again, so an agent does not restart them; they exited 1 at fbf4dac) and
/// a line holding `says`, and the checkpoint must stay as it was.
void check_resume_refused(const std::string& dir,
                          std::vector<std::string> other,
                          const std::string& says) {
  auto before = troupe::read_manifest(dir);
  BOOST_REQUIRE(before);
  other.insert(other.end(), {"--checkpoint.dir=" + dir,
                             "--checkpoint.every-ms=0", "--resume"});
  one_epoch job{other};
  for (auto* w : {job.w0.get(), job.w1.get()}) {
    auto rc = w->wait_exit(60s);
    BOOST_REQUIRE_MESSAGE(rc, "a worker went on: " << w->output());
    BOOST_CHECK_EQUAL(*rc, exit_bad_config);
    auto line = w->wait_for_line(says, 1s);
    BOOST_CHECK_MESSAGE(line, w->output());
    if (line)
      BOOST_TEST_MESSAGE("refused: " << *line);
    BOOST_CHECK_MESSAGE(!w->wait_for_line("final test accuracy", 1s),
                        w->output());
  }
  job.s.proc->signal(SIGTERM);
  job.srv->signal(SIGTERM);
  auto after = troupe::read_manifest(dir);
  BOOST_REQUIRE(after);
  BOOST_CHECK_EQUAL(after->generation, before->generation);
  BOOST_CHECK_EQUAL(after->version, before->version);
}

BOOST_AUTO_TEST_CASE(a_resume_with_another_step_layout_or_model_is_refused) {
  // Overlapped steps are 2 server clocks and split the first layer's
  // weights in row blocks: a checkpoint of whole steps resumed with
  // --worker.overlap would pair other steps in the sync rounds, and a
  // model of other sizes would have its slices skipped and trained afresh.
  temp_dir dir;
  std::vector<std::string> flags{"--checkpoint.dir=" + dir.path,
                                 "--checkpoint.every-ms=0"};
  {
    one_epoch job{flags};
    scheduler_client client{job.s.port};
    BOOST_REQUIRE(client.wait_for_view(
        [](const troupe::cluster_view& v) { return !v.placement.empty(); }));
    auto gen = client.checkpoint();
    BOOST_REQUIRE_MESSAGE(gen, job.s.proc->output());
    job.s.proc->signal(SIGKILL);
    for (auto* p : {job.srv.get(), job.w0.get(), job.w1.get()})
      BOOST_REQUIRE_MESSAGE(p->wait_exit(30s), p->output());
  }
  auto m = troupe::read_manifest(dir.path);
  BOOST_REQUIRE(m);
  BOOST_CHECK_EQUAL(m->clocks_per_step, 1u);
  check_resume_refused(dir.path, {"--worker.overlap"},
                       "the checkpoint in " + dir.path +
                           " was written by workers that push one in 1");
  check_resume_refused(dir.path, {"--train.model=mlp:784-64-10"},
                       "floats; the checkpoint in " + dir.path +
                           " holds it with");
  // A layer more, of the same sizes up to it: the first layers took the
  // checkpoint's weights, and the last trained afresh, without a word.
  check_resume_refused(dir.path, {"--train.model=mlp:784-256-128-10-10"},
                       "declares keys the checkpoint in " + dir.path +
                           " lacks (7, 8) beside keys it holds: another"
                           " model");
  // Slices of another size would find nothing to restore: the scheduler
  // refuses at once.
  child_process sched{node_args({"--role=scheduler", "--scheduler-port=0",
                                 "--cluster.slice-floats=1000",
                                 "--checkpoint.dir=" + dir.path, "--resume"})};
  auto rc = sched.wait_exit(20s);
  BOOST_REQUIRE_MESSAGE(rc, sched.output());
  BOOST_CHECK_NE(*rc, 0);
  BOOST_CHECK_MESSAGE(
      sched.wait_for_line("into other slices than --cluster.slice-floats=1000",
                          2s),
      sched.output());
}

BOOST_AUTO_TEST_CASE(two_workers_train_fashion_mnist_well_past_chance) {
  temp_dir dir;
  std::string metrics = dir / "metrics.jsonl";
  scheduler_process s{1, 2};
  auto srv = start_server(s, "sync",
                          {"--optimizer.name=momentum", "--optimizer.lr=0.02"});
  std::vector<std::string> flags{"--train.epochs=1",
                                 "--train.metrics-file=" + metrics};
  auto w0 = start_trainer(s, flags);
  auto w1 = start_trainer(s, flags);
  for (auto* w : {w0.get(), w1.get()}) {
    auto rc = w->wait_exit(150s);
    BOOST_REQUIRE_MESSAGE(rc, "worker did not finish: " << w->output());
    BOOST_CHECK_MESSAGE(*rc == 0, w->output());
  }
  auto line = w0->wait_for_line("final test accuracy: ", 1s);
  if (!line)
    line = w1->wait_for_line("final test accuracy: ", 1s);
  BOOST_REQUIRE_MESSAGE(line, w0->output() << w1->output());
  auto acc = std::stod(line->substr(line->rfind(' ') + 1));
  BOOST_TEST_MESSAGE("after one epoch: " << *line);
  BOOST_CHECK_GT(acc, 0.75); // chance is 0.1; one epoch reaches ~0.83
  auto m = read_file(metrics);
  BOOST_CHECK_MESSAGE(m.find("\"epoch\":1,") != std::string::npos, m);
  BOOST_CHECK_MESSAGE(m.find("\"test_accuracy\":") != std::string::npos, m);
  // Each line splits rank 0's steps of its part into its own work and its
  // wait for the rounds; together they are the part's training time (the
  // steps follow each other), and in sync mode with two workers rank 0
  // always waits for something.
  std::istringstream lines{m};
  double before = 0;
  size_t n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    auto train = json_number(line, "train_s");
    auto compute = json_number(line, "compute_s");
    auto wait = json_number(line, "wait_s");
    auto part = train - before;
    before = train;
    BOOST_TEST_MESSAGE("part " << part << " s: compute " << compute
                               << " s, wait " << wait << " s");
    BOOST_CHECK_MESSAGE(compute > 0 && wait > 0, line);
    BOOST_CHECK_MESSAGE(std::fabs(compute + wait - part) <= 0.1 * part + 0.02,
                        line << " (part " << part << " s)");
  }
  BOOST_CHECK_EQUAL(n, 1u);
  BOOST_CHECK_MESSAGE(w0->output().find("waiting ") != std::string::npos ||
                          w1->output().find("waiting ") != std::string::npos,
                      "no progress line shows the waiting share");
}

BOOST_AUTO_TEST_CASE(pipelined_async_workers_train_past_chance) {
  // Each worker computes step t + 1 while push t is in flight: its
  // gradients are one step older, and training still gets far past chance.
  scheduler_process s{1, 2, {"--server.mode=async"}};
  auto srv = start_server(s, "async",
                          {"--optimizer.name=momentum", "--optimizer.lr=0.025",
                           "--optimizer.momentum=0.7"});
  std::vector<std::string> flags{"--server.mode=async", "--worker.pipeline",
                                 "--train.epochs=1",
                                 "--train.eval-samples=2000"};
  auto w0 = start_trainer(s, flags);
  auto w1 = start_trainer(s, flags);
  std::optional<std::string> line;
  for (auto* w : {w0.get(), w1.get()}) {
    auto rc = w->wait_exit(150s);
    BOOST_REQUIRE_MESSAGE(rc, "worker did not finish: " << w->output());
    BOOST_CHECK_MESSAGE(*rc == 0, w->output());
    if (!line)
      line = w->wait_for_line("final test accuracy: ", 1s);
  }
  BOOST_REQUIRE_MESSAGE(line, w0->output() << w1->output());
  BOOST_TEST_MESSAGE("pipelined, after one epoch: " << *line);
  BOOST_CHECK_GT(std::stod(line->substr(line->rfind(' ') + 1)), 0.75);
}

BOOST_AUTO_TEST_CASE(missing_data_or_a_bad_model_gets_one_clear_line) {
  scheduler_process s{1, 1};
  auto srv = start_server(s, "sync");
  struct bad_case {
    std::string flag, says;
  };
  for (auto& c : std::vector<bad_case>{
           {"--train.data-dir=/nonexistent", "dataset-fashion-mnist"},
           {"--train.model=mlp:784", "--train.model"},
           {"--train.model=cnn:1-2", "--train.model"},
           // At fbf4dac a model of another width read past each image (a
           // segfault) or trained on the wrong pixels, and one of fewer
           // logits than classes failed each step with "bad_shape".
           {"--train.model=mlp:785-10", "its first size must be 784"},
           {"--train.model=mlp:100-10", "its first size must be 784"},
           {"--train.model=mlp:784-64-5", "its last size must be 10 or more"},
           // ... and a batch above the worker's share ran no step at all.
           {"--train.batch=60001",
            "--train.batch 60001 is more than this worker's share of the"
            " 60000 training samples (1 worker): at most 60000"},
           // ... and one whose optimizer runs elsewhere than the server's
           // trained garbage to the end.
           {"--optimizer.on=worker",
            "give every node the same --optimizer flags"},
           // ... and one whose metrics file could not be written trained
           // on, its metrics going nowhere (as a stage refuses it).
           {"--train.metrics-file=/nonexistent/m.jsonl",
            "*** --train.metrics-file: cannot write /nonexistent/m.jsonl: No"
            " such file or directory"}}) {
    auto w = start_trainer(s, {c.flag, "--optimizer.name=sgd"});
    auto rc = w->wait_exit(60s);
    BOOST_REQUIRE_MESSAGE(rc, w->output());
    // A bad configuration: its agent would not restart it (at 27adb75
    // these exited 1, and were restarted into the same line).
    BOOST_CHECK_EQUAL(*rc, exit_bad_config);
    BOOST_CHECK_MESSAGE(w->output().find(c.says) != std::string::npos,
                        w->output());
  }
}

BOOST_AUTO_TEST_CASE(a_stage_that_cannot_work_says_so_and_exits_2) {
  // At fbf4dac a stage of a model with fewer logits than classes dropped
  // mini-batch 0 ("bad_shape") and the pipeline waited for ever; one with a
  // checkpoint folder it could not write trained on, logging an error at
  // each checkpoint, so that a restart found none.
  scheduler_process s{0, 2};
  for (auto [flag, says] : std::vector<std::pair<std::string, std::string>>{
           {"--train.model=mlp:784-64-5",
            "*** stage failed: starting: invalid_config:"
            " --train.model=mlp:784-64-5 gives 5 logits a sample, but the"
            " labels have 10 classes"},
           {"--pipeline.checkpoint-dir=/proc/nope",
            "*** stage failed: --pipeline.checkpoint-dir: invalid_config: "
            "cannot"
            " make /proc/nope: "}}) {
    child_process st{
        node_args({"--role=worker", s.flag(), "--worker.task=stage",
                   "--optimizer.name=sgd", "--pipeline.stages=2", flag})};
    auto rc = st.wait_exit(90s);
    BOOST_REQUIRE_MESSAGE(rc, st.output());
    BOOST_CHECK_EQUAL(*rc, exit_bad_config);
    BOOST_CHECK_MESSAGE(st.output().find(says) != std::string::npos,
                        st.output());
  }
}

BOOST_AUTO_TEST_CASE(a_worker_computes_with_the_blas_threads_it_is_given) {
  // OpenBLAS's own choice (a thread per core) had a pipeline's stages spin
  // on 2 cores: 1 is the default, --worker.blas-threads raises it. The
  // line (logged at info) is read back from OpenBLAS before the data is
  // read; a missing data folder ends the worker right after it.
  scheduler_process s{1, 1};
  auto srv = start_server(s, "sync");
  for (auto [threads, says] : std::vector<std::pair<std::string, std::string>>{
           {"", " kernels, 1 thread)"}, // the default
           {"2", " kernels, 2 threads)"}}) {
    std::vector<std::string> flags{"--device=cpu", "--log-level=info",
                                   "--train.data-dir=/nonexistent"};
    if (!threads.empty())
      flags.push_back("--worker.blas-threads=" + threads);
    auto w = start_trainer(s, flags);
    auto rc = w->wait_exit(60s);
    BOOST_REQUIRE_MESSAGE(rc, w->output());
    BOOST_CHECK_EQUAL(*rc, exit_bad_config);
    auto at = w->output().find("computing on cpu (OpenBLAS ");
    BOOST_CHECK_MESSAGE(at != std::string::npos &&
                            w->output().find(says, at) != std::string::npos,
                        "threads '" << threads << "': " << w->output());
  }
}

BOOST_AUTO_TEST_CASE(a_diverging_job_stops_with_one_line_and_a_nonzero_exit) {
  // At bc0f027 --optimizer.lr=1000 trained on NaN to the end and wrote
  // "train_loss":-nan. Now the first non-finite loss, or the push of a
  // non-finite gradient, ends the worker.
  for (std::string on : {"server", "worker"}) {
    scheduler_process s{1, 1};
    auto srv = start_server(s, "sync",
                            {"--optimizer.lr=1000", "--optimizer.on=" + on});
    auto w = start_trainer(
        s, {"--optimizer.lr=1000", "--optimizer.on=" + on, "--train.epochs=1"});
    auto rc = w->wait_exit(120s);
    BOOST_REQUIRE_MESSAGE(rc, w->output());
    BOOST_CHECK_NE(*rc, 0);
    BOOST_CHECK_MESSAGE(w->output().find("*** worker failed: non_finite: ") !=
                            std::string::npos,
                        on << ": " << w->output());
    // The optimizer is the default, sum: the line says that it is the
    // counter task's (not to lower the rate, which sum does not read).
    BOOST_CHECK_MESSAGE(w->output().find("--optimizer.name=sum, the default,"
                                         " is the counter task's") !=
                            std::string::npos,
                        on << ": " << w->output());
    BOOST_CHECK_MESSAGE(w->output().find("final test accuracy") ==
                            std::string::npos,
                        on << ": " << w->output());
  }
}

BOOST_AUTO_TEST_CASE(a_job_that_lost_values_ends_at_once_unless_allowed) {
  // At bc0f027 a job whose dead server's slices came back with no replica
  // printed its accuracy and exited 0; at ee5f66d it trained on to its end
  // and exited 4 there. The "lost" event here is the one a server reports
  // then (shard_server_views.cpp), sent by the test once both trainers
  // are in: the scheduler tells them of it.
  const std::string said = "*** worker failed: values_lost: the job lost"
                           " values (the first loss, from server 0: 7 slices"
                           " of a dead server came with no replica";
  for (bool allowed : {false, true}) {
    std::vector<std::string> extra;
    if (allowed)
      extra.push_back("--cluster.allow-loss");
    one_epoch job{extra};
    scheduler_client client{job.s.port};
    BOOST_REQUIRE_MESSAGE(client.wait_for_view([](const cluster_view& v) {
      return v.workers.size() == 2;
    }),
                          said_so_far(job));
    caf::scoped_actor self{*client.sys};
    self->send(client.sched, event_atom_v,
               encode(event_record{now_ms(), "lost", role::server, 0, 0,
                                   "7 slices of a dead server came with no"
                                   " replica: their values are lost",
                                   "server 0"}));
    int finals = 0; // rank 0's "final test accuracy"
    for (auto* w : {job.w0.get(), job.w1.get()}) {
      auto rc = w->wait_exit(120s);
      BOOST_REQUIRE_MESSAGE(rc, said_so_far(job));
      auto& out = w->output();
      bool says = out.find(said) != std::string::npos;
      finals += occurrences(out, "final test accuracy");
      // Not allowed: exit 4 (not restarted) at once, before the end.
      BOOST_CHECK_MESSAGE(allowed ? *rc == 0 && !says : *rc == 4 && says,
                          "allowed " << allowed << ": " << out);
    }
    BOOST_CHECK_MESSAGE(finals == (allowed ? 1 : 0),
                        "allowed " << allowed << ": " << said_so_far(job));
    if (allowed)
      continue;
    // A worker that joins after the loss (its agent's restart, say) is
    // told of it as it joins.
    auto late = start_trainer(job.s, {"--optimizer.name=momentum",
                                      "--optimizer.lr=0.02", "--train.epochs=1",
                                      "--train.eval-samples=2000"});
    auto rc = late->wait_exit(60s);
    BOOST_REQUIRE_MESSAGE(rc, late->output());
    BOOST_CHECK_EQUAL(*rc, 4);
    BOOST_CHECK_MESSAGE(late->output().find(said) != std::string::npos,
                        late->output());
  }
}

BOOST_AUTO_TEST_SUITE_END()

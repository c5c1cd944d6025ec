// Checkpoints with real processes. Workers of the counter workload add 1
// per clock to every element in sync mode, so a consistent checkpoint at
// round R holds exactly R x workers everywhere, and a cluster resumed from
// it ends with exactly clocks x workers. The scheduler is SIGKILLed
// mid-training (every process must end with a line saying how to go on),
// and a server is killed half way through writing a checkpoint (the
// previous generation must stay whole and be the one resumed).
#define BOOST_TEST_MODULE checkpoint_cluster_tests
#include <boost/test/unit_test.hpp>

#include "tests/test_support.hpp"

#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>

#include "messages/checkpoint.hpp"
#include "tests/system/nodes.hpp"
#include "tests/system/scheduler_client.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

/// Clocks each counter worker runs: long enough that the test's
/// checkpoint and kill land mid-training even on a fast machine.
constexpr uint32_t steps = 20000;

/// Scheduler, 2 servers and 2 counter workers (small arrays, so steps are
/// quick), all sharing `flags`.
struct counter_cluster {
  scheduler_process sched;
  std::unique_ptr<scheduler_client> client;
  std::vector<std::unique_ptr<child_process>> servers, workers;

  counter_cluster(const std::vector<std::string>& flags,
                  const std::vector<std::string>& server_flags = {})
      : sched(2, 2, flags) {
    client = std::make_unique<scheduler_client>(sched.port);
    for (int i = 0; i < 2; ++i) {
      auto f = flags;
      if (i == 0)
        f.insert(f.end(), server_flags.begin(), server_flags.end());
      servers.push_back(start_server(sched, "sync", f));
    }
    auto w = flags;
    w.push_back("--worker.key-floats=2000");
    for (int i = 0; i < 2; ++i)
      workers.push_back(start_counter(sched, steps, w));
  }

  /// Waits until the workers pushed a while (the keys are placed and a
  /// server reported nothing yet: training is under way).
  void wait_for_training() {
    BOOST_REQUIRE(client->wait_for_view([](const cluster_view& v) {
      return !v.placement.empty() && v.workers.size() == 2;
    }));
  }

  /// Every worker ends with a sum that is exactly right.
  void expect_exact_sums() {
    for (auto& w : workers) {
      auto rc = w->wait_exit(180s);
      BOOST_REQUIRE_MESSAGE(rc, "worker did not finish: " << w->output());
      BOOST_CHECK_MESSAGE(*rc == 0, w->output());
      if (auto took = w->wait_for_line(" clocks x ", 2s))
        BOOST_TEST_MESSAGE(*took);
      auto line = w->wait_for_line("final value", 2s);
      BOOST_REQUIRE_MESSAGE(line, w->output());
      BOOST_CHECK_MESSAGE(line->find("= " + std::to_string(2 * steps) +
                                     ": sums exact") != std::string::npos,
                          *line);
    }
  }
};

std::vector<std::string> checkpoint_flags(const temp_dir& d) {
  return {"--checkpoint.dir=" + d.path, "--checkpoint.every-ms=0"};
}

/// The clock a worker said it resumed at; 0 if it did not say.
uint64_t resumed_at(child_process& w) {
  auto line = w.wait_for_line("resuming at clock", 2s);
  if (!line)
    return 0;
  return std::stoull(line->substr(line->rfind(' ') + 1));
}

bool is(const event_record& e, const char* kind) {
  return e.kind == kind;
}

/// A tmpfs of 64 KiB at a fresh folder, read-only with `flags` MS_RDONLY:
/// a disk that is full, or cannot be written. Unmounted at the end.
struct small_disk {
  temp_dir d;
  std::string path = d.path + "/disk";
  bool mounted = false;
  explicit small_disk(unsigned long flags = 0) {
    std::filesystem::create_directories(path);
    mounted = ::mount("tmpfs", path.c_str(), "tmpfs", flags, "size=64k") == 0;
    BOOST_REQUIRE_MESSAGE(mounted, "mount: " << std::strerror(errno));
  }
  ~small_disk() {
    if (mounted)
      ::umount2(path.c_str(), MNT_DETACH);
  }
  /// The checkpoint files in it.
  size_t files() const {
    size_t n = 0;
    for (auto& e : std::filesystem::directory_iterator{path})
      n += e.path().filename().string().rfind("ckpt-", 0) == 0 ? 1 : 0;
    return n;
  }
};

/// Whether this process may mount a tmpfs (root); why not, for the skip.
/// The first call moves it (and the nodes it starts) into a mount namespace
/// of its own, so that no mount outlives it, even killed.
boost::test_tools::assertion_result can_mount(boost::unit_test::test_unit_id) {
  static const std::string why = [] {
    if (::geteuid() != 0)
      return std::string{"not root"};
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      return std::string{"no mount namespace of its own: "} +
             std::strerror(errno);
    temp_dir d;
    if (::mount("tmpfs", d.path.c_str(), "tmpfs", 0, "size=64k") != 0)
      return std::string{"cannot mount a tmpfs: "} + std::strerror(errno);
    ::umount2(d.path.c_str(), MNT_DETACH);
    return std::string{};
  }();
  boost::test_tools::assertion_result r{why.empty()};
  if (!why.empty())
    r.message() << "skipped: " << why;
  return r;
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_cluster_tests)

BOOST_AUTO_TEST_CASE(a_cluster_resumes_after_its_scheduler_dies) {
  temp_dir d;
  auto flags = checkpoint_flags(d);
  uint64_t cut = 0, last = 0;
  {
    counter_cluster c{flags};
    c.wait_for_training();
    // Checkpoints until one is well into training: each is answered once
    // its manifest is written, so this paces itself.
    caf::expected<checkpoint_manifest> m = checkpoint_manifest{};
    for (uint64_t want = 1; want <= 1000 && cut < 1000; ++want) {
      auto gen = c.client->checkpoint();
      c.sched.proc->drain(); // a line per checkpoint
      BOOST_REQUIRE_MESSAGE(gen, "generation " << want << ": " << why(gen));
      BOOST_CHECK_EQUAL(*gen, want); // numbered 1, 2, ...
      m = read_manifest(d.path);
      BOOST_REQUIRE_MESSAGE(m, why(m));
      BOOST_CHECK_EQUAL(m->generation, want);
      BOOST_CHECK_EQUAL(m->files.size(), 2u);
      BOOST_CHECK_EQUAL(m->mode, "sync");
      BOOST_CHECK_GT(m->version, cut); // each cut later than the last
      cut = m->version;
      last = m->generation;
    }
    BOOST_CHECK_GE(cut, 1000u);
    BOOST_CHECK_LT(cut, steps); // mid-training, or the test proves little
    // Every file of the generation reads back whole, cut at one version.
    for (auto& name : m->files) {
      auto x = read_checkpoint(d.path + "/" + name);
      BOOST_REQUIRE_MESSAGE(x, why(x));
      for (auto& st : x->stores)
        BOOST_CHECK_EQUAL(st.version, cut);
    }
    c.sched.proc->signal(SIGKILL);
    // Every process ends, with one line that says how to go on.
    for (auto* group : {&c.servers, &c.workers})
      for (auto& p : *group) {
        auto rc = p->wait_exit(30s);
        BOOST_REQUIRE_MESSAGE(rc, "still running: " << p->output());
        BOOST_CHECK_NE(*rc, 0);
        BOOST_CHECK_MESSAGE(p->wait_for_line("the scheduler is gone", 2s) &&
                                p->wait_for_line("--resume", 2s),
                            p->output());
      }
  }
  // The whole cluster again, with --resume: from round `cut` to the end.
  flags.push_back("--resume");
  counter_cluster c{flags};
  c.expect_exact_sums();
  for (auto& w : c.workers)
    BOOST_CHECK_MESSAGE(resumed_at(*w) == cut, w->output());
  BOOST_CHECK(c.sched.proc->wait_for_line("resuming from checkpoint ", 2s));
  auto evs = c.client->events();
  std::set<uint32_t> restored; // server ranks that restored slices
  for (auto& e : evs)
    if (is(e, "restored"))
      restored.insert(e.rank);
  BOOST_CHECK_MESSAGE(restored == (std::set<uint32_t>{0, 1}), dump(evs));
  // The job's end was checkpointed too: generation 2, after the last round.
  BOOST_REQUIRE(c.client->wait_for_event(
      [](const event_record& e) { return is(e, "checkpoint"); }));
  auto m = read_manifest(d.path);
  BOOST_REQUIRE(m);
  BOOST_CHECK_EQUAL(m->generation, last + 1); // numbered after the resumed
  BOOST_CHECK_EQUAL(m->version, steps);
}

BOOST_AUTO_TEST_CASE(
    a_cut_no_worker_is_left_to_reach_is_taken_where_they_left) {
  // A sync checkpoint cuts a round above the server's version and waits
  // for the workers to get there. Once the last of them is gone (in a job:
  // all done just after the cut was set; here stopped, until the scheduler
  // finds their links dead), none will: the cut is taken again where the
  // server is, instead of the server waiting out the request timeout
  // (60 s) and the checkpoint failing. (One server: the workers cannot
  // stop between two servers' halves of a round.)
  temp_dir d;
  auto flags = checkpoint_flags(d);
  scheduler_process sched{1, 2, flags};
  auto server = start_server(sched, "sync", flags);
  auto w = flags;
  w.push_back("--worker.key-floats=2000");
  std::vector<std::unique_ptr<child_process>> workers;
  for (int i = 0; i < 2; ++i)
    workers.push_back(start_counter(sched, steps, w));
  scheduler_client client{sched.port};
  BOOST_REQUIRE(client.wait_for_view([](const cluster_view& v) {
    return !v.placement.empty() && v.workers.size() == 2;
  }));
  // Training under way: checkpoints (each answered once written) until
  // one is past round 10.
  uint64_t cut = 0;
  for (int i = 0; i < 1000 && cut < 10; ++i) {
    auto gen = client.checkpoint();
    sched.proc->drain(); // a line per checkpoint
    BOOST_REQUIRE_MESSAGE(gen, "checkpoint " << i << ": " << why(gen));
    auto m = read_manifest(d.path);
    BOOST_REQUIRE_MESSAGE(m, why(m));
    cut = m->version;
  }
  BOOST_REQUIRE_GE(cut, 10u);
  for (auto& p : workers)
    p->signal(SIGSTOP);
  // The first cuts fall while the workers are still members: rounds on
  // their way may reach one, not the next. Each checkpoint is written.
  for (int i = 0; i < 3; ++i) {
    auto gen = client.checkpoint();
    sched.proc->drain();
    BOOST_REQUIRE_MESSAGE(gen, "checkpoint " << i << " with the workers "
                                             << "stopped: " << why(gen) << "\n"
                                             << sched.proc->output());
    auto m = read_manifest(d.path);
    BOOST_REQUIRE_MESSAGE(m, why(m));
    BOOST_CHECK_EQUAL(m->generation, *gen);
    BOOST_CHECK_GE(m->version, cut);
    cut = m->version;
    BOOST_REQUIRE_EQUAL(m->files.size(), 1u);
    auto x = read_checkpoint(d.path + "/" + m->files.front());
    BOOST_REQUIRE_MESSAGE(x, why(x));
    for (auto& st : x->stores)
      BOOST_CHECK_EQUAL(st.version, cut);
  }
  // They were found gone meanwhile (their links dead).
  BOOST_CHECK(client.wait_for_view(
      [](const cluster_view& v) { return v.workers.empty(); }));
  for (auto& p : workers) {
    p->signal(SIGKILL);
    BOOST_REQUIRE_MESSAGE(p->wait_exit(30s), "still running: " << p->output());
  }
}

BOOST_AUTO_TEST_CASE(a_checkpoint_torn_by_a_kill_leaves_the_previous_whole) {
  temp_dir d;
  auto flags = checkpoint_flags(d);
  uint64_t cut = 0;
  {
    // The first server dies half way through writing generation 2.
    counter_cluster c{flags, {"--checkpoint.fault-tear=2"}};
    c.wait_for_training();
    // Its rank names its file: ranks follow registration, not start order.
    auto tearing = rank_of(c.client->view().servers, c.servers[0]->pid());
    BOOST_REQUIRE_MESSAGE(tearing, "server 0 is not in the view");
    auto first = c.client->checkpoint();
    BOOST_REQUIRE_MESSAGE(first, why(first));
    auto torn = c.client->checkpoint();
    BOOST_REQUIRE_MESSAGE(!torn, "generation 2 was not torn");
    auto rc = c.servers[0]->wait_exit(30s);
    BOOST_REQUIRE_MESSAGE(rc, c.servers[0]->output());
    BOOST_CHECK_MESSAGE(c.servers[0]->wait_for_line("fault injection", 2s),
                        c.servers[0]->output());
    // The manifest still names generation 1, whose files are whole; the
    // torn file never took its final name.
    auto m = read_manifest(d.path);
    BOOST_REQUIRE_MESSAGE(m, why(m));
    BOOST_CHECK_EQUAL(m->generation, 1u);
    cut = m->version;
    for (auto& name : m->files)
      BOOST_CHECK_MESSAGE(read_checkpoint(d.path + "/" + name), name);
    // The other server may still be writing its own generation 2 file,
    // whole or not, when we look: only the killed server's file is torn.
    auto torn_name = checkpoint_file_name(2, *tearing) + ".tmp";
    bool tmp_seen = false; // the torn file, under its temporary name
    for (auto& f : std::filesystem::directory_iterator(d.path)) {
      auto name = f.path().filename().string();
      if (name.find(".tmp") == std::string::npos)
        continue;
      BOOST_CHECK_MESSAGE(name.rfind("ckpt-00000002-", 0) == 0, name);
      if (name != torn_name)
        continue;
      tmp_seen = true;
      auto bad = read_checked_file(f.path().string());
      BOOST_REQUIRE_MESSAGE(!bad, name << " reads whole");
      BOOST_CHECK_MESSAGE(describe(bad.error()).find("torn") !=
                              std::string::npos,
                          describe(bad.error()));
    }
    BOOST_CHECK_MESSAGE(tmp_seen, torn_name << " not found");
    auto evs = c.client->events();
    BOOST_CHECK_MESSAGE(std::any_of(evs.begin(), evs.end(),
                                    [](const event_record& e) {
                                      return is(e, "checkpoint-failed");
                                    }),
                        dump(evs));
    // The job ends with its scheduler; what resumes is generation 1.
    c.sched.proc->signal(SIGKILL);
  }
  // Resumed from generation 1, the cluster runs to the same exact sums.
  flags.push_back("--resume");
  counter_cluster c{flags};
  c.expect_exact_sums();
  for (auto& w : c.workers)
    BOOST_CHECK_MESSAGE(resumed_at(*w) == cut, w->output());
}

BOOST_AUTO_TEST_CASE(resume_without_a_checkpoint_says_so_and_exits) {
  temp_dir d;
  // An empty folder, and one that does not exist (which is not made):
  // said once, before listening, by the scheduler and by a server, with
  // exit 2 (a configuration an agent does not restart).
  // An agent of servers too: it made the folder and started servers that
  // each failed so.
  const std::vector<std::vector<std::string>> roles = {
      {"--role=scheduler"},
      {"--role=server"},
      {"--role=agent", "--agent.servers=1"}};
  for (auto dir : {d.path, d.path + "/missing"})
    for (auto role : roles) {
      // (A server's scheduler port is one it would dial: it never does.)
      role.insert(role.end(), {"--scheduler-port=1", "--port=0",
                               "--checkpoint.dir=" + dir, "--resume"});
      child_process p{node_args(role)};
      auto rc = p.wait_exit(20s);
      BOOST_REQUIRE_MESSAGE(rc, p.output());
      BOOST_CHECK_MESSAGE(*rc == 2, p.output());
      auto said = "no checkpoint to resume from in " + dir;
      BOOST_CHECK_MESSAGE(p.wait_for_line(said, 2s) &&
                              occurrences(p.output(), said) == 1 &&
                              p.wait_for_line("start without --resume", 2s),
                          p.output());
      BOOST_CHECK_MESSAGE(p.output().find("listening") == std::string::npos,
                          p.output());
    }
  BOOST_CHECK(!std::filesystem::exists(d.path + "/missing"));
  child_process flagless{node_args({"--role=server", "--resume"})};
  auto rc = flagless.wait_exit(20s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_NE(*rc, 0);
  BOOST_CHECK_MESSAGE(
      flagless.wait_for_line("--resume needs --checkpoint.dir", 2s),
      flagless.output());
}

BOOST_AUTO_TEST_CASE(a_damaged_manifest_is_named_and_its_files_kept) {
  // It read as "no checkpoint ... start without --resume", and a fresh job
  // numbered from 1 and wrote over the files it named.
  temp_dir d;
  std::ofstream{d.path + "/MANIFEST"} << "not a manifest at all";
  auto file = d.path + "/ckpt-00000001-server-0.bin";
  std::ofstream{file} << "the only copy";
  for (bool resume : {true, false})
    for (auto role : {"--role=scheduler", "--role=server"}) {
      std::vector<std::string> args{role, "--scheduler-port=1", "--port=0",
                                    "--checkpoint.dir=" + d.path};
      if (resume)
        args.push_back("--resume");
      child_process p{node_args(args)};
      auto rc = p.wait_exit(20s);
      BOOST_REQUIRE_MESSAGE(rc, p.output());
      BOOST_CHECK_MESSAGE(*rc == 2, p.output());
      auto said = resume ? "the checkpoint in " + d.path +
                               " cannot be resumed: its MANIFEST is damaged ("
                         : d.path + " holds a damaged MANIFEST (";
      BOOST_CHECK_MESSAGE(p.output().find(said) != std::string::npos &&
                              p.output().find("listening") == std::string::npos,
                          p.output());
    }
  std::ifstream in{file};
  std::string kept;
  std::getline(in, kept);
  BOOST_CHECK_EQUAL(kept, "the only copy");
}

BOOST_AUTO_TEST_CASE(a_scheduler_of_another_mode_than_its_checkpoint_says_so) {
  // The servers refused the mode, and the scheduler waited for them for
  // ever (its workers timed out declaring).
  temp_dir d;
  checkpoint_manifest m;
  m.generation = 1;
  m.mode = "sync";
  m.optimizer = "sum@server";
  BOOST_REQUIRE(!write_checked_file(d.path + "/MANIFEST", encode(m)));
  child_process p{node_args({"--role=scheduler", "--scheduler-port=0",
                             "--checkpoint.dir=" + d.path, "--resume",
                             "--server.mode=async"})};
  auto rc = p.wait_exit(20s);
  BOOST_REQUIRE_MESSAGE(rc, p.output());
  BOOST_CHECK_MESSAGE(
      *rc == 2 &&
          p.output().find("the checkpoint in " + d.path +
                          " was written with --server.mode=sync, and this"
                          " job runs --server.mode=async: use the same"
                          " flags to resume") != std::string::npos,
      p.output());
  // A file the manifest names, torn: said before "listening" (it came
  // after), exit 1 as every torn checkpoint.
  m.files = {checkpoint_file_name(1, 0)};
  BOOST_REQUIRE(!write_checked_file(d.path + "/MANIFEST", encode(m)));
  std::ofstream{d.path + "/" + m.files[0]} << "torn";
  child_process torn{node_args({"--role=scheduler", "--scheduler-port=0",
                                "--checkpoint.dir=" + d.path, "--resume"})};
  rc = torn.wait_exit(20s);
  BOOST_REQUIRE_MESSAGE(rc, torn.output());
  BOOST_CHECK_MESSAGE(
      *rc == 1 &&
          torn.output().find(m.files[0] + ": too short to be a troupe"
                                          " checkpoint") != std::string::npos &&
          torn.output().find("listening") == std::string::npos,
      torn.output());
}

BOOST_AUTO_TEST_CASE(a_folder_that_cannot_be_written_is_refused_at_start,
                     *boost::unit_test::precondition(can_mount)) {
  // Every checkpoint failed, in the servers' logs alone, and the job ended
  // with exit 0.
  small_disk ro{MS_RDONLY};
  for (auto role : {"--role=scheduler", "--role=server"}) {
    child_process p{node_args({role, "--scheduler-port=1", "--port=0",
                               "--checkpoint.dir=" + ro.path})};
    auto rc = p.wait_exit(20s);
    BOOST_REQUIRE_MESSAGE(rc, p.output());
    BOOST_CHECK_MESSAGE(*rc == 2 &&
                            p.output().find("--checkpoint.dir: cannot"
                                            " write in " +
                                            ro.path +
                                            ": Read-only file"
                                            " system") != std::string::npos,
                        p.output());
  }
}

BOOST_AUTO_TEST_CASE(a_final_checkpoint_that_fails_fails_the_job,
                     *boost::unit_test::precondition(can_mount)) {
  // A disk too small for one checkpoint (3 x 40000 floats a server): the
  // job ended 0 with its weights nowhere. (The removal of a failed
  // generation's whole files is checkpoint_messages_test's.)
  small_disk full;
  std::vector<std::string> flags = {"--checkpoint.dir=" + full.path,
                                    "--checkpoint.every-ms=0"};
  scheduler_process s{1, 1, flags};
  flags.insert(flags.end(), {"--worker.task=counter", "--optimizer.name=sum",
                             "--worker.steps=30", "--worker.keys=3",
                             "--worker.key-floats=40000"});
  auto agent = start_agent(s, 1, 1, flags);
  auto rc = agent->wait_exit(120s);
  BOOST_REQUIRE_MESSAGE(rc, agent->output());
  BOOST_CHECK_EQUAL(*rc, 1);
  BOOST_CHECK_MESSAGE(
      agent->output().find("*** agent: the job's final checkpoint was not"
                           " written (") != std::string::npos &&
          agent->output().find("No space left on device") != std::string::npos,
      agent->output());
  BOOST_CHECK_MESSAGE(s.proc->wait_for_line("checkpoint 1 failed (", 20s),
                      s.proc->output());
  BOOST_CHECK_EQUAL(full.files(), 0u); // the torn .tmp went too
}

BOOST_AUTO_TEST_SUITE_END()

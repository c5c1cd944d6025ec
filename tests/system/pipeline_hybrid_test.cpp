// Hybrid pipelines: 2 replicas x 3 stages (6 troupe-node processes under
// one agent) keep each stage's weights in sync through 2 shard servers. In
// sync mode that is 2-worker data-parallel training on the same global
// batches: the servers' final checkpoints of both jobs agree within 1e-5
// relative. async and ssp runs train to the end too, and so does one
// replica when the other lacks a stage (whose two others end).
#define BOOST_TEST_MODULE pipeline_hybrid_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "messages/checkpoint.hpp"
#include "messages/errors.hpp"
#include "tests/system/nodes.hpp"
#include "tests/system/scheduler_client.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using namespace troupe::test;
namespace fs = std::filesystem;

namespace {

/// A small IDX data set of `n` 28 x 28 images (split `split`) with pixels
/// and labels from a fixed sequence: 1280 training samples are 20
/// mini-batches of 32 for each of 2 replicas.
void write_split(const fs::path& dir, const std::string& split, uint32_t n) {
  uint32_t x = 12345;
  auto next = [&x] {
    x = x * 1103515245u + 12345u;
    return x >> 16;
  };
  std::vector<uint8_t> pixels(size_t{n} * 784), labels(n);
  for (auto& p : pixels)
    p = uint8_t(next() & 0xff);
  for (auto& l : labels)
    l = uint8_t(next() % 10);
  auto put = [&dir](const std::string& name, const std::vector<uint8_t>& b) {
    std::ofstream f{dir / name, std::ios::binary};
    f.write(reinterpret_cast<const char*>(b.data()),
            static_cast<std::streamsize>(b.size()));
  };
  put(split + "-images-idx3-ubyte", idx_bytes(0x803, {n, 28, 28}, pixels));
  put(split + "-labels-idx1-ubyte", idx_bytes(0x801, {n}, labels));
}

/// What both jobs share: 2 servers in `mode`, plain SGD on the servers,
/// slices of 1000 floats, a checkpoint when the last worker leaves, one
/// epoch of the small data set.
std::vector<std::string> shared_flags(const std::string& mode,
                                      const fs::path& data,
                                      const fs::path& ckpt) {
  return {"--server.mode=" + mode,
          "--optimizer.name=sgd",
          "--optimizer.lr=0.1",
          "--optimizer.lr-decay-steps=0",
          "--cluster.slice-floats=1000",
          "--checkpoint.dir=" + ckpt.string(),
          "--checkpoint.every-ms=0",
          "--train.model=mlp:784-64-48-32-10",
          "--train.batch=32",
          "--train.epochs=1",
          "--train.eval-samples=200",
          "--train.data-dir=" + data.string()};
}

/// Runs a job of `workers` worker processes and 2 servers under one agent
/// with `flags`; returns the servers' final checkpoint, slice by slice
/// (and the scheduler's output in `log`, the agent's in `agent_log`, if
/// given).
std::map<slice_id, std::vector<float>>
run_job(uint32_t workers, std::vector<std::string> flags, const fs::path& ckpt,
        std::string* log = nullptr, std::string* agent_log = nullptr) {
  scheduler_process s{2, workers, flags};
  auto agent = start_agent(s, 2, workers, flags);
  auto rc = agent->wait_exit(std::chrono::seconds{200});
  BOOST_REQUIRE_MESSAGE(rc && *rc == 0, "agent: " << agent->output());
  // The last worker's departure is checkpointed: wait for its manifest.
  BOOST_REQUIRE_MESSAGE(s.proc->wait_for_line("\"kind\":\"checkpoint\"",
                                              std::chrono::seconds{30}),
                        s.proc->output());
  s.proc->signal(SIGTERM);
  s.proc->wait_exit(std::chrono::seconds{10});
  if (log != nullptr)
    *log = s.proc->output();
  if (agent_log != nullptr)
    *agent_log = agent->output();
  auto m = read_manifest(ckpt.string());
  BOOST_REQUIRE_MESSAGE(m, (m ? "" : describe(m.error())) << "\n"
                                                          << agent->output());
  std::map<slice_id, std::vector<float>> out;
  for (auto& name : m->files) {
    auto x = read_checkpoint((ckpt / name).string());
    BOOST_REQUIRE(x);
    for (auto& st : x->stores)
      for (auto& sl : st.slices)
        if (sl.ready)
          out[sl.id] = sl.values;
  }
  BOOST_TEST_MESSAGE(agent->output());
  return out;
}

std::vector<std::string> stage_flags(const std::string& schedule) {
  return {"--worker.task=stage",
          "--pipeline.stages=3",
          "--pipeline.replicas=2",
          "--pipeline.micro-batches=4",
          "--pipeline.schedule=" + schedule,
          "--server.atomic-pushes=on"};
}

std::vector<std::string> operator+(std::vector<std::string> a,
                                   const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// A sync job of 2 replicas of 3 stages on the small data set in which
/// stage `fault` (--pipeline.fault-kill) kills its process and its agent
/// gives it up (--agent.max-restarts=0), with `extra` flags, the metrics
/// in marks/m.jsonl; its agent has ended, not 0. The scheduler stays until
/// the end of the test.
struct given_up_job {
  temp_dir data, ck, marks;
  std::unique_ptr<scheduler_process> s;
  std::string out; ///< the agent's output

  given_up_job(const std::string& fault, std::vector<std::string> extra) {
    write_split(data.path, "train", 1280);
    write_split(data.path, "t10k", 200);
    auto flags =
        shared_flags("sync", data.path, ck.path) + stage_flags("1f1b") +
        std::vector<std::string>{"--pipeline.fault-kill=" + fault,
                                 "--pipeline.checkpoint-dir=" + marks.path,
                                 "--train.metrics-file=" + marks.path +
                                     "/m.jsonl",
                                 "--agent.max-restarts=0"} +
        extra;
    s = std::make_unique<scheduler_process>(2, 6, flags);
    auto agent = start_agent(*s, 2, 6, flags);
    auto rc = agent->wait_exit(std::chrono::seconds{200});
    BOOST_REQUIRE_MESSAGE(rc, "the agent did not end: " << agent->output());
    BOOST_TEST_MESSAGE("the agent's output:\n" << agent->output());
    BOOST_CHECK_NE(*rc, 0); // a child given up
    out = agent->output();
  }
  ~given_up_job() {
    s->proc->signal(SIGTERM);
    s->proc->wait_exit(std::chrono::seconds{10});
  }
};

} // namespace

BOOST_AUTO_TEST_CASE(two_replicas_of_three_stages_train_as_two_workers) {
  temp_dir data, dp, hy;
  write_split(data.path, "train", 1280);
  write_split(data.path, "t10k", 200);
  auto plain = run_job(2,
                       shared_flags("sync", data.path, dp.path) +
                           std::vector<std::string>{"--worker.task=train"},
                       dp.path);
  std::string out;
  auto hybrid =
      run_job(6, shared_flags("sync", data.path, hy.path) + stage_flags("1f1b"),
              hy.path, nullptr, &out);
  // Replica 0 says the final line; replica 1 holds its own until it sees
  // replica 0's last stage finished (the view's finished), and says none.
  BOOST_CHECK_MESSAGE(occurrences(out, "final test accuracy: ") == 1, out);
  // Stage 1 of one replica kills its process in the middle of mini-batch
  // 10: its replica drops that mini-batch, reloads from the servers and
  // goes on; the other replica waits for it in the servers' sync round.
  temp_dir killed, marks;
  auto with_kill = run_job(
      6,
      shared_flags("sync", data.path, killed.path) + stage_flags("1f1b") +
          std::vector<std::string>{"--pipeline.fault-kill=1@10",
                                   "--pipeline.checkpoint-dir=" + marks.path},
      killed.path);
  BOOST_CHECK_MESSAGE(with_kill == hybrid,
                      "a stage's kill changed the weights");
  // Replica 0's stage 2 leaves its lead's first sync unanswered, as a cut
  // connection loses an answer: the lead asks again within a second. It
  // waited the whole request timeout before (10 s), while replica 1 waited
  // for it in the servers' rounds, whose pulls timed out at that.
  temp_dir lost;
  std::string lost_out;
  auto with_lost =
      run_job(6,
              shared_flags("sync", data.path, lost.path) + stage_flags("1f1b") +
                  std::vector<std::string>{"--pipeline.fault-lose-sync=2/0"},
              lost.path, nullptr, &lost_out);
  BOOST_CHECK_MESSAGE(occurrences(lost_out, "fault injection: leaves the"
                                            " lead's sync") == 1 &&
                          occurrences(lost_out, " did not answer") == 0 &&
                          occurrences(lost_out, "stage failed") == 0,
                      lost_out);
  BOOST_CHECK_MESSAGE(with_lost == hybrid,
                      "a lost answer to a sync changed the weights");
  BOOST_REQUIRE(!plain.empty());
  BOOST_REQUIRE_EQUAL(plain.size(), hybrid.size());
  // ||a - b|| / ||a|| per array, as pipeline_exactness_test measures.
  std::map<uint64_t, std::pair<double, double>> by_key; // diff², norm²
  for (auto& [id, a] : plain) {
    auto i = hybrid.find(id);
    BOOST_REQUIRE_MESSAGE(i != hybrid.end(),
                          "slice " << id.key << "/" << id.index << " missing");
    BOOST_REQUIRE_EQUAL(a.size(), i->second.size());
    auto& [d, n] = by_key[id.key];
    for (size_t k = 0; k < a.size(); ++k) {
      double x = a[k], y = i->second[k];
      d += (x - y) * (x - y);
      n += x * x;
    }
  }
  double worst = 0;
  for (auto& [key, dn] : by_key)
    worst = std::max(worst, std::sqrt(dn.first / std::max(dn.second, 1e-30)));
  BOOST_TEST_MESSAGE("hybrid against data-parallel: worst relative "
                     << worst << " over " << by_key.size() << " arrays");
  BOOST_CHECK_MESSAGE(worst <= 1e-5, "worst relative difference " << worst);
}

// A stage that dies in its push of a committed mini-batch, after the
// first server took its part and the other stages pushed theirs: without
// more, the servers' round completes without it, and the mini-batch stays
// on the other stages' keys alone. The scheduler takes the replica's
// stages that pushed it out too and cuts all three at the least of their
// cuts, so the mini-batch is on every stage's keys or on none. One replica, so
// that nothing trains while it restarts: whichever stage dies, the weights must
// come out the same, bit for bit. (Were the mini-batch kept on the other
// stages alone, stage 1's death and stage 2's would leave different keys
// without it.)
BOOST_AUTO_TEST_CASE(a_stage_dead_in_its_push_leaves_the_mini_batch_nowhere) {
  temp_dir data;
  write_split(data.path, "train", 1280);
  write_split(data.path, "t10k", 200);
  std::map<uint32_t, std::map<slice_id, std::vector<float>>> by_stage;
  for (uint32_t stage : {1u, 2u}) {
    temp_dir ck, marks;
    std::string log;
    auto f = shared_flags("sync", data.path, ck.path) +
             std::vector<std::string>{
                 "--worker.task=stage",      "--pipeline.stages=3",
                 "--pipeline.replicas=1",    "--pipeline.micro-batches=4",
                 "--pipeline.schedule=1f1b", "--server.atomic-pushes=on"};
    f.push_back("--pipeline.fault-kill=" + std::to_string(stage) + "@10:push");
    f.push_back("--pipeline.checkpoint-dir=" + marks.path);
    by_stage[stage] = run_job(3, f, ck.path, &log);
    BOOST_CHECK_MESSAGE(log.find("leave and are cut together") !=
                            std::string::npos,
                        "stage " << stage << ": no replica cut\n"
                                 << log);
    // Every stage is cut at one clock, at most the mini-batch that died.
    std::set<uint64_t> clocks;
    for (uint32_t rank = 0; rank < 3; ++rank) {
      auto at = log.find("\"kind\":\"cut\",\"role\":\"worker\",\"rank\":" +
                         std::to_string(rank) + ",");
      BOOST_REQUIRE_MESSAGE(at != std::string::npos,
                            "stage " << stage << ": no cut of worker " << rank
                                     << "\n"
                                     << log);
      auto c = log.find("\"clock\":", at);
      BOOST_REQUIRE(c != std::string::npos && c < log.find('\n', at));
      clocks.insert(std::stoull(log.substr(c + 8)));
    }
    BOOST_CHECK_MESSAGE(clocks.size() == 1 && *clocks.begin() <= 10,
                        "stage " << stage << ": the stages' cuts differ or"
                                 << " pass the mini-batch\n"
                                 << log);
  }
  BOOST_REQUIRE(!by_stage[1].empty());
  BOOST_CHECK_MESSAGE(by_stage[1] == by_stage[2],
                      "the weights depend on which stage died in its push");
}

BOOST_AUTO_TEST_CASE(async_and_ssp_hybrids_train_to_the_end) {
  temp_dir data;
  write_split(data.path, "train", 1280);
  write_split(data.path, "t10k", 200);
  for (auto [mode, schedule] :
       {std::pair{"async", "zb-h1"}, std::pair{"ssp:1", "gpipe"}}) {
    temp_dir ck;
    auto got = run_job(
        6, shared_flags(mode, data.path, ck.path) + stage_flags(schedule),
        ck.path);
    BOOST_CHECK_MESSAGE(!got.empty(), mode);
    for (auto& [id, v] : got)
      for (auto x : v)
        BOOST_REQUIRE_MESSAGE(std::isfinite(x), mode << ": a weight is " << x);
  }
}

BOOST_AUTO_TEST_CASE(a_replica_short_of_a_stage_ends_and_the_other_trains_on) {
  // Five of the six stage processes: replica 1 lacks its stage 2. Its two
  // stages end after --pipeline.stage-wait-ms, each in one line that
  // points at the servers' checkpoint (hybrid stages keep none), with exit
  // 5; replica 0 trains to the end, and the agent ends non-zero.
  temp_dir data;
  write_split(data.path, "train", 1280);
  write_split(data.path, "t10k", 200);
  temp_dir ck;
  auto flags = shared_flags("sync", data.path, ck.path) + stage_flags("1f1b") +
               std::vector<std::string>{"--pipeline.stage-wait-ms=2000"};
  scheduler_process s{2, 6, flags};
  auto agent = start_agent(
      s, 2, 5, flags + std::vector<std::string>{"--cluster.workers=6"});
  auto rc = agent->wait_exit(std::chrono::seconds{200});
  BOOST_REQUIRE_MESSAGE(rc, "the agent did not end: " << agent->output());
  BOOST_TEST_MESSAGE("the agent's output:\n" << agent->output());
  BOOST_CHECK_NE(*rc, 0);
  auto& out = agent->output();
  auto count = [&out](const std::string& line) {
    return occurrences(out, line);
  };
  BOOST_CHECK_MESSAGE(count("stage 2 of replica 1 not in the cluster for 2000"
                            " ms") == 2 &&
                          count("start the job again with --resume to go on"
                                " from the servers' last checkpoint") == 2 &&
                          count(" could not go on: ") == 2,
                      out);
  BOOST_CHECK_MESSAGE(out.find("final test accuracy: ") != std::string::npos,
                      "replica 0 did not train to the end: " << out);
  // To the scheduler, replica 1's stages (workers 3 and 4) ended saying
  // why (cut as crashed stages are), and nothing crashed.
  auto evs = scheduler_client{s.port}.events();
  std::set<uint32_t> ended;
  for (auto& e : evs)
    if (e.kind == "ended" && e.about == role::worker &&
        e.detail.rfind("stuck: member_missing: ", 0) == 0)
      ended.insert(e.rank);
  BOOST_CHECK_MESSAGE((ended == std::set<uint32_t>{3, 4}), dump(evs));
  BOOST_CHECK_MESSAGE(
      std::none_of(evs.begin(), evs.end(),
                   [](const event_record& e) { return e.kind == "crashed"; }),
      dump(evs));
  s.proc->signal(SIGTERM);
  s.proc->wait_exit(std::chrono::seconds{10});
}

BOOST_AUTO_TEST_CASE(
    a_stage_given_up_ends_its_replica_at_once_and_the_other_trains_on) {
  // Stage 2 of one replica kills its process in mini-batch 8 and its
  // agent gives it up. In sync mode the servers' rounds wait for every
  // live stage, so before, the other replica stood still for the whole
  // --pipeline.stage-wait-ms (here 10 minutes, past the test's bound)
  // until that replica's two other stages ended. Now the view names the
  // rank given up: they end at once, and the other replica trains on.
  // It is replica 0's stage: replica 1 takes over the reports.
  given_up_job job{"2/0@8", {"--pipeline.stage-wait-ms=600000"}};
  auto& out = job.out;
  BOOST_CHECK_MESSAGE(occurrences(out, " was given up by its agent (no"
                                       " restart will come)") == 2 &&
                          occurrences(out, " could not go on: ") == 2,
                      out);
  // Once, by the replica still going: replica 0 reports while it goes,
  // the next one once it ended (before, a job whose replica 0 ended
  // trained to the end without a word of its accuracy).
  BOOST_CHECK_MESSAGE(occurrences(out, "final test accuracy: ") == 1 &&
                          occurrences(out, "epoch 1/1: ") == 1,
                      "the other replica did not train to the end and say"
                      " so once: "
                          << out);
  // Its metrics file too, opened when it took over: the one epoch's line.
  std::ifstream m{job.marks.path + "/m.jsonl"};
  std::string line, last;
  size_t lines = 0;
  while (std::getline(m, line))
    last = line, ++lines;
  BOOST_CHECK_MESSAGE(lines == 1 &&
                          last.find("\"mini_batch\":20") != std::string::npos,
                      lines << " lines, the last: " << last);
  // Replica 0's stage 2 was given up, its stages 0 and 1 ended.
  auto evs = scheduler_client{job.s->port}.events();
  std::set<uint32_t> gone, ended;
  for (auto& e : evs) {
    if (e.kind == "gave-up" && e.about == role::worker)
      gone.insert(e.rank);
    if (e.kind == "ended" && e.about == role::worker &&
        e.detail.rfind("stuck: member_missing: ", 0) == 0)
      ended.insert(e.rank);
  }
  BOOST_CHECK_MESSAGE((gone == std::set<uint32_t>{2}), dump(evs));
  BOOST_CHECK_MESSAGE((ended == std::set<uint32_t>{0, 1}), dump(evs));
}

BOOST_AUTO_TEST_CASE(
    a_replica_given_up_in_the_final_evaluation_leaves_the_line) {
  // Replica 0's last stage kills its process in the evaluation after the
  // last mini-batch, and its agent gives it up. Replica 1 had counted its
  // own final evaluation by then, while its view still showed replica 0
  // going: at 2b8c60c it ended without a word, and the job had no final
  // accuracy. Now it holds the line until replica 0 has left, and says it.
  given_up_job job{"2/0@20:eval", {}};
  auto& out = job.out;
  BOOST_CHECK_MESSAGE(occurrences(out,
                                  "killing its process in the evaluation after"
                                  " mini-batch 20") == 1,
                      out);
  BOOST_CHECK_MESSAGE(occurrences(out, "final test accuracy: ") == 1 &&
                          occurrences(out, "epoch 1/1: ") == 1,
                      "the final line was not said once: " << out);
}

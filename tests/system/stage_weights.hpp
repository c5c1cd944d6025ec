// The pipeline job of stage processes (--cluster.servers=0) that tests
// run, and the weights it ends with, read from its stages' final
// checkpoints, and their comparison with another run's: a fault the
// pipeline survived must leave them bit for bit as a run without it did.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "actors/pipeline/stage_driver_internal.hpp"
#include "messages/checkpoint.hpp"

namespace troupe::test {

/// The flags of a 3-stage job of `steps` mini-batches of
/// mlp:784-64-48-32-10 with SGD at `lr`, checkpoints into `dir` every 20,
/// then `extra`.
inline std::vector<std::string>
stage_job_flags(const std::string& dir, uint64_t steps, const std::string& lr,
                const std::vector<std::string>& extra) {
  std::vector<std::string> flags{"--worker.task=stage",
                                 "--cluster.servers=0",
                                 "--pipeline.stages=3",
                                 "--pipeline.schedule=1f1b",
                                 "--pipeline.micro-batches=4",
                                 "--pipeline.steps=" + std::to_string(steps),
                                 "--pipeline.checkpoint-every=20",
                                 "--pipeline.checkpoint-dir=" + dir,
                                 "--train.model=mlp:784-64-48-32-10",
                                 "--train.batch=32",
                                 "--train.eval-samples=1000",
                                 "--optimizer.name=sgd",
                                 "--optimizer.lr=" + lr};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

/// Every one of `stages` stages' weights at the end (mini-batch `steps`)
/// of a run into checkpoint folder `dir`.
inline std::vector<std::vector<named_array>>
final_weights(const std::string& dir, uint32_t stages, uint64_t steps) {
  std::vector<std::vector<named_array>> out;
  for (uint32_t s = 0; s < stages; ++s) {
    auto bytes = read_checked_file(pipe::checkpoint_path(dir, s, steps));
    BOOST_REQUIRE_MESSAGE(bytes, "stage " << s << ": no final checkpoint");
    stage_checkpoint x;
    BOOST_REQUIRE(!decode(*bytes, x));
    BOOST_REQUIRE_EQUAL(x.step, steps);
    out.push_back(std::move(x.arrays));
  }
  return out;
}

/// The final weights of the runs into `a` and `b` are equal, array by
/// array; `what` names what `b` had and `a` had not.
inline void check_same_weights(const std::string& a, const std::string& b,
                               const char* what, uint32_t stages,
                               uint64_t steps) {
  auto wa = final_weights(a, stages, steps);
  auto wb = final_weights(b, stages, steps);
  for (uint32_t s = 0; s < stages; ++s) {
    BOOST_REQUIRE_EQUAL(wa[s].size(), wb[s].size());
    for (size_t i = 0; i < wa[s].size(); ++i) {
      BOOST_CHECK_EQUAL(wa[s][i].key, wb[s][i].key);
      BOOST_CHECK_MESSAGE(wa[s][i].values == wb[s][i].values,
                          "stage " << s << ", array " << wa[s][i].key
                                   << " differs from the run without " << what);
    }
  }
}

} // namespace troupe::test

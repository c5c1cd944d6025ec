// Whether a file or folder named by a flag can be written: what trainers
// and stages check before they join (actors/base/writable.hpp).
#define BOOST_TEST_MODULE writable
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include "actors/base/writable.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using namespace troupe::test;

BOOST_AUTO_TEST_CASE(a_metrics_path_that_cannot_be_written_is_said) {
  // What every trainer and stage checks before it joins
  // (--train.metrics-file).
  temp_dir d;
  BOOST_CHECK_EQUAL(unwritable(""), "");
  BOOST_CHECK_EQUAL(unwritable(d.path + "/m.jsonl"), ""); // made on open
  { std::ofstream{d.path + "/old.jsonl"} << "{}\n"; }
  BOOST_CHECK_EQUAL(unwritable(d.path + "/old.jsonl"), ""); // appended to
  BOOST_CHECK_EQUAL(unwritable("/nonexistent/m.jsonl"),
                    "cannot write /nonexistent/m.jsonl: No such file or"
                    " directory");
  BOOST_CHECK_EQUAL(unwritable(d.path),
                    "cannot write " + d.path + ": a folder");
  // ... and --pipeline.checkpoint-dir, made if missing.
  BOOST_CHECK_EQUAL(unwritable_folder(d.path + "/ck/a"), "");
  BOOST_CHECK(std::filesystem::is_directory(d.path + "/ck/a"));
  BOOST_CHECK_EQUAL(unwritable_folder(d.path + "/old.jsonl"),
                    "cannot make " + d.path + "/old.jsonl: Not a directory");
  BOOST_CHECK_EQUAL(unwritable_folder("/proc/nope"),
                    "cannot make /proc/nope: No such file or directory");
}

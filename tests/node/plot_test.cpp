// troupe-plot draws a finished job's metrics.jsonl as an HTML page: one
// SVG chart per measure, a line through the points, broken where a value
// is null; a file that is not metrics gets one error naming its line.
#define BOOST_TEST_MODULE plot_tests
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/system/child_process.hpp"
#include "tests/test_support.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(plot_tests)

BOOST_AUTO_TEST_CASE(the_curves_of_a_job_are_drawn_with_gaps_for_nulls) {
  temp_dir dir;
  std::ofstream{dir / "metrics.jsonl"}
      << "{\"epoch\":1,\"train_loss\":0.9,\"test_accuracy\":0.7,"
         "\"samples_per_s\":1000}\n"
      << "{\"epoch\":2,\"train_loss\":null,\"test_accuracy\":0.8,"
         "\"samples_per_s\":null}\n"
      << "{\"epoch\":3,\"train_loss\":0.5,\"test_accuracy\":0.85,"
         "\"samples_per_s\":1200}\n"
      << "{\"epoch\":4,\"train_loss\":0.4,\"test_accuracy\":0.87,"
         "\"samples_per_s\":1300}\n";
  child_process plot{{TROUPE_PLOT_BIN, dir / "metrics.jsonl"}};
  auto rc = plot.wait_exit(30s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_EQUAL(*rc, 0);
  BOOST_CHECK_MESSAGE(plot.output().find("4 points") != std::string::npos,
                      plot.output());
  auto html = read_file(dir / "curves.html"); // beside the metrics
  BOOST_CHECK_EQUAL(occurrences(html, "<svg"), 3u);
  // Accuracy: one line through 4 points; loss and rate: broken at epoch
  // 2, a point alone and a line of two.
  BOOST_CHECK_EQUAL(occurrences(html, "<polyline"), 1u + 2u + 2u);
  BOOST_CHECK_EQUAL(occurrences(html, "<circle"), 4u + 3u + 3u);
  BOOST_CHECK(html.find("test accuracy") != std::string::npos);
  BOOST_CHECK(html.find("0.8700") != std::string::npos); // the top label
}

BOOST_AUTO_TEST_CASE(a_file_that_is_not_metrics_gets_one_error) {
  temp_dir dir;
  std::ofstream{dir / "bad.jsonl"} << "{\"epoch\":1,\"train_loss\":0.9}\n"
                                   << "{\"epoch\":2,\"train_loss\":-nan}\n";
  child_process bad{{TROUPE_PLOT_BIN, dir / "bad.jsonl", dir / "out.html"}};
  auto rc = bad.wait_exit(30s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_EQUAL(*rc, 1);
  BOOST_CHECK_MESSAGE(bad.output().find("bad.jsonl:2: not a metrics line") !=
                          std::string::npos,
                      bad.output());
  child_process missing{{TROUPE_PLOT_BIN, dir / "none.jsonl"}};
  rc = missing.wait_exit(30s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_EQUAL(*rc, 1);
  BOOST_CHECK(missing.output().find("cannot read") != std::string::npos);
  std::ofstream{dir / "empty.jsonl"};
  child_process empty{{TROUPE_PLOT_BIN, dir / "empty.jsonl"}};
  rc = empty.wait_exit(30s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_EQUAL(*rc, 1);
  BOOST_CHECK(empty.output().find("no metrics lines") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_metrics_file_is_never_drawn_over) {
  // At 2b8c60c `troupe-plot m.jsonl m.jsonl` replaced the metrics with the
  // page; a folder for the metrics said "no metrics lines".
  temp_dir dir;
  auto m = dir / "m.jsonl";
  std::string line = "{\"epoch\":1,\"train_loss\":0.9,\"test_accuracy\":0.7,"
                     "\"samples_per_s\":1000}\n";
  std::ofstream{m} << line;
  for (auto out : {m, dir.path + "/./m.jsonl"}) {
    child_process same{{TROUPE_PLOT_BIN, m, out}};
    auto rc = same.wait_exit(30s);
    BOOST_REQUIRE(rc);
    BOOST_CHECK_EQUAL(*rc, 2);
    BOOST_CHECK_MESSAGE(same.output().find("is the metrics file itself: not"
                                           " replaced") != std::string::npos,
                        same.output());
  }
  BOOST_CHECK_EQUAL(read_file(m), line);
  child_process folder{{TROUPE_PLOT_BIN, dir.path}};
  auto rc = folder.wait_exit(30s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_EQUAL(*rc, 2);
  BOOST_CHECK_MESSAGE(folder.output().find(" is a folder: name its metrics"
                                           " file") != std::string::npos,
                      folder.output());
}

BOOST_AUTO_TEST_CASE(two_jobs_in_one_file_are_said_and_a_path_stays_text) {
  // At 2b8c60c lines of two jobs appended to one file were drawn as one
  // zig-zag without a word, and a path with "<b>" was markup in the page.
  temp_dir dir;
  std::filesystem::create_directory(dir / "<b>");
  auto m = dir / "<b>/m.jsonl";
  {
    std::ofstream f{m};
    for (int epoch : {1, 2, 1})
      f << "{\"epoch\":" << epoch << ",\"train_loss\":0.5}\n";
  }
  child_process plot{{TROUPE_PLOT_BIN, m}};
  auto rc = plot.wait_exit(30s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_EQUAL(*rc, 0);
  BOOST_CHECK_MESSAGE(plot.output().find(":3: epoch 1 after epoch 2: more than"
                                         " one job's lines in one file?") !=
                          std::string::npos,
                      plot.output());
  auto html = read_file(dir / "<b>/curves.html");
  BOOST_CHECK(html.find("/&lt;b&gt;/m.jsonl</h1>") != std::string::npos);
  BOOST_CHECK(html.find("<b>") == std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

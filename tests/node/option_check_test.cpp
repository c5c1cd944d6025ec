// Strict options: an unknown INI section or key, a value of the wrong type
// and an unknown flag are each one error naming the file, line and key,
// with "did you mean" where a known name is close. CAF 0.17 alone would
// run on defaults.
#define BOOST_TEST_MODULE option_check_tests
#include <boost/test/unit_test.hpp>

#include <fstream>

#include <caf/io/middleman.hpp>

#include "actors/node/node_config.hpp"
#include "actors/node/option_check.hpp"
#include "messages/errors.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using troupe::test::temp_dir;

namespace {

/// The error check_options gives for an INI file holding `text` (empty
/// string: none).
std::string ini_error(const std::string& text) {
  temp_dir dir;
  auto path = dir / "t.ini";
  std::ofstream{path} << text;
  node_config cfg;
  cfg.load<caf::io::middleman>();
  std::vector<std::string> args{"--config-file=" + path};
  auto err = cfg.check_options(args);
  if (!err)
    return {};
  auto out = describe(err);
  // The file's name varies: keep what follows it.
  auto at = out.find(path);
  return at == std::string::npos
             ? out
             : out.substr(0, at) + "FILE" + out.substr(at + path.size());
}

std::string flag_error(std::vector<std::string> args) {
  node_config cfg;
  cfg.load<caf::io::middleman>();
  auto err = cfg.check_options(args);
  return err ? describe(err) : std::string{};
}

} // namespace

BOOST_AUTO_TEST_SUITE(option_check_tests)

BOOST_AUTO_TEST_CASE(a_good_file_passes_with_comments_and_durations) {
  BOOST_CHECK_EQUAL(ini_error("; a comment\n"
                              "[global]\n"
                              "log-level=\"debug\" ; trailing; comment\n"
                              "[server]\n"
                              "mode=\"ssp:2\"\n"
                              "[optimizer]\n"
                              "lr=0.5\n"
                              "[middleman]\n"
                              "heartbeat-interval=250ms\n"
                              "[kv]\n"
                              "request-timeout-ms=2000\n"),
                    "");
}

BOOST_AUTO_TEST_CASE(the_shipped_config_passes) {
  node_config cfg;
  cfg.load<caf::io::middleman>();
  std::vector<std::string> args{"--config-file=" TROUPE_SOURCE_DIR
                                "/deploy/local.ini"};
  auto err = cfg.check_options(args);
  BOOST_CHECK_MESSAGE(!err, describe(err));
}

BOOST_AUTO_TEST_CASE(an_unknown_section_or_key_names_the_line_and_a_match) {
  BOOST_CHECK_EQUAL(ini_error("[sever]\nmode=\"async\"\n"),
                    "invalid_config: FILE:1: unknown section [sever] (did you "
                    "mean [server]?)");
  BOOST_CHECK_EQUAL(ini_error("[server]\n\nmdoe=\"async\"\n"),
                    "invalid_config: FILE:3: unknown key 'mdoe' in [server] "
                    "(did you mean 'mode'?)");
  // Nothing close: no guess.
  BOOST_CHECK_EQUAL(ini_error("[kv]\nflux-capacitor=1\n"),
                    "invalid_config: FILE:2: unknown key 'flux-capacitor' in "
                    "[kv]");
  // Before any section: the global group.
  BOOST_CHECK_EQUAL(ini_error("x=1\n"),
                    "invalid_config: FILE:1: unknown key 'x' in [global]");
  BOOST_CHECK_EQUAL(ini_error("log-level=\"debug\"\n[kv]\n"), "");
  BOOST_CHECK_EQUAL(ini_error("[kv]\njunk\n"),
                    "invalid_config: FILE:2: expected key=value or [section], "
                    "got junk");
}

BOOST_AUTO_TEST_CASE(a_value_of_the_wrong_type_names_the_key_and_the_type) {
  BOOST_CHECK_EQUAL(ini_error("[kv]\nrequest-timeout-ms=\"ten\"\n"),
                    "invalid_config: FILE:2: kv.request-timeout-ms takes a "
                    "whole number of 0 or more, got \"ten\"");
  BOOST_CHECK_EQUAL(ini_error("[kv]\nrequest-timeout-ms=-5\n"),
                    "invalid_config: FILE:2: kv.request-timeout-ms takes a "
                    "whole number of 0 or more, got -5");
  // CAF would keep the default lr for an integer.
  BOOST_CHECK_EQUAL(ini_error("[optimizer]\nlr=-5\n"),
                    "invalid_config: FILE:2: optimizer.lr takes a real number "
                    "(write 5.0, not 5), got -5");
  // CAF's atoms are words in single quotes: at fbf4dac "a value of type
  // atom".
  BOOST_CHECK_EQUAL(ini_error("[logger]\nverbosity=\"info\"\n"),
                    "invalid_config: FILE:2: logger.verbosity takes a word in"
                    " single quotes such as 'info', got \"info\"");
  BOOST_CHECK_EQUAL(ini_error("[logger]\nverbosity='info'\n"), "");
  BOOST_CHECK_EQUAL(ini_error("[server]\nmode=async\n"),
                    "invalid_config: FILE:2: strings are quoted in an INI "
                    "file: mode=\"async\"");
  // A bare word where a word is taken: single quotes (the hint said double
  // ones, which the next check refused).
  BOOST_CHECK_EQUAL(ini_error("[scheduler]\npolicy=stealing\n"),
                    "invalid_config: FILE:2: words are in single quotes in an"
                    " INI file: policy='stealing'");
}

BOOST_AUTO_TEST_CASE(a_key_given_twice_is_named_with_both_lines) {
  // CAF took the last, silently. Two sections of one name are fine.
  BOOST_CHECK_EQUAL(
      ini_error("[cluster]\nservers=2\n[kv]\n[cluster]\nservers=3\n"),
      "invalid_config: FILE:5: servers in [cluster] is given twice (line 2"
      " too): keep one");
  BOOST_CHECK_EQUAL(ini_error("[cluster]\nservers=2\n[cluster]\nworkers=3\n"),
                    "");
}

BOOST_AUTO_TEST_CASE(a_missing_config_file_is_an_error) {
  auto err = flag_error({"--config-file=/nonexistent/troupe.ini"});
  BOOST_CHECK_EQUAL(err, "invalid_config: cannot read the config file "
                         "/nonexistent/troupe.ini");
  // At fbf4dac a folder was read as an empty file, without a word.
  temp_dir dir;
  BOOST_CHECK_EQUAL(flag_error({"--config-file=" + dir.path}),
                    "invalid_config: the config file " + dir.path +
                        " is a folder: name an INI file");
}

BOOST_AUTO_TEST_CASE(windows_line_ends_a_bom_and_two_files_are_named) {
  // CAF's reader said "trailing_character" at column 10 of line 1, or
  // "unknown key 'scheduler-port' (did you mean 'scheduler-port'?)".
  BOOST_CHECK_EQUAL(ini_error("scheduler-port = 4300\n[cluster]\r\n"),
                    "invalid_config: FILE:2: Windows line ends (CR LF): save"
                    " it with LF alone (dos2unix)");
  BOOST_CHECK_EQUAL(ini_error("\xEF\xBB\xBFscheduler-port = 4300\n"),
                    "invalid_config: FILE: starts with a byte order mark"
                    " (UTF-8 BOM): save it without one");
  // CAF read the first file, and the check the last.
  temp_dir dir;
  std::ofstream{dir / "a.ini"} << "[cluster]\nvnodse = 64\n";
  std::ofstream{dir / "b.ini"} << "";
  BOOST_CHECK_EQUAL(flag_error({"--config-file=" + dir / "a.ini",
                                "--config-file=" + dir / "b.ini"}),
                    "invalid_config: --config-file given twice (" +
                        dir / "a.ini" + ", " + dir / "b.ini" +
                        "): one INI file a node");
}

BOOST_AUTO_TEST_CASE(a_binary_file_or_a_nested_config_file_is_named) {
  // A checkpoint named by mistake was echoed raw in the error.
  BOOST_CHECK_EQUAL(ini_error(std::string{"[cluster]\nservers=2\n\x01\x00"
                                          "\xff\x07junk",
                                          28}),
                    "invalid_config: FILE:3: holds a control byte (1): not an"
                    " INI text file");
  // Binary with a CR first read as Windows line ends.
  BOOST_CHECK_EQUAL(ini_error("a = 1\r\n\x02"),
                    "invalid_config: FILE:2: holds a control byte (2): not an"
                    " INI text file");
  // A 5000-byte key made a 5000-byte line.
  BOOST_CHECK_EQUAL(ini_error(std::string(5000, 'k') + " = 1\n"),
                    "invalid_config: FILE:1: unknown key '" +
                        std::string(100, 'k') +
                        "... (5000 bytes)' in [global]");
  BOOST_CHECK_EQUAL(flag_error({"--" + std::string(300, 'f') + "=1"}),
                    "invalid_config: unknown flag --" + std::string(100, 'f') +
                        "... (300 bytes); troupe-node --help lists them all");
  // CAF reads one file: the second was silently left unread.
  BOOST_CHECK_EQUAL(ini_error("config-file = \"/etc/more.ini\"\n"),
                    "invalid_config: FILE:1: config-file in an INI file is"
                    " not read: a node reads one INI file, the one"
                    " --config-file names");
}

/// What finish() says of `args` and an INI file holding `ini` (checked
/// and read as troupe-node does): "" if it takes them.
std::string finish_error(std::vector<std::string> args,
                         const std::string& ini = "") {
  temp_dir dir;
  std::ofstream{dir / "t.ini"} << ini;
  args.push_back("--config-file=" + dir / "t.ini");
  node_config cfg;
  cfg.load<caf::io::middleman>();
  auto err = cfg.check_options(args);
  if (!err)
    err = cfg.parse(std::move(args));
  if (!err)
    err = cfg.finish();
  return err ? describe(err) : std::string{};
}

BOOST_AUTO_TEST_CASE(an_option_that_does_nothing_with_the_rest_is_named) {
  // Each was taken and did nothing, without a word.
  temp_dir ck;
  for (auto every : {"--checkpoint.every-ms=500", "--checkpoint.fault-tear=2"})
    BOOST_CHECK_MESSAGE(
        finish_error({"--role=scheduler", every})
                .find(" does nothing without --checkpoint.dir") !=
            std::string::npos,
        finish_error({"--role=scheduler", every}));
  BOOST_CHECK_EQUAL(
      finish_error({"--role=scheduler"}, "[checkpoint]\nevery-ms = 500\n"),
      "invalid_config: --checkpoint.every-ms does nothing without"
      " --checkpoint.dir (the folder the cluster's checkpoints go to): give"
      " both, or neither");
  BOOST_CHECK_EQUAL(
      finish_error({"--role=scheduler", "--checkpoint.every-ms=500",
                    "--checkpoint.dir=" + ck.path}),
      "");
  const std::vector<std::string> pipelined = {
      "--role=worker", "--server.mode=async", "--worker.pipeline"};
  auto watched = pipelined;
  watched.push_back("--worker.watch-us=500");
  BOOST_CHECK_EQUAL(finish_error(watched),
                    "invalid_config: --worker.watch-us does nothing with"
                    " --worker.pipeline (a pipelined worker runs on a thread"
                    " of its own): drop one");
  BOOST_CHECK_EQUAL(finish_error(pipelined), "");
  // A server takes the workers' INI file as it is: it never watches.
  BOOST_CHECK_EQUAL(finish_error({"--role=server", "--server.mode=async"},
                                 "[worker]\npipeline = true\n"
                                 "watch-us = 500\n"),
                    "");
}

BOOST_AUTO_TEST_CASE(a_word_that_is_no_flag_is_an_error) {
  // At fbf4dac CAF ran on past these: `--role=worker foo` was a worker.
  BOOST_CHECK_EQUAL(flag_error({"--role=worker", "foo"}),
                    "invalid_config: troupe-node takes flags only"
                    " (--NAME=VALUE), got 'foo'");
  BOOST_CHECK_EQUAL(flag_error({"--role", "worker"}),
                    "invalid_config: --role needs a value: --role=VALUE");
  BOOST_CHECK_EQUAL(flag_error({"--role=worker", "--", "--role=server"}),
                    "invalid_config: unknown flag --: flags are --NAME or"
                    " --NAME=VALUE; troupe-node --help lists them all");
  BOOST_CHECK_EQUAL(flag_error({"-x"}),
                    "invalid_config: unknown flag -x: flags are --NAME or"
                    " --NAME=VALUE; troupe-node --help lists them all");
}

BOOST_AUTO_TEST_CASE(empty_strings_and_switches_read_as_meant) {
  // CAF 0.17 refuses --NAME= ("missing_argument") and --SWITCH=true
  // ("illegal_argument"): they are read as --NAME="" and --SWITCH.
  std::vector<std::string> args{"--train.metrics-file=", "--resume=true",
                                "--worker.overlap=false", "--role=worker"};
  node_config cfg;
  cfg.load<caf::io::middleman>();
  auto err = cfg.check_options(args);
  BOOST_REQUIRE_MESSAGE(!err, describe(err));
  BOOST_CHECK_EQUAL(args.size(), 3u); // the switch turned off is set later
  BOOST_REQUIRE(!cfg.parse(args));
  BOOST_CHECK_EQUAL(cfg.train.metrics_file, "");
  BOOST_CHECK(cfg.server.checkpoint.resume);
  // Off in the INI file's stead: a flag after the file wins.
  temp_dir dir;
  auto path = dir / "on.ini";
  std::ofstream{path} << "[worker]\noverlap=true\n";
  std::vector<std::string> off{"--config-file=" + path,
                               "--worker.overlap=false"};
  node_config cfg2;
  cfg2.load<caf::io::middleman>();
  BOOST_REQUIRE(!cfg2.check_options(off));
  BOOST_REQUIRE(!cfg2.parse(off));
  BOOST_CHECK(cfg2.worker.overlap); // the file's, until finish()
  auto done = cfg2.finish();
  BOOST_CHECK_MESSAGE(!done, describe(done));
  BOOST_CHECK(!cfg2.worker.overlap);
  // The last of --X=false and --X wins, as for any flag.
  std::vector<std::string> last{"--worker.overlap=false", "--worker.overlap"};
  node_config cfg3;
  cfg3.load<caf::io::middleman>();
  BOOST_REQUIRE(!cfg3.check_options(last));
  BOOST_REQUIRE(!cfg3.parse(last));
  BOOST_REQUIRE(!cfg3.finish());
  BOOST_CHECK(cfg3.worker.overlap);
  BOOST_CHECK_EQUAL(flag_error({"--config-file="}),
                    "invalid_config: --config-file= names no file: name an"
                    " INI file, or leave the flag out");
  // A switch still takes only true or false.
  BOOST_CHECK_EQUAL(flag_error({"--resume=yes"}),
                    "invalid_config: --resume takes true or false, got yes");
}

BOOST_AUTO_TEST_CASE(flags_are_known_and_of_their_type) {
  BOOST_CHECK_EQUAL(flag_error({"--role=worker", "--server.mode=async",
                                "--optimizer.lr=5", "--worker.overlap"}),
                    "");
  BOOST_CHECK_EQUAL(flag_error({"--kv.request-timout-ms=5"}),
                    "invalid_config: unknown flag --kv.request-timout-ms (did "
                    "you mean --kv.request-timeout-ms?); troupe-node --help "
                    "lists them all");
  BOOST_CHECK_EQUAL(flag_error({"--kv.request-timeout-ms=ten"}),
                    "invalid_config: --kv.request-timeout-ms takes a whole "
                    "number of 0 or more, got ten");
  BOOST_CHECK_EQUAL(flag_error({"--role"}),
                    "invalid_config: --role needs a value: --role=VALUE");
}

BOOST_AUTO_TEST_CASE(closest_names_are_typos_only) {
  std::vector<std::string> names{"mode", "replicas", "road-port"};
  BOOST_CHECK_EQUAL(closest_name("mdoe", names), "mode");
  BOOST_CHECK_EQUAL(closest_name("replica", names), "replicas");
  BOOST_CHECK_EQUAL(closest_name("checkpoint", names), "");
}

BOOST_AUTO_TEST_SUITE_END()

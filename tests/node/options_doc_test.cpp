// docs/options.md against troupe-node --help: every option --help shows is
// in the document with the same default, and the document names no option
// that --help does not show, so the two cannot drift apart.
#define BOOST_TEST_MODULE options_doc_tests
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace {

/// What `troupe-node --help` prints.
std::string help_output() {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> p{
      ::popen(TROUPE_NODE_BIN " --help", "r"), ::pclose};
  BOOST_REQUIRE(p);
  char buf[4096];
  while (auto n = std::fread(buf, 1, sizeof(buf), p.get()))
    out.append(buf, n);
  return out;
}

/// Each "--flag" of --help with its default: a line "  --group.name=<type>"
/// followed by a description line ending in "(default: X)".
std::map<std::string, std::string> options_in_help(const std::string& help) {
  std::map<std::string, std::string> out;
  std::istringstream in{help};
  std::string line, flag;
  std::regex flag_line{R"(^  (--[a-z0-9.-]+)(=<[a-z0-9_]+>)?$)"};
  std::regex default_at_end{R"(\(default: (.*)\)$)"};
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, flag_line)) {
      flag = m[1];
    } else if (!flag.empty() && std::regex_search(line, m, default_at_end)) {
      out[flag] = m[1];
      flag.clear();
    }
  }
  return out;
}

/// Each row "| `--flag` | `default` | ..." of docs/options.md.
std::map<std::string, std::string> options_in_doc(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in{path};
  BOOST_REQUIRE_MESSAGE(in, "cannot read " << path);
  std::string line;
  std::regex row{R"(^\| `(--[a-z0-9.-]+)[^`]*` \| `([^`]*)` \|)"};
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_search(line, m, row))
      out[m[1]] = m[2];
  return out;
}

const std::string doc_path = TROUPE_SOURCE_DIR "/docs/options.md";

} // namespace

BOOST_AUTO_TEST_SUITE(options_doc_tests)

BOOST_AUTO_TEST_CASE(help_shows_options_with_their_defaults) {
  auto help = help_output();
  auto opts = options_in_help(help);
  BOOST_TEST_MESSAGE(opts.size() << " options in --help");
  BOOST_CHECK_GT(opts.size(), 60u);
  BOOST_CHECK_EQUAL(opts.count("--role"), 1u);
  BOOST_CHECK_EQUAL(opts["--server.mode"], "\"sync\"");
  BOOST_CHECK_EQUAL(opts["--kv.request-timeout-ms"], "10000");
  // troupe sets CAF's scheduler to sharing, and --help says so.
  BOOST_CHECK_EQUAL(opts["--scheduler.policy"], "'sharing'");
  // TLS is CAF's openssl module: its files are troupe options too.
  BOOST_CHECK_EQUAL(opts.count("--openssl.certificate"), 1u);
  // CAF's groups that do nothing in troupe stay out.
  for (auto hidden : {"--opencl.", "--work-stealing.", "--openssl.capath",
                      "--logger.", "--stream."})
    BOOST_CHECK_MESSAGE(help.find(hidden) == std::string::npos,
                        hidden << " is in --help");
}

BOOST_AUTO_TEST_CASE(every_option_of_help_is_documented_with_its_default) {
  auto help = options_in_help(help_output());
  auto doc = options_in_doc(doc_path);
  for (auto& [flag, def] : help) {
    auto i = doc.find(flag);
    if (i == doc.end()) {
      BOOST_ERROR(flag << " is not in docs/options.md");
      continue;
    }
    BOOST_CHECK_MESSAGE(i->second == def, flag << ": docs/options.md says `"
                                               << i->second << "`, --help `"
                                               << def << "`");
  }
}

BOOST_AUTO_TEST_CASE(the_document_names_no_option_help_does_not_show) {
  auto help = options_in_help(help_output());
  for (auto& [flag, def] : options_in_doc(doc_path))
    BOOST_CHECK_MESSAGE(help.count(flag) == 1,
                        flag << " is in docs/options.md but not in --help");
}

BOOST_AUTO_TEST_SUITE_END()

// The user's documents against the tree: README.md stays a short guide,
// no link leaves the repository, every relative link finds its file, and
// the training step that docs/architecture.md traces names only functions
// that exist in the files it names.
#define BOOST_TEST_MODULE docs_tests
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path root = TROUPE_SOURCE_DIR;

/// The text of `p`, which must exist.
std::string read(const fs::path& p) {
  BOOST_REQUIRE_MESSAGE(fs::is_regular_file(p), "cannot read " << p);
  return troupe::test::read_file(p);
}

/// README.md and every page of docs/.
std::vector<fs::path> documents() {
  std::vector<fs::path> out{root / "README.md"};
  for (auto& e : fs::directory_iterator{root / "docs"})
    if (e.path().extension() == ".md")
      out.push_back(e.path());
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(docs_tests)

BOOST_AUTO_TEST_CASE(the_readme_is_a_guide_of_at_most_250_lines) {
  auto text = read(root / "README.md");
  auto lines = std::count(text.begin(), text.end(), '\n');
  BOOST_CHECK_LE(lines, 250);
  // The two commands come first, unchanged.
  auto build = text.find("deploy/build.sh && deploy/local-cluster.sh"
                         " deploy/local.ini 2 2");
  auto test = text.find("deploy/build.sh --slurm --k8s && ctest --test-dir"
                        " build --output-on-failure");
  BOOST_CHECK(build != std::string::npos && test != std::string::npos);
  BOOST_CHECK_LT(build,
                 text.find("\n## ", text.find("## The two commands") + 1));
}

BOOST_AUTO_TEST_CASE(no_link_leaves_the_repository_and_each_finds_its_file) {
  std::regex link{R"(\]\(([^)#\s]*)(#[^)]*)?\))"};
  for (auto& doc : documents()) {
    auto text = read(doc);
    BOOST_CHECK_MESSAGE(text.find("http://") == std::string::npos &&
                            text.find("https://") == std::string::npos,
                        doc << " links outside the repository");
    for (std::sregex_iterator i{text.begin(), text.end(), link}, end; i != end;
         ++i) {
      std::string target = (*i)[1];
      if (target.empty())
        continue; // an anchor on the same page
      BOOST_CHECK_MESSAGE(fs::exists(doc.parent_path() / target),
                          doc << " links to " << target << ", not there");
    }
  }
}

BOOST_AUTO_TEST_CASE(the_traced_step_names_functions_that_exist) {
  // Lines "N. `path: function`: what happens".
  std::regex step{R"(^\d+\. `([^`:]+): ([A-Za-z_][A-Za-z0-9_]*)`)"};
  std::istringstream in{read(root / "docs" / "architecture.md")};
  std::string line;
  int steps = 0;
  std::smatch m;
  while (std::getline(in, line)) {
    if (!std::regex_search(line, m, step))
      continue;
    ++steps;
    fs::path file = root / std::string{m[1]};
    std::string fn = m[2];
    BOOST_REQUIRE_MESSAGE(fs::exists(file), file << " does not exist");
    // A definition: the name, then its parameters, then a body.
    std::regex def{"(^|[\\s:*&])" + fn + R"(\([^;{]*\)[^;{]*\{)"};
    auto code = read(file);
    BOOST_CHECK_MESSAGE(std::regex_search(code, def),
                        "docs/architecture.md step " << steps << ": no " << fn
                                                     << " in " << file);
  }
  BOOST_CHECK_GE(steps, 15);
}

BOOST_AUTO_TEST_SUITE_END()

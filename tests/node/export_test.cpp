// troupe-export takes a trained model out: the arrays of a checkpoint's
// manifest generation, reassembled from every server's slices, as a .npz
// that NumPy (Debian's python3-numpy) reads back exactly; a checkpoint
// with a slice missing, unready or disagreeing between two stores gets
// one error naming it.
#define BOOST_TEST_MODULE export_tests
#include <boost/test/unit_test.hpp>

#include <string>
#include <unistd.h>
#include <vector>

#include "actors/node/export_npz.hpp"
#include "messages/checkpoint.hpp"
#include "messages/errors.hpp"
#include "tests/system/child_process.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

constexpr const char* python = "/usr/bin/python3"; // Debian's, with numpy

slice_snapshot slice(uint64_t key, uint32_t index, std::vector<float> xs) {
  slice_snapshot s;
  s.id = slice_id{key, index};
  s.floats = static_cast<uint32_t>(xs.size());
  s.ready = true;
  s.values = std::move(xs);
  return s;
}

/// Two servers' files of generation 3: array 1 in three slices over both
/// (server 0 holds 0 and 2, server 1 holds 1), array 2 in one, which a
/// second store of server 1 (a promoted replica) holds too. `edit` may
/// break server 1's store before the files are written.
template <class Edit> void write_checkpoint(const temp_dir& dir, Edit edit) {
  checkpoint_data s0, s1;
  s0.generation = s1.generation = 3;
  s0.server = 0;
  s1.server = 1;
  s0.mode = s1.mode = "sync";
  s0.optimizer = s1.optimizer = "sum@server";
  store_snapshot a, b, c;
  a.slices = {slice(1, 0, {1, 2}), slice(1, 2, {5, 6}), slice(2, 0, {-1.5f})};
  b.slices = {slice(1, 1, {3, 4})};
  c.id = 9;
  c.slices = {slice(2, 0, {-1.5f})};
  s0.stores = {a};
  s1.stores = {b, c};
  edit(s1);
  for (auto* x : {&s0, &s1})
    BOOST_REQUIRE(!write_checked_file(dir / checkpoint_file_name(3, x->server),
                                      encode(*x)));
  checkpoint_manifest m;
  m.generation = 3;
  m.files = {checkpoint_file_name(3, 0), checkpoint_file_name(3, 1)};
  BOOST_REQUIRE(!write_checked_file(dir / manifest_name, encode(m)));
}

boost::test_tools::assertion_result has_numpy(boost::unit_test::test_unit_id) {
  bool ok = ::access(python, X_OK) == 0;
  if (ok) {
    child_process probe{{python, "-c", "import numpy"}};
    auto rc = probe.wait_exit(30s);
    ok = rc && *rc == 0;
  }
  boost::test_tools::assertion_result r{ok};
  if (!ok)
    r.message() << "skipped: no numpy for " << python
                << " (Debian's python3-numpy; deploy/install-deps.sh)";
  return r;
}

} // namespace

BOOST_AUTO_TEST_SUITE(export_tests)

BOOST_AUTO_TEST_CASE(the_arrays_come_whole_from_every_servers_slices) {
  temp_dir dir;
  write_checkpoint(dir, [](checkpoint_data&) {});
  auto xs = checkpoint_arrays(dir.path);
  BOOST_REQUIRE_MESSAGE(xs, describe(xs.error()));
  BOOST_REQUIRE_EQUAL(xs->size(), 2u);
  BOOST_CHECK((xs->at(1) == std::vector<float>{1, 2, 3, 4, 5, 6}));
  BOOST_CHECK((xs->at(2) == std::vector<float>{-1.5f}));
  // .npy 1.0: magic, version, the header's length, the header padded with
  // spaces and a newline to a multiple of 64 bytes, then the floats.
  auto npy = npy_of({1, 2});
  BOOST_CHECK_EQUAL(npy.size(), 128u + 8u);
  BOOST_CHECK_EQUAL(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  BOOST_CHECK_EQUAL(npy[127], '\n');
  BOOST_CHECK(npy.find("'shape': (2,)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(numpy_reads_the_npz_back_exactly,
                     *boost::unit_test::precondition(has_numpy)) {
  temp_dir dir;
  write_checkpoint(dir, [](checkpoint_data&) {});
  child_process exported{{TROUPE_EXPORT_BIN, dir.path, dir / "model.npz"}};
  auto rc = exported.wait_exit(60s);
  BOOST_REQUIRE(rc);
  BOOST_REQUIRE_MESSAGE(*rc == 0, exported.output());
  BOOST_CHECK_MESSAGE(exported.output().find("2 arrays (7 floats)") !=
                          std::string::npos,
                      exported.output());
  child_process np{
      {python, "-c",
       "import numpy, sys\n"
       "d = numpy.load(sys.argv[1])\n"
       "print(sorted(d.files), d['key_1'].dtype, d['key_1'].tolist(),"
       " d['key_2'].tolist())\n",
       dir / "model.npz"}};
  rc = np.wait_exit(60s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_MESSAGE(*rc == 0, np.output());
  BOOST_CHECK_MESSAGE(
      np.output().find("['key_1', 'key_2'] float32 "
                       "[1.0, 2.0, 3.0, 4.0, 5.0, 6.0] [-1.5]") !=
          std::string::npos,
      np.output());
}

BOOST_AUTO_TEST_CASE(a_broken_checkpoint_gets_one_error_naming_it) {
  struct broken {
    const char* says;
    void (*edit)(checkpoint_data&);
  };
  for (auto b : {broken{"lacks slice 1",
                        [](checkpoint_data& x) { x.stores[0].slices.clear(); }},
                 broken{"differs between two stores",
                        [](checkpoint_data& x) {
                          x.stores[1].slices[0].values = {7.0f};
                        }},
                 broken{"never initialised", [](checkpoint_data& x) {
                          x.stores[0].slices[0].ready = false;
                          x.stores[0].slices[0].values.clear();
                        }}}) {
    temp_dir dir;
    write_checkpoint(dir, b.edit);
    auto xs = checkpoint_arrays(dir.path);
    BOOST_REQUIRE_MESSAGE(!xs, b.says);
    BOOST_CHECK(xs.error() == errc::bad_file);
    BOOST_CHECK_MESSAGE(describe(xs.error()).find(b.says) != std::string::npos,
                        describe(xs.error()));
  }
  temp_dir empty; // no MANIFEST
  auto xs = checkpoint_arrays(empty.path);
  BOOST_REQUIRE(!xs);
  BOOST_CHECK(xs.error() == errc::bad_file);
  child_process cli{{TROUPE_EXPORT_BIN, empty.path, empty / "x.npz"}};
  auto rc = cli.wait_exit(60s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_EQUAL(*rc, 1);
  BOOST_CHECK_MESSAGE(cli.output().find("reading the checkpoint failed") !=
                          std::string::npos,
                      cli.output());
}

BOOST_AUTO_TEST_CASE(a_file_that_is_no_npz_is_not_replaced) {
  // At 2b8c60c `troupe-export DIR DIR/MANIFEST` wrote the .npz over the
  // checkpoint's manifest (and over any file named).
  temp_dir dir;
  write_checkpoint(dir, [](checkpoint_data&) {});
  auto manifest = read_file(dir / "MANIFEST");
  std::ofstream{dir / "notes.txt"} << "hello\n";
  for (auto out : {dir / "MANIFEST", dir / "notes.txt", dir.path}) {
    child_process cli{{TROUPE_EXPORT_BIN, dir.path, out}};
    auto rc = cli.wait_exit(60s);
    BOOST_REQUIRE(rc);
    BOOST_CHECK_EQUAL(*rc, 2);
    BOOST_CHECK_MESSAGE(cli.output().find(" give the .npz a new name") !=
                            std::string::npos,
                        cli.output());
  }
  BOOST_CHECK(read_file(dir / "MANIFEST") == manifest);
  BOOST_CHECK_EQUAL(read_file(dir / "notes.txt"), "hello\n");
  BOOST_CHECK(checkpoint_arrays(dir.path)); // still whole
  // An .npz of an earlier export is replaced, as before.
  temp_dir out;
  for (int i = 0; i < 2; ++i) {
    child_process cli{{TROUPE_EXPORT_BIN, dir.path, out / "w.npz"}};
    auto rc = cli.wait_exit(60s);
    BOOST_REQUIRE(rc);
    BOOST_CHECK_MESSAGE(*rc == 0, cli.output());
  }
  BOOST_CHECK_EQUAL(not_an_npz(out / "w.npz"), "");
  BOOST_CHECK_EQUAL(not_an_npz(out / "none.npz"), "");
  { std::ofstream{out / "empty.npz"}; } // as mktemp makes one
  BOOST_CHECK_EQUAL(not_an_npz(out / "empty.npz"), "");
}

BOOST_AUTO_TEST_SUITE_END()

// Checkpoint files: the codec and its checks, the checked file header, atomic
// writes torn half way, and removing old generations.
#define BOOST_TEST_MODULE checkpoint_tests
#include <boost/test/unit_test.hpp>

#include "tests/test_support.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <capnp/message.h>

#include "messages/checkpoint.capnp.h"
#include "messages/checkpoint.hpp"
#include "messages/errors.hpp"
#include "tests/messages/raw_frame.hpp"

using namespace troupe;
using troupe::test::raw;
using troupe::test::temp_dir;
using troupe::test::why;
namespace fs = std::filesystem;

namespace {

constexpr size_t header_bytes = 24; // magic, length, FNV-1a 64

// -- sample values ------------------------------------------------------------

/// Two stores: a not-ready slice, slices with 2, 1 and an empty (zeros)
/// optimizer array, and workers with and without parts.
checkpoint_data sample_checkpoint() {
  checkpoint_data x;
  x.generation = 7;
  x.server = 2;
  x.mode = "ssp:2";
  x.optimizer = "adam@server";
  store_snapshot a;
  a.id = 11;
  a.origin = 1;
  a.version = 42;
  a.rounds = 40;
  // Held pushes (async and ssp with atomic pushes): two clocks, one slice
  // named twice by its push.
  a.workers = {{0, 41, {}, 0, {}, {}},
               {3,
                40,
                {0, 2, 5},
                9,
                {{5, 0}, {5, 1}},
                {{39, {5, 0}, 2, {1.0f, 2.0f, 3.0f, 4.0f}},
                 {39, {5, 1}, 1, {-1.0f, 0.5f, 0.25f}},
                 {40, {5, 0}, 1, {4.0f, 3.0f, 2.0f, 1.0f}}}}};
  a.slices.push_back({{5, 0},
                      4,
                      true,
                      {1.5f, -2.0f, 3.25f, 1e-30f},
                      12,
                      12,
                      {{0.1f, 0.2f, 0.3f, 0.4f}, {1.0f, 2.0f, 3.0f, 4.0f}}});
  a.slices.push_back({{5, 1}, 3, false, {}, 0, 0, {}});
  store_snapshot b;
  b.id = 9;
  b.origin = 0;
  b.version = 100;
  b.rounds = 0;
  b.workers = {{2, 99, {1}, 4, {}, {}}};
  b.slices.push_back({{6, 0},
                      5,
                      true,
                      {-1, -2, -3, -4, -5},
                      3,
                      0,
                      {{0.5f, 0.25f, 0.125f, 8.0f, 1e20f}}});
  b.slices.push_back({{6, 1}, 2, true, {7.0f, -7.0f}, 1, 1, {{}, {9, 10}}});
  // The same slice id in another store is not a duplicate.
  b.slices.push_back({{5, 0}, 1, true, {3.0f}, 0, 0, {}});
  x.stores = {a, b};
  return x;
}

checkpoint_manifest sample_manifest() {
  return {3,
          120,
          "sync",
          "momentum@server",
          {checkpoint_file_name(3, 0), checkpoint_file_name(3, 1)},
          1700000000123,
          2};
}

void check_same(const slice_snapshot& x, const slice_snapshot& y) {
  BOOST_CHECK(x.id == y.id);
  BOOST_CHECK_EQUAL(x.floats, y.floats);
  BOOST_CHECK_EQUAL(x.ready, y.ready);
  BOOST_CHECK(x.values == y.values);
  BOOST_CHECK_EQUAL(x.updates, y.updates);
  BOOST_CHECK_EQUAL(x.step, y.step);
  BOOST_REQUIRE_EQUAL(x.state.size(), y.state.size());
  for (size_t i = 0; i < x.state.size(); ++i)
    BOOST_CHECK_MESSAGE(x.state[i] == y.state[i], "state array " << i);
}

void check_same(const store_snapshot& x, const store_snapshot& y) {
  BOOST_CHECK_EQUAL(x.id, y.id);
  BOOST_CHECK_EQUAL(x.origin, y.origin);
  BOOST_CHECK_EQUAL(x.version, y.version);
  BOOST_CHECK_EQUAL(x.rounds, y.rounds);
  BOOST_REQUIRE_EQUAL(x.workers.size(), y.workers.size());
  for (size_t i = 0; i < x.workers.size(); ++i) {
    BOOST_CHECK_EQUAL(x.workers[i].rank, y.workers[i].rank);
    BOOST_CHECK_EQUAL(x.workers[i].clock, y.workers[i].clock);
    BOOST_CHECK(x.workers[i].parts == y.workers[i].parts);
    BOOST_CHECK_EQUAL(x.workers[i].cut, y.workers[i].cut);
    BOOST_CHECK(x.workers[i].taken == y.workers[i].taken);
    auto &hx = x.workers[i].held, &hy = y.workers[i].held;
    BOOST_REQUIRE_EQUAL(hx.size(), hy.size());
    for (size_t j = 0; j < hx.size(); ++j) {
      BOOST_CHECK_EQUAL(hx[j].clock, hy[j].clock);
      BOOST_CHECK(hx[j].id == hy[j].id);
      BOOST_CHECK_EQUAL(hx[j].pushes, hy[j].pushes);
      BOOST_CHECK(hx[j].values == hy[j].values);
    }
  }
  BOOST_REQUIRE_EQUAL(x.slices.size(), y.slices.size());
  for (size_t i = 0; i < x.slices.size(); ++i)
    check_same(x.slices[i], y.slices[i]);
}

void check_same(const checkpoint_data& x, const checkpoint_data& y) {
  BOOST_CHECK_EQUAL(x.generation, y.generation);
  BOOST_CHECK_EQUAL(x.server, y.server);
  BOOST_CHECK_EQUAL(x.mode, y.mode);
  BOOST_CHECK_EQUAL(x.optimizer, y.optimizer);
  BOOST_REQUIRE_EQUAL(x.stores.size(), y.stores.size());
  for (size_t i = 0; i < x.stores.size(); ++i)
    check_same(x.stores[i], y.stores[i]);
}

void check_same(const checkpoint_manifest& x, const checkpoint_manifest& y) {
  BOOST_CHECK_EQUAL(x.generation, y.generation);
  BOOST_CHECK_EQUAL(x.version, y.version);
  BOOST_CHECK_EQUAL(x.mode, y.mode);
  BOOST_CHECK_EQUAL(x.optimizer, y.optimizer);
  BOOST_CHECK(x.files == y.files);
  BOOST_CHECK_EQUAL(x.time_ms, y.time_ms);
  BOOST_CHECK_EQUAL(x.clocks_per_step, y.clocks_per_step);
}

/// True if `err` is errc::malformed_message.
bool malformed(const caf::error& err) {
  return err == errc::malformed_message;
}

bool rejected(const checkpoint_data& x) {
  checkpoint_data y;
  return malformed(decode(encode(x), y));
}

bool rejected(const checkpoint_manifest& x) {
  checkpoint_manifest y;
  return malformed(decode(encode(x), y));
}

// -- files --------------------------------------------------------------------

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& xs) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(xs.data()),
            static_cast<std::streamsize>(xs.size()));
  BOOST_REQUIRE(out.good());
}

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> out;
  for (auto& e : fs::directory_iterator(dir))
    out.insert(e.path().filename().string());
  return out;
}

/// Open file descriptors of this process.
size_t open_fds() {
  return static_cast<size_t>(
      std::distance(fs::directory_iterator("/proc/self/fd"), {}));
}

/// The error of `x`, or none if it holds a value (never UB to call).
template <class T> caf::error error_of(const caf::expected<T>& x) {
  return x ? caf::error{} : x.error();
}

/// True if `err` is errc::bad_file and its text holds `what`.
bool bad_file_saying(const caf::error& err, const std::string& what) {
  auto text = describe(err);
  BOOST_TEST_MESSAGE("error: " << text);
  return err == errc::bad_file && text.find(what) != std::string::npos;
}

/// A payload of `n` bytes (a multiple of 8) that is no Cap'n Proto message.
frame noise(size_t n) {
  frame f{std::vector<uint8_t>(n)};
  for (size_t i = 0; i < n; ++i)
    f.bytes[i] = static_cast<uint8_t>(i * 37 + 11);
  return f;
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_tests)

// -- codec --------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_checkpoint_keeps_every_field_through_encode_decode) {
  auto x = sample_checkpoint();
  // Decoding into a used value must replace it, not append to it.
  checkpoint_data y = sample_checkpoint();
  y.mode = "stale";
  BOOST_REQUIRE(!decode(encode(x), y));
  check_same(x, y);
  // Spot checks, in case check_same compared the wrong things.
  BOOST_REQUIRE_EQUAL(y.stores.size(), 2u);
  BOOST_CHECK_EQUAL(y.stores[0].slices[0].state.size(), 2u);
  BOOST_CHECK(y.stores[0].slices[0].state[1] ==
              (std::vector<float>{1, 2, 3, 4}));
  BOOST_CHECK(!y.stores[0].slices[1].ready);
  BOOST_CHECK(y.stores[0].slices[1].values.empty());
  BOOST_CHECK(y.stores[1].slices[1].state[0].empty());
  BOOST_CHECK(y.stores[0].workers[1].parts == (std::vector<uint32_t>{0, 2, 5}));
  BOOST_CHECK_EQUAL(y.stores[0].workers[1].cut, 9u);
  BOOST_CHECK(y.stores[0].workers[1].taken ==
              (std::vector<slice_id>{{5, 0}, {5, 1}}));
  BOOST_CHECK_EQUAL(y.stores[1].slices[0].values[4], -5.0f);
}

BOOST_AUTO_TEST_CASE(an_empty_checkpoint_round_trips) {
  checkpoint_data x, y = sample_checkpoint();
  BOOST_REQUIRE(!decode(encode(x), y));
  check_same(x, y);
  BOOST_CHECK(y.stores.empty());
}

BOOST_AUTO_TEST_CASE(a_manifest_keeps_every_field_through_encode_decode) {
  auto m = sample_manifest();
  checkpoint_manifest n;
  n.files = {"stale"};
  BOOST_REQUIRE(!decode(encode(m), n));
  check_same(m, n);
  BOOST_REQUIRE_EQUAL(n.files.size(), 2u);
  BOOST_CHECK_EQUAL(n.files[1], checkpoint_file_name(3, 1));
  BOOST_CHECK_EQUAL(n.time_ms, 1700000000123u);
}

BOOST_AUTO_TEST_CASE(a_slice_twice_in_one_store_is_malformed) {
  auto x = sample_checkpoint();
  x.stores[1].slices.push_back(x.stores[1].slices[1]);
  BOOST_CHECK(rejected(x));
}

BOOST_AUTO_TEST_CASE(a_held_slice_twice_or_of_no_push_is_malformed) {
  auto x = sample_checkpoint();
  auto& held = x.stores[0].workers[1].held;
  held.push_back(held.front()); // the same clock and slice again
  BOOST_CHECK(rejected(x));
  auto y = sample_checkpoint();
  y.stores[0].workers[1].held[1].pushes = 0;
  BOOST_CHECK(rejected(y));
  auto z = sample_checkpoint(); // the same slice at another clock is fine
  z.stores[0].workers[1].held[2].clock = 41;
  BOOST_CHECK(!rejected(z));
}

BOOST_AUTO_TEST_CASE(a_store_or_a_worker_twice_is_malformed) {
  auto x = sample_checkpoint();
  x.stores[1].id = x.stores[0].id;
  BOOST_CHECK(rejected(x));
  auto y = sample_checkpoint();
  y.stores[0].workers.push_back({3, 1, {}, 0, {}, {}});
  BOOST_CHECK(rejected(y));
  auto z = sample_checkpoint(); // a slice taken twice in one clock
  z.stores[0].workers[1].taken.push_back({5, 0});
  BOOST_CHECK(rejected(z));
}

BOOST_AUTO_TEST_CASE(values_of_another_length_than_floats_are_malformed) {
  auto shorter = sample_checkpoint();
  shorter.stores[0].slices[0].values.pop_back();
  BOOST_CHECK(rejected(shorter));
  auto longer = sample_checkpoint();
  longer.stores[1].slices[0].values.push_back(1.0f);
  BOOST_CHECK(rejected(longer));
  // Ready with no values, and not ready with values, contradict each other.
  auto missing = sample_checkpoint();
  missing.stores[0].slices[0].values.clear();
  BOOST_CHECK(rejected(missing));
  auto unready = sample_checkpoint();
  unready.stores[1].slices[0].ready = false;
  BOOST_CHECK(rejected(unready));
  // 7 bytes: not even whole floats.
  capnp::MallocMessageBuilder msg;
  auto c = msg.initRoot<schema::Checkpoint>();
  auto s = c.initStores(1)[0].initSlices(1)[0];
  s.setFloats(2);
  s.setReady(true);
  s.initValues(7);
  checkpoint_data y;
  BOOST_CHECK(malformed(decode(raw(msg), y)));
}

BOOST_AUTO_TEST_CASE(a_state_array_of_the_wrong_length_is_malformed) {
  auto x = sample_checkpoint();
  x.stores[0].slices[0].state[1].pop_back();
  BOOST_CHECK(rejected(x));
  auto y = sample_checkpoint();
  y.stores[1].slices[0].state[0].push_back(0.0f);
  BOOST_CHECK(rejected(y));
}

BOOST_AUTO_TEST_CASE(manifest_names_outside_the_folder_are_malformed) {
  for (std::string name : {"sub/ckpt-00000003-server-0.bin", "../MANIFEST",
                           "/etc/passwd", ".hidden", "..", ""}) {
    auto m = sample_manifest();
    m.files.push_back(name);
    BOOST_CHECK_MESSAGE(rejected(m), "file name '" << name << "'");
  }
}

BOOST_AUTO_TEST_CASE(garbage_and_truncated_bytes_are_malformed) {
  std::mt19937 gen{20240601};
  std::uniform_int_distribution<int> byte{0, 255};
  for (size_t n : {0, 1, 7, 8, 16, 24, 64, 1000, 4096}) {
    frame f{std::vector<uint8_t>(n)};
    for (auto& b : f.bytes)
      b = static_cast<uint8_t>(byte(gen));
    checkpoint_data x;
    checkpoint_manifest m;
    BOOST_CHECK_MESSAGE(malformed(decode(f, x)), n << " random bytes");
    BOOST_CHECK_MESSAGE(malformed(decode(f, m)), n << " random bytes");
  }
  auto whole = encode(sample_checkpoint());
  for (size_t cut = 8; cut < whole.bytes.size(); cut += 8) {
    frame t{
        std::vector<uint8_t>(whole.bytes.begin(), whole.bytes.begin() + cut)};
    checkpoint_data x;
    BOOST_CHECK_MESSAGE(malformed(decode(t, x)), "cut at " << cut);
  }
}

// -- checked files ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_checked_file_reads_back_its_payload) {
  temp_dir dir;
  auto path = dir / checkpoint_file_name(7, 2);
  auto x = sample_checkpoint();
  auto payload = encode(x);
  BOOST_REQUIRE(!write_checked_file(path, payload));
  BOOST_CHECK(names_in(dir.path) ==
              std::set<std::string>{checkpoint_file_name(7, 2)});
  auto bytes = read_bytes(path);
  BOOST_REQUIRE_EQUAL(bytes.size(), header_bytes + payload.bytes.size());
  BOOST_CHECK(std::string(bytes.begin(), bytes.begin() + 8) == "TROUPECK");
  auto f = read_checked_file(path);
  BOOST_REQUIRE_MESSAGE(f, why(f));
  BOOST_CHECK(f->bytes == payload.bytes);
  auto y = read_checkpoint(path);
  BOOST_REQUIRE_MESSAGE(y, why(y));
  check_same(x, *y);
  // Writing again replaces the file.
  auto other = noise(64);
  BOOST_REQUIRE(!write_checked_file(path, other));
  f = read_checked_file(path);
  BOOST_REQUIRE(f);
  BOOST_CHECK(f->bytes == other.bytes);
  // An empty payload is a file too.
  BOOST_REQUIRE(!write_checked_file(dir / "empty", frame{}));
  f = read_checked_file(dir / "empty");
  BOOST_REQUIRE(f);
  BOOST_CHECK(f->bytes.empty());
}

BOOST_AUTO_TEST_CASE(unreadable_files_are_bad_files_that_say_why) {
  temp_dir dir;
  auto good = dir / "good";
  BOOST_REQUIRE(!write_checked_file(good, noise(256)));
  auto bytes = read_bytes(good);
  BOOST_REQUIRE_EQUAL(bytes.size(), header_bytes + 256);
  auto broken = [&dir](const std::string& name, std::vector<uint8_t> xs) {
    write_bytes(dir / name, xs);
    return error_of(read_checked_file(dir / name));
  };
  auto missing = error_of(read_checked_file(dir / "missing"));
  BOOST_CHECK(bad_file_saying(missing, "cannot open"));
  BOOST_CHECK(bad_file_saying(missing, dir / "missing"));
  BOOST_CHECK(bad_file_saying(broken("empty", {}), "too short"));
  BOOST_CHECK(bad_file_saying(
      broken("short", {bytes.begin(), bytes.begin() + 23}), "too short"));
  auto magic = bytes;
  magic[0] = 'X';
  BOOST_CHECK(bad_file_saying(broken("magic", magic), "bad magic"));
  BOOST_CHECK(bad_file_saying(broken("torn", {bytes.begin(), bytes.end() - 8}),
                              "torn"));
  BOOST_CHECK(bad_file_saying(
      broken("header-only", {bytes.begin(), bytes.begin() + 24}), "torn"));
  auto longer = bytes;
  longer.push_back(0);
  BOOST_CHECK(bad_file_saying(broken("longer", longer), "torn"));
  auto flipped = bytes;
  flipped[header_bytes + 100] ^= 0x01;
  BOOST_CHECK(bad_file_saying(broken("flipped", flipped), "corrupt"));
  auto last = bytes;
  last.back() ^= 0x80;
  BOOST_CHECK(bad_file_saying(broken("last", last), "corrupt"));
  fs::create_directory(dir / "folder");
  auto folder = error_of(read_checked_file(dir / "folder"));
  BOOST_CHECK(bad_file_saying(folder, "not a regular file"));
  // The good file is still good: the checks above are not always-fail.
  BOOST_CHECK(read_checked_file(good));
}

BOOST_AUTO_TEST_CASE(a_write_torn_half_way_leaves_the_old_file_whole) {
  temp_dir dir;
  auto name = checkpoint_file_name(4, 0);
  auto path = dir / name;
  auto tmp = path + ".tmp";
  auto a = encode(sample_checkpoint());
  auto b = noise(4096);
  BOOST_REQUIRE(a.bytes != b.bytes);
  BOOST_REQUIRE(!write_checked_file(path, a));
  auto fds = open_fds();
  size_t calls = 0;
  auto crash = [&calls, &path, &tmp, &a, &b] {
    ++calls;
    // Half of B is on disk in the temporary file; the path is still A.
    BOOST_CHECK_EQUAL(fs::file_size(tmp), header_bytes + b.bytes.size() / 2);
    auto f = read_checked_file(path);
    BOOST_CHECK(f && f->bytes == a.bytes);
    throw std::runtime_error("killed half way");
  };
  BOOST_CHECK_THROW(write_checked_file(path, b, crash), std::runtime_error);
  BOOST_CHECK_EQUAL(calls, 1u);
  BOOST_CHECK_EQUAL(open_fds(), fds); // the file was closed
  auto f = read_checked_file(path);
  BOOST_REQUIRE_MESSAGE(f, why(f));
  BOOST_CHECK(f->bytes == a.bytes);
  auto y = read_checkpoint(path);
  BOOST_REQUIRE(y);
  check_same(sample_checkpoint(), *y);
  // The temporary file holds the header and the first half of B.
  BOOST_REQUIRE(fs::exists(tmp));
  auto partial = read_bytes(tmp);
  BOOST_REQUIRE_EQUAL(partial.size(), header_bytes + b.bytes.size() / 2);
  BOOST_CHECK(std::equal(partial.begin() + header_bytes, partial.end(),
                         b.bytes.begin()));
  BOOST_CHECK(bad_file_saying(error_of(read_checked_file(tmp)), "torn"));
  // While generation 4 is kept, its .tmp may be a write under way: it
  // stays. Once generation 4 is old, the leftover goes, and only it.
  BOOST_CHECK_EQUAL(remove_old_checkpoints(dir.path, 4), 0u);
  BOOST_CHECK(fs::exists(tmp));
  BOOST_CHECK_EQUAL(remove_old_checkpoints(dir.path, 5), 2u);
  BOOST_CHECK(names_in(dir.path).empty());
}

BOOST_AUTO_TEST_CASE(a_midway_hook_that_returns_lets_the_write_finish) {
  temp_dir dir;
  auto path = dir / "file";
  auto b = noise(1024);
  size_t calls = 0;
  BOOST_REQUIRE(!write_checked_file(path, b, [&calls] { ++calls; }));
  BOOST_CHECK_EQUAL(calls, 1u);
  auto f = read_checked_file(path);
  BOOST_REQUIRE(f);
  BOOST_CHECK(f->bytes == b.bytes);
  BOOST_CHECK(names_in(dir.path) == std::set<std::string>{"file"});
}

BOOST_AUTO_TEST_CASE(a_write_into_a_missing_folder_is_a_bad_file) {
  temp_dir dir;
  auto err = write_checked_file(dir / "no/such/file", noise(8));
  BOOST_CHECK(bad_file_saying(err, "cannot create"));
}

// -- folders ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(file_names_differ_and_stay_inside_the_folder) {
  std::set<std::string> names;
  for (uint64_t gen : {0, 1, 9, 10, 99999999, 123456789})
    for (uint32_t server : {0, 1, 12})
      names.insert(checkpoint_file_name(gen, server));
  BOOST_CHECK_EQUAL(names.size(), 18u);
  // A manifest naming them decodes.
  checkpoint_manifest m = sample_manifest(), n;
  m.files.assign(names.begin(), names.end());
  BOOST_REQUIRE(!decode(encode(m), n));
  BOOST_CHECK(n.files == m.files);
}

BOOST_AUTO_TEST_CASE(old_generations_and_leftovers_are_removed) {
  temp_dir dir;
  for (uint64_t gen : {1, 2, 3})
    for (uint32_t server : {0, 1})
      BOOST_REQUIRE(!write_checked_file(dir / checkpoint_file_name(gen, server),
                                        noise(8 * gen)));
  BOOST_REQUIRE(!write_checked_file(dir / manifest_name, noise(16)));
  write_bytes(dir / "notes.txt", {1, 2, 3});
  auto all = names_in(dir.path);
  BOOST_REQUIRE_EQUAL(all.size(), 8u);
  BOOST_CHECK_EQUAL(remove_old_checkpoints(dir.path, 2), 2u);
  auto kept = all;
  kept.erase(checkpoint_file_name(1, 0));
  kept.erase(checkpoint_file_name(1, 1));
  BOOST_CHECK(names_in(dir.path) == kept);
  // Nothing more to remove, and the kept files are intact.
  BOOST_CHECK_EQUAL(remove_old_checkpoints(dir.path, 2), 0u);
  auto f = read_checked_file(dir / checkpoint_file_name(3, 1));
  BOOST_REQUIRE(f);
  BOOST_CHECK(f->bytes == noise(24).bytes);
  // Leftover temporary files of old generations go, and those naming no
  // generation; one of a kept generation may be a write under way.
  write_bytes(dir / (checkpoint_file_name(1, 0) + ".tmp"), {1});
  write_bytes(dir / (checkpoint_file_name(3, 0) + ".tmp"), {1});
  write_bytes(dir / "ckpt-junk.tmp", {});
  BOOST_CHECK_EQUAL(remove_old_checkpoints(dir.path, 2), 2u);
  kept.insert(checkpoint_file_name(3, 0) + ".tmp");
  BOOST_CHECK(names_in(dir.path) == kept);
  // Large generations parse too.
  BOOST_REQUIRE(
      !write_checked_file(dir / checkpoint_file_name(123456789, 0), noise(8)));
  BOOST_CHECK_EQUAL(remove_old_checkpoints(dir.path, 123456789), 5u);
  BOOST_CHECK(names_in(dir.path) ==
              (std::set<std::string>{checkpoint_file_name(123456789, 0),
                                     manifest_name, "notes.txt"}));
  BOOST_CHECK_EQUAL(remove_old_checkpoints(dir / "missing", 10), 0u);
}

BOOST_AUTO_TEST_CASE(a_failed_generation_is_removed_and_no_other) {
  // Its whole files were left until two later generations had been
  // written: on a disk near full they kept every later one from fitting.
  // A temporary file may be a write under way: it stays.
  temp_dir dir;
  for (uint64_t gen : {1, 2, 12})
    for (uint32_t server : {0, 1})
      BOOST_REQUIRE(!write_checked_file(dir / checkpoint_file_name(gen, server),
                                        noise(8)));
  write_bytes(dir / (checkpoint_file_name(2, 2) + ".tmp"), {1});
  BOOST_CHECK_EQUAL(remove_generation(dir.path, 2), 2u);
  BOOST_CHECK(names_in(dir.path) ==
              (std::set<std::string>{
                  checkpoint_file_name(1, 0), checkpoint_file_name(1, 1),
                  checkpoint_file_name(12, 0), checkpoint_file_name(12, 1),
                  checkpoint_file_name(2, 2) + ".tmp"}));
  BOOST_CHECK_EQUAL(remove_generation(dir.path, 2), 0u);
  BOOST_CHECK_EQUAL(remove_generation(dir / "missing", 2), 0u);
}

BOOST_AUTO_TEST_CASE(read_manifest_finds_the_manifest_or_says_it_is_bad) {
  temp_dir dir;
  auto none = read_manifest(dir.path);
  BOOST_REQUIRE(!none);
  BOOST_CHECK(bad_file_saying(error_of(none), "cannot open"));
  auto m = sample_manifest();
  BOOST_REQUIRE(!write_checked_file(dir / manifest_name, encode(m)));
  auto got = read_manifest(dir.path);
  BOOST_REQUIRE_MESSAGE(got, why(got));
  check_same(m, *got);
  // A whole file whose payload does not decode is a bad file too.
  BOOST_REQUIRE(!write_checked_file(dir / manifest_name, noise(64)));
  auto garbled = read_manifest(dir.path);
  BOOST_REQUIRE(!garbled);
  BOOST_CHECK(error_of(garbled) == errc::bad_file);
}

BOOST_AUTO_TEST_CASE(read_checkpoint_of_a_manifest_does_not_crash) {
  temp_dir dir;
  auto path = dir / manifest_name;
  BOOST_REQUIRE(!write_checked_file(path, encode(sample_manifest())));
  auto x = read_checkpoint(path);
  if (x)
    BOOST_TEST_MESSAGE("a manifest decodes as generation " << x->generation);
  else
    BOOST_CHECK_MESSAGE(error_of(x) == errc::bad_file, why(x));
  BOOST_CHECK(error_of(read_checkpoint(dir / "missing")) == errc::bad_file);
  BOOST_REQUIRE(!write_checked_file(path, noise(64)));
  BOOST_CHECK(error_of(read_checkpoint(path)) == errc::bad_file);
}

BOOST_AUTO_TEST_SUITE_END()

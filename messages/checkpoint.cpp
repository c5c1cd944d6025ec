// Checkpoint files: codec, checked header, atomic writes.
#include "messages/checkpoint.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "messages/checkpoint.capnp.h"
#include "messages/errors.hpp"
#include "messages/frame_codec.hpp"

namespace troupe {

namespace {

using detail::decode_guarded;
using detail::frame_reader;
using detail::to_frame;

constexpr char magic[8] = {'T', 'R', 'O', 'U', 'P', 'E', 'C', 'K'};
constexpr size_t header_bytes = 24;
constexpr const char* file_prefix = "ckpt-";

caf::error bad(const char* what) {
  return caf::make_error(errc::malformed_message, what);
}

caf::error bad_file(const std::string& path, const std::string& what) {
  return caf::make_error(errc::bad_file, path + ": " + what);
}

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

void put_u64(uint8_t* p, uint64_t x) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<uint8_t>(x >> (8 * i));
}

uint64_t get_u64(const uint8_t* p) {
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i)
    x |= uint64_t{p[i]} << (8 * i);
  return x;
}

kj::ArrayPtr<const kj::byte> bytes_of(const std::vector<float>& xs) {
  return {reinterpret_cast<const kj::byte*>(xs.data()), xs.size() * 4};
}

caf::error read_floats(capnp::Data::Reader d, uint32_t floats,
                       std::vector<float>& out) {
  if (d.size() == 0) {
    out.clear();
    return caf::none;
  }
  if (d.size() != size_t{floats} * 4)
    return bad("checkpoint array of the wrong length");
  out.resize(floats);
  std::memcpy(out.data(), d.begin(), d.size());
  return caf::none;
}

void write_store(schema::StoreState::Builder b, const store_snapshot& x) {
  b.setId(x.id);
  b.setOrigin(x.origin);
  b.setVersion(x.version);
  b.setRounds(x.rounds);
  auto ws = b.initWorkers(static_cast<unsigned>(x.workers.size()));
  for (unsigned i = 0; i < x.workers.size(); ++i) {
    auto& w = x.workers[i];
    ws[i].setRank(w.rank);
    ws[i].setClock(w.clock);
    auto ps = ws[i].initParts(static_cast<unsigned>(w.parts.size()));
    for (unsigned j = 0; j < w.parts.size(); ++j)
      ps.set(j, w.parts[j]);
    ws[i].setCut(w.cut);
    auto ts = ws[i].initTaken(static_cast<unsigned>(w.taken.size()));
    for (unsigned j = 0; j < w.taken.size(); ++j) {
      ts[j].setKey(w.taken[j].key);
      ts[j].setIndex(w.taken[j].index);
    }
    auto hs = ws[i].initHeld(static_cast<unsigned>(w.held.size()));
    for (unsigned j = 0; j < w.held.size(); ++j) {
      auto& h = w.held[j];
      hs[j].setClock(h.clock);
      hs[j].setKey(h.id.key);
      hs[j].setIndex(h.id.index);
      hs[j].setPushes(h.pushes);
      hs[j].setValues(bytes_of(h.values));
    }
  }
  auto ss = b.initSlices(static_cast<unsigned>(x.slices.size()));
  for (unsigned i = 0; i < x.slices.size(); ++i) {
    auto& s = x.slices[i];
    auto o = ss[i];
    o.setKey(s.id.key);
    o.setIndex(s.id.index);
    o.setFloats(s.floats);
    o.setReady(s.ready);
    o.setValues(bytes_of(s.values));
    o.setUpdates(s.updates);
    o.setStep(s.step);
    auto st = o.initState(static_cast<unsigned>(s.state.size()));
    for (unsigned j = 0; j < s.state.size(); ++j)
      st.set(j, bytes_of(s.state[j]));
  }
}

caf::error read_store(schema::StoreState::Reader r, store_snapshot& x) {
  x.id = r.getId();
  x.origin = r.getOrigin();
  x.version = r.getVersion();
  x.rounds = r.getRounds();
  std::set<uint32_t> ranks;
  for (auto w : r.getWorkers()) {
    if (!ranks.insert(w.getRank()).second)
      return bad("a worker twice in a checkpointed store");
    worker_snapshot ws{w.getRank(), w.getClock(), {}, w.getCut(), {}, {}};
    for (auto p : w.getParts())
      ws.parts.push_back(p);
    std::set<slice_id> taken;
    for (auto t : w.getTaken())
      if (!taken.insert(slice_id{t.getKey(), t.getIndex()}).second)
        return bad("a slice taken twice by a checkpointed worker");
    ws.taken.assign(taken.begin(), taken.end());
    std::set<std::pair<uint64_t, slice_id>> held;
    for (auto h : w.getHeld()) {
      worker_snapshot::held_slice out{
          h.getClock(), slice_id{h.getKey(), h.getIndex()}, h.getPushes(), {}};
      if (!held.insert({out.clock, out.id}).second)
        return bad("a held slice twice in a checkpointed worker");
      if (h.getValues().size() % sizeof(float) != 0 || out.pushes == 0)
        return bad("a checkpointed held slice of a broken length or count");
      if (auto err = read_floats(
              h.getValues(), h.getValues().size() / sizeof(float), out.values))
        return err;
      ws.held.push_back(std::move(out));
    }
    x.workers.push_back(std::move(ws));
  }
  std::set<slice_id> seen;
  for (auto s : r.getSlices()) {
    slice_snapshot out;
    out.id = slice_id{s.getKey(), s.getIndex()};
    if (!seen.insert(out.id).second)
      return bad("a slice twice in a checkpointed store");
    out.floats = s.getFloats();
    out.ready = s.getReady();
    if (auto err = read_floats(s.getValues(), out.floats, out.values))
      return err;
    if (out.ready != (out.values.size() == out.floats) && out.floats > 0)
      return bad("checkpointed slice: values do not match ready");
    out.updates = s.getUpdates();
    out.step = s.getStep();
    if (s.getState().size() > 8)
      return bad("checkpointed slice: too many optimizer arrays");
    for (auto d : s.getState()) {
      out.state.emplace_back();
      if (auto err = read_floats(d, out.floats, out.state.back()))
        return err;
    }
    x.slices.push_back(std::move(out));
  }
  return caf::none;
}

/// Writes all of `p[0, n)` to `fd`.
bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    auto k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

std::string folder_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

} // namespace

frame encode(const checkpoint_data& x) {
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::Checkpoint>();
  b.setGeneration(x.generation);
  b.setServer(x.server);
  b.setMode(x.mode);
  b.setOptimizer(x.optimizer);
  auto ss = b.initStores(static_cast<unsigned>(x.stores.size()));
  for (unsigned i = 0; i < x.stores.size(); ++i)
    write_store(ss[i], x.stores[i]);
  return to_frame(msg);
}

frame encode(const checkpoint_manifest& x) {
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::Manifest>();
  b.setGeneration(x.generation);
  b.setVersion(x.version);
  b.setMode(x.mode);
  b.setOptimizer(x.optimizer);
  auto fs = b.initFiles(static_cast<unsigned>(x.files.size()));
  for (unsigned i = 0; i < x.files.size(); ++i)
    fs.set(i, x.files[i]);
  b.setTimeMs(x.time_ms);
  b.setClocksPerStep(x.clocks_per_step);
  return to_frame(msg);
}

caf::error decode(bytes_view f, checkpoint_data& x) {
  x = checkpoint_data{};
  return decode_guarded(
      f, "Checkpoint",
      [&x](frame_reader& rd) {
        auto r = rd.get<schema::Checkpoint>();
        x.generation = r.getGeneration();
        x.server = r.getServer();
        x.mode = r.getMode().cStr();
        x.optimizer = r.getOptimizer().cStr();
        std::set<uint64_t> ids;
        for (auto s : r.getStores()) {
          x.stores.emplace_back();
          if (auto err = read_store(s, x.stores.back()))
            return err;
          if (!ids.insert(x.stores.back().id).second)
            return bad("a store twice in a checkpoint");
        }
        return caf::error{};
      },
      max_checkpoint_bytes);
}

caf::error decode(bytes_view f, checkpoint_manifest& x) {
  x = checkpoint_manifest{};
  return decode_guarded(f, "Manifest", [&x](frame_reader& rd) {
    auto r = rd.get<schema::Manifest>();
    x.generation = r.getGeneration();
    x.version = r.getVersion();
    x.mode = r.getMode().cStr();
    x.optimizer = r.getOptimizer().cStr();
    for (auto name : r.getFiles()) {
      std::string s = name.cStr();
      if (s.empty() || s.find('/') != std::string::npos || s[0] == '.')
        return bad("manifest names a file outside its folder");
      x.files.push_back(std::move(s));
    }
    x.time_ms = r.getTimeMs();
    x.clocks_per_step = r.getClocksPerStep();
    return caf::error{};
  });
}

std::string checkpoint_file_name(uint64_t generation, uint32_t server) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s%08llu-server-%u.bin", file_prefix,
                static_cast<unsigned long long>(generation), server);
  return buf;
}

caf::error write_checked_file(const std::string& path, const frame& payload,
                              const std::function<void()>& midway) {
  uint8_t header[header_bytes];
  std::memcpy(header, magic, 8);
  put_u64(header + 8, payload.bytes.size());
  put_u64(header + 16, fnv1a(payload.bytes.data(), payload.bytes.size()));
  auto tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return bad_file(tmp, std::string{"cannot create: "} + std::strerror(errno));
  auto half = payload.bytes.size() / 2;
  bool ok = write_all(fd, header, header_bytes) &&
            write_all(fd, payload.bytes.data(), half);
  if (ok && midway) {
    ::fsync(fd);
    try {
      midway();
    } catch (...) {
      ::close(fd); // a throwing hook must not leak the descriptor
      throw;
    }
  }
  ok =
      ok &&
      write_all(fd, payload.bytes.data() + half, payload.bytes.size() - half) &&
      ::fsync(fd) == 0;
  auto err = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return bad_file(tmp, std::string{"cannot write: "} + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return bad_file(path, std::string{"cannot rename: "} + std::strerror(err));
  }
  // The rename itself is durable only once the folder is synced.
  int dfd = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return caf::none;
}

caf::expected<frame> read_checked_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return bad_file(path, std::string{"cannot open: "} + std::strerror(errno));
  struct stat sb;
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    return bad_file(path, "not a regular file");
  }
  auto size = static_cast<size_t>(sb.st_size);
  if (size < header_bytes) {
    ::close(fd);
    return bad_file(path, "too short to be a troupe checkpoint (" +
                              std::to_string(size) + " bytes)");
  }
  if (size - header_bytes > max_checkpoint_bytes) {
    ::close(fd);
    return bad_file(path, "larger than any checkpoint troupe writes");
  }
  std::vector<uint8_t> all(size);
  size_t got = 0;
  while (got < size) {
    auto k = ::read(fd, all.data() + got, size - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    got += static_cast<size_t>(k);
  }
  ::close(fd);
  if (got != size)
    return bad_file(path, "read failed");
  if (std::memcmp(all.data(), magic, 8) != 0)
    return bad_file(path, "not a troupe checkpoint (bad magic)");
  auto len = get_u64(all.data() + 8);
  if (len != size - header_bytes)
    return bad_file(path, "torn: header says " + std::to_string(len) +
                              " bytes, the file holds " +
                              std::to_string(size - header_bytes));
  frame out;
  out.bytes.assign(all.begin() + header_bytes, all.end());
  if (fnv1a(out.bytes.data(), out.bytes.size()) != get_u64(all.data() + 16))
    return bad_file(path, "corrupt: checksum mismatch");
  return out;
}

caf::expected<checkpoint_manifest> read_manifest(const std::string& dir) {
  auto path = dir + "/" + manifest_name;
  auto f = read_checked_file(path);
  if (!f)
    return f.error();
  checkpoint_manifest m;
  if (auto err = decode(*f, m))
    return bad_file(path, describe(err));
  return m;
}

caf::expected<checkpoint_data> read_checkpoint(const std::string& path) {
  auto f = read_checked_file(path);
  if (!f)
    return f.error();
  checkpoint_data x;
  if (auto err = decode(*f, x))
    return bad_file(path, describe(err));
  return x;
}

namespace {

/// Removes the checkpoint files of `dir` for which `doomed(gen, named, tmp)`
/// holds: `gen` the generation the name gives (`named`: it gives one),
/// `tmp` whether it is a temporary file. Returns how many it removed.
template <class Doomed>
size_t remove_checkpoint_files(const std::string& dir, Doomed doomed) {
  auto* d = ::opendir(dir.c_str());
  if (d == nullptr)
    return 0;
  std::vector<std::string> paths;
  while (auto* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind(file_prefix, 0) != 0)
      continue;
    bool tmp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
    unsigned long long gen = 0;
    bool named =
        std::sscanf(name.c_str() + std::strlen(file_prefix), "%llu", &gen) == 1;
    if (doomed(uint64_t{gen}, named, tmp))
      paths.push_back(dir + "/" + name);
  }
  ::closedir(d);
  size_t n = 0;
  for (auto& p : paths)
    n += ::unlink(p.c_str()) == 0 ? 1 : 0;
  return n;
}

} // namespace

size_t remove_old_checkpoints(const std::string& dir, uint64_t keep_from) {
  return remove_checkpoint_files(
      dir, [keep_from](uint64_t gen, bool named, bool tmp) {
        return (named && gen < keep_from) || (tmp && !named);
      });
}

size_t remove_generation(const std::string& dir, uint64_t generation) {
  return remove_checkpoint_files(
      dir, [generation](uint64_t gen, bool named, bool tmp) {
        return named && gen == generation && !tmp;
      });
}

} // namespace troupe

// See export_npz.hpp.
#include "actors/node/export_npz.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <utility>

#include <zip.h>

#include "actors/base/log.hpp"
#include "messages/checkpoint.hpp"
#include "messages/errors.hpp"

namespace troupe {

caf::expected<std::map<uint64_t, std::vector<float>>>
checkpoint_arrays(const std::string& dir) {
  auto m = read_manifest(dir);
  if (!m)
    return std::move(m.error());
  // key -> index -> values, each slice once over every store of every file
  std::map<uint64_t, std::map<uint32_t, std::vector<float>>> slices;
  for (auto& name : m->files) {
    auto c = read_checkpoint(dir + "/" + name);
    if (!c)
      return std::move(c.error());
    for (auto& store : c->stores)
      for (auto& s : store.slices) {
        if (!s.ready)
          return caf::make_error(errc::bad_file, "slice", s.id.key, s.id.index,
                                 "in", name, "was never initialised");
        auto [at, fresh] = slices[s.id.key].emplace(s.id.index, s.values);
        if (!fresh && at->second != s.values)
          return caf::make_error(errc::bad_file, "slice", s.id.key, s.id.index,
                                 "differs between two stores (", name, ")");
      }
  }
  if (slices.empty())
    return caf::make_error(errc::bad_file, "checkpoint", dir,
                           "holds no arrays");
  std::map<uint64_t, std::vector<float>> out;
  for (auto& [key, parts] : slices) {
    auto& xs = out[key];
    uint32_t expect = 0;
    for (auto& [index, values] : parts) {
      if (index != expect)
        return caf::make_error(errc::bad_file, "array", key, "lacks slice",
                               expect, "of generation", m->generation);
      xs.insert(xs.end(), values.begin(), values.end());
      ++expect;
    }
  }
  return out;
}

std::string npy_of(const std::vector<float>& xs) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                     std::to_string(xs.size()) + ",), }";
  // magic (6) + version (2) + header length (2) + dict, padded with spaces
  // and a newline to a multiple of 64 bytes
  auto len = dict.size() + 1;
  len += (64 - (10 + len) % 64) % 64;
  dict.resize(len - 1, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>(len >> 8);
  out += dict;
  out.append(reinterpret_cast<const char*>(xs.data()),
             xs.size() * sizeof(float)); // little-endian hosts only
  return out;
}

std::string not_an_npz(const std::string& path) {
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st))
    return {};
  if (!std::filesystem::is_regular_file(st))
    return path + " is there and is no file: give the .npz a new name";
  if (std::filesystem::file_size(path, ec) == 0)
    return {}; // made for it beforehand (mktemp)
  std::ifstream in{path, std::ios::binary};
  char head[4] = {};
  in.read(head, sizeof head);
  // A zip starts with a local file header, or, empty, its end record.
  if (in.gcount() == 4 && head[0] == 'P' && head[1] == 'K' &&
      ((head[2] == 3 && head[3] == 4) || (head[2] == 5 && head[3] == 6)))
    return {};
  return path + " is there and is no .npz (no zip): not replaced; give"
                " the .npz a new name";
}

caf::error write_npz(const std::string& path,
                     const std::map<uint64_t, std::vector<float>>& arrays) {
  int err = 0;
  auto* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  if (z == nullptr) {
    zip_error_t ze;
    zip_error_init_with_code(&ze, err);
    auto e = caf::make_error(errc::bad_file, "cannot create", path,
                             zip_error_strerror(&ze));
    zip_error_fini(&ze);
    return e;
  }
  // The .npy bytes live until zip_close writes them.
  std::vector<std::string> files;
  files.reserve(arrays.size());
  for (auto& [key, xs] : arrays) {
    files.push_back(npy_of(xs));
    auto* src =
        zip_source_buffer(z, files.back().data(), files.back().size(), 0);
    auto name = "key_" + std::to_string(key) + ".npy";
    if (src == nullptr || zip_file_add(z, name.c_str(), src, 0) < 0) {
      if (src != nullptr)
        zip_source_free(src);
      auto e = caf::make_error(errc::bad_file, "cannot add", name, "to", path,
                               zip_strerror(z));
      zip_discard(z);
      return e;
    }
  }
  if (zip_close(z) != 0) {
    auto e =
        caf::make_error(errc::bad_file, "cannot write", path, zip_strerror(z));
    zip_discard(z);
    return e;
  }
  return caf::none;
}

} // namespace troupe

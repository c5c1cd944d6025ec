// Slicing and bounded-load consistent hashing.
#include "actors/cluster/placement.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace troupe {

namespace {

uint64_t mix(uint64_t x) { // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t floats_of(const std::map<uint64_t, uint64_t>& sizes, slice_id id,
                   uint32_t slice_floats) {
  auto r = slice_range(sizes.at(id.key), slice_floats, id.index);
  return r.second - r.first;
}

} // namespace

uint64_t slice_count(uint64_t size, uint32_t slice_floats) {
  return (size + slice_floats - 1) / slice_floats;
}

std::pair<uint64_t, uint64_t> slice_range(uint64_t size, uint32_t slice_floats,
                                          uint32_t index) {
  auto first = std::min<uint64_t>(uint64_t{index} * slice_floats, size);
  return {first, std::min<uint64_t>(first + slice_floats, size)};
}

uint64_t slice_hash(slice_id id) {
  return mix(mix(id.key) ^ (uint64_t{id.index} * 0xd6e8feb86659fd93ull));
}

hash_ring::hash_ring(const std::vector<uint32_t>& servers, uint32_t vnodes)
    : servers_(servers.size()) {
  for (auto s : servers)
    for (uint32_t v = 0; v < vnodes; ++v)
      points_.emplace_back(mix((uint64_t{s} << 32) | v), s);
  std::sort(points_.begin(), points_.end());
}

std::vector<uint32_t> hash_ring::preference(uint64_t h) const {
  std::vector<uint32_t> out;
  if (points_.empty())
    return out;
  auto start = std::lower_bound(points_.begin(), points_.end(),
                                std::make_pair(h, uint32_t{0})) -
               points_.begin();
  for (size_t i = 0; i < points_.size() && out.size() < servers_; ++i) {
    auto s = points_[(start + i) % points_.size()].second;
    if (std::find(out.begin(), out.end(), s) == out.end())
      out.push_back(s);
  }
  return out;
}

uint32_t backup_of(uint32_t server, std::vector<uint32_t> servers) {
  std::sort(servers.begin(), servers.end());
  auto next = std::upper_bound(servers.begin(), servers.end(), server);
  if (next == servers.end())
    next = servers.begin();
  return next == servers.end() ? server : *next;
}

std::vector<slice_place> place(const std::vector<key_info>& keys,
                               const std::vector<slice_place>& current,
                               const std::vector<uint32_t>& servers,
                               const placement_params& params) {
  std::map<uint64_t, uint64_t> sizes;
  uint64_t total = 0;
  for (auto& k : keys) {
    sizes[k.key] = k.size;
    total += k.size;
  }
  std::set<uint32_t> live(servers.begin(), servers.end());
  std::map<uint32_t, uint64_t> load;
  for (auto s : servers)
    load[s] = 0;
  // Keep every slice whose server lives; collect the rest.
  std::vector<slice_place> out;
  std::set<slice_id> kept;
  for (auto& p : current) {
    if (live.count(p.server) == 0 || sizes.count(p.key) == 0)
      continue;
    out.push_back(p);
    kept.insert(slice_id{p.key, p.index});
    load[p.server] +=
        floats_of(sizes, slice_id{p.key, p.index}, params.slice_floats);
  }
  auto cap = static_cast<uint64_t>(
      std::ceil((1.0 + params.slack) * double(total) / double(servers.size())));
  // Largest slices first, so that small ones fill what is left: the
  // placement then stays balanced even when slices are coarse.
  std::vector<std::pair<uint64_t, slice_id>> todo; // (floats, slice)
  for (auto& k : keys)
    for (uint32_t i = 0; i < slice_count(k.size, params.slice_floats); ++i)
      if (kept.count(slice_id{k.key, i}) == 0)
        todo.emplace_back(
            floats_of(sizes, slice_id{k.key, i}, params.slice_floats),
            slice_id{k.key, i});
  std::stable_sort(todo.begin(), todo.end(), [](const auto& a, const auto& b) {
    return a.first > b.first;
  });
  hash_ring ring{servers, params.vnodes};
  for (auto& [floats, id] : todo) {
    auto pref = ring.preference(slice_hash(id));
    // First server on the ring with room; else the least loaded.
    auto chosen = *std::min_element(
        pref.begin(), pref.end(),
        [&load](uint32_t a, uint32_t b) { return load[a] < load[b]; });
    for (auto s : pref)
      if (load[s] + floats <= cap) {
        chosen = s;
        break;
      }
    load[chosen] += floats;
    out.push_back(slice_place{id.key, id.index, chosen});
  }
  std::sort(out.begin(), out.end(),
            [](const slice_place& a, const slice_place& b) {
              return slice_id{a.key, a.index} < slice_id{b.key, b.index};
            });
  return out;
}

std::map<uint32_t, uint64_t> load_of(const std::vector<key_info>& keys,
                                     const std::vector<slice_place>& placement,
                                     uint32_t slice_floats) {
  std::map<uint64_t, uint64_t> sizes;
  for (auto& k : keys)
    sizes[k.key] = k.size;
  std::map<uint32_t, uint64_t> load;
  for (auto& p : placement)
    load[p.server] += floats_of(sizes, slice_id{p.key, p.index}, slice_floats);
  return load;
}

} // namespace troupe

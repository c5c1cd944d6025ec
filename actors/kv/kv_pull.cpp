// Filling pulled arrays from replies, and landing replies in place.
#include "actors/kv/kv_pull.hpp"

#include <algorithm>

#include "actors/cluster/placement.hpp"
#include "messages/errors.hpp"

namespace troupe {

void pull_target::add(uint64_t key, size_t n, uint32_t bound,
                      std::vector<float> memory) {
  index_of[key] = out.size();
  out.push_back(named_array{key, std::move(memory)});
  if (out.back().values.empty())
    out.back().values.reserve(n);
  floats.push_back(n);
  got.push_back(0);
  seen.emplace_back(slice_count(n, bound), false);
}

float* pull_target::slot(slice_id id, size_t n, uint32_t bound) {
  auto i = index_of.find(id.key);
  if (i == index_of.end())
    return nullptr;
  auto total = floats[i->second];
  auto& dst = out[i->second].values;
  if (dst.size() != total || id.index >= slice_count(total, bound))
    return nullptr;
  auto range = slice_range(total, bound, id.index);
  return n == range.second - range.first ? dst.data() + range.first : nullptr;
}

caf::error pull_target::complete() const {
  for (size_t k = 0; k < out.size(); ++k)
    if (got[k] != floats[k] || out[k].values.size() != floats[k])
      return caf::make_error(errc::malformed_message,
                             "pull reply lacks slices of key", out[k].key);
  return caf::none;
}

caf::error copy_reply(bytes_view f, pull_target& t, uint32_t bound) {
  uint64_t version = 0;
  return visit_pull_reply(
      f, version, [&](slice_id id, const float* xs, size_t n) -> caf::error {
        auto i = t.index_of.find(id.key);
        if (i == t.index_of.end())
          return caf::make_error(errc::malformed_message, "unasked slice");
        auto& dst = t.out[i->second].values;
        auto total = t.floats[i->second];
        if (id.index >= slice_count(total, bound))
          return caf::make_error(errc::bad_shape, id.key, id.index);
        auto range = slice_range(total, bound, id.index);
        if (n != range.second - range.first)
          return caf::make_error(errc::bad_shape, id.key, id.index);
        auto& seen = t.seen[i->second];
        if (seen[id.index])
          return caf::make_error(errc::malformed_message, "slice", id.key,
                                 id.index, "twice in pull replies");
        seen[id.index] = true;
        t.got[i->second] += n;
        if (f.segments != nullptr) { // landed: in place, or in the buffer
          if (dst.size() == total && xs == dst.data() + range.first)
            return caf::none;
          auto p = reinterpret_cast<const uint8_t*>(xs);
          if (p < f.data || p + n * sizeof(float) > f.data + f.size)
            return caf::make_error(errc::malformed_message, "slice", id.key,
                                   id.index, "of a pull reply out of place");
        }
        if (range.first == dst.size()) {
          dst.insert(dst.end(), xs, xs + n);
        } else {
          if (dst.size() < range.second)
            dst.resize(range.second);
          std::copy(xs, xs + n, dst.begin() + range.first);
        }
        return caf::none;
      });
}

void pull_landing::place(const std::vector<bytes_view>& segs,
                         std::vector<uint8_t*>& at) {
  bytes_view f;
  f.segments = segs.data();
  f.segment_count = segs.size();
  uint64_t version = 0;
  // Only where values lie is read here (segments 1.. are in address
  // order), not the values; a frame that does not parse lands nothing,
  // and copy_reply reports it.
  auto find = [&](slice_id id, const float* xs, size_t n) -> caf::error {
    auto p = reinterpret_cast<const uint8_t*>(xs);
    auto i = std::lower_bound(
        segs.begin() + 1, segs.end(), p,
        [](const bytes_view& s, const uint8_t* x) { return s.data < x; });
    while (i != segs.end() && i->data == p && i->size == 0)
      ++i;
    if (i == segs.end() || i->data != p || i->size != n * sizeof(float))
      return caf::none;
    if (auto dst = t->slot(id, n, bound))
      at[static_cast<size_t>(i - segs.begin())] =
          reinterpret_cast<uint8_t*>(dst);
    return caf::none;
  };
  visit_pull_reply(f, version, find);
}

} // namespace troupe

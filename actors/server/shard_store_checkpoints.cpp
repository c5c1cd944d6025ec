// Checkpoints of a shard store: its applied state (snapshot), a
// checkpoint's state taken back (restore), and where one may be taken
// (between_rounds, at_version); see shard_store.hpp.
#include "actors/server/shard_store.hpp"

#include <algorithm>

#include "messages/errors.hpp"

namespace troupe {

store_snapshot shard_store::snapshot() const {
  store_snapshot out;
  bool sync = mode_.kind == consistency::kind_t::sync;
  // A replica's rounds held back are not in its slices yet (replica()).
  auto applied = deferred_.empty() ? rounds_applied_ : deferred_.begin()->first;
  out.version = sync ? applied : version_;
  out.rounds = applied;
  for (auto& [w, wc] : workers_) {
    worker_snapshot ws{w,
                       wc.clock,
                       {wc.parts.begin(), wc.parts.end()},
                       wc.cut,
                       {wc.taken.begin(), wc.taken.end()},
                       {}};
    if (sync) { // cut at the rounds applied
      ws.clock = std::min(wc.clock, applied);
      ws.parts.clear();
      ws.cut = 0;
      ws.taken.clear();
    }
    for (auto& [clock, r] : wc.held)
      for (auto& [rank, mine] : r.ranks)
        for (auto& [id, c] : mine)
          ws.held.push_back({clock, id, c.pushes, {c.data(), c.data() + c.n}});
    out.workers.push_back(std::move(ws));
  }
  for (auto& [id, s] : slices_) {
    slice_snapshot x;
    x.id = id;
    x.floats = s.floats;
    x.ready = s.ready;
    if (s.ready)
      x.values = s.values;
    out.slices.push_back(std::move(x));
  }
  return out;
}

size_t
shard_store::restore(uint64_t version, uint64_t rounds,
                     const std::vector<worker_snapshot>& workers,
                     const std::map<slice_id, const slice_snapshot*>& slices) {
  catch_up();
  version_ = std::max(version_, version);
  if (mode_.kind == consistency::kind_t::sync) {
    rounds_applied_ = std::max(rounds_applied_, rounds);
    version_ = rounds_applied_;
  }
  for (auto& w : workers) { // a live worker that has not pushed takes it now
    worker_clock wc;
    wc.clock = w.clock;
    wc.parts.insert(w.parts.begin(), w.parts.end());
    wc.cut = w.cut;
    wc.taken.insert(w.taken.begin(), w.taken.end());
    for (auto& h : w.held) { // those of slices we own, whole
      auto s = slices_.find(h.id);
      if (s != slices_.end() && s->second.floats == h.values.size())
        wc.held[h.clock].ranks[w.rank][h.id] =
            contribution{h.values, nullptr, nullptr, h.values.size(), h.pushes};
    }
    auto i = workers_.find(w.rank);
    if (i != workers_.end() && i->second.fresh)
      i->second = std::move(wc);
    else if (i == workers_.end())
      resume_clocks_[w.rank] = std::move(wc);
  }
  if (mode_.kind == consistency::kind_t::sync) // no one starts below a round
    for (auto& [w, wc] : workers_)
      if (wc.fresh && wc.clock < rounds_applied_)
        wc.start_at(rounds_applied_);
  size_t n = 0;
  for (auto& [id, s] : slices_) {
    auto i = slices.find(id);
    if (s.ready || i == slices.end() || !i->second->ready ||
        i->second->floats != s.floats)
      continue;
    s.values = i->second->values;
    s.ready = true;
    ++n;
  }
  return n;
}

bool shard_store::between_rounds() const {
  return rounds_.empty() && deferred_.empty();
}

caf::error shard_store::at_version(uint64_t v, std::function<void()> fn) {
  if (v == version_) {
    fn();
    return caf::none;
  }
  if (v < version_ || mode_.kind != consistency::kind_t::sync)
    return caf::make_error(errc::clock_gap, "checkpoint at version", v,
                           "but the store is at", version_);
  at_version_[v].push_back(std::move(fn));
  return caf::none;
}

} // namespace troupe

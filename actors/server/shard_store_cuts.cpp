// Sync rounds applied as they complete, and atomic pushes in a shard store
// (docs/atomic-pushes.md): when a tentative round is final, the undo image,
// a replica's rounds held back, and the cluster's cut of a departed
// worker's clocks; see shard_store.hpp.
#include "actors/server/shard_store.hpp"

namespace troupe {

void shard_store::complete_rounds() {
  if (mode_.kind != consistency::kind_t::sync || workers_.empty())
    return settle();
  while (min_clock() > rounds_applied_) {
    auto i = rounds_.find(rounds_applied_);
    auto to = rounds_applied_ + 1;
    if (i != rounds_.end() && replica_) {
      deferred_.emplace(i->first, std::move(i->second)); // settle() applies it
      rounds_.erase(i);
    } else if (i != rounds_.end()) {
      if (await_cuts_) {
        settle();
        if (!image_.taken) { // the state this round may have to be undone to
          image_.restore_hook = capture_ ? capture_(update_) : nullptr;
          image_.taken = true;
        }
      }
      apply_round(i->second, await_cuts_);
      if (await_cuts_)
        tentative_.emplace(i->first, std::move(i->second));
      else
        recycle(i->second);
      rounds_.erase(i);
    } else {
      // Rounds no push reached here (workers met at a higher clock: this
      // store joined late) change nothing: they pass at once, up to the
      // next round with pushes or the next version something waits for,
      // not one at a time (a first push's clock may be large).
      to = min_clock();
      if (auto n = rounds_.upper_bound(rounds_applied_); n != rounds_.end())
        to = std::min(to, n->first);
      if (auto v = at_version_.upper_bound(rounds_applied_);
          v != at_version_.end())
        to = std::min(to, v->first);
    }
    version_ = rounds_applied_ = to;
    auto due = at_version_.find(version_);
    if (due != at_version_.end()) {
      auto fns = std::move(due->second);
      at_version_.erase(due);
      for (auto& fn : fns)
        fn();
    }
  }
  settle();
}

// Rounds are tentative only in a store that awaits cuts.
bool shard_store::settled(uint64_t clock, const round_parts& r) const {
  for (auto& [w, mine] : r.ranks) {
    auto cut = cuts_.find(w);
    if (cut != cuts_.end() && clock < cut->second)
      continue; // the cluster keeps it
    auto live = workers_.find(w);
    if (live == workers_.end())
      return false; // its cut is not known yet
    // Its push of clock + 1 has begun here: it pulled clock + 1 from every
    // server, so its push of `clock` is whole on every one.
    auto& wc = live->second;
    if (wc.clock <= clock + 1 && (wc.clock < clock + 1 || wc.parts.empty()))
      return false;
  }
  return true;
}

void shard_store::settle() {
  for (auto& [clock, r] : tentative_)
    if (!settled(clock, r))
      return;
  if (image_.taken) {
    for (auto& [clock, r] : tentative_)
      recycle(r);
    tentative_.clear();
    image_.taken = false;
    for (auto i = image_.slices.begin(); i != image_.slices.end();)
      if (slices_.count(i->first) == 0) { // moved away
        i = image_.slices.erase(i);
      } else {
        i->second.taken = false;
        ++i;
      }
  }
  // A replica's rounds held back, once nothing can take a part out: for
  // good, as a primary's settled ones are (the same pushes, in the same
  // order over the same state, so the same bits).
  while (!deferred_.empty() &&
         settled(deferred_.begin()->first, deferred_.begin()->second)) {
    apply_round(deferred_.begin()->second, false);
    recycle(deferred_.begin()->second);
    deferred_.erase(deferred_.begin());
  }
}

void shard_store::catch_up() {
  settle();
  if (deferred_.empty())
    return;
  if (!image_.taken) {
    image_.restore_hook = capture_ ? capture_(update_) : nullptr;
    image_.taken = true;
  }
  for (auto& [clock, r] : deferred_) {
    apply_round(r, true);
    tentative_.emplace(clock, std::move(r));
  }
  deferred_.clear();
}

void shard_store::replica(bool on) {
  replica_ = on && await_cuts_ && mode_.kind == consistency::kind_t::sync;
  if (!replica_)
    catch_up();
}

void shard_store::await_cuts(capture_fn capture, step_from_fn step) {
  await_cuts_ = true;
  capture_ = std::move(capture); // sync's undo image
  step_from_ = std::move(step);
}

bool shard_store::holds_pushes() const {
  return await_cuts_ && mode_.kind != consistency::kind_t::sync;
}

size_t shard_store::held() const {
  size_t n = 0;
  for (auto* ws : {&workers_, &departed_})
    for (auto& [w, wc] : *ws)
      n += wc.held.size();
  return n;
}

bool shard_store::release(worker_clock& wc, uint64_t upto) {
  // Only clocks whole here: `upto` above them would be a worker's error.
  upto = std::min(upto, wc.clock);
  bool any = false;
  while (!wc.held.empty() && wc.held.begin()->first < upto) {
    auto h = wc.held.begin();
    apply_round(h->second, false);
    ++version_;
    recycle(h->second);
    wc.held.erase(h);
    any = true;
  }
  return any;
}

bool shard_store::cut(uint32_t w, uint64_t keep) {
  if (!await_cuts_ || workers_.count(w) != 0)
    return false;
  cuts_[w] = keep;
  auto d = departed_.find(w);
  if (d != departed_.end() && holds_pushes()) {
    release(d->second, keep);
    for (auto& [clock, r] : d->second.held)
      recycle(r);
    d->second.held.clear();
  }
  if (d != departed_.end() && d->second.clock > keep)
    d->second.start_at(keep); // a rank back pushes them again
  for (auto& [clock, r] : rounds_)
    if (clock >= keep)
      r.erase(w);
  for (auto& [clock, r] : deferred_) // never applied: nothing to undo
    if (clock >= keep)
      r.erase(w);
  bool undo = false;
  for (auto& [clock, r] : tentative_)
    if (clock >= keep && r.erase(w))
      undo = true;
  if (undo && image_.taken) { // back to the image, then rounds without w
    for (auto& [id, c] : image_.slices) {
      auto s = slices_.find(id);
      if (c.taken && s != slices_.end())
        s->second.values = c.values;
    }
    if (image_.restore_hook)
      image_.restore_hook(update_);
    for (auto& [clock, r] : tentative_)
      apply_round(r, false);
  }
  settle();
  return true;
}

std::optional<uint64_t> shard_store::whole_clocks(uint32_t w) const {
  auto d = departed_.find(w);
  if (workers_.count(w) != 0 || d == departed_.end() ||
      (d->second.fresh && !d->second.known))
    return std::nullopt;
  return d->second.clock;
}

} // namespace troupe

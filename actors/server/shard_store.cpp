// Mode rules of a shard server's slices; see the header for the clock model.
#include "actors/server/shard_store.hpp"

#include <algorithm>
#include <limits>

#include "kernels/wide_loop.hpp"
#include "messages/errors.hpp"

namespace troupe {

namespace {

/// sum += x; restrict and -O3 (CMakeLists.txt) make it vectorise, also
/// for AVX2 (kernels/wide_loop.hpp): servers run it over every slice each
/// round while the workers wait.
TROUPE_WIDE_LOOP
void add_into(float* __restrict sum, const float* __restrict x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    sum[i] += x[i];
}

/// sum = x + y, in one pass.
TROUPE_WIDE_LOOP
void add_two(float* __restrict sum, const float* __restrict x,
             const float* __restrict y, size_t n) {
  for (size_t i = 0; i < n; ++i)
    sum[i] = x[i] + y[i];
}

/// part = x and sum = first + x, in one pass over x.
TROUPE_WIDE_LOOP
void copy_and_add_two(float* __restrict part, float* __restrict sum,
                      const float* __restrict first, const float* __restrict x,
                      size_t n) {
  for (size_t i = 0; i < n; ++i) {
    part[i] = x[i];
    sum[i] = first[i] + x[i];
  }
}

/// part = x and sum += x, in one pass over x.
TROUPE_WIDE_LOOP
void copy_and_add(float* __restrict part, float* __restrict sum,
                  const float* __restrict x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    part[i] = x[i];
    sum[i] += x[i];
  }
}

} // namespace

void add_update(slice_id, std::vector<float>& values, const float* sum,
                uint32_t) {
  add_into(values.data(), sum, values.size());
}

shard_store::shard_store(consistency mode, update_fn fn)
    : mode_(mode), update_(std::move(fn)) {
  // empty
}

void shard_store::set_loop(loop_fn fn) {
  loop_ = fn ? std::move(fn) : loop_fn{run_serially};
}

void shard_store::for_slices(const std::vector<const void*>& targets,
                             const loop_body& body) {
  auto sorted = targets;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return run_serially(targets.size(), body);
  loop_(targets.size(), body);
}

void shard_store::set_owned(const std::map<slice_id, uint32_t>& owned) {
  catch_up(); // the rounds held back hold slices this may drop
  for (auto i = slices_.begin(); i != slices_.end();)
    i = owned.count(i->first) == 0 ? slices_.erase(i) : std::next(i);
  for (auto& [id, floats] : owned)
    if (slices_.count(id) == 0)
      slices_[id].floats = floats;
}

void shard_store::set_workers(const std::set<uint32_t>& live) {
  auto start =
      mode_.kind == consistency::kind_t::sync ? rounds_applied_ : min_clock();
  for (auto i = workers_.begin(); i != workers_.end();)
    if (live.count(i->first) == 0) {
      // A clock it had not pushed whole here is not whole everywhere: no
      // server keeps it (the cluster's cut is below it). Its parts leave
      // the open round; a rank back pushes the clock again. (Without cuts
      // a round is one running sum: the parts stay, and the slices they
      // brought stay taken, so a rank back does not add them twice.)
      auto& wc = i->second;
      if (await_cuts_ && !wc.parts.empty()) {
        if (auto r = rounds_.find(wc.clock); r != rounds_.end())
          r->second.erase(i->first);
        if (auto h = wc.held.find(wc.clock); h != wc.held.end()) {
          recycle(h->second);
          wc.held.erase(h);
        }
        wc.start_at(wc.clock);
      }
      cuts_.erase(i->first); // its cut is the cluster's to say anew
      departed_[i->first] = std::move(i->second);
      i = workers_.erase(i);
    } else {
      ++i;
    }
  for (auto w : live)
    if (workers_.count(w) == 0) {
      // A rank back (its process restarted) that had pushed clocks the
      // rounds have not passed: its pushes are in those rounds, so it
      // carries on from its own clock (what it pushes again is a
      // duplicate), not from `start` (it would be added twice).
      auto d = departed_.find(w);
      if (d != departed_.end()) {
        auto wc = std::move(d->second);
        departed_.erase(d);
        if (wc.clock >= start && resume_clocks_.count(w) == 0) {
          wc.fresh = true;
          wc.placed = false; // its clock here is its own
          wc.known = true;
          workers_[w] = std::move(wc);
          continue;
        }
      }
      auto r = resume_clocks_.find(w);
      if (r != resume_clocks_.end()) { // first join after a resume
        auto wc = std::move(r->second);
        resume_clocks_.erase(r);
        // Sync rounds went on without it meanwhile: as restore() does for
        // the workers live then, it starts at the rounds applied (its
        // pushes for those would sit in rounds never applied).
        if (mode_.kind == consistency::kind_t::sync && wc.clock < start)
          wc.start_at(start);
        workers_[w] = std::move(wc);
      } else {
        workers_[w].clock = start;
        workers_[w].placed = mode_.kind != consistency::kind_t::sync;
        workers_[w].known = had_view_;
      }
    }
  had_view_ = true;
  complete_rounds();
}

caf::error shard_store::check_slices(const std::vector<slice_view>& xs) const {
  for (auto& x : xs) {
    auto i = slices_.find(x.id);
    if (i == slices_.end())
      return caf::make_error(errc::slice_not_owned, x.id.key, x.id.index);
    if (x.size != i->second.floats)
      return caf::make_error(errc::bad_shape, x.id.key, x.id.index,
                             static_cast<uint64_t>(x.size), i->second.floats);
  }
  return caf::none;
}

caf::error shard_store::check_init(const init_request& req) const {
  return check_slices(views_of(req.slices));
}

caf::error shard_store::init(const init_request& req) {
  if (auto err = check_init(req))
    return err;
  catch_up();
  for (auto& x : req.slices) {
    auto& s = slices_[x.id];
    if (!s.ready) {
      s.values = x.values;
      s.ready = true;
    }
  }
  return caf::none;
}

caf::expected<push_reply> shard_store::push(const push_request& req) {
  return push(req, views_of(req.slices));
}

caf::expected<bool>
shard_store::check_push(const push_request& req,
                        const std::vector<slice_view>& slices) const {
  auto w = workers_.find(req.worker);
  if (w == workers_.end())
    return caf::make_error(errc::not_a_member, "worker", req.worker);
  auto& wc = w->second;
  if (req.clock > max_clock)
    return caf::make_error(errc::malformed_message, "push at clock", req.clock,
                           "beyond", max_clock);
  if (req.clock < wc.clock && !(wc.fresh && wc.placed))
    return true;
  // A push resent under a newer view (a server died) is cut into parts
  // anew: its parts replace those of the older cut, and slices an older
  // part brought are not taken twice. An older cut's part that comes
  // after a newer one is a duplicate: the newer cut brings every slice.
  // (Cuts are known once a part came; after a restore they are not, and
  // part numbers alone tell duplicates.)
  bool recut = wc.recut_by(req);
  if (req.clock == wc.clock && !wc.parts.empty() && wc.cut != 0 &&
      req.epoch < wc.cut)
    return true;
  if (req.clock == wc.clock && !recut && wc.parts.count(req.part) != 0)
    return true;
  if (req.clock > wc.clock && !wc.fresh)
    return caf::make_error(errc::clock_gap, "expected", wc.clock, "got",
                           req.clock);
  if (auto err = check_slices(slices))
    return err;
  for (auto& x : slices) {
    auto s = slices_.find(x.id);
    if (s == slices_.end() || !s->second.ready)
      return caf::make_error(errc::unknown_key, "slice not initialised",
                             x.id.key, x.id.index);
  }
  return false;
}

caf::expected<push_reply>
shard_store::push(const push_request& req,
                  const std::vector<slice_view>& slices,
                  std::shared_ptr<const void> frame) {
  auto dup = check_push(req, slices);
  if (!dup)
    return std::move(dup.error());
  auto& wc = workers_.find(req.worker)->second; // check_push found it
  if (holds_pushes()) // a duplicate's acknowledgements count too
    release(wc, req.acked);
  if (*dup)
    return push_reply{version_, true};
  bool recut = wc.recut_by(req);
  if (req.clock != wc.clock) // a fresh worker's first push: its clock
    wc.start_at(req.clock);
  wc.fresh = false;
  wc.placed = false;
  if (recut)
    wc.parts.clear();
  if (wc.parts.empty() || recut)
    wc.cut = req.epoch;
  // The slices no earlier part of this clock brought (a part may name a
  // slice twice: each is added).
  std::vector<slice_view> fresh_slices;
  fresh_slices.reserve(slices.size());
  for (auto& x : slices)
    if (wc.taken.count(x.id) == 0)
      fresh_slices.push_back(x);
  for (auto& x : fresh_slices)
    wc.taken.insert(x.id);
  if (mode_.kind == consistency::kind_t::sync)
    add_part(rounds_[req.clock], req.worker, fresh_slices,
             await_cuts_ && (replica_ || !step_from_ || workers_.size() > 2),
             frame);
  else if (holds_pushes())
    add_part(wc.held[req.clock], req.worker, fresh_slices, false, frame);
  else
    apply_now(fresh_slices);
  wc.parts.insert(req.part);
  if (wc.parts.size() == req.parts) {
    wc.start_at(wc.clock + 1);
    complete_rounds();
  } else if (!tentative_.empty() || !deferred_.empty()) {
    settle();
  }
  return push_reply{version_, false};
}

void shard_store::apply_now(const std::vector<slice_view>& xs) {
  std::vector<std::vector<float>*> dst;
  dst.reserve(xs.size());
  for (auto& x : xs)
    dst.push_back(&slices_[x.id].values);
  for_slices({dst.begin(), dst.end()}, [&](size_t k) {
    update_(xs[k].id, *dst[k], xs[k].data, 1); // straight from the frame
  });
  ++version_;
}

void shard_store::add_part(round_parts& r, uint32_t worker,
                           const std::vector<slice_view>& xs, bool sum,
                           const std::shared_ptr<const void>& frame) {
  // Without cuts nothing takes a part out again: one running sum, under a
  // rank no worker has, costs what a plain sum does.
  auto& mine = r.ranks[await_cuts_ ? worker : all_workers];
  // Each slice's work, done below (maybe on threads: buffers taken here).
  struct todo {
    contribution* part = nullptr;
    const float* x = nullptr;
    float* own = nullptr;          // the part's own floats: copy or add x in
    const float* before = nullptr; // with own: the viewed floats it adds to
    std::shared_ptr<const void> frame;   // keeps `before` valid meanwhile
    round_parts::running* run = nullptr; // the running sum x goes into
    const float* first = nullptr;        // the one part summed so far
  };
  std::vector<todo> todos;
  for (auto& x : xs) {
    auto& c = mine[x.id];
    todo t;
    t.part = &c;
    t.x = x.data;
    if (c.pushes++ != 0) { // the slice twice in one push: the part changes
      if (c.view != nullptr) {
        t.before = c.view;
        t.frame = c.frame;
        t.own = c.own(take_buffer(c.n));
      } else {
        t.own = c.values.data();
        t.before = t.own;
      }
      if (sum && r.summing)
        r.sums[x.id].broken = true; // the part changes after it was added
      todos.push_back(t);
      continue;
    }
    c.n = x.size;
    if (frame != nullptr) { // kept where it came: no copy
      c.view = x.data;
      c.frame = frame;
    } else {
      t.own = c.own(take_buffer(x.size));
    }
    if (sum && r.summing) {
      auto& run = r.sums[x.id];
      if (run.broken || (run.parts > 1 && worker < run.top)) {
        run.broken = true; // out of rank order: apply_round sums the parts
      } else {
        if (run.parts == 1) {
          t.first = r.ranks[run.top][x.id].data();
          run.values = take_buffer(x.size);
        }
        if (run.parts > 0)
          t.run = &run;
        run.top = std::max(run.top, worker);
        ++run.parts;
      }
    }
    todos.push_back(t);
  }
  std::vector<const void*> targets;
  targets.reserve(todos.size());
  for (auto& t : todos)
    targets.push_back(t.part);
  for_slices(targets, [&](size_t k) {
    auto& t = todos[k];
    auto n = t.part->n;
    if (t.before != nullptr) { // own = before + x
      if (t.before == t.own)
        add_into(t.own, t.x, n);
      else
        add_two(t.own, t.before, t.x, n);
      return;
    }
    auto* run = t.run ? t.run->values.data() : nullptr;
    if (t.own == nullptr) { // a view: only the running sum to make
      if (t.first != nullptr)
        add_two(run, t.first, t.x, n);
      else if (run != nullptr)
        add_into(run, t.x, n);
    } else if (run == nullptr) {
      std::copy(t.x, t.x + n, t.own);
    } else if (t.first != nullptr) {
      copy_and_add_two(t.own, run, t.first, t.x, n);
    } else {
      copy_and_add(t.own, run, t.x, n);
    }
  });
}

void shard_store::apply_round(const round_parts& r, bool image) {
  struct todo {
    const slice_id* id;
    std::vector<float>* values;
    std::vector<const contribution*> parts;    // in rank order
    undo_image::slice_copy* copy = nullptr;    // to take first
    const round_parts::running* run = nullptr; // the parts' sum, if whole
  };
  std::map<slice_id, todo> by_slice;
  for (auto& [w, mine] : r.ranks) // a std::map: ranks in order
    for (auto& [id, c] : mine) {
      auto s = slices_.find(id);
      if (s == slices_.end()) // may have moved away meanwhile
        continue;
      auto& t = by_slice[id];
      t.id = &s->first;
      t.values = &s->second.values;
      t.parts.push_back(&c);
    }
  std::vector<todo*> todos;
  std::vector<std::vector<float>> sums; // taken here: the loop may be threads
  for (auto& [id, t] : by_slice) {
    if (image) { // map nodes made here: the loop may be threads
      auto& c = image_.slices[id];
      if (!c.taken)
        t.copy = &c;
    }
    if (auto run = r.sums.find(id);
        run != r.sums.end() && !run->second.broken &&
        run->second.parts == t.parts.size() && t.parts.size() > 1)
      t.run = &run->second;
    todos.push_back(&t);
    sums.push_back(t.parts.size() > 1 && t.run == nullptr
                       ? take_buffer(t.values->size())
                       : std::vector<float>{});
  }
  // The image without a copy: the values before go into it whole (a
  // swap of buffers), and the hook steps from them into the slice's new
  // buffer, adding up to two parts on the way.
  auto step_from = [this](todo& t, uint32_t pushes) {
    const float* g0 = nullptr;
    const float* g1 = nullptr;
    if (t.parts.size() == 1) {
      g0 = t.parts[0]->data();
    } else if (t.run != nullptr) {
      g0 = t.run->values.data();
    } else if (t.parts.size() == 2) {
      g0 = t.parts[0]->data();
      g1 = t.parts[1]->data();
    }
    if (!step_from_ || g0 == nullptr)
      return false;
    auto& img = t.copy->values;
    std::swap(img, *t.values);
    t.values->resize(img.size());
    if (!step_from_(update_, *t.id, img.data(), t.values->data(), img.size(),
                    g0, g1, pushes)) {
      std::swap(img, *t.values);
      return false;
    }
    t.copy->taken = true;
    return true;
  };
  // One sum per slice in a round: no two items touch one slice.
  loop_(todos.size(), [&](size_t k) {
    auto& t = *todos[k];
    uint32_t pushes = 0;
    for (auto* c : t.parts)
      pushes += c->pushes;
    if (t.copy && step_from(t, pushes))
      return;
    if (t.copy) {
      t.copy->values = *t.values; // reuses the buffer of the last image
      t.copy->taken = true;
    }
    if (t.parts.size() == 1)
      return update_(*t.id, *t.values, t.parts[0]->data(), pushes);
    if (t.run != nullptr)
      return update_(*t.id, *t.values, t.run->values.data(), pushes);
    auto& sum = sums[k];
    add_two(sum.data(), t.parts[0]->data(), t.parts[1]->data(), sum.size());
    for (size_t i = 2; i < t.parts.size(); ++i)
      add_into(sum.data(), t.parts[i]->data(), sum.size());
    update_(*t.id, *t.values, sum.data(), pushes);
  });
  for (auto& sum : sums)
    if (!sum.empty())
      spare_.push_back(std::move(sum));
}

std::vector<float> shard_store::take_buffer(size_t n) {
  for (size_t i = spare_.size(); i-- > 0;)
    if (spare_[i].capacity() >= n) {
      auto out = std::move(spare_[i]);
      spare_[i] = std::move(spare_.back());
      spare_.pop_back();
      out.resize(n);
      return out;
    }
  return std::vector<float>(n);
}

void shard_store::recycle(round_parts& r) {
  // Rounds in steady state take back what they give: a few per slice and
  // worker; more (slices that moved away) are freed.
  auto bound = 4 * (slices_.size() + workers_.size()) + 64;
  for (auto& [w, mine] : r.ranks)
    for (auto& [id, c] : mine)
      if (c.values.capacity() > 0 && spare_.size() < bound)
        spare_.push_back(std::move(c.values));
  for (auto& [id, run] : r.sums)
    if (run.values.capacity() > 0 && spare_.size() < bound)
      spare_.push_back(std::move(run.values));
  r = round_parts{};
}

caf::error shard_store::check_pull(uint32_t worker, uint64_t clock) const {
  auto w = workers_.find(worker);
  if (w == workers_.end())
    return caf::make_error(errc::not_a_member, "worker", worker);
  if (clock > max_clock + 1)
    return caf::make_error(errc::malformed_message, "pull at clock", clock,
                           "beyond", max_clock + 1);
  if (clock > w->second.clock + 1 && !w->second.fresh)
    return caf::make_error(errc::clock_gap, "pull at clock", clock,
                           "but pushed up to", w->second.clock);
  return caf::none;
}

bool shard_store::pulled(uint32_t worker, uint64_t clock, uint64_t acked) {
  auto w = workers_.find(worker);
  if (w == workers_.end())
    return false;
  if (holds_pushes())
    return release(w->second, acked);
  if (mode_.kind != consistency::kind_t::sync || !w->second.fresh ||
      clock <= w->second.clock)
    return false;
  w->second.start_at(clock);
  complete_rounds();
  return true;
}

bool shard_store::readable_at(uint64_t clock) const {
  switch (mode_.kind) {
  case consistency::kind_t::sync:
    return rounds_applied_ >= clock;
  case consistency::kind_t::async:
    return true;
  case consistency::kind_t::ssp: {
    if (!holds_pushes())
      return min_clock() + mode_.staleness >= clock;
    // The clocks a reader sees are those applied, not those held.
    for (auto& [w, wc] : workers_)
      if (wc.applied() + mode_.staleness < clock)
        return false;
    return true;
  }
  }
  return false;
}

bool shard_store::initialised(const std::vector<slice_id>& ids) const {
  return std::all_of(ids.begin(), ids.end(), [this](const slice_id& id) {
    auto i = slices_.find(id);
    return i != slices_.end() && i->second.ready;
  });
}

caf::expected<pull_reply>
shard_store::read(const std::vector<slice_id>& ids) const {
  std::vector<slice_view> views;
  if (auto err = read_views(ids, views))
    return err;
  pull_reply out;
  out.version = version_;
  for (auto& v : views)
    out.slices.push_back(slice_data{v.id, {v.data, v.data + v.size}});
  return out;
}

caf::error shard_store::read_views(const std::vector<slice_id>& ids,
                                   std::vector<slice_view>& out) const {
  out.clear();
  out.reserve(ids.size());
  for (auto& id : ids) {
    auto i = slices_.find(id);
    if (i == slices_.end())
      return caf::make_error(errc::slice_not_owned, id.key, id.index);
    out.push_back(
        slice_view{id, i->second.values.data(), i->second.values.size()});
  }
  return caf::none;
}

std::map<slice_id, uint32_t> shard_store::owned() const {
  std::map<slice_id, uint32_t> out;
  for (auto& [id, s] : slices_)
    out.emplace(id, s.floats);
  return out;
}

bool shard_store::pristine() const {
  if (version_ > 0 || rounds_applied_ > 0 || !rounds_.empty() ||
      !tentative_.empty() || !deferred_.empty())
    return false;
  for (auto& [id, s] : slices_)
    if (s.ready)
      return false;
  for (auto& [w, wc] : workers_)
    if (wc.clock > 0 || !wc.parts.empty())
      return false;
  return true;
}

uint64_t shard_store::clock_of(uint32_t worker) const {
  auto i = workers_.find(worker);
  return i == workers_.end() ? 0 : i->second.clock;
}

uint64_t shard_store::min_clock() const {
  if (workers_.empty())
    return 0;
  auto lo = std::numeric_limits<uint64_t>::max();
  for (auto& [w, wc] : workers_)
    lo = std::min(lo, wc.clock);
  return lo;
}

} // namespace troupe

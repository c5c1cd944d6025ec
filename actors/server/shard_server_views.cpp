// A shard server takes a newer cluster view (3): which slices each hosted
// store owns, which workers are live (7), promotion of replicas
// (replication.hpp, B4), the backup link, then what waited for the view.
#include "actors/server/shard_server_internal.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "actors/base/log.hpp"
#include "actors/base/stray_errors.hpp"
#include "actors/cluster/placement.hpp"
#include "actors/cluster/view_metrics.hpp"
#include "messages/errors.hpp"

namespace troupe::server_impl {

void report_resumed(self_ptr self) {
  auto& st = self->state;
  if (st.lost_epoch == 0 || own_store(self).version() <= st.lost_version)
    return;
  report(self, "resumed",
         str("version ", own_store(self).version(), " applied with ",
             st.view.workers.size(), " workers after view ", st.lost_epoch));
  st.lost_epoch = 0;
}

namespace {

/// Notes which workers are new in `v` (7) and whether one was lost.
void track_workers(self_ptr self, const cluster_view& v) {
  auto& st = self->state;
  std::map<uint32_t, uint64_t> next;
  for (auto& w : v.workers) {
    auto old = std::find_if(st.view.workers.begin(), st.view.workers.end(),
                            [&w](const node_info& o) { return o == w; });
    auto i = st.incarnation.find(w.rank);
    next[w.rank] = old != st.view.workers.end() && i != st.incarnation.end()
                       ? i->second
                       : v.epoch;
  }
  for (auto& w : st.view.workers)
    if (next.count(w.rank) == 0 ||
        std::none_of(v.workers.begin(), v.workers.end(),
                     [&w](const node_info& n) { return n == w; })) {
      if (st.lost_epoch == 0)
        st.lost_version = own_store(self).version();
      st.lost_epoch = v.epoch;
    }
  st.incarnation = std::move(next);
}

/// True if `v` has no live worker and every worker rank of the job is
/// done: finished (one at least), given up, or ended.
bool job_over(const cluster_view& v) {
  if (!v.workers.empty() || v.expected_workers == 0 || v.finished.empty())
    return false;
  std::set<uint32_t> done{v.finished.begin(), v.finished.end()};
  done.insert(v.given_up.begin(), v.given_up.end());
  done.insert(v.ended.begin(), v.ended.end());
  for (uint32_t r = 0; r < v.expected_workers; ++r)
    if (done.count(r) == 0)
      return false;
  return true;
}

/// Gives each hosted store its share of `owned` (in view `v`): a slice
/// stays in the store that holds it; new slices go to our own store.
void share_out(self_ptr self, const cluster_view& v,
               const std::map<slice_id, uint32_t>& owned) {
  auto& st = self->state;
  std::map<slice_id, uint32_t> rest = owned;
  for (size_t k = 1; k < st.stores.size(); ++k) {
    std::map<slice_id, uint32_t> mine;
    for (auto& [id, floats] : st.stores[k].store.owned())
      if (owned.count(id) != 0) {
        mine[id] = owned.at(id);
        rest.erase(id);
      }
    st.stores[k].store.set_owned(mine);
  }
  // Slices new to us of arrays declared before: they lived on a server
  // that died without a replica here. They start uninitialised, and a
  // resent Init would set them to their first values: say so loudly.
  size_t lost = 0;
  std::set<uint64_t> old_keys;
  for (auto& k : st.view.keys)
    old_keys.insert(k.key);
  for (auto& [id, floats] : rest)
    if (!own_store(self).owns(id) && old_keys.count(id.key) != 0)
      ++lost;
  // Once the job is over (the servers stop one by one after its final
  // checkpoint), nothing reads them: every job with --server.replicas=0
  // and 2 servers ended with this error, and a "lost" event.
  if (lost > 0 && job_over(v)) {
    TROUPE_LOG(info, who(self), "took ", lost,
               " slices of a departed server with no replica after the"
               " job's workers were done: nothing reads them");
  } else if (lost > 0) {
    TROUPE_LOG(error, who(self), lost,
               " slices of a dead server came with no replica: their values"
               " are lost");
    report(self, "lost",
           str(lost, " slices of a dead server had no replica here"));
  }
  own_store(self).set_owned(rest);
  st.stores.erase(std::remove_if(st.stores.begin() + 1, st.stores.end(),
                                 [](const hosted_store& h) {
                                   return h.store.owned().empty();
                                 }),
                  st.stores.end());
}

/// The slices `v` places on server `rank`, with their lengths in floats.
std::map<slice_id, uint32_t> owned_in(const cluster_view& v, uint32_t rank) {
  std::map<uint64_t, uint64_t> sizes;
  for (auto& k : v.keys)
    sizes[k.key] = k.size;
  std::map<slice_id, uint32_t> owned;
  for (auto& p : v.placement)
    if (p.server == rank) {
      auto r = slice_range(sizes[p.key], v.slice_floats, p.index);
      owned[slice_id{p.key, p.index}] =
          static_cast<uint32_t>(r.second - r.first);
    }
  return owned;
}

/// Runs what waited for our epoch (4); keeps what waits for a later one.
void run_held(self_ptr self) {
  auto& st = self->state;
  auto held = std::move(st.held);
  st.held.clear();
  for (auto& h : held) {
    if (h.epoch > st.view.epoch) {
      st.held.push_back(std::move(h));
      continue;
    }
    st.held_bytes -= h.bytes;
    h.run();
  }
}

} // namespace

void apply_view(self_ptr self, cluster_view v) { // 3
  auto& st = self->state;
  if (!st.joined) { // ownership needs our rank: keep the newest for later
    if (v.epoch > st.early_view.epoch)
      st.early_view = std::move(v);
    return;
  }
  if (v.epoch <= st.view.epoch)
    return;
  note_view(v);
  auto owned = owned_in(v, st.rank);
  std::set<uint32_t> workers;
  for (auto& w : v.workers)
    workers.insert(w.rank);
  track_workers(self, v);
  promote_replicas(self, v, owned);
  share_out(self, v, owned);
  // A rank taken by a new process without a view in between: the old one
  // leaves first, so the new one starts at the others' clock.
  auto kept = workers;
  for (auto& [rank, epoch] : st.incarnation)
    if (epoch == v.epoch)
      kept.erase(rank);
  // In our first view every worker is new to us (and each counts as
  // rejoined now): our stores meet them, rather than see them join, and
  // know nothing of their clocks (shard_store::whole_clocks).
  bool first = st.view.epoch == 0;
  for (auto& h : st.stores) {
    if (!first)
      h.store.set_workers(kept);
    h.store.set_workers(workers);
  }
  st.view = std::move(v);
  if (st.intake)
    st.intake->limit_worker_frames(
        worker_frame_bound(st.cfg.max_message_bytes, st.view.slice_floats));
  update_backup(self);
  forward_layout(self, restore_from_checkpoint(self), &kept);
  TROUPE_LOG(debug, who(self), "view ", st.view.epoch, ": ", owned.size(),
             " slices in ", st.stores.size(), " stores, ", workers.size(),
             " workers");
  run_held(self);
  serve_pulls(self);
  answer_cut_queries(self);
}

void on_view_frame(self_ptr self, const frame& f) {
  if (!from_scheduler(self, "a view"))
    return;
  cluster_view v;
  if (auto err = decode(f, v)) {
    TROUPE_LOG(warning, who(self),
               "dropped a malformed view: ", self->system().render(err));
    return;
  }
  apply_view(self, std::move(v));
}

} // namespace troupe::server_impl

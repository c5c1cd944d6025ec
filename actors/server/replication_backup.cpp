// The backup's side of chain replication (replication.hpp): replica
// operations applied to the replicas of our primary's stores, fenced
// (F1-F3), their staleness (B1-B3), and their promotion (B4, B5).
#include "actors/server/shard_server_internal.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "actors/base/log.hpp"
#include "actors/server/server_optimizer.hpp"
#include "messages/errors.hpp"

namespace troupe::server_impl {
namespace {

// -- replica operations -------------------------------------------------------

/// Owned slices from (key, index, floats) triples, as owned_triples makes.
caf::expected<std::map<slice_id, uint32_t>>
owned_of(const std::vector<uint64_t>& xs) {
  if (xs.size() % 3 != 0)
    return caf::make_error(errc::malformed_message, "owned slices");
  std::map<slice_id, uint32_t> owned;
  for (size_t k = 0; k < xs.size(); k += 3)
    owned[slice_id{xs[k], static_cast<uint32_t>(xs[k + 1])}] =
        static_cast<uint32_t>(xs[k + 2]);
  return owned;
}

/// An Init on replica `m`: the slices it owns.
caf::expected<uint64_t> init_replica(shard_store& m, bytes_view f) {
  init_request req;
  if (auto err = decode(f, req))
    return err;
  auto& xs_ = req.slices;
  xs_.erase(std::remove_if(xs_.begin(), xs_.end(),
                           [&m](const slice_data& x) { return !m.owns(x.id); }),
            xs_.end());
  if (auto err = m.init(req))
    return err;
  return m.version();
}

/// A Push on replica `m`, read in place: the slices it owns.
caf::expected<uint64_t> push_replica(shard_store& m, bytes_view f,
                                     std::shared_ptr<const void> keep) {
  push_request req;
  std::vector<slice_view> values;
  auto err = visit_push(f, req, [&](slice_id sid, const float* p, size_t n) {
    if (m.owns(sid))
      values.push_back(slice_view{sid, p, n});
    return caf::error{};
  });
  if (err)
    return err;
  auto r = m.push(req, values, std::move(keep));
  if (!r)
    return std::move(r.error());
  return r->version;
}

/// A Checkpoint of one store, restored into replica `m`.
caf::expected<uint64_t> restore_replica(shard_store& m, bytes_view f) {
  checkpoint_data x;
  if (auto err = decode(f, x))
    return err;
  if (x.stores.size() != 1)
    return caf::make_error(errc::malformed_message, "restore of",
                           x.stores.size(), "stores");
  auto n = apply_restore(m, x.stores.front());
  if (!n)
    return std::move(n.error());
  return m.version();
}

/// One operation on replica `m`; op_copy sets its layout, then its state.
caf::expected<uint64_t>
apply_to_replica(shard_store& m, uint8_t op, bytes_view f,
                 const std::vector<uint64_t>& xs,
                 std::shared_ptr<const void> keep = nullptr) {
  switch (op) {
  case op_owned: {
    auto owned = owned_of(xs);
    if (!owned)
      return std::move(owned.error());
    m.set_owned(*owned);
    return m.version();
  }
  case op_workers: {
    std::set<uint32_t> live;
    for (auto w : xs)
      live.insert(static_cast<uint32_t>(w));
    m.set_workers(live);
    return m.version();
  }
  case op_init:
    return init_replica(m, f);
  case op_push:
    return push_replica(m, f, std::move(keep));
  case op_copy: {
    auto owned = owned_of(xs);
    if (!owned)
      return std::move(owned.error());
    m.set_owned(*owned);
    return restore_replica(m, f); // then its state, as a restore
  }
  case op_restore:
    return restore_replica(m, f);
  case op_cut:
    if (xs.size() != 2 || xs[0] > UINT32_MAX)
      return caf::make_error(errc::malformed_message, "a cut of", xs.size(),
                             "numbers");
    m.cut(static_cast<uint32_t>(xs[0]), xs[1]);
    return m.version();
  case op_pulled:
    if (xs.size() != 3 || xs[0] > UINT32_MAX)
      return caf::make_error(errc::malformed_message, "a pull of", xs.size(),
                             "numbers");
    m.pulled(static_cast<uint32_t>(xs[0]), xs[1], xs[2]);
    return m.version();
  default:
    return caf::make_error(errc::malformed_message, "replica operation", op);
  }
}

// -- fencing ------------------------------------------------------------------

/// Every replica of `primary` may lack operations it acknowledged alone
/// (`why`), until its copy on a newer link: stale (B2).
void mark_stale(self_ptr self, uint32_t primary, const char* why) {
  for (auto& [id, m] : self->state.mirrors)
    if (m.primary == primary && !m.stale_since) {
      m.stale_since = m.store.version();
      TROUPE_LOG(warning, who(self), "server ", primary, " ", why,
                 ": our replica of store ", id, " (version ", m.store.version(),
                 ") may lack what it acknowledged alone, until its copy");
    }
}

/// Refuses an operation of link `link` of `primary` on store `id` per
/// F1-F3; a newer link makes every replica of the primary stale (B2).
caf::error fence(self_ptr self, uint32_t primary, uint64_t link, uint64_t id) {
  auto& st = self->state;
  auto& l = st.primary_links[primary];
  if (link < l.newest) // F1
    return caf::make_error(errc::not_a_member, "replica operation of link",
                           link, "of server", primary, "after its newer link",
                           l.newest);
  if (link > l.newest) {
    if (l.newest != 0)
      mark_stale(self, primary, "replaced its link to us");
    l = primary_link{link, false};
  } else if (l.refused) { // F2
    return caf::make_error(errc::not_a_member, "link", link, "of server",
                           primary,
                           "refused an operation already: the primary drops"
                           " it");
  }
  if (auto h = hosted(self, id)) // F3
    return caf::make_error(errc::not_a_member, "store", id, "of server",
                           h->origin, "is served here since view", h->since,
                           "(its primary was declared dead): not replicated");
  return caf::none;
}

// -- replicas -----------------------------------------------------------------

/// An empty replica of a store `origin` created, which `primary` serves.
mirror_store new_mirror(self_ptr self, uint32_t primary, uint32_t origin) {
  auto& st = self->state;
  mirror_store m{primary, origin, shard_store{st.cfg.mode, st.fresh_fn},
                 std::nullopt};
  m.store.set_loop(st.loop);
  if (st.cfg.atomic_pushes) {
    m.store.await_cuts(capture_optimizer, step_from_optimizer);
    m.store.replica(true); // no undo image until it is promoted
  }
  return m;
}

/// A whole store for a backup that came late (op_copy): layout, then state
/// as a restore. It replaces what we held of the store only once it is
/// applied whole (B3): a copy that fails leaves the replica as it was.
caf::expected<uint64_t> apply_copy(self_ptr self, uint32_t primary, uint64_t id,
                                   uint32_t origin, bytes_view f,
                                   const std::vector<uint64_t>& xs) {
  auto m = new_mirror(self, primary, origin);
  auto r = apply_to_replica(m.store, op_copy, f, xs);
  if (!r)
    return r;
  auto& mirrors = self->state.mirrors;
  mirrors.erase(id);
  mirrors.emplace(id, std::move(m));
  return r;
}

/// Applies one replica operation from our primary, past the fence.
caf::expected<uint64_t> apply_replica_op(self_ptr self, uint32_t primary,
                                         uint64_t id, uint32_t origin,
                                         uint8_t op, bytes_view f,
                                         const std::vector<uint64_t>& xs,
                                         std::shared_ptr<const void> keep) {
  auto& st = self->state;
  if (op == op_copy)
    return apply_copy(self, primary, id, origin, f, xs);
  auto i = st.mirrors.find(id);
  if (i == st.mirrors.end()) {
    if (op != op_owned) // a replica starts with its layout (B1)
      return caf::make_error(errc::malformed_message,
                             "replica operation before its layout");
    i = st.mirrors.emplace(id, new_mirror(self, primary, origin)).first;
    TROUPE_LOG(debug, who(self), "replicating the store of server ", origin,
               " for server ", primary);
  }
  // A replica still pristine that the newest link feeds without a copy was
  // pristine at the primary when that link came (else the copy would come
  // first): nothing was acknowledged alone, it is current (B3).
  auto& stale = i->second.stale_since;
  bool current = stale && i->second.store.pristine();
  auto r = apply_to_replica(i->second.store, op, f, xs, std::move(keep));
  if (r && current)
    stale.reset();
  return r;
}

} // namespace

caf::expected<uint64_t> apply_replica(self_ptr self, uint32_t primary,
                                      uint64_t link, uint64_t id,
                                      uint32_t origin, uint8_t op, bytes_view f,
                                      const std::vector<uint64_t>& xs,
                                      std::shared_ptr<const void> keep) {
  auto err = fence(self, primary, link, id);
  auto r = err ? caf::expected<uint64_t>{std::move(err)}
               : apply_replica_op(self, primary, id, origin, op, f, xs,
                                  std::move(keep));
  auto& l = self->state.primary_links[primary];
  if (!r && l.newest == link && !l.refused) {
    // The primary drops the link, and acknowledges alone what it had sent
    // on it after this operation (we refuse those, F2): so do we, and its
    // replicas are stale from here (B2).
    l.refused = true;
    mark_stale(self, primary, "had an operation refused");
  }
  return r;
}

/// The rest of that link is refused, as after a refusal of ours (F2).
void on_link_dropped(self_ptr self, uint32_t primary, uint64_t link) {
  auto& st = self->state;
  if (self->current_sender() != st.scheduler) {
    TROUPE_LOG(warning, who(self),
               "ignored a dropped-link notice not from the scheduler");
    return;
  }
  auto& l = st.primary_links[primary];
  if (link < l.newest)
    return; // a newer link came since: its copies make the replicas current
  mark_stale(self, primary, "dropped its link to us");
  l = primary_link{link, true};
}

// -- promotion ----------------------------------------------------------------

namespace {

/// A replica promoted before the copy its primary's newer link owed it:
/// what the primary acknowledged alone in between is lost. Said loudly.
void report_stale_promotion(self_ptr self, uint32_t primary, uint64_t version,
                            uint64_t stale_since) {
  auto what =
      str("the replica of server ", primary,
          "'s store was promoted at version ", version,
          " without the copy its primary owed it since version ", stale_since,
          ": updates the primary acknowledged alone meanwhile are lost");
  TROUPE_LOG(error, who(self), what);
  report(self, "lost", what);
}

} // namespace

void promote_replicas(self_ptr self, const cluster_view& v,
                      const std::map<slice_id, uint32_t>& owned) {
  auto& st = self->state;
  for (auto i = st.mirrors.begin(); i != st.mirrors.end();) {
    auto primary = i->second.primary;
    bool alive = std::any_of(
        v.servers.begin(), v.servers.end(),
        [primary](const node_info& n) { return n.rank == primary; });
    auto slices = i->second.store.owned();
    bool ours = !slices.empty() && owned.count(slices.begin()->first) != 0;
    if (hosted(self, i->first)) { // fence() keeps this from happening
      TROUPE_LOG(error, who(self), "dropped a replica of store ", i->first,
                 ", which we serve already");
      i = st.mirrors.erase(i);
    } else if (!alive && ours) { // B4
      TROUPE_LOG(info, who(self), "promoted: serving the ", slices.size(),
                 " slices of server ", primary, " from their replica");
      if (auto stale = i->second.stale_since)
        report_stale_promotion(self, primary, i->second.store.version(),
                               *stale);
      if (st.lost_epoch == 0) // reported as resumed at the next update
        st.lost_version = own_store(self).version();
      st.lost_epoch = v.epoch;
      i->second.store.replica(false); // its rounds held back, tentatively
      st.stores.push_back(hosted_store{i->first, i->second.origin,
                                       std::move(i->second.store), v.epoch});
      i = st.mirrors.erase(i);
    } else if (!alive) { // B5
      i = st.mirrors.erase(i);
    } else {
      ++i;
    }
  }
}

} // namespace troupe::server_impl

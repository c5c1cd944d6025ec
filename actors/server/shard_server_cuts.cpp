// Atomic pushes on a shard server (docs/atomic-pushes.md): it tells the
// scheduler how many clocks a departed worker pushed whole here, and applies
// the cluster's cut to every store it hosts and, through the chain, to its
// backup's replicas.
#include "actors/server/shard_server_internal.hpp"

#include <algorithm>
#include <memory>

#include "actors/base/log.hpp"
#include "actors/cluster/peer_name.hpp"
#include "messages/errors.hpp"

namespace troupe::server_impl {

bool from_scheduler(self_ptr self, const char* what) {
  // Views and cuts come from our scheduler alone: one from anyone else (a
  // stranger on the CAF port) could hand our slices away or undo rounds.
  // BASP takes the sender's word for who it is; authenticated connections
  // make that word good.
  auto from = self->current_sender();
  if (from != nullptr &&
      caf::actor_cast<caf::actor_addr>(from) == self->state.scheduler.address())
    return true;
  with_peer_name(
      self, from,
      [name = who(self), what = std::string{what}](const std::string& peer) {
        TROUPE_LOG_LIMITED(warning, name, "refused ", what, " from ", peer,
                           ": only the scheduler sends these");
      });
  return false;
}

namespace {

/// The least clocks `worker` pushed whole over our stores.
uint64_t whole_clocks_here(self_ptr self, uint32_t worker) {
  auto least = no_whole_clocks;
  for (auto& h : self->state.stores)
    if (auto n = h.store.whole_clocks(worker))
      least = std::min(least, *n);
  return least;
}

/// Answers `q` once the backup has every operation forwarded so far: a
/// forward of the live workers (which changes nothing there) on each
/// store comes back after them.
void answer_after_backup(self_ptr self, shard_server_state::cut_query q) {
  struct pending {
    size_t left;
    caf::response_promise rp;
    uint32_t worker;
  };
  auto p = std::make_shared<pending>(
      pending{self->state.stores.size(), q.rp, q.worker});
  auto ranks = worker_ranks(self->state.view);
  for (auto& h : self->state.stores)
    forward(self, h, op_workers, frame{}, ranks, [self, p](const caf::error&) {
      // A refusal drops the link: what we report then stands on us
      // alone, as any acknowledgement does (A2).
      if (--p->left == 0)
        p->rp.deliver(whole_clocks_here(self, p->worker));
    });
}

} // namespace

caf::response_promise on_cut_query(self_ptr self, uint32_t worker,
                                   uint64_t epoch) {
  // Asked before the promise takes the sender out of the message.
  bool ok = from_scheduler(self, "a cut query");
  auto rp = self->make_response_promise();
  if (!ok) {
    rp.deliver(caf::make_error(errc::not_a_member,
                               "cut queries come from the scheduler alone"));
    return rp;
  }
  self->state.cut_queries.push_back({worker, epoch, rp});
  answer_cut_queries(self);
  return rp;
}

void answer_cut_queries(self_ptr self) {
  auto& st = self->state;
  if (!st.joined)
    return;
  auto qs = std::move(st.cut_queries);
  st.cut_queries.clear();
  for (auto& q : qs)
    if (q.epoch > st.view.epoch)
      st.cut_queries.push_back(std::move(q));
    else
      answer_after_backup(self, std::move(q));
}

uint64_t on_cut(self_ptr self, uint32_t worker, uint64_t keep) {
  if (!from_scheduler(self, "a cut"))
    return 0;
  uint64_t n = 0;
  for (auto& h : self->state.stores) {
    auto undone = h.store.version();
    if (!h.store.cut(worker, keep))
      continue;
    ++n;
    TROUPE_LOG(info, who(self), "keeps worker ", worker, "'s clocks below ",
               keep, " (store ", h.id, ", version ", undone, ")");
    forward(self, h, op_cut, frame{}, {worker, keep}, ignore_outcome);
  }
  serve_pulls(self);
  return n; // the stores that applied it
}

} // namespace troupe::server_impl

// What the parts of the shard server (shard_server*.cpp, replication_*.cpp)
// call in one another; not for use outside actors/server/. Numbers 1-8 are
// shard_server.hpp's transitions, letters and numbers replication.hpp's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/response_promise.hpp>

#include "actors/server/shard_server.hpp"

namespace troupe::server_impl {

using self_ptr = shard_server_actor*;

// -- shared helpers (shard_server.cpp) ----------------------------------------

/// "server <rank>", for logs.
std::string who(self_ptr self);

/// Sends the scheduler an event of ours: `kind`, with `detail` for people.
void report(self_ptr self, const char* kind, std::string detail);

inline shard_store& own_store(self_ptr self) {
  return self->state.stores.front().store;
}

/// The store we host with id `id`; null if none.
inline hosted_store* hosted(self_ptr self, uint64_t id) {
  for (auto& h : self->state.stores)
    if (h.id == id)
      return &h;
  return nullptr;
}

// -- requests (shard_server_requests.cpp) -------------------------------------

/// Decodes a request and handles it once our view has its epoch (4, 5); the
/// answer goes to `rp`.
void accept_init(self_ptr self, bytes_view f, replier rp);
void accept_pull(self_ptr self, bytes_view f, replier rp);

/// A push is read in place: its values are applied straight from the
/// frame, which `keep` (or the road message in `rp`) keeps alive.
void accept_push(self_ptr self, bytes_view f, replier rp,
                 std::shared_ptr<const void> keep);

/// The same for requests that came in on CAF.
caf::response_promise on_init(self_ptr self, const frame& f);
caf::response_promise on_push(self_ptr self, frame& f);
caf::response_promise on_pull(self_ptr self, const frame& f);

/// Answers every waiting pull the stores can serve now.
void serve_pulls(self_ptr self);

/// How often requests held for a newer view are checked while any are.
constexpr auto held_sweep_every = std::chrono::seconds{1};

/// Answers held requests past their time, and drops those whose road
/// connection closed (4).
void sweep_held(self_ptr self);

// -- the fast road (shard_server_road.cpp) ------------------------------------

/// Opens the fast road; without it, workers use CAF.
road_info open_road(self_ptr self, const std::string& host);

/// A request from the fast road, or a replica operation on it.
void accept_road(self_ptr self, road_message_ptr m);

// -- views (shard_server_views.cpp) -------------------------------------------

/// Takes view `v` if it is newer than ours (3).
void apply_view(self_ptr self, cluster_view v);

/// A view frame from the scheduler; a malformed one is dropped.
void on_view_frame(self_ptr self, const frame& f);

/// Reports the first update after a worker was lost (a "resumed" event).
void report_resumed(self_ptr self);

// -- atomic pushes (shard_server_cuts.cpp) ------------------------------------

/// True if the message being handled comes from our scheduler; else says
/// that `what` was refused, naming the sender.
bool from_scheduler(self_ptr self, const char* what);

/// The scheduler asks how many clocks departed worker `worker` pushed
/// whole here (the least over our stores, or no_whole_clocks): answered
/// once our view is `epoch` or newer (the worker is gone from it, so no
/// more of its parts are taken), and once our backup has every part our
/// stores took (a backup promoted later has what we reported).
caf::response_promise on_cut_query(self_ptr self, uint32_t worker,
                                   uint64_t epoch);

/// Answers the queries that waited for our view.
void answer_cut_queries(self_ptr self);

/// The cluster's cut for departed worker `worker`: every store we host keeps
/// its clocks below `keep`, and our backup's replicas do the same.
uint64_t on_cut(self_ptr self, uint32_t worker, uint64_t keep);

// -- checkpoints (shard_server_checkpoints.cpp) -------------------------------

/// With --resume, loads the checkpoint before we join; false (and we quit)
/// if it cannot be.
bool load_resume(self_ptr self);

/// Restores the slices our own store got in this view from the checkpoint
/// we resume from; returns the restore for our backup's replica (empty if
/// nothing was restored).
frame restore_from_checkpoint(self_ptr self);

/// Our largest store version: the scheduler cuts a checkpoint above it.
caf::result<uint64_t> checkpoint_version(self_ptr self);

/// Writes checkpoint `gen` of our stores once they reach version `at`.
caf::response_promise take_checkpoint(self_ptr self, uint64_t gen, uint64_t at);

/// The writer thread's report on take `serial`.
void checkpoint_written(self_ptr self, uint64_t serial, const std::string& err);

// -- replication: forwarding (replication_primary.cpp) ------------------------

/// Sends one operation on store `h` to our backup, then runs `then` (A1),
/// or stands alone (A2) if the store has no replica.
void forward(self_ptr self, const hosted_store& h, replica_op op, frame f,
             std::vector<uint64_t> xs, replica_done then);

/// The same for an operation without numbers whose bytes `f` are valid for
/// the call only: on a connected road they go out from there, else (CAF,
/// a link not connected yet) a copy is sent or queued.
void forward_bytes(self_ptr self, const hosted_store& h, replica_op op,
                   bytes_view f, replica_done then);

/// Answers a worker's Init or Push with `reply` once its `n` forwards to
/// the backup are done (A1, A2); never acknowledged unreplicated by a live
/// backup (A3).
replica_done acknowledge_after(self_ptr self, size_t n, replier rp,
                               frame reply);

/// A forward whose outcome only the link cares about (it is dropped and
/// tried again on a refusal).
void ignore_outcome(const caf::error&);

/// The owned slices of `s` as (key, index, floats) triples.
std::vector<uint64_t> owned_triples(const shard_store& s);

/// The ranks of the live workers of `v`.
std::vector<uint64_t> worker_ranks(const cluster_view& v);

/// Forwards the owned slices and live workers of every replicated store,
/// and between them what our own store restored from a checkpoint;
/// `kept`: the live workers but those whose rank a new process took (they
/// leave first, then join anew).
void forward_layout(self_ptr self, frame restored,
                    const std::set<uint32_t>* kept = nullptr);

/// The backup answered forward `m->id` of link `serial` on the road (L3).
void on_backup_reply(self_ptr self, uint64_t serial, road_message_ptr m);

// -- replication: the link (replication_link.cpp) -----------------------------

/// Our link to the backup if it is link `serial` still, else null.
backup_link* current_link(self_ptr self, uint64_t serial);

/// Drops the link to our backup (L4); what waited for it goes on without it.
void drop_backup(self_ptr self, const char* why);

/// A backup that failed us but stays in the view: a new link in a while
/// (L1).
void retry_backup_later(self_ptr self);

/// Drops a backup silent on the road (L4); checked while the link lives.
void check_backup_road(self_ptr self, uint64_t serial);

/// Connects to our backup per our view (L1), with copies of the stores
/// that need them.
void update_backup(self_ptr self);

/// The retry after a backup was unreachable (L1).
void on_reconnect(self_ptr self);

/// The road of link `serial` went down (L4).
void on_backup_road_down(self_ptr self, uint64_t serial,
                         const std::string& why);

// -- replication: the dropped link's notice (replication_alone.cpp) -----------

/// Runs `then` for an operation our backup may not have applied (A2).
void stands_alone(self_ptr self, replica_done then);

/// Link `b`, which the view still names, was dropped (N1).
void notice_drop(self_ptr self, const backup_link& b, const char* why);

/// Fails the acknowledgements alone that waited their while (N5).
void expire_held(self_ptr self);

// -- replication: the backup (replication_backup.cpp) -------------------------

/// Applies one replica operation from our primary (over CAF or the road),
/// fenced (F1-F3). With `keep`, `f` stays valid while it lives: a push the
/// replica keeps is kept there (shard_store::push).
caf::expected<uint64_t>
apply_replica(self_ptr self, uint32_t primary, uint64_t link, uint64_t id,
              uint32_t origin, uint8_t op, bytes_view f,
              const std::vector<uint64_t>& xs,
              std::shared_ptr<const void> keep = nullptr);

/// The scheduler says `primary` dropped its link `link` to us (N1, B2).
void on_link_dropped(self_ptr self, uint32_t primary, uint64_t link);

/// Replicas of a server that left and whose slices `v` gives us become
/// stores we serve (B4); replicas no longer ours are dropped (B5).
void promote_replicas(self_ptr self, const cluster_view& v,
                      const std::map<slice_id, uint32_t>& owned);

} // namespace troupe::server_impl

// A shard server's checkpoints (shard_server.hpp, "Checkpoints"): snapshots
// of its stores at the version the scheduler cut at, written on a thread of
// their own, and the restore from the last one with --resume.
#include "actors/server/shard_server_internal.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>

#include "actors/base/log.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::server_impl {

// -- resuming -----------------------------------------------------------------

bool load_resume(self_ptr self) {
  if (!self->state.cfg.checkpoint.resume)
    return true;
  auto set = load_resume_set(self->state.cfg.checkpoint);
  if (!set) {
    self->quit(set.error()); // troupe-node says why, once
    return false;
  }
  self->state.resume = std::move(*set);
  TROUPE_LOG(info, "server", "resuming from checkpoint ",
             self->state.resume->manifest.generation, " (",
             self->state.resume->slices.size(), " slices)");
  return true;
}

frame restore_from_checkpoint(self_ptr self) {
  auto& st = self->state;
  if (!st.resume)
    return {};
  auto snap = restorable(*st.resume, own_store(self));
  if (snap.slices.empty())
    return {};
  auto n = apply_restore(own_store(self), snap);
  if (!n) { // the files passed their checks: a bug, or a changed optimizer
    TROUPE_LOG(error, who(self), "restoring from checkpoint failed: ",
               self->system().render(n.error()));
    self->quit(n.error());
    return {};
  }
  st.resume->meta_applied = true;
  auto gen = st.resume->manifest.generation;
  TROUPE_LOG(info, who(self), "restored ", *n, " slices from checkpoint ", gen,
             " at version ", own_store(self).version());
  report(self, "restored",
         str(*n, " slices from checkpoint ", gen, " at version ",
             own_store(self).version()));
  checkpoint_data x;
  x.stores.push_back(std::move(snap));
  return encode(x);
}

// -- taking -------------------------------------------------------------------

caf::result<uint64_t> checkpoint_version(self_ptr self) {
  if (self->state.cfg.checkpoint.dir.empty())
    return caf::make_error(errc::invalid_config,
                           "this server has no --checkpoint.dir");
  uint64_t v = 0;
  for (auto& h : self->state.stores)
    v = std::max(v, h.store.version());
  return v;
}

namespace {

/// Writes the snapshots of `p` to our checkpoint file on the writer thread;
/// the thread reports back with (checkpoint_atom, serial, error text).
void write_checkpoint(self_ptr self, pending_checkpoint& p) {
  auto& st = self->state;
  auto name = checkpoint_file_name(p.generation, st.rank);
  auto path = st.cfg.checkpoint.dir + "/" + name;
  std::function<void()> midway;
  if (st.cfg.checkpoint.tear_generation == p.generation)
    midway = [] { // fault injection: die with half a file written
      std::fprintf(stderr, "*** fault injection: killing this server in the"
                           " middle of a checkpoint write\n");
      ::kill(::getpid(), SIGKILL);
    };
  st.writer.join(); // the previous write, long done in practice
  st.writer.thread =
      std::thread([me = caf::actor_cast<caf::actor>(self), serial = p.serial,
                   f = encode(p.data), path, midway] {
        auto err = write_checked_file(path, f, midway);
        caf::anon_send(me, checkpoint_atom_v, serial,
                       err ? describe_words(err) : std::string{});
      });
}

/// Snapshots hosted store `id` for take `serial` if it is still the one
/// being taken, and starts the write once every store is in.
void snapshot_store(self_ptr self, uint64_t serial, uint64_t id) {
  auto& p = self->state.taking;
  if (!p || p->serial != serial || p->waiting.erase(id) == 0)
    return;
  for (auto& h : self->state.stores)
    if (h.id == id) {
      auto snap = snapshot_of(h.store);
      snap.id = h.id;
      snap.origin = h.origin;
      p->data.stores.push_back(std::move(snap));
    }
  if (p->waiting.empty())
    write_checkpoint(self, *p);
}

} // namespace

caf::response_promise take_checkpoint(self_ptr self, uint64_t gen,
                                      uint64_t at) {
  auto& st = self->state;
  if (st.cfg.checkpoint.dir.empty()) {
    auto rp = self->make_response_promise();
    rp.deliver(caf::make_error(errc::invalid_config,
                               "this server has no --checkpoint.dir"));
    return rp;
  }
  if (st.taking) // the scheduler gave up on it and started another
    st.taking->rp.deliver(caf::make_error(errc::timeout, "checkpoint",
                                          st.taking->generation,
                                          "superseded by", gen));
  st.taking = std::make_unique<pending_checkpoint>();
  auto& p = *st.taking;
  p.generation = gen;
  p.serial = ++st.checkpoint_serial; // the same generation may come again
  auto serial = p.serial;
  p.data = checkpoint_data{
      gen, st.rank, st.cfg.checkpoint.mode, st.cfg.checkpoint.optimizer, {}};
  p.rp = self->make_response_promise();
  auto rp = p.rp;
  for (auto& h : st.stores)
    p.waiting.insert(h.id);
  bool sync = own_store(self).mode().kind == consistency::kind_t::sync;
  std::vector<uint64_t> ids(p.waiting.begin(), p.waiting.end());
  for (auto id : ids) {
    auto h = hosted(self, id);
    auto snap = [self, serial, id] { snapshot_store(self, serial, id); };
    auto err = sync ? h->store.at_version(at, snap) : (snap(), caf::error{});
    if (err) { // past the cut: the scheduler tries again higher
      st.taking.reset();
      rp.deliver(err);
      return rp;
    }
  }
  return rp;
}

void checkpoint_written(self_ptr self, uint64_t serial,
                        const std::string& err) {
  auto& st = self->state;
  if (!st.taking || st.taking->serial != serial)
    return; // superseded meanwhile: its file may be cut elsewhere
  auto p = std::move(st.taking);
  auto gen = p->generation;
  if (!err.empty()) {
    TROUPE_LOG(error, who(self), "checkpoint ", gen, " failed: ", err);
    p->rp.deliver(caf::make_error(errc::bad_file, err));
    return;
  }
  TROUPE_LOG(debug, who(self), "checkpoint ", gen, " written");
  p->rp.deliver(checkpoint_file_name(gen, st.rank));
}

} // namespace troupe::server_impl

// Checkpoints: cutting one consistent generation across the servers and
// writing its manifest, and, at start, resuming from the last one.
#include <algorithm>
#include <chrono>
#include <memory>

#include <caf/event_based_actor.hpp>

#include "actors/base/log.hpp"
#include "actors/cluster/placement.hpp"
#include "actors/scheduler/scheduler_internal.hpp"
#include "actors/server/server_checkpoint.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::sched {

namespace {

// -- one generation -----------------------------------------------------------

/// Attempts at cutting a checkpoint before giving up on it.
constexpr int checkpoint_tries = 5;

void checkpoint_done(self_ptr self, const caf::error& err, uint64_t gen) {
  auto& st = self->state;
  st.checkpointing = false;
  st.abort_checkpoint = nullptr;
  if (nodes_of(self, role::worker).empty()) {
    if (!err)
      st.final_checkpoint = gen;
    st.final_failure = err;
  }
  auto waiting = std::move(st.checkpoint_waiting);
  st.checkpoint_waiting.clear();
  for (auto& rp : waiting)
    if (err)
      rp.deliver(err);
    else
      rp.deliver(gen);
}

void checkpoint_failed(self_ptr self, uint64_t gen, const caf::error& err) {
  // What the servers wrote of it is named by no manifest: it would only
  // take room the next one needs.
  auto removed = remove_generation(self->state.cfg.checkpoint.dir, gen);
  self->state.failed_generations.push_back(gen);
  TROUPE_LOG(warning, "scheduler", "checkpoint ", gen, " failed (",
             describe(err), "); ", removed, " files of it removed");
  record(self, event_record{now_ms(), "checkpoint-failed", role::scheduler, 0,
                            0, str("generation ", gen, ": ", describe(err)),
                            "scheduler"});
  checkpoint_done(self, err, gen);
}

/// Every server wrote generation `gen` at `at`: the manifest names it.
void write_manifest(self_ptr self, uint64_t gen, uint64_t at,
                    std::vector<std::string> files, uint64_t started) {
  auto& ck = self->state.cfg.checkpoint;
  std::sort(files.begin(), files.end());
  checkpoint_manifest m{gen,
                        at,
                        ck.mode,
                        ck.optimizer,
                        files,
                        static_cast<uint64_t>(now_ms()),
                        self->state.job_clocks_per_step};
  if (auto err = write_checked_file(ck.dir + "/" + manifest_name, encode(m))) {
    checkpoint_failed(self, gen, err);
    return;
  }
  auto removed = remove_old_checkpoints(ck.dir, gen - 1); // keep two
  // A failed one's files that a server renamed after the failure (the
  // previous failed generation would be kept as one of the two).
  for (auto failed : self->state.failed_generations)
    removed += remove_generation(ck.dir, failed);
  self->state.failed_generations.clear();
  record(self, event_record{now_ms(), "checkpoint", role::scheduler, 0, 0,
                            str("generation ", gen, " at version ", at, ": ",
                                files.size(), " files in ", ck.dir, ", ",
                                m.time_ms - started, " ms; ", removed,
                                " old files removed"),
                            "scheduler"});
  checkpoint_done(self, caf::none, gen);
}

/// Servers' clocks per step of the live workers (they agree; 1 if none).
uint32_t clocks_per_step(self_ptr self) {
  uint32_t per = 1;
  for (auto& [rank, n] : self->state.clocks_per_step)
    if (is_live_worker(self, rank))
      per = std::max(per, n);
  return per;
}

/// The version to cut at, above `top`, the largest the servers hold:
/// `margin` rounds above it while sync workers run (`workers`).
uint64_t cut_version(self_ptr self, uint64_t top, uint64_t margin,
                     bool workers) {
  auto at = top + (workers ? margin : 0);
  // Between steps: an overlapped worker resumed mid-step would
  // give the rest of that step up.
  if (auto per = clocks_per_step(self); workers && per > 1)
    at = (at + per - 1) / per * per;
  return at;
}

/// What the replies of one attempt gather.
struct gather {
  size_t left = 0;
  uint64_t top = 0;
  std::vector<std::string> files;
  bool failed = false;
};

/// Asks every server to write generation `gen` at version `at`; the
/// manifest follows the last file.
template <class Fail>
void collect_files(self_ptr self, std::shared_ptr<gather> g, uint64_t gen,
                   uint64_t at, const std::vector<caf::actor>& servers,
                   std::chrono::seconds timeout, Fail fail, uint64_t started) {
  g->left = servers.size();
  for (auto& s : servers)
    self->request(s, timeout, checkpoint_atom_v, gen, at)
        .then(
            [self, g, gen, at, started](std::string& file) {
              g->files.push_back(std::move(file));
              if (!g->failed && --g->left == 0)
                write_manifest(self, gen, at, std::move(g->files), started);
            },
            fail);
}

/// One attempt at generation `gen`: ask every server for its version, cut
/// `margin` rounds above the largest, collect the files.
void attempt_checkpoint(self_ptr self, uint64_t gen, uint64_t margin, int tries,
                        uint64_t started) {
  std::vector<caf::actor> servers;
  for (auto& m : self->state.members)
    if (m.info.kind == role::server)
      servers.push_back(m.handle);
  if (servers.empty()) {
    checkpoint_failed(self, gen,
                      caf::make_error(errc::not_connected, "no servers"));
    return;
  }
  // Only sync rounds wait for a cut; other modes snapshot at once.
  bool workers = !nodes_of(self, role::worker).empty() &&
                 self->state.cfg.checkpoint.mode == "sync";
  auto g = std::make_shared<gather>();
  g->left = servers.size();
  auto timeout = std::chrono::seconds{60};
  auto fail = [self, g, gen, margin, tries, started](caf::error err) {
    if (g->failed)
      return;
    g->failed = true;
    // A server passed the cut, or no worker is left to reach it (the next
    // attempt then cuts where the servers are).
    // Four times higher each time (1, 4, 16, 64, 256 rounds): doubled, the
    // fifth was 16 rounds, and a loaded scheduler's round trip saw the
    // servers pass 24 (checkpoint_cluster_test failed so under load). A
    // high cut is reached soon where rounds are that fast.
    if (err == errc::clock_gap && tries > 1) {
      attempt_checkpoint(self, gen, margin * 4, tries - 1, started);
      return;
    }
    checkpoint_failed(self, gen, err);
  };
  self->state.abort_checkpoint = fail; // a server died: do not wait for it
  for (auto& srv : servers)
    self->request(srv, timeout, checkpoint_atom_v, gen)
        .then(
            [self, g, gen, margin, workers, servers, timeout, fail,
             started](uint64_t version) {
              g->top = std::max(g->top, version);
              if (g->failed || --g->left > 0)
                return;
              auto at = cut_version(self, g->top, margin, workers);
              collect_files(self, g, gen, at, servers, timeout, fail, started);
            },
            fail);
}

// -- resuming -----------------------------------------------------------------

/// Resuming: the checkpoint's slices must be those this scheduler's
/// --cluster.slice-floats cuts each key into, or servers would find no
/// slice of the right size to restore and train those afresh.
caf::error check_slicing(self_ptr self, const resume_set& set) {
  auto bound = self->state.cfg.placement.slice_floats;
  for (auto& [key, size] : self->state.resume_sizes) {
    auto n = slice_count(size, bound);
    for (uint32_t i = 0; i < n; ++i) {
      auto [first, last] = slice_range(size, bound, i);
      auto at = set.slices.find(slice_id{key, i});
      if (at == set.slices.end() || at->second.second->floats != last - first)
        return caf::make_error(
            errc::invalid_config,
            str("the checkpoint in ", self->state.cfg.checkpoint.dir,
                " cuts key ", key, " into other slices than",
                " --cluster.slice-floats=", bound,
                " does: resume with the flags the job was started with"));
    }
  }
  return caf::none;
}

/// --resume: takes the last checkpoint's generation and layout, which
/// declares must match. One clear line now rather than failing servers
/// later.
caf::error resume(self_ptr self) {
  auto& ck = self->state.cfg.checkpoint;
  auto set = load_resume_set(ck, false); // servers check their flags
  if (!set) // troupe-node says why the scheduler ended, once
    return set.error();
  auto& m = (*set)->manifest;
  self->state.generation = m.generation;
  self->state.resume_clocks_per_step = m.clocks_per_step;
  self->state.job_clocks_per_step = m.clocks_per_step;
  for (auto& [id, at] : (*set)->slices)
    self->state.resume_sizes[id.key] += at.second->floats;
  if (auto err = check_slicing(self, **set))
    return err;
  TROUPE_LOG(info, "scheduler", "resuming from checkpoint ", m.generation,
             " in ", ck.dir, " (version ", m.version, ", ",
             (*set)->slices.size(), " slices)");
  return caf::none;
}

/// A fresh job in a folder with an earlier job's checkpoint: number
/// after it, so no file of ours takes a name it uses, and say so.
void number_after_earlier_job(self_ptr self) {
  auto& ck = self->state.cfg.checkpoint;
  if (auto m = read_manifest(ck.dir)) {
    self->state.generation = m->generation;
    TROUPE_LOG(warning, "scheduler", ck.dir, " holds checkpoint ",
               m->generation,
               " of an earlier job; this job starts afresh"
               " (--resume continues it) and replaces it at its first"
               " checkpoint");
  }
}

} // namespace

// -- taking one ---------------------------------------------------------------

void start_checkpoint(self_ptr self, caf::response_promise rp) {
  auto& st = self->state;
  if (st.cfg.checkpoint.dir.empty()) {
    if (rp.pending())
      rp.deliver(caf::make_error(errc::invalid_config,
                                 "the scheduler has no --checkpoint.dir"));
    return;
  }
  if (rp.pending())
    st.checkpoint_waiting.push_back(rp);
  if (st.checkpointing)
    return;
  if (st.keys.empty()) {
    checkpoint_done(self,
                    caf::make_error(errc::unknown_key,
                                    "nothing to checkpoint: no key declared"),
                    0);
    return;
  }
  st.checkpointing = true;
  attempt_checkpoint(self, ++st.generation, 1, checkpoint_tries,
                     static_cast<uint64_t>(now_ms()));
}

caf::result<uint64_t> on_final_checkpoint(self_ptr self) {
  auto& st = self->state;
  if (st.cfg.checkpoint.dir.empty())
    return caf::make_error(errc::invalid_config,
                           "the scheduler has no --checkpoint.dir");
  if (!nodes_of(self, role::worker).empty())
    return caf::make_error(errc::timeout, "workers are still live: the job's"
                                          " final checkpoint comes later");
  if (st.checkpointing) {
    auto rp = self->make_response_promise();
    st.checkpoint_waiting.push_back(rp);
    return rp;
  }
  if (st.final_checkpoint != 0)
    return st.final_checkpoint;
  if (st.final_failure) // its own words (no key to keep: unknown_key)
    return st.final_failure;
  return caf::make_error(errc::bad_file,
                         "the job's final checkpoint failed or was never"
                         " taken");
}

void checkpoint_tick(self_ptr self) {
  auto every = self->state.cfg.checkpoint.every_ms;
  if (!nodes_of(self, role::worker).empty())
    start_checkpoint(self, caf::response_promise{});
  self->delayed_send(self, std::chrono::milliseconds{every}, tick_atom_v);
}

caf::error prepare_checkpoints(self_ptr self) {
  auto& ck = self->state.cfg.checkpoint;
  if (ck.resume) {
    if (auto err = resume(self))
      return err;
  } else if (!ck.dir.empty()) {
    number_after_earlier_job(self);
  }
  if (!ck.dir.empty() && ck.every_ms > 0)
    self->delayed_send(self, std::chrono::milliseconds{ck.every_ms},
                       tick_atom_v);
  return caf::none;
}

} // namespace troupe::sched

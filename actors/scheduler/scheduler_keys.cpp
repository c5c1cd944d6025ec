// Declares: the keys workers declare, which worker initialises each, and
// the declares parked until the expected servers have joined.
#include <algorithm>

#include <caf/event_based_actor.hpp>

#include "actors/base/log.hpp"
#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::sched {

namespace {

/// Resuming: `req` must step in the checkpoint's clock count and declare
/// its keys at their checkpointed sizes. Keys the checkpoint lacks are
/// allowed where it holds none of the request's (a worker, a stage, that
/// declared after the cut) and start from their initialiser; beside keys
/// it holds they are another model's (a worker declares its keys at once).
caf::error check_resumed_layout(self_ptr self, const declare_request& req) {
  auto& st = self->state;
  auto& dir = st.cfg.checkpoint.dir;
  if (st.resume_clocks_per_step != 0 &&
      req.clocks_per_step != st.resume_clocks_per_step)
    return caf::make_error(
        errc::invalid_config,
        str("worker ", req.worker, " pushes a step in ", req.clocks_per_step,
            " clocks; the checkpoint in ", dir, " was written by workers that",
            " push one in ", st.resume_clocks_per_step,
            ": resume with the --worker.overlap and --train.block-floats the",
            " job was started with"));
  for (auto& k : req.keys) {
    auto i = st.resume_sizes.find(k.key);
    if (i != st.resume_sizes.end() && i->second != k.size)
      return caf::make_error(
          errc::invalid_config,
          str("worker ", req.worker, " declares key ", k.key, " with ", k.size,
              " floats; the checkpoint in ", dir, " holds it with ", i->second,
              ": resume with the model (--train.model) and the flags the job",
              " was started with"));
  }
  std::vector<uint64_t> lacking;
  for (auto& k : req.keys)
    if (st.resume_sizes.count(k.key) == 0)
      lacking.push_back(k.key);
  // mlp:784-10-10 resumed from mlp:784-10 took the first layer's weights
  // and trained the second afresh, without a word.
  if (!st.resume_sizes.empty() && !lacking.empty() &&
      lacking.size() < req.keys.size()) {
    std::string keys;
    for (size_t i = 0; i < lacking.size() && i < 8; ++i)
      keys += (i > 0 ? ", " : "") + std::to_string(lacking[i]);
    if (lacking.size() > 8)
      keys += ", ...";
    return caf::make_error(
        errc::invalid_config,
        str("worker ", req.worker, " declares keys the checkpoint in ", dir,
            " lacks (", keys, ") beside keys it holds: another model; resume",
            " with the model (--train.model) and the flags the job was",
            " started with"));
  }
  return caf::none;
}

/// Refuses `req` if it disagrees with the live workers' step, the
/// checkpoint resumed from, or a key's size declared before.
caf::error check_declare(self_ptr self, const declare_request& req) {
  auto& st = self->state;
  for (auto& [rank, n] : st.clocks_per_step)
    if (rank != req.worker && n != req.clocks_per_step &&
        is_live_worker(self, rank))
      return caf::make_error(errc::invalid_config, "worker", req.worker,
                             "pushes a step in", req.clocks_per_step,
                             "clocks, worker", rank, "in", n,
                             "(give every worker the same --worker.overlap"
                             " and --train.block-floats)");
  if (auto err = check_resumed_layout(self, req))
    return err;
  for (auto& k : req.keys) {
    auto i = std::find_if(st.keys.begin(), st.keys.end(),
                          [&k](const key_info& x) { return x.key == k.key; });
    if (i != st.keys.end() && i->size != k.size)
      return caf::make_error(errc::size_conflict, "key", k.key, "declared",
                             i->size, "now", k.size);
  }
  return caf::none;
}

/// Adds the keys of `req` that are new, placing them and publishing the
/// view if there are any.
caf::error add_keys(self_ptr self, const declare_request& req) {
  if (auto err = check_declare(self, req))
    return err;
  auto& st = self->state;
  st.clocks_per_step[req.worker] = req.clocks_per_step;
  st.job_clocks_per_step = req.clocks_per_step;
  bool added = false;
  for (auto& k : req.keys)
    if (st.initialiser.emplace(k.key, req.worker).second) {
      st.keys.push_back(k);
      added = true;
    }
  if (added) {
    replace_placement(self);
    publish(self);
  }
  return caf::none;
}

void answer_declare(self_ptr self, const declare_request& req,
                    caf::response_promise& rp) {
  if (auto err = add_keys(self, req)) {
    rp.deliver(err);
    return;
  }
  declare_reply reply{current_view(self), {}};
  for (auto& k : req.keys) {
    // The first declarer initialises; if it is gone (maybe before its Init
    // arrived), this one does. Servers keep the first Init of a slice.
    auto& first = self->state.initialiser[k.key];
    if (first != req.worker && !is_live_worker(self, first))
      first = req.worker;
    if (first == req.worker)
      reply.initialiser.push_back(k.key);
  }
  rp.deliver(encode(reply));
}

} // namespace

void flush_parked(self_ptr self) {
  auto& st = self->state;
  if (st.cfg.servers == 0) { // pipeline stages alone: nothing to declare
    for (auto& p : st.parked)
      p.rp.deliver(caf::make_error(
          errc::invalid_config,
          "this cluster has no servers (--cluster.servers=0): only pipeline"
          " stages without replicas (--worker.task=stage) run in it"));
    st.parked.clear();
    return;
  }
  // Until the expected servers have joined, declares wait for them; once
  // they have, the live ones are enough (a dead server never blocks).
  auto live = server_ranks(self).size();
  if (live == 0 ||
      (live < st.cfg.servers && st.joined[role::server] < st.cfg.servers))
    return;
  auto parked = std::move(st.parked);
  st.parked.clear();
  for (auto& p : parked)
    answer_declare(self, p.req, p.rp);
}

caf::result<frame> on_declare(self_ptr self, const frame& f) {
  declare_request req;
  if (auto err = decode(f, req)) { // 2
    TROUPE_LOG(warning, "scheduler",
               "dropped Declare: ", self->system().render(err));
    return err;
  }
  auto rp = self->make_response_promise();
  self->state.parked.push_back({std::move(req), rp});
  flush_parked(self);
  arm_waiting_report(self); // says so if it is still parked then
  return rp;
}

} // namespace troupe::sched

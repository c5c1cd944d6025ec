// The worker actor's loop, as a chain of named steps; see the header.
#include "actors/worker/worker.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <map>
#include <optional>
#include <set>

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/base/exit_codes.hpp"
#include "actors/base/log.hpp"
#include "actors/base/spin_scheduler.hpp"
#include "actors/base/step_watch.hpp"
#include "actors/base/stray_errors.hpp"
#include "actors/base/thrown.hpp"
#include "actors/kv/kv.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

struct worker_state {
  static inline const char* name = "worker";
  std::shared_ptr<worker_logic> logic;
  caf::actor kv;
  std::vector<uint64_t> keys;
  uint64_t clock = 0;
  std::string who = "worker"; // "worker 1" once it has its rank
  std::chrono::milliseconds barrier_timeout{60000};
  bool pipeline = false;
  /// Pipelined: a computed step waiting for the push before it to be
  /// answered (its clock and what to push).
  std::optional<std::pair<uint64_t, std::vector<named_array>>> pending;
  // -- overlapped steps --------------------------------------------------
  /// The keys of each block (empty: steps are whole); the servers' clock
  /// of block b of step t is t * blocks.size() + b.
  std::vector<std::vector<uint64_t>> blocks;
  size_t awaiting = 0;                 // blocks of this step not answered
  std::vector<named_array> collected;  // the next step's weights, by key
  std::map<uint64_t, size_t> position; // key -> index in `keys`
};

using worker_ptr = caf::stateful_actor<worker_state>*;
using arrays = std::vector<named_array>;

/// The kv client answers every request within its own timeouts and we
/// monitor it, so steps need no timeout of their own (one would cost a
/// wake-up of CAF's clock thread per call).
constexpr caf::infinite_t kv_grace = caf::infinite;

void stop(worker_ptr self, caf::error err) {
  self->quit(std::move(err));
}

/// A request to our kv client failed with `err`. One to a client that has
/// ended fails with CAF's bare request_receiver_down, which may come before
/// the client's down message: that message says why it ended (a loss, the
/// scheduler gone), and the down handler stops us with it.
void kv_failed(worker_ptr self, caf::error err) {
  if (err != caf::sec::request_receiver_down)
    stop(self, std::move(err));
}

/// A request to our kv client on its way (ask_kv): then(f) handles the
/// answer, and every failure goes to kv_failed.
template <class Handle> struct kv_request {
  worker_ptr self;
  Handle handle;
  template <class F> void then(F f) && {
    std::move(handle).then(std::move(f), [s = self](caf::error& err) {
      kv_failed(s, std::move(err));
    });
  }
};

/// Sends a request to our kv client. Its reply is due soon: the scheduler
/// thread watches for it rather than sleeping (actors/base/spin_scheduler.hpp).
template <class... Ts> auto ask_kv(worker_ptr self, Ts&&... xs) {
  expect_work_soon();
  auto h = self->request(self->state.kv, kv_grace, std::forward<Ts>(xs)...);
  return kv_request<decltype(h)>{self, std::move(h)};
}

void start_step(worker_ptr self);

/// The servers' clock of the start of the worker's step (with blocks,
/// each is a clock of its own).
uint64_t kv_clock(const worker_state& st) {
  return st.clock * std::max<size_t>(st.blocks.size(), 1);
}

/// Watches a call of the logic (step_watch.hpp): "worker 1: step 12".
watched_work watching(const worker_state& st, const char* what,
                      uint64_t clock) {
  return watched_work{st.who + ": " + what + " " + std::to_string(clock)};
}

void on_final(worker_ptr self, const arrays& weights) { // 8
  auto watch =
      watching(self->state, "its finish after clock", self->state.clock);
  self->state.logic->finish(weights);
  self->quit();
}

void finish_up(worker_ptr self) { // 7
  auto& st = self->state;
  auto timeout = st.barrier_timeout;
  ask_kv(self, barrier_atom_v, std::string{"end"},
         static_cast<uint32_t>(timeout.count()))
      .then([self](uint64_t) {
        ask_kv(self, pull_atom_v, kv_clock(self->state), self->state.keys)
            .then([self](const arrays& w) { on_final(self, w); });
      });
}

/// What a step returned holds one array for each of `keys` (those of
/// parameters()): a key left out was left out of every round, silently
/// (the rest trained); one returned twice or never declared, the same.
caf::error check_step(const std::vector<uint64_t>& keys, const arrays& out) {
  std::vector<bool> seen(keys.size());
  for (auto& a : out) {
    auto at = std::find(keys.begin(), keys.end(), a.key);
    auto key = std::to_string(a.key);
    if (at == keys.end())
      return caf::make_error(errc::unknown_key,
                             "step() returned key " + key +
                                 ", which parameters() did not declare");
    if (seen[at - keys.begin()])
      return caf::make_error(errc::bad_shape,
                             "step() returned key " + key + " twice");
    seen[at - keys.begin()] = true;
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i])
      return caf::make_error(errc::bad_shape,
                             "step() returned no array for key " +
                                 std::to_string(keys[i]) +
                                 ", which parameters() declared: return one"
                                 " per key");
  return caf::none;
}

/// Step `clock` of the logic (step_taking, or step where `first`), its
/// arrays checked against parameters() (check_step).
caf::expected<arrays> run_step(worker_ptr self, uint64_t clock, arrays& weights,
                               bool first = false) {
  auto& st = self->state;
  auto watch = watching(st, "step", clock);
  auto out = first ? st.logic->step(clock, weights)
                   : st.logic->step_taking(clock, weights);
  if (out)
    if (auto err = check_step(st.keys, *out))
      return err;
  return out;
}

void on_weights(worker_ptr self, arrays& weights) { // 4, 5
  auto& st = self->state;
  auto out = run_step(self, st.clock, weights);
  if (!out) {
    stop(self, std::move(out.error()));
    return;
  }
  if (!st.logic->done(st.clock + 1)) {
    // Push and the next pull in one round trip per server.
    ask_kv(self, push_atom_v, st.clock, std::move(*out),
           st.keys)
        .then([self](arrays& w) { // 6 (ours alone: the step may take it)
          ++self->state.clock;
          on_weights(self, w);
        });
    return;
  }
  ask_kv(self, push_atom_v, st.clock, std::move(*out))
      .then([self](uint64_t) { // 6
        ++self->state.clock;
        start_step(self);
      });
}

// -- pipelined steps: push(t) is in flight while step(t + 1) runs ----------

void push_piped(worker_ptr self, uint64_t clock, arrays out);

/// Runs step `clock` on `weights` (the step may take them) and keeps what
/// it pushes until the push before it is answered.
void compute_piped(worker_ptr self, uint64_t clock, arrays& weights) {
  auto out = run_step(self, clock, weights);
  if (!out) {
    stop(self, std::move(out.error()));
    return;
  }
  self->state.pending.emplace(clock, std::move(*out));
}

/// Push `clock` was answered, with the weights for step clock + 2 if there
/// is one: the step computed meanwhile goes out, then that step runs.
void on_piped_reply(worker_ptr self, uint64_t clock, arrays* weights) {
  auto& st = self->state;
  st.clock = clock + 1;
  if (!st.pending) { // that push was the last
    finish_up(self);
    return;
  }
  auto [next, out] = std::move(*st.pending);
  st.pending.reset();
  push_piped(self, next, std::move(out));
  if (weights)
    compute_piped(self, next + 1, *weights);
}

/// Pushes step `clock` and, if step clock + 2 will run, reads its weights
/// (at clock + 1) in the same round trip.
void push_piped(worker_ptr self, uint64_t clock, arrays out) {
  auto& st = self->state;
  if (!st.logic->done(clock + 2)) {
    ask_kv(self, push_atom_v, clock, std::move(out), st.keys)
        .then([self, clock](arrays& w) { on_piped_reply(self, clock, &w); });
    return;
  }
  ask_kv(self, push_atom_v, clock, std::move(out))
      .then([self, clock](uint64_t) { on_piped_reply(self, clock, nullptr); });
}

/// The first weights serve two steps: step() leaves them to us, the push
/// of its result goes out, and step_taking() runs the next step on them.
void start_piped(worker_ptr self, arrays& weights) {
  auto& st = self->state;
  auto clock = st.clock;
  auto out = run_step(self, clock, weights, true);
  if (!out) {
    stop(self, std::move(out.error()));
    return;
  }
  push_piped(self, clock, std::move(*out));
  if (!st.logic->done(clock + 1))
    compute_piped(self, clock + 1, weights);
}

// -- overlapped steps: each block's push leaves while the step goes on ----

void run_blocked(worker_ptr self, arrays& weights);

/// True if `xs` holds the arrays of block `b`, keys in order.
bool is_block(const worker_state& st, size_t b, const arrays& xs) {
  if (b >= st.blocks.size() || xs.size() != st.blocks[b].size())
    return false;
  for (size_t i = 0; i < xs.size(); ++i)
    if (xs[i].key != st.blocks[b][i])
      return false;
  return true;
}

/// Block `b` of the step at st.clock was answered: with its keys' weights
/// for the next step, or (the last step) only acknowledged.
void on_block(worker_ptr self, size_t b, arrays* weights) {
  auto& st = self->state;
  if (weights) {
    if (!is_block(st, b, *weights)) { // its keys are parameters' then
      stop(self, caf::make_error(errc::bad_shape, "pulled block", b,
                                 "holds other keys"));
      return;
    }
    {
      auto watch = watching(st, "weights_arrived of step", st.clock + 1);
      st.logic->weights_arrived(st.clock + 1, b, *weights);
    }
    for (auto& a : *weights)
      st.collected[st.position.at(a.key)] = std::move(a);
  }
  if (--st.awaiting > 0)
    return;
  ++st.clock;
  if (st.logic->done(st.clock)) {
    finish_up(self);
    return;
  }
  auto next = std::move(st.collected);
  run_blocked(self, next);
}

/// Pushes block `b` of the step at `clock` (and pulls its keys for the
/// next step unless this step is the `last`).
void push_block(worker_ptr self, uint64_t clock, size_t b, arrays grads,
                bool last) {
  auto& st = self->state;
  auto at = clock * st.blocks.size() + b;
  if (last) {
    ask_kv(self, push_atom_v, at, std::move(grads)).then([self, b](uint64_t) {
      on_block(self, b, nullptr);
    });
    return;
  }
  ask_kv(self, push_atom_v, at, std::move(grads), st.blocks[b])
      .then([self, b](arrays& w) { on_block(self, b, &w); });
}

/// Runs the step at st.clock on `weights` (the step may take them), its
/// blocks pushed as the logic hands them over.
void run_blocked(worker_ptr self, arrays& weights) {
  auto& st = self->state;
  auto clock = st.clock;
  st.collected.assign(st.keys.size(), named_array{});
  st.awaiting = st.blocks.size();
  bool last = st.logic->done(clock + 1); // asked here: one call at a time
  size_t next = 0;                       // the block due next
  caf::error bad;
  auto watch = watching(st, "step", clock);
  auto err = st.logic->step_blocked(
      clock, weights, [self, clock, last, &next, &bad](size_t b, arrays grads) {
        if (bad)
          return;
        if (b != next || !is_block(self->state, b, grads)) {
          bad =
              caf::make_error(errc::bad_shape, "step_blocked handed over block",
                              b, "out of order or with other keys");
          return;
        }
        ++next;
        push_block(self, clock, b, std::move(grads), last);
      });
  if (!err && !bad && next != st.blocks.size())
    bad = caf::make_error(errc::bad_shape, "step_blocked handed over",
                          uint64_t{next}, "of", uint64_t{st.blocks.size()},
                          "blocks");
  if (err || bad)
    stop(self, err ? std::move(err) : std::move(bad));
}

/// A worker back in the middle of step t (restarted, or resumed from a
/// checkpoint cut there): the rounds of its blocks before `first` are
/// applied, so step t's weights are gone and a gradient computed now would
/// mix steps t and t + 1. Its part in the blocks left is given up (empty
/// pushes: those rounds take the other workers' mean), and it goes on with
/// step t + 1.
void skip_rest_of_step(worker_ptr self, size_t first) {
  auto& st = self->state;
  TROUPE_LOG(info, "worker", "back in the middle of step ", st.clock,
             ": its blocks ", first, " to ", st.blocks.size() - 1,
             " of that step are given up");
  st.logic->step_skipped(st.clock);
  auto left = std::make_shared<size_t>(st.blocks.size() - first);
  for (auto b = first; b < st.blocks.size(); ++b)
    ask_kv(self, push_atom_v, st.clock * st.blocks.size() + b, arrays{})
        .then([self, left](uint64_t) {
          if (--*left > 0)
            return;
          ++self->state.clock;
          start_step(self);
        });
}

void start_step(worker_ptr self) {
  auto& st = self->state;
  if (st.logic->done(st.clock)) {
    finish_up(self);
    return;
  }
  ask_kv(self, pull_atom_v, kv_clock(st), st.keys).then([self](arrays& w) {
    if (!self->state.blocks.empty())
      run_blocked(self, w);
    else if (self->state.pipeline)
      start_piped(self, w);
    else
      on_weights(self, w);
  });
}

void on_started(worker_ptr self) { // 3
  ask_kv(self, view_atom_v).then([self](uint32_t rank, const frame& f) {
    cluster_view v;
    if (auto err = decode(f, v)) {
      stop(self, err);
      return;
    }
    // Partitions follow the job's size, not who is live right now
    // (a worker restarted mid-failure keeps its share).
    auto workers =
        std::max(v.expected_workers, static_cast<uint32_t>(v.workers.size()));
    ask_kv(self, clock_atom_v).then([self, rank, workers](uint64_t clock) {
      if (clock > 0) // a restarted worker catches up
        TROUPE_LOG(info, "worker " + std::to_string(rank),
                   "rejoined: resuming at clock ", clock);
      auto& st = self->state;
      auto per = std::max<size_t>(st.blocks.size(), 1);
      st.clock = clock / per; // with blocks: step, block
      st.who = "worker " + std::to_string(rank);
      {
        auto watch = watching(st, "its start at step", st.clock);
        st.logic->start(rank, workers);
      }
      if (auto first = clock % per; first > 0)
        skip_rest_of_step(self, first);
      else
        start_step(self);
    });
  });
}

void on_initialised(worker_ptr self) { // 2
  auto timeout = self->state.barrier_timeout;
  ask_kv(self, barrier_atom_v, std::string{"start"},
         static_cast<uint32_t>(timeout.count()))
      .then([self](uint64_t) { on_started(self); });
}

/// parameters() names each key once, with at least one float (the kv
/// client's refusal read as a malformed message: "key listed twice").
caf::error check_parameters(const arrays& params) {
  std::set<uint64_t> seen;
  for (auto& p : params) {
    auto key = std::to_string(p.key);
    if (!seen.insert(p.key).second)
      return caf::make_error(errc::invalid_config,
                             "parameters() lists key " + key + " twice");
    if (p.values.empty())
      return caf::make_error(errc::invalid_config,
                             "parameters() gives key " + key +
                                 " no values: an array holds one float or"
                                 " more");
  }
  return caf::none;
}

/// Blocks must name each key of parameters() once.
caf::error check_blocks(const worker_state& st) {
  std::map<uint64_t, size_t> seen;
  for (auto& b : st.blocks) {
    if (b.empty())
      return caf::make_error(errc::invalid_config, "an empty block");
    for (auto key : b)
      if (st.position.count(key) == 0 || seen[key]++ > 0)
        return caf::make_error(errc::invalid_config, "block key", key,
                               "is not a parameter or is in two blocks");
  }
  if (!st.blocks.empty() && seen.size() != st.keys.size())
    return caf::make_error(errc::invalid_config, "blocks name",
                           uint64_t{seen.size()}, "of",
                           uint64_t{st.keys.size()}, "keys");
  return caf::none;
}

caf::behavior worker(worker_ptr self, caf::actor kv,
                     std::shared_ptr<worker_logic> logic, worker_options opts) {
  self->set_exception_handler([](caf::scheduled_actor*, std::exception_ptr& e) {
    return thrown("the worker's", e);
  });
  auto& st = self->state;
  st.kv = kv;
  st.logic = std::move(logic);
  st.barrier_timeout = std::chrono::milliseconds{opts.barrier_timeout_ms};
  st.pipeline = opts.pipeline;
  auto params = st.logic->parameters();
  for (auto& p : params) {
    st.position[p.key] = st.keys.size();
    st.keys.push_back(p.key);
  }
  if (opts.overlap && !opts.pipeline)
    st.blocks = st.logic->blocks();
  if (auto err = check_parameters(params); err || (err = check_blocks(st))) {
    self->quit(std::move(err));
    return {};
  }
  self->monitor(kv);
  log_stray_errors(self, [] { return std::string{"worker"}; });
  self->set_down_handler([self](const caf::down_msg& dm) {
    if (dm.source == self->state.kv.address())
      stop(self, dm.reason ? dm.reason
                           : caf::make_error(errc::peer_down, "kv client"));
  });
  // 1; with blocks, each step is that many server clocks (the scheduler
  // cuts checkpoints between steps, and refuses workers that differ)
  auto on_init = [self](const arrays&) { on_initialised(self); };
  if (st.blocks.empty())
    ask_kv(self, init_atom_v, std::move(params)).then(on_init);
  else
    ask_kv(self, init_atom_v, std::move(params),
           static_cast<uint32_t>(st.blocks.size()))
        .then(on_init);
  return {[](caf::unit_t) {}}; // everything happens in replies
}

} // namespace

caf::error worker_logic::step_blocked(uint64_t clock, arrays& weights,
                                      const emit_fn& emit) {
  auto out = step_taking(clock, weights);
  if (!out)
    return std::move(out.error());
  // The blocks name each key of parameters() once (check_blocks).
  auto bs = blocks();
  std::vector<uint64_t> keys;
  for (auto& b : bs)
    keys.insert(keys.end(), b.begin(), b.end());
  if (auto err = check_step(keys, *out))
    return err;
  std::map<uint64_t, named_array*> by_key;
  for (auto& a : *out)
    by_key[a.key] = &a;
  for (size_t b = 0; b < bs.size(); ++b) {
    arrays part;
    for (auto key : bs[b])
      part.push_back(std::move(*by_key.at(key)));
    emit(b, std::move(part));
  }
  return caf::none;
}

int check_nothing_lost(caf::actor_system& sys, const caf::actor& scheduler,
                       uint32_t timeout_ms) {
  caf::scoped_actor self{sys};
  std::vector<event_record> log;
  caf::error failed;
  self->request(scheduler, std::chrono::milliseconds{timeout_ms}, events_atom_v)
      .receive([&](const frame& f) { failed = decode(f, log); },
               [&](caf::error& err) { failed = std::move(err); });
  if (failed) { // a failure of the moment: a restart may tell
    stderr_line() << "*** cannot tell whether the job lost values (the"
                     " scheduler's event log: "
                  << describe(failed) << ")\n";
    return exit_failed;
  }
  auto is_lost = [](const event_record& e) { return e.kind == "lost"; };
  auto first = std::find_if(log.begin(), log.end(), is_lost);
  if (first == log.end())
    return 0;
  auto lost = std::count_if(first, log.end(), is_lost);
  stderr_line() << "*** the job lost values (" << lost << " lost event"
                << (lost == 1 ? "" : "s") << "; the first, from "
                << first->source << ": " << first->detail
                << "): its result is not what it trained; --cluster.allow-loss"
                   " accepts that\n";
  return exit_job_failed;
}

std::chrono::milliseconds step_bound_of(const worker_options& opts,
                                        const kv_settings& kv) {
  auto others_wait =
      kv.mode == "async" ? opts.barrier_timeout_ms : kv.request_timeout_ms;
  return step_bound(opts.step_timeout_ms, others_wait);
}

caf::actor spawn_worker(caf::actor_system& sys, caf::actor kv_client,
                        std::shared_ptr<worker_logic> logic,
                        worker_options opts) {
  if (opts.pipeline) // a step runs while the kv client sends
    return sys.spawn<caf::detached>(worker, std::move(kv_client),
                                    std::move(logic), opts);
  return sys.spawn(worker, std::move(kv_client), std::move(logic), opts);
}

int run_worker(caf::actor_system& sys, caf::actor scheduler,
               const kv_settings& cfg, std::shared_ptr<worker_logic> logic,
               worker_options opts) {
  start_step_watch(step_bound_of(opts, cfg));
  auto ends = cfg; // a loss ends it at once, as at its end below
  ends.ends_on_loss = !cfg.allow_loss;
  auto kv = spawn_kv_client(sys, scheduler, ends);
  auto w = spawn_worker(sys, kv, std::move(logic), opts);
  caf::scoped_actor self{sys};
  self->monitor(w);
  int rc = 0;
  self->receive([&rc](const caf::down_msg& dm) {
    if (dm.reason && dm.reason != caf::exit_reason::normal) {
      stderr_line() << "*** worker failed: " << describe(dm.reason) << '\n';
      rc = exit_code_of(dm.reason);
    }
  });
  if (rc == 0 && !cfg.allow_loss)
    rc = check_nothing_lost(sys, scheduler, cfg.request_timeout_ms);
  if (rc == 0) // done: leave the view, so that our exit is no crash
    self->request(kv, std::chrono::seconds{5}, leave_atom_v)
        .receive([](uint64_t) {},
                 [](const caf::error& err) {
                   TROUPE_LOG(warning, "worker",
                              "leaving the cluster failed: ", describe(err));
                 });
  self->send_exit(kv, caf::exit_reason::user_shutdown);
  return rc;
}

} // namespace troupe

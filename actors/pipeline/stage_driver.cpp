// A pipeline stage's driver: see the header. The numbers in comments are
// its transitions.
#include "actors/pipeline/stage_driver.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include <caf/event_based_actor.hpp>

#include "actors/base/log.hpp"
#include "actors/device/stage_device.hpp"
#include "actors/pipeline/stage_actor.hpp"
#include "actors/pipeline/stage_driver_internal.hpp"
#include "actors/pipeline/stage_roads.hpp"
#include "kernels/partition.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::pipe {

std::string who(driver_ptr self) {
  auto& st = self->state;
  auto s = "stage " + std::to_string(st.rank);
  return st.replicas > 1 ? "replica " + std::to_string(st.replica) + " " + s
                         : s;
}

bool hybrid(driver_ptr self) {
  return self->state.cfg.servers > 0;
}

bool is_lead(driver_ptr self) {
  return self->state.rank == 0;
}

bool is_last(driver_ptr self) {
  return self->state.rank + 1 == self->state.stages;
}

caf::timespan timeout(driver_ptr self) {
  return std::chrono::milliseconds{self->state.cfg.kv.request_timeout_ms};
}

caf::timespan stall_after(driver_ptr self) {
  return 2 * timeout(self);
}

std::string generation_name(uint64_t g) {
  auto name = std::to_string(g >> 32);
  if (auto n = g & 0xffffffffu)
    name += "." + std::to_string(n);
  return name;
}

namespace {

/// True once per checkpoint folder for stage `rank`'s fault in `step`: it
/// leaves a mark there, so that the restarted process does not kill
/// itself again.
bool claim_fault(const std::string& dir, uint32_t rank, uint64_t step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  auto mark = std::filesystem::path{dir} /
              ("fault-" + std::to_string(rank) + "-" + std::to_string(step));
  if (std::filesystem::exists(mark, ec))
    return false;
  std::ofstream{mark} << "killed once\n";
  return true;
}

/// What stage_checkpoint names this stage's layers by, at `step`.
stage_checkpoint layout(driver_ptr self, uint64_t step) {
  auto& st = self->state;
  stage_checkpoint x;
  x.stage = st.rank;
  x.step = step;
  x.spec = st.cfg.train.model;
  x.first = static_cast<uint32_t>(st.cut[st.rank]);
  x.last = static_cast<uint32_t>(st.cut[st.rank + 1]);
  x.optimizer = st.optimizer;
  return x;
}

/// The samples of mini-batch `k`, in order.
const size_t* batch_samples(driver_ptr self, uint64_t k) {
  auto& st = self->state;
  auto epoch = k / st.steps_per_epoch;
  if (epoch != st.order_epoch) {
    epoch_partition(st.data.train_n, epoch, st.cfg.train.seed, st.replica,
                    st.replicas, st.order);
    st.order_epoch = epoch;
  }
  return st.order.data() + (k % st.steps_per_epoch) * st.cfg.train.batch;
}

/// Mini-batch `k` as this stage takes it: stage 0 the images, the last
/// stage the labels, a middle stage nothing.
frame batch_frame(driver_ptr self, uint64_t k) {
  auto& st = self->state;
  auto rows = st.cfg.train.batch;
  auto* idx = batch_samples(self, k);
  if (st.rank == 0) {
    auto cols = st.data.cols;
    stage_tensor x{k, 0, rows, static_cast<uint32_t>(cols), {}, st.gen};
    x.values.resize(size_t{rows} * cols);
    for (uint32_t i = 0; i < rows; ++i)
      std::copy_n(st.data.train.images.data() + idx[i] * cols, cols,
                  x.values.data() + i * cols);
    return encode(x);
  }
  if (!is_last(self))
    return frame{};
  stage_tensor y{k, 0, rows, 1, std::vector<float>(rows), st.gen};
  for (uint32_t i = 0; i < rows; ++i)
    y.values[i] = float(st.data.train.labels[idx[i]]);
  return encode(y);
}

void begin_step(driver_ptr self);

/// 4: mini-batch `k` is applied here: checkpoint, evaluate, go on.
void on_committed(driver_ptr self, uint64_t applied) {
  auto& st = self->state;
  st.step = applied;
  bool end = applied == st.total_steps;
  if (!hybrid(self) &&
      (applied % st.cfg.pipeline.checkpoint_every == 0 || end)) {
    self->request(st.stage, timeout(self), pull_atom_v)
        .then([self, applied](std::vector<named_array>& w) {
          auto x = layout(self, applied);
          x.arrays = std::move(w);
          if (auto err = write_stage_checkpoint(self->state.dir, x))
            TROUPE_LOG(error, who(self),
                       "cannot write its checkpoint: ", describe(err));
        });
  }
  evaluate_at(self, applied);
  if (!end)
    begin_step(self);
}

/// Declares the stage's arrays on the servers (the first declarer's
/// values are everyone's), then st.declared. A connection to a server
/// that broke while the view still names it (seen while a cluster's
/// processes all start at once) is tried again after a pause, a few times.
void declare(driver_ptr self) {
  auto& st = self->state;
  self->request(st.kv, caf::infinite, init_atom_v, st.initial)
      .then(
          [self](std::vector<named_array>&) {
            auto done = std::move(self->state.declared);
            done();
          },
          [self](caf::error& err) {
            auto& st = self->state;
            if (st.declare_tries == 0 ||
                (err != errc::not_connected && err != errc::peer_down)) {
              self->quit(err);
              return;
            }
            --st.declare_tries;
            TROUPE_LOG(info, who(self), "declaring its arrays: ", describe(err),
                       "; trying again");
            self->delayed_send(self, sync_retry, init_atom_v);
          });
}

/// 2: gives the stage mini-batch `st.step`.
void begin_step(driver_ptr self) {
  auto& st = self->state;
  if (st.step >= st.total_steps || st.running)
    return;
  st.running = true;
  auto gen = st.gen;
  auto k = st.step;
  self->request(st.stage, caf::infinite, step_atom_v, k, batch_frame(self, k))
      .then(
          [self, gen, k](double loss) { // 3
            auto& st = self->state;
            if (gen != st.gen)
              return;
            st.running = false;
            if (is_last(self))
              st.losses[k] = loss / st.cfg.train.batch;
            self->send(st.lead, done_atom_v, gen, k, st.rank, loss);
          },
          [self, gen, k](caf::error& err) {
            if (gen == self->state.gen)
              TROUPE_LOG(warning, who(self), "mini-batch ", k,
                         " dropped: ", describe(err));
          });
}

/// Gives the stage `w` as its weights after `step` mini-batches in
/// generation `gen`, with its neighbours; then `then` with the step.
template <class F>
void reset_stage(driver_ptr self, uint64_t gen, uint64_t step,
                 std::vector<named_array> w, F then) {
  auto& st = self->state;
  auto sink = is_last(self) ? caf::actor{self} : caf::actor{};
  self->request(st.stage, timeout(self), reset_atom_v, gen, step, std::move(w),
                st.prev, st.next, sink)
      .then(
          [self, gen, then](uint64_t at) {
            if (gen == self->state.gen)
              then(at);
          },
          [self](caf::error& err) { self->quit(err); });
}

/// 1, once the weights of `step` are here.
void begin_generation(driver_ptr self, uint64_t gen, uint64_t step,
                      std::vector<named_array> w) {
  // Shared: the weights are not copied with the handlers that hold them.
  auto held = std::make_shared<std::vector<named_array>>(std::move(w));
  auto reset = [self, gen, step, held] {
    reset_stage(self, gen, step, std::move(*held), [self, gen](uint64_t at) {
      auto& st = self->state;
      TROUPE_LOG(info, who(self), "generation ", generation_name(gen),
                 ": at mini-batch ", at);
      st.step = at;
      if (at >= st.total_steps) // resumed at the end
        evaluate_at(self, at);
      begin_step(self);
    });
  };
  meet_previous(self, gen, std::move(reset));
}

} // namespace

void on_start(driver_ptr self, caf::actor lead, uint64_t gen, uint64_t step,
              caf::actor prev, caf::actor next) {
  auto& st = self->state;
  if (gen < st.gen || st.finished)
    return;
  if (st.running)
    TROUPE_LOG(info, who(self), "mini-batch ", st.step, " dropped");
  st.gen = gen;
  st.lead = std::move(lead);
  st.running = false;
  st.step = step;
  st.rate_step = step;
  st.rate_secs = seconds_running(st);
  st.prev = std::move(prev);
  st.next = std::move(next);
  // Evaluations of a generation that is over; the final one comes again.
  st.evals.clear();
  if (step < st.total_steps)
    st.final_held.reset();
  if (hybrid(self)) { // the servers' weights at that clock
    self->request(st.kv, caf::infinite, pull_atom_v, step, st.keys)
        .then(
            [self, gen, step](std::vector<named_array>& w) {
              if (gen == self->state.gen)
                begin_generation(self, gen, step, std::move(w));
            },
            [self](caf::error& err) { self->quit(err); });
    return;
  }
  std::vector<named_array> w = st.initial;
  if (step > 0) {
    auto got = read_stage_checkpoint(st.dir, layout(self, step));
    if (!got) { // the lead saw it listed: torn since, or unreadable
      TROUPE_LOG(error, who(self), describe(got.error()));
      self->quit(got.error());
      return;
    }
    w = std::move(*got);
  }
  begin_generation(self, gen, step, std::move(w));
}

namespace {

/// 4 with servers: the gradients of `k` go to them, and the weights of
/// k + 1 come back.
void push_through_servers(driver_ptr self, uint64_t gen, uint64_t k) {
  auto& st = self->state;
  auto fail = [self](caf::error& err) { self->quit(err); };
  self->request(st.stage, timeout(self), push_atom_v, gen, k)
      .then(
          [self, gen, k, fail](std::vector<named_array>& grads) {
            auto& st = self->state;
            if (k == st.kill_in_push) // --pipeline.fault-kill=S@K:push
              self->send(st.kv, fault_atom_v, k);
            self->request(st.kv, caf::infinite, push_atom_v, k,
                          std::move(grads), st.keys)
                .then(
                    [self, gen, k](std::vector<named_array>& w) {
                      if (gen != self->state.gen)
                        return;
                      reset_stage(
                          self, gen, k + 1, std::move(w),
                          [self](uint64_t at) { on_committed(self, at); });
                    },
                    fail);
          },
          fail);
}

/// Answers a sync: the stage actor, and where this stage can start again:
/// the steps it has checkpoints of, or (with servers) its clock there.
void answer_sync(driver_ptr self, driver_state::sync_promise rp) {
  auto& st = self->state;
  // Here, not where the sync comes in: one that came before the stage was
  // built is answered later (flush_early), and the fault then never fired
  // (pipeline_hybrid_test, where the stages joined spread out).
  if (st.lose_sync) { // the promise goes unkept, as on a cut
    st.lose_sync = false;
    TROUPE_LOG(warning, who(self), "fault injection: leaves the lead's sync ",
               "unanswered (--pipeline.fault-lose-sync)");
    return;
  }
  if (!hybrid(self)) {
    rp.deliver(st.stage, whole_checkpoint_steps(st.dir, st.rank));
    return;
  }
  self->request(st.kv, timeout(self), clock_atom_v)
      .then(
          [self, rp](uint64_t clock) mutable {
            rp.deliver(self->state.stage, std::vector<uint64_t>{clock});
          },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
}

caf::error not_the_lead(driver_ptr self, const char* what) {
  return caf::make_error(errc::not_a_member, who(self) + ": ignored " + what +
                                                 " from another than its"
                                                 " lead");
}

} // namespace

void flush_early(driver_ptr self) {
  auto& st = self->state;
  if (!st.lead_known)
    return;
  if (st.ready) {
    auto syncs = std::move(st.early_syncs);
    st.early_syncs.clear();
    for (auto& e : syncs)
      if (is_lead_addr(self, e.from))
        answer_sync(self, e.rp);
      else
        e.rp.deliver(not_the_lead(self, "a sync"));
  }
  auto starts = std::move(st.early_starts);
  st.early_starts.clear();
  for (auto& e : starts)
    if (is_lead_addr(self, e.from))
      on_start(self, caf::actor_cast<caf::actor>(e.from), e.gen, e.step,
               std::move(e.prev), std::move(e.next));
    else
      TROUPE_LOG_LIMITED(warning, who(self),
                         "ignored a start from another than its lead");
}

caf::behavior stage_driver(driver_ptr self, stage_run_settings cfg,
                           caf::actor scheduler) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.scheduler = std::move(scheduler);
  st.began = std::chrono::steady_clock::now();
  return {
      // The process knows its rank: build the stage, read the data.
      [self](start_atom, uint32_t member, std::vector<size_t> cut,
             std::string dir, caf::actor kv) -> caf::result<uint64_t> {
        auto& st = self->state;
        st.stages = st.cfg.pipeline.stages;
        st.replicas = st.cfg.pipeline.replicas;
        auto rank = member % st.stages;
        st.rank = rank;
        st.replica = member / st.stages;
        st.kv = std::move(kv);
        st.cut = std::move(cut);
        st.dir = std::move(dir);
        if (auto why = load_stage_data(st.cfg.train, rank, st.stages, st.data);
            !why.empty())
          return caf::make_error(errc::invalid_config, why);
        if (auto why = open_metrics(self, reports(self)); !why.empty())
          return caf::make_error(errc::invalid_config, why);
        // Every replica runs the same number of steps, or sync rounds
        // stall (as the built-in trainer's workers).
        st.steps_per_epoch =
            (st.data.train_n / st.replicas) / st.cfg.train.batch;
        if (st.steps_per_epoch == 0)
          return caf::make_error(errc::invalid_config, "--train.batch",
                                 st.cfg.train.batch, "is more than the",
                                 st.data.train_n, "training samples");
        st.total_steps = st.cfg.pipeline.steps > 0
                             ? st.cfg.pipeline.steps
                             : st.steps_per_epoch * st.cfg.train.epochs;
        auto& p = st.cfg.pipeline;
        auto& opt = st.cfg.optimizer;
        stage_settings s{st.cfg.train.model, st.cfg.train.seed, st.cut, rank,
                         p.micro_batches,    p.schedule,        opt};
        // Its own weights: its own optimizer ("sum", the default, is sgd
        // here); hybrid, the servers' (unused here).
        s.update = opt;
        if (hybrid(self) || opt.name == "sum")
          s.update.name = "sgd";
        st.optimizer = s.update.name;
        s.commit_apart = true;
        s.member = member;
        // The stage's layers on its device, opened here so that a device
        // that cannot be is this process's one-line error (exit 2).
        std::string why;
        s.device = stage_device(st.cfg.device, why);
        std::string bad_spec;
        auto whole = model::from_spec(st.cfg.train.model, &bad_spec);
        if (!whole)
          return caf::make_error(errc::invalid_config, "--train.model",
                                 bad_spec);
        if (auto why =
                model_fits(st.cfg.train.model, whole->input_size(),
                           whole->output_size(), st.data.cols, st.data.classes);
            !why.empty())
          return caf::make_error(errc::invalid_config, why);
        whole->init_parameters(s.seed);
        s.backend =
            open_stage(s.device, *whole, st.cut[rank], st.cut[rank + 1], why);
        if (!s.backend)
          return caf::make_error(errc::device_failed,
                                 "--device=" + st.cfg.device.text + ": " +
                                     to_string(s.device) + ": " + why);
        TROUPE_LOG(info, who(self), "stage ", rank, " computes on ",
                   s.backend->describe(), auto_note(st.cfg.device, why));
        if (auto roads = stage_roads::listen(st.cfg.host, st.cfg.kv))
          s.roads = std::move(*roads);
        else
          TROUPE_LOG(info, who(self), "no road for stage tensors (",
                     describe(roads.error()), "): CAF carries them");
        // A fault in an evaluation that never comes here is not claimed
        // (replica 0 reports as the job starts).
        using at = pipeline_settings::fault_at;
        bool in_eval = p.fault_in == at::eval;
        bool evaluates = evaluated_after(self, p.fault_step);
        if (in_eval && !evaluates && st.replica == 0 && rank == 0)
          TROUPE_LOG(warning, who(self), "--pipeline.fault-kill=", p.fault_kill,
                     ": no evaluation follows mini-batch ", p.fault_step,
                     " (an epoch is ", st.steps_per_epoch, ", the last ",
                     st.total_steps, "): it never fires");
        if (p.fault_step != pipeline_settings::no_fault &&
            (!in_eval || evaluates) &&
            fault_names(p.fault_stage, p.fault_replica, rank, st.replica) &&
            claim_fault(st.dir, rank, p.fault_step)) {
          auto fault = p.fault_in == at::push     ? &st.kill_in_push
                       : p.fault_in == at::eval   ? &s.kill_in_eval
                       : p.fault_in == at::device ? &s.device_error_in_step
                       : p.fault_in == at::stall  ? &s.stall_in_step
                                                  : &s.kill_in_step;
          *fault = p.fault_step;
        }
        st.lose_sync = fault_names(p.lose_sync_stage, p.lose_sync_replica, rank,
                                   st.replica);
        if (fault_names(p.lose_commit_stage, p.lose_commit_replica, rank,
                        st.replica))
          st.lose_commit = p.lose_commit_step;
        st.lose_finish = fault_names(p.lose_finish_stage, p.lose_finish_replica,
                                     rank, st.replica);
        st.stage = self->spawn(stage_actor, s);
        if (s.roads)
          s.roads->deliver_to(st.stage);
        self->link_to(st.stage);
        self->request(st.stage, timeout(self), pull_atom_v)
            .then([self](std::vector<named_array>& w) {
              auto& st = self->state;
              for (auto& a : w)
                st.keys.push_back(a.key);
              auto ready = [self] {
                auto& st = self->state;
                st.ready = true;
                flush_early(self);
                self->send(st.scheduler, watch_atom_v);
              };
              st.initial = std::move(w);
              if (!hybrid(self)) {
                ready();
                return;
              }
              st.declared = std::move(ready);
              declare(self);
            });
        return st.total_steps;
      },
      [self](const frame& f) { // the view asked for by watch_atom
        on_view(self, f);
      },
      [self](view_atom, const frame& f) { on_view(self, f); },
      [self](sync_atom,
             uint64_t epoch) -> caf::result<caf::actor, std::vector<uint64_t>> {
        auto& st = self->state;
        if (epoch < st.gen)
          return caf::make_error(
              errc::bad_shape, who(self) + ": sync " + generation_name(epoch) +
                                   " is older than generation " +
                                   generation_name(st.gen));
        auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
        if (st.lead_known && !is_lead_addr(self, from))
          return not_the_lead(self, "a sync");
        auto rp =
            self->make_response_promise<caf::actor, std::vector<uint64_t>>();
        if (st.ready && st.lead_known) {
          answer_sync(self, rp);
          return rp;
        }
        // Once the stage is built (and declared) and the lead known; the
        // lead asks again every sync_ask_every: its newest ask replaces
        // the one before (whose request timed out there).
        for (auto& e : st.early_syncs)
          if (e.from == from) {
            e.rp.deliver(caf::make_error(errc::timeout, "asked again"));
            e.rp = rp;
            return rp;
          }
        st.early_syncs.push_back({from, rp});
        return rp;
      },
      [self](sync_atom, uint64_t epoch, uint32_t rank) {
        retry(self, epoch, rank);
      },
      [self](tick_atom, uint64_t n) { on_wait_over(self, n); },
      [self](tick_atom) { end_job(self); }, // the stage wait of end_job
      [self](stale_atom) {
        if (self->current_sender() == self->ctrl())
          on_stall_check(self);
      },
      [self](start_atom, uint64_t gen, uint64_t step, caf::actor prev,
             caf::actor next) {
        auto& st = self->state;
        auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
        if (!st.lead_known) { // the view naming the lead is on its way
          st.early_starts.push_back(
              {from, gen, step, std::move(prev), std::move(next)});
          return;
        }
        if (from_lead(self, "a start"))
          on_start(self, caf::actor_cast<caf::actor>(from), gen, step,
                   std::move(prev), std::move(next));
      },
      [self](done_atom, uint64_t gen, uint64_t k, uint32_t rank, double) {
        if (!from_driver(self, rank)) {
          TROUPE_LOG_LIMITED(warning, who(self), "ignored a done for stage ",
                             rank, " from another than its driver");
          return;
        }
        on_done(self, gen, k, rank);
      },
      [self](commit_atom, uint64_t gen, uint64_t k) {
        auto& st = self->state;
        if (!from_lead(self, "a commit") || gen != st.gen || k != st.step)
          return;
        if (k == st.lose_commit) { // --pipeline.fault-lose-commit
          st.lose_commit = ~uint64_t{0};
          TROUPE_LOG(warning, who(self), "fault injection: drops the lead's",
                     " commit of mini-batch ", k,
                     ", as a cut connection"
                     " loses it (--pipeline.fault-lose-commit)");
          return;
        }
        if (hybrid(self)) {
          push_through_servers(self, gen, k);
          return;
        }
        self->request(st.stage, timeout(self), commit_atom_v, gen, k)
            .then(
                [self, gen](uint64_t applied) {
                  if (gen == self->state.gen)
                    on_committed(self, applied);
                },
                [self](caf::error& err) {
                  TROUPE_LOG(warning, who(self),
                             "commit refused: ", describe(err));
                });
      },
      [self](eval_atom, const frame& f) { count_eval(self, f); },
      [self](eval_atom, uint64_t gen, uint64_t step) {
        on_final_counted(self, gen, step);
      },
      [self](init_atom) { declare(self); }, // again, after a pause
      [self](finish_atom, uint64_t gen) { on_finish(self, gen); },
      [self](finish_atom) { // the last stage's finish again (end_job)
        if (self->current_sender() == self->ctrl())
          finish_again(self);
      },
  };
}

} // namespace troupe::pipe

// A stage actor: see the header.
#include "actors/pipeline/stage_actor.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include <caf/event_based_actor.hpp>

#include "actors/base/log.hpp"
#include "actors/base/step_watch.hpp"
#include "actors/device/stage_device.hpp"
#include "actors/pipeline/stage_actor_internal.hpp"
#include "actors/road/road_wire.hpp"
#include "kernels/loss.hpp"
#include "kernels/optimizer.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

std::string stage_impl::who(stage_ptr self) {
  return "stage " + std::to_string(self->state.cfg.stage);
}

namespace {

using stage_impl::arrays_of;
using stage_impl::keep;
using stage_impl::load_weights;
using stage_impl::update_array;
using stage_impl::weights_and_state;
using stage_impl::who;

bool is_first(stage_ptr self) {
  return self->state.cfg.stage == 0;
}

bool is_last(stage_ptr self) {
  return self->state.model->is_last();
}

/// Rows of each micro-batch of the mini-batch under way, where the stage
/// was given the mini-batch (the first and the last stage).
uint32_t micro_rows(stage_ptr self) {
  return self->state.batch.rows / self->state.cfg.micros;
}

/// Sends `t` of micro-batch `micro` to the next stage (`forward`) or the
/// one before.
void send_tensor(stage_ptr self, bool forward, uint32_t micro,
                 const tensor& t) {
  stage_tensor x{self->state.step,
                 micro,
                 static_cast<uint32_t>(t.rows()),
                 static_cast<uint32_t>(t.cols()),
                 std::vector<float>(t.data(), t.data() + t.size()),
                 self->state.gen};
  stage_impl::send_to_neighbour(self, forward, encode(x));
}

/// Takes the tensor of (step, micro) out of `box`, if it came.
bool take(stage_ptr self, stage_state::box& box, uint32_t micro,
          stage_tensor& out) {
  auto i = box.find({self->state.gen, self->state.step, micro});
  if (i == box.end())
    return false;
  out = std::move(i->second);
  box.erase(i);
  return true;
}

/// A kernel's refusal ("bad input: ...") fails the mini-batch. Anything
/// else is the device's (a GPU out of memory, a CUDA error): the stage
/// ends, and its driver with it (linked), so its process exits 1 and its
/// agent restarts it (stage_process.cpp): the pipeline starts again from
/// the stages' checkpoints, as after a crash. A device that fails every
/// time is given up after the agent's restarts.
caf::error failed(stage_ptr self, const stage_work& w, const std::string& why) {
  auto text = who(self) + ": " + to_string(w) + " failed: " + why;
  if (why.rfind("bad input", 0) == 0)
    return caf::make_error(errc::bad_shape, text);
  auto err = caf::make_error(errc::device_failed, text);
  self->quit(err);
  return err;
}

/// The synthetic cost of `w` (stage_settings::work_us), taken once what
/// it needs is there and before what it makes goes out.
void synthetic_work(stage_ptr self, const stage_work& w) {
  auto us = self->state.cfg.work_us;
  if (us > 0)
    std::this_thread::sleep_for(std::chrono::microseconds{
        w.kind == stage_work::backward ? 2 * us : us});
}

/// Runs work `w` if what it needs is there; false if it must wait. Its
/// math is bounded (step_watch.hpp: a stage hung there still answers its
/// lead's connects, and the pipeline would wait for it for ever); sending
/// its result waits on the neighbour, and is not.
caf::expected<bool> run(stage_ptr self, const stage_work& w) {
  auto& st = self->state;
  auto& m = *st.model;
  stage_tensor in;
  std::optional<watched_work> watch;
  auto watch_math = [&] {
    watch.emplace(who(self) + ": " + to_string(w) + " of mini-batch " +
                  std::to_string(st.step));
  };
  switch (w.kind) {
  case stage_work::forward: {
    const float* x = nullptr;
    uint32_t rows = 0;
    if (is_first(self)) {
      rows = micro_rows(self);
      x = st.batch.values.data() + size_t{w.micro} * rows * m.input_size();
    } else {
      if (!take(self, st.acts, w.micro, in))
        return false;
      rows = in.rows;
      if (rows == 0 || in.cols != m.input_size() ||
          (is_last(self) && rows != micro_rows(self)))
        return caf::make_error(errc::bad_shape,
                               who(self) + ": activations of the wrong shape");
      x = in.values.data();
    }
    watch_math();
    synthetic_work(self, w);
    auto r = m.forward(w.micro, x, rows);
    if (r.ok() && st.step == st.cfg.device_error_in_step &&
        w.micro == std::min<uint32_t>(1, st.cfg.micros - 1)) {
      TROUPE_LOG(warning, who(self), "fault injection: a device error in",
                 " mini-batch ", st.step);
      r.error = "fault injection: a device error";
    }
    if (!r.ok())
      return failed(self, w, r.error);
    watch.reset();
    if (!is_last(self))
      send_tensor(self, true, w.micro, m.output(w.micro));
    if (st.step == st.cfg.kill_in_step &&
        w.micro == std::min<uint32_t>(1, st.cfg.micros - 1)) {
      TROUPE_LOG(warning, who(self),
                 "fault injection: killing its process"
                 " in mini-batch ",
                 st.step);
      ::kill(::getpid(), SIGKILL);
    }
    if (st.step == st.cfg.stall_in_step &&
        w.micro == std::min<uint32_t>(1, st.cfg.micros - 1)) {
      TROUPE_LOG(warning, who(self),
                 "fault injection: its next work hangs, in mini-batch ",
                 st.step);
      ::raise(SIGUSR1);
    }
    return true;
  }
  case stage_work::backward:
  case stage_work::backward_input: {
    auto rows = static_cast<uint32_t>(m.output(w.micro).rows());
    std::vector<float> dy;
    if (is_last(self)) { // the loss: its mean over the whole mini-batch
      std::vector<uint8_t> labels(rows);
      for (uint32_t i = 0; i < rows; ++i)
        labels[i] =
            static_cast<uint8_t>(st.batch.values[size_t{w.micro} * rows + i]);
      dy.resize(size_t{rows} * m.output_size());
      float loss = 0;
      auto r = softmax_xent_cpu(m.output(w.micro).data(), labels.data(), rows,
                                m.output_size(), &loss, dy.data());
      if (r != kernel_status::ok)
        return failed(self, w, std::string{"bad input: "} + to_string(r));
      st.loss += double(loss) * rows;
      for (auto& v : dy)
        v /= float(st.cfg.micros);
    } else {
      if (!take(self, st.grads, w.micro, in))
        return false;
      dy = std::move(in.values);
      if (dy.size() != size_t{rows} * m.output_size())
        return caf::make_error(errc::bad_shape,
                               who(self) + ": a gradient of the wrong shape");
    }
    watch_math();
    synthetic_work(self, w);
    auto r = m.backward_input(w.micro, dy.data(), !is_first(self));
    if (r.ok() && w.kind == stage_work::backward)
      r = m.backward_weight(w.micro);
    if (!r.ok())
      return failed(self, w, r.error);
    watch.reset();
    if (!is_first(self))
      send_tensor(self, false, w.micro, m.input_grad());
    return true;
  }
  case stage_work::backward_weight:
    watch_math();
    synthetic_work(self, w);
    if (auto r = m.backward_weight(w.micro); !r.ok())
      return failed(self, w, r.error);
    return true;
  }
  return true;
}

/// Runs the evaluation chunks whose weights are applied: the layers on
/// each, and the result to the next stage (the last: to the sink).
void run_evals(stage_ptr self) {
  auto& st = self->state;
  auto& m = *st.model;
  for (auto i = st.evals.begin(); i != st.evals.end();) {
    if (i->gen != st.gen || i->step > st.applied) {
      ++i;
      continue;
    }
    auto x = std::move(*i);
    i = st.evals.erase(i);
    if (x.step == st.cfg.kill_in_eval) {
      TROUPE_LOG(warning, who(self),
                 "fault injection: killing its process in the evaluation"
                 " after mini-batch ",
                 x.step);
      ::kill(::getpid(), SIGKILL);
    }
    tensor out;
    device_status r;
    watched_work watch{who(self) + ": the evaluation after mini-batch " +
                       std::to_string(x.step)};
    if (x.cols != m.input_size() ||
        !(r = m.infer(x.values.data(), x.rows, out)).ok()) {
      TROUPE_LOG_LIMITED(warning, who(self), "dropped an evaluation chunk of ",
                         x.cols, " columns", r.ok() ? "" : ": ", r.error);
      continue;
    }
    stage_tensor y{x.step,
                   x.micro,
                   x.rows,
                   static_cast<uint32_t>(out.cols()),
                   std::vector<float>(out.data(), out.data() + out.size()),
                   x.gen};
    auto& to = is_last(self) ? st.sink : st.next;
    if (to)
      self->send(to, eval_atom_v, encode(y));
  }
}

/// The finished mini-batch's update: it is applied.
caf::error apply_update(stage_ptr self) {
  auto& st = self->state;
  watched_work watch{who(self) + ": the update of mini-batch " +
                     std::to_string(st.step)};
  // On the host (a GPU's gradients come down first, its weights go up
  // after): once per mini-batch, beside its forwards and backwards.
  auto down = st.model->download_gradients();
  auto params = st.model->parameters();
  auto grads = st.model->gradients();
  auto lr = decayed_lr(st.cfg.update.lr, st.cfg.update.lr_decay_steps,
                       st.cfg.update.lr_decay, st.step);
  for (size_t i = 0; down.ok() && i < params.size(); ++i)
    if (auto k = update_array(self, lr, i, params[i], grads[i]);
        k != kernel_status::ok)
      down.error = "the " + st.cfg.update.name + " update of array " +
                   std::to_string(i) + ": " + to_string(k);
  if (auto up = down.ok() ? st.model->upload_parameters() : down; !up.ok()) {
    // The device broke (or the optimizer refused an array, which the
    // checked flags rule out): the stage ends, as in failed().
    auto err = caf::make_error(errc::device_failed,
                               who(self) + ": the update: " + up.error);
    self->quit(err);
    return err;
  }
  st.awaiting_commit = false;
  st.applied = st.step + 1;
  run_evals(self);
  return caf::none;
}

/// Runs the plan as far as what has come allows; at its end, updates the
/// weights (or waits for the commit) and answers the step.
void advance(stage_ptr self) {
  auto& st = self->state;
  while (st.running && st.at < st.plan.size()) {
    auto began = std::chrono::steady_clock::now();
    auto ran = run(self, st.plan[st.at]);
    if (ran && *ran) {
      st.busy += std::chrono::steady_clock::now() - began;
      st.peak_held =
          std::max(st.peak_held, static_cast<uint32_t>(st.model->held()));
      st.peak_bytes = std::max(st.peak_bytes, uint64_t{st.model->held_bytes()});
    }
    if (!ran) {
      st.running = false;
      st.done.deliver(ran.error());
      return;
    }
    if (!*ran)
      return; // waits for a neighbour
    ++st.at;
  }
  if (!st.running)
    return;
  st.running = false;
  st.awaiting_commit = true;
  if (!st.cfg.commit_apart)
    if (auto err = apply_update(self)) {
      st.done.deliver(err);
      return;
    }
  st.done.deliver(st.loss);
}

} // namespace

void stage_impl::keep(stage_ptr self, stage_state::box& box, bytes_view f,
                      const char* what) {
  stage_tensor x;
  if (auto err = decode(f, x)) {
    TROUPE_LOG_LIMITED(warning, who(self), "dropped ", what, ": ",
                       describe(err));
    return;
  }
  keep(self, box, std::move(x), what);
}

void stage_impl::keep(stage_ptr self, stage_state::box& box, stage_tensor x,
                      const char* what) {
  auto& st = self->state;
  if (x.gen < st.gen ||
      (x.gen == st.gen &&
       (x.step < st.step || (x.step == st.step && !st.running && st.at > 0))))
    return; // of a mini-batch that is over, or of an older generation
  if (x.micro >= st.cfg.micros) {
    TROUPE_LOG_LIMITED(warning, who(self), "dropped ", what, " of micro-batch ",
                       x.micro, " of ", st.cfg.micros);
    return;
  }
  box[{x.gen, x.step, x.micro}] = std::move(x);
  advance(self);
}

namespace {

/// Drops the tensors of older generations, and of this one's steps before
/// `step`.
void drop_before(stage_ptr self, uint64_t step) {
  auto& st = self->state;
  for (auto* box : {&st.acts, &st.grads})
    for (auto i = box->begin(); i != box->end();) {
      auto [gen, at, micro] = i->first;
      i = gen < st.gen || (gen == st.gen && at < step) ? box->erase(i)
                                                       : std::next(i);
    }
  auto& ev = st.evals;
  ev.erase(
      std::remove_if(ev.begin(), ev.end(),
                     [&st](const stage_tensor& x) { return x.gen < st.gen; }),
      ev.end());
}

/// A new generation (reset_atom): see the header.
caf::result<uint64_t> on_reset(stage_ptr self, uint64_t gen, uint64_t step,
                               const std::vector<named_array>& w) {
  auto& st = self->state;
  if (gen < st.gen)
    return caf::make_error(errc::bad_shape, who(self) + ": generation", gen,
                           "is older than", st.gen);
  if (!w.empty()) {
    if (auto err = load_weights(self, w, step))
      return err;
  } else {
    for (auto& a : st.moments) // kept: the state after `step` updates
      a.step = step;
  }
  if (st.running) {
    st.running = false;
    st.done.deliver(
        caf::make_error(errc::bad_shape, who(self) + ": mini-batch dropped"));
  }
  st.awaiting_commit = false;
  st.model->drop_micro_batches();
  if (auto z = st.model->zero_gradients(); !z.ok())
    return caf::make_error(errc::device_failed, who(self) + ": " + z.error);
  st.gen = gen;
  st.applied = step;
  st.step = step;
  st.at = 0;
  drop_before(self, step);
  run_evals(self);
  return step;
}

caf::result<double> on_step(stage_ptr self, uint64_t step, const frame& f) {
  auto& st = self->state;
  if (st.running)
    return caf::make_error(errc::bad_shape,
                           who(self) + ": a mini-batch is under way");
  if (st.cfg.commit_apart && (st.awaiting_commit || step != st.applied))
    return caf::make_error(errc::bad_shape, who(self) + ": mini-batch", step,
                           "comes after", st.applied, "applied");
  stage_tensor batch;
  if (is_first(self) || is_last(self)) {
    if (auto err = decode(f, batch))
      return err;
    auto want = is_first(self) ? st.model->input_size() : size_t{1};
    if (batch.rows == 0 || batch.rows % st.cfg.micros != 0 ||
        batch.cols != want)
      return caf::make_error(errc::bad_shape,
                             who(self) + ": a mini-batch must have rows a"
                                         " multiple of the micro-batches, and",
                             want, "columns");
  }
  if (auto z = st.model->zero_gradients(); !z.ok())
    return caf::make_error(errc::device_failed, who(self) + ": " + z.error);
  // Old tensors (a mini-batch given up) go.
  drop_before(self, step);
  st.step = step;
  st.batch = std::move(batch);
  st.loss = 0;
  st.at = 0;
  st.running = true;
  st.done = self->make_response_promise();
  advance(self);
  return caf::delegated<double>{};
}

/// None if mini-batch `step` of generation `gen` is through and waits for
/// its commit (commit_apart), else an error that says so.
caf::error check_waiting(stage_ptr self, uint64_t gen, uint64_t step) {
  auto& st = self->state;
  if (st.cfg.commit_apart && gen == st.gen && st.awaiting_commit &&
      st.step == step)
    return caf::none;
  return caf::make_error(errc::bad_shape, who(self) + ": mini-batch", step,
                         "of generation", gen, "is not waiting for its commit");
}

/// The stage's weights (or gradients) as named arrays.

} // namespace

caf::behavior stage_actor(stage_ptr self, stage_settings cfg) {
  auto& st = self->state;
  st.cfg = cfg;
  std::string err;
  auto m = model::from_spec(cfg.spec, &err);
  if (!m || cfg.cut.size() < 2 || cfg.stage + 1 >= cfg.cut.size() ||
      cfg.cut.back() != m->layer_count() || cfg.micros == 0) {
    self->quit(caf::make_error(errc::invalid_config,
                               m ? "pipeline: bad cut or stage" : err));
    return {};
  }
  // Handed its layers (the stage driver opens them), or opens them here.
  std::string why;
  st.model = std::move(st.cfg.backend); // held once, as st.model
  if (!st.model) {
    m->init_parameters(cfg.seed);
    st.model = open_stage(cfg.device, *m, cfg.cut[cfg.stage],
                          cfg.cut[cfg.stage + 1], why);
  }
  if (!st.model) {
    self->quit(caf::make_error(errc::device_failed,
                               "pipeline: --device=" + to_string(cfg.device) +
                                   ": " + why));
    return {};
  }
  st.plan = stage_plan(cfg.schedule, cfg.stage,
                       static_cast<uint32_t>(cfg.cut.size() - 1), cfg.micros);
  if (auto bad = stage_impl::take_update(self)) {
    self->quit(std::move(bad));
    return {};
  }
  return {
      [self](link_atom, caf::actor prev,
             caf::actor next) -> caf::result<uint64_t> {
        self->state.prev = std::move(prev);
        self->state.next = std::move(next);
        // Answered once the roads to them are up (or given up).
        auto rp = self->make_response_promise<uint64_t>();
        stage_impl::link_roads(self,
                               [rp]() mutable { rp.deliver(uint64_t{0}); });
        return rp;
      },
      [self](step_atom, uint64_t step, const frame& f) {
        return on_step(self, step, f);
      },
      [self](activation_atom, const frame& f) {
        keep(self, self->state.acts, f, "activations");
      },
      [self](gradient_atom, const frame& f) {
        keep(self, self->state.grads, f, "a gradient");
      },
      [self](road_atom, uint32_t rank) {
        return stage_impl::road_ticket(self, rank);
      },
      [self](road_atom, road_message_ptr& m) {
        stage_impl::on_road(self, std::move(m));
      },
      [self](road_down_atom, uint64_t serial) {
        stage_impl::on_road_down(self, serial);
      },
      [self](stats_atom, road_atom) -> caf::result<uint64_t, uint64_t> {
        return {self->state.road_tensors, self->state.caf_tensors};
      },
      [self](pull_atom) { return weights_and_state(self); },
      [self](push_atom, uint64_t gen,
             uint64_t step) -> caf::result<std::vector<named_array>> {
        if (auto err = check_waiting(self, gen, step))
          return err;
        if (auto down = self->state.model->download_gradients(); !down.ok())
          return caf::make_error(errc::device_failed,
                                 who(self) + ": " + down.error);
        self->state.awaiting_commit = false;
        return arrays_of(self, self->state.model->gradients());
      },
      [self](commit_atom, uint64_t gen,
             uint64_t step) -> caf::result<uint64_t> {
        if (auto err = check_waiting(self, gen, step))
          return err;
        if (auto err = apply_update(self))
          return err;
        return self->state.applied;
      },
      [self](reset_atom, uint64_t gen, uint64_t step,
             const std::vector<named_array>& w, caf::actor prev,
             caf::actor next, caf::actor sink) -> caf::result<uint64_t> {
        auto r = on_reset(self, gen, step, w);
        auto& st = self->state;
        st.prev = std::move(prev);
        st.next = std::move(next);
        st.sink = std::move(sink);
        stage_impl::link_roads(self);
        return r;
      },
      [self](stats_atom) -> caf::result<uint32_t, uint64_t, uint64_t> {
        auto& st = self->state;
        auto held = st.peak_held;
        auto bytes = st.peak_bytes;
        auto busy = uint64_t(st.busy.count());
        st.peak_held = 0;
        st.peak_bytes = 0;
        st.busy = {};
        return {held, bytes, busy};
      },
      [self](eval_atom, const frame& f) {
        stage_tensor x;
        if (auto err = decode(f, x)) {
          TROUPE_LOG_LIMITED(warning, who(self),
                             "dropped an evaluation chunk: ", describe(err));
          return;
        }
        if (x.gen < self->state.gen)
          return;
        self->state.evals.push_back(std::move(x));
        run_evals(self);
      },
  };
}

} // namespace troupe

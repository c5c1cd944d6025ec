// A stage actor: see the header.
#include "actors/pipeline/stage_actor.hpp"

#include <chrono>
#include <thread>

#include <caf/event_based_actor.hpp>

#include "actors/base/log.hpp"
#include "kernels/loss.hpp"
#include "kernels/optimizer.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

std::string who(stage_ptr self) {
  return "stage " + std::to_string(self->state.cfg.stage);
}

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

/// Sends `t` of micro-batch `micro` to `to` as `Atom`.
template <class Atom>
void send_tensor(stage_ptr self, const caf::actor& to, Atom atom,
                 uint32_t micro, const tensor& t) {
  stage_tensor x{self->state.step, micro, static_cast<uint32_t>(t.rows()),
                 static_cast<uint32_t>(t.cols()),
                 std::vector<float>(t.data(), t.data() + t.size())};
  self->send(to, atom, encode(x));
}

/// Takes the tensor of (step, micro) out of `box`, if it came.
bool take(stage_ptr self,
          std::map<std::pair<uint64_t, uint32_t>, stage_tensor>& box,
          uint32_t micro, stage_tensor& out) {
  auto i = box.find({self->state.step, micro});
  if (i == box.end())
    return false;
  out = std::move(i->second);
  box.erase(i);
  return true;
}

caf::error failed(stage_ptr self, const stage_work& w, kernel_status st) {
  return caf::make_error(errc::bad_shape, who(self) + ": " + to_string(w) +
                                              " failed: " + to_string(st));
}

/// The synthetic cost of `w` (stage_settings::work_us), taken once what
/// it needs is there and before what it makes goes out.
void synthetic_work(stage_ptr self, const stage_work& w) {
  auto us = self->state.cfg.work_us;
  if (us > 0)
    std::this_thread::sleep_for(std::chrono::microseconds{
        w.kind == stage_work::backward ? 2 * us : us});
}

/// Runs work `w` if what it needs is there; false if it must wait.
caf::expected<bool> run(stage_ptr self, const stage_work& w) {
  auto& st = self->state;
  auto& m = *st.model;
  stage_tensor in;
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
    synthetic_work(self, w);
    if (auto r = m.forward(w.micro, x, rows); r != kernel_status::ok)
      return failed(self, w, r);
    if (!is_last(self))
      send_tensor(self, st.next, activation_atom_v, w.micro, m.output(w.micro));
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
        return failed(self, w, r);
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
    synthetic_work(self, w);
    auto r = m.backward_input(w.micro, dy.data(), !is_first(self));
    if (r == kernel_status::ok && w.kind == stage_work::backward)
      r = m.backward_weight(w.micro);
    if (r != kernel_status::ok)
      return failed(self, w, r);
    if (!is_first(self))
      send_tensor(self, st.prev, gradient_atom_v, w.micro, m.input_grad());
    return true;
  }
  case stage_work::backward_weight:
    synthetic_work(self, w);
    if (auto r = m.backward_weight(w.micro); r != kernel_status::ok)
      return failed(self, w, r);
    return true;
  }
  return true;
}

/// Runs the plan as far as what has come allows; at its end, updates the
/// weights and answers the step.
void advance(stage_ptr self) {
  auto& st = self->state;
  while (st.running && st.at < st.plan.size()) {
    auto ran = run(self, st.plan[st.at]);
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
  auto params = st.model->parameters();
  auto grads = st.model->gradients();
  for (size_t i = 0; i < params.size(); ++i)
    sgd_update_cpu(params[i].data, grads[i].data, params[i].size,
                   sgd_params{st.cfg.lr, 0.0f, 1.0f});
  st.running = false;
  st.done.deliver(st.loss);
}

/// Keeps a neighbour's tensor for its step, if it is not an old one.
void keep(stage_ptr self,
          std::map<std::pair<uint64_t, uint32_t>, stage_tensor>& box,
          const frame& f, const char* what) {
  stage_tensor x;
  if (auto err = decode(f, x)) {
    TROUPE_LOG_LIMITED(warning, who(self), "dropped ", what, ": ",
                       describe(err));
    return;
  }
  auto& st = self->state;
  if (x.step < st.step || (x.step == st.step && !st.running && st.at > 0))
    return; // of a mini-batch that is over
  if (x.micro >= st.cfg.micros) {
    TROUPE_LOG_LIMITED(warning, who(self), "dropped ", what, " of micro-batch ",
                       x.micro, " of ", st.cfg.micros);
    return;
  }
  box[{x.step, x.micro}] = std::move(x);
  advance(self);
}

caf::result<double> on_step(stage_ptr self, uint64_t step, const frame& f) {
  auto& st = self->state;
  if (st.running)
    return caf::make_error(errc::bad_shape,
                           who(self) + ": a mini-batch is under way");
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
  // Old tensors (a mini-batch given up) go.
  for (auto* box : {&st.acts, &st.grads})
    for (auto i = box->begin(); i != box->end();)
      i = i->first.first < step ? box->erase(i) : std::next(i);
  st.step = step;
  st.batch = std::move(batch);
  st.loss = 0;
  st.at = 0;
  st.running = true;
  st.model->zero_gradients();
  st.done = self->make_response_promise();
  advance(self);
  return caf::delegated<double>{};
}

std::vector<named_array> weights_of(stage_ptr self) {
  auto& m = *self->state.model;
  auto params = m.parameters();
  std::vector<named_array> out;
  for (size_t i = 0; i < params.size(); ++i) // weights, bias, per layer
    out.push_back(named_array{
        2 * m.first_layer() + i,
        std::vector<float>(params[i].data, params[i].data + params[i].size)});
  return out;
}

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
  m->init_parameters(cfg.seed);
  st.model = std::make_unique<stage_model>(*m, cfg.cut[cfg.stage],
                                           cfg.cut[cfg.stage + 1]);
  st.plan = stage_plan(cfg.schedule, cfg.stage,
                       static_cast<uint32_t>(cfg.cut.size() - 1), cfg.micros);
  return {
      [self](link_atom, caf::actor prev, caf::actor next) {
        self->state.prev = std::move(prev);
        self->state.next = std::move(next);
        return uint64_t{0};
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
      [self](pull_atom) { return weights_of(self); },
  };
}

} // namespace troupe

// A stage driver's evaluations and reports (stage_driver.hpp): which
// replica reports, the test images through the pipeline, the epoch lines
// and the metrics file; and the finish (5).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "actors/base/log.hpp"
#include "actors/cluster/connect.hpp"
#include "actors/pipeline/stage_driver_internal.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::pipe {

namespace {

constexpr uint32_t eval_chunk_rows = 500;

/// Stage 0: the test images, in chunks, to its stage once `after`
/// mini-batches are applied.
void send_evals(driver_ptr self, uint64_t after) {
  auto& st = self->state;
  auto& imgs = st.data.test.images;
  auto cols = st.data.cols;
  for (size_t at = 0, c = 0; at < st.data.test_n; at += eval_chunk_rows, ++c) {
    auto rows = std::min<size_t>(eval_chunk_rows, st.data.test_n - at);
    stage_tensor x{after,
                   static_cast<uint32_t>(c),
                   static_cast<uint32_t>(rows),
                   static_cast<uint32_t>(cols),
                   std::vector<float>(imgs.data() + at * cols,
                                      imgs.data() + (at + rows) * cols),
                   st.gen};
    self->send(st.stage, eval_atom_v, encode(x));
  }
}

/// The replicas that are over: a stage of each was given up or ended (the
/// view's given_up and ended: no process comes back to it).
std::set<uint32_t> replicas_over(driver_ptr self) {
  auto& st = self->state;
  std::set<uint32_t> over;
  for (auto* ranks : {&st.view.given_up, &st.view.ended})
    for (auto rank : *ranks)
      over.insert(rank / st.stages);
  return over;
}

/// How many replicas are not over.
uint32_t replicas_going(driver_ptr self) {
  uint32_t over = 0;
  for (auto q : replicas_over(self))
    over += q < self->state.replicas;
  return self->state.replicas - over;
}

} // namespace

// The lowest replica still going evaluates and reports: replica 0 unless
// it is over; the others train alike, quietly.
bool reports(driver_ptr self) {
  auto over = replicas_over(self);
  if (over.count(self->state.replica) != 0)
    return false;
  for (uint32_t q = 0; q < self->state.replica; ++q)
    if (over.count(q) == 0)
      return false;
  return true;
}

bool evaluated_after(driver_ptr self, uint64_t at) {
  auto& st = self->state;
  return at >= st.total_steps ||
         (at > 0 && at % st.steps_per_epoch == 0 && reports(self));
}

void evaluate_at(driver_ptr self, uint64_t at) {
  if (self->state.rank == 0 && evaluated_after(self, at))
    send_evals(self, at);
}

/// The last stage: a chunk's logits, counted; the epoch's line once all
/// are in (the reporting replica), and at the end the finish.
void count_eval(driver_ptr self, const frame& f) {
  auto& st = self->state;
  stage_tensor y;
  if (auto err = decode(f, y); err || y.gen != st.gen)
    return;
  auto at = size_t{y.micro} * eval_chunk_rows;
  if (y.cols == 0 || at + y.rows > st.data.test_n)
    return;
  auto& c = st.evals[y.step];
  for (uint32_t i = 0; i < y.rows; ++i) {
    auto* row = y.values.data() + size_t{i} * y.cols;
    auto best = std::max_element(row, row + y.cols) - row;
    c.right += best == st.data.test.labels[at + i];
  }
  c.seen += y.rows;
  if (c.seen < st.data.test_n)
    return;
  double acc = double(c.right) / double(c.seen);
  auto epoch = (y.step + st.steps_per_epoch - 1) / st.steps_per_epoch;
  double loss = 0;
  size_t n = 0;
  for (auto i = st.losses.lower_bound((epoch - 1) * st.steps_per_epoch);
       i != st.losses.end() && i->first < y.step; ++i, ++n)
    loss += i->second;
  st.evals.erase(y.step);
  auto mean = n ? loss / n : std::nan("");
  // Only the reporting replica evaluates before the end (evaluate_at);
  // at the end every one does, and the lowest going speaks (end_job).
  if (y.step == st.total_steps) {
    // The lead's stall watch ends here (the line may be held a while).
    self->send(st.lead, eval_atom_v, st.gen, y.step);
    st.final_held = driver_state::final_line{epoch, y.step, mean, acc};
    end_job(self);
    return;
  }
  report_epoch(self, epoch, mean, acc, y.step);
  std::fflush(stdout);
}

void end_job(driver_ptr self) {
  auto& st = self->state;
  if (!st.final_held)
    return;
  std::set<uint32_t> live,
      finished{st.view.finished.begin(), st.view.finished.end()};
  for (auto& w : st.view.workers)
    live.insert(w.rank);
  // A replica below whose last stage did its work and left said the line
  // (or left it to one below it that did).
  bool said = false, below_live = false;
  for (uint32_t q = 0; q < st.replica; ++q) {
    said |= finished.count(q * st.stages + st.stages - 1) != 0;
    for (uint32_t s = 0; s < st.stages; ++s)
      below_live |= live.count(q * st.stages + s) != 0;
  }
  bool says = !said && reports(self);
  if (!said && !says) {
    // One below is going: live, or out (cut after a crash and coming
    // back, or given up with its agent's report on its way). Held while
    // one is live, else --pipeline.stage-wait-ms at most (0: for ever):
    // out that long, they are over, as a stage out that long is.
    auto wait = std::chrono::milliseconds{st.cfg.pipeline.stage_wait_ms};
    auto now = std::chrono::steady_clock::now();
    auto& since = st.final_held->below_left;
    if (below_live || since == std::chrono::steady_clock::time_point{}) {
      since = below_live ? std::chrono::steady_clock::time_point{} : now;
      if (!below_live && wait.count() > 0)
        self->delayed_send(self, wait, tick_atom_v);
      return;
    }
    if (wait.count() == 0 || now - since < wait)
      return;
    says = true;
  }
  if (says) {
    auto& f = *st.final_held;
    report_epoch(self, f.epoch, f.loss, f.acc, f.step);
    std::printf("final test accuracy: %.4f\n", f.acc);
  }
  std::fflush(stdout);
  st.final_held.reset();
  self->send(st.lead, finish_atom_v, st.gen); // 5
  // Again until the lead's finish comes (a finish can be lost as any
  // message; the lead takes one once).
  self->delayed_send(self, stall_after(self) / 2, finish_atom_v);
}

void finish(driver_ptr self) {
  auto& st = self->state;
  if (st.finished)
    return;
  st.finished = true;
  self->send_exit(st.stage, caf::exit_reason::user_shutdown);
  if (is_lead(self))
    for (auto& [rank, d] : st.drivers)
      if (rank != st.rank)
        self->send(d, finish_atom_v, st.gen);
  TROUPE_LOG(info, who(self), "finished after ", st.step, " mini-batches");
  self->quit();
}

void on_finish(driver_ptr self, uint64_t gen) {
  auto& st = self->state;
  if (!from_lead(self, "a finish", true) || gen != st.gen)
    return;
  if (st.lose_finish) { // --pipeline.fault-lose-finish
    st.lose_finish = false;
    TROUPE_LOG(warning, who(self), "fault injection: drops a finish, as a cut",
               " connection loses it (--pipeline.fault-lose-finish)");
    return;
  }
  finish(self);
}

void finish_again(driver_ptr self) {
  auto& st = self->state;
  if (st.finished)
    return;
  TROUPE_LOG(info, who(self),
             "no finish from the lead yet: sends its own"
             " again");
  // First on the handle its start came from; then to the lead's address
  // in the view: a connection that broke (a cut between the two alone)
  // leaves that handle dead, and whatever is sent on it is lost; the
  // connector makes a new connection where the old one is gone. (Not at
  // once: a second connection between two connected nodes can break the
  // first, and a finish is mostly lost alone.)
  self->delayed_send(self, stall_after(self) / 2, finish_atom_v);
  if (st.finish_resends++ == 0) {
    self->send(st.lead, finish_atom_v, st.gen);
    return;
  }
  auto gen = st.gen;
  connect_actor(
      self, st.lead_node.host, st.lead_node.port, timeout(self),
      [self, gen](caf::strong_actor_ptr& lead) {
        if (lead && !self->state.finished)
          self->send(caf::actor_cast<caf::actor>(lead), finish_atom_v, gen);
      },
      [self](caf::error& err) {
        TROUPE_LOG(warning, who(self),
                   "cannot reach the lead to finish: ", describe(err));
      });
}

std::string open_metrics(driver_ptr self, bool reporting) {
  auto& st = self->state;
  auto& path = st.cfg.train.metrics_file;
  if (path.empty() || !is_last(self) || !reporting || st.metrics.is_open())
    return {};
  st.metrics.open(path, std::ios::app);
  if (!st.metrics)
    return "--train.metrics-file: cannot open " + path + ": " +
           std::strerror(errno);
  return {};
}

void report_epoch(driver_ptr self, uint64_t epoch, double loss, double acc,
                  uint64_t step) {
  auto& st = self->state;
  if (st.reported && step <= *st.reported)
    return; // a replay after a stage came back: said already
  st.reported = step;
  auto secs = seconds_running(st);
  auto epochs = (st.total_steps + st.steps_per_epoch - 1) / st.steps_per_epoch;
  char said[32] = "-"; // no mini-batch since the last line
  if (std::isfinite(loss))
    std::snprintf(said, sizeof(said), "%.4f", loss);
  std::printf("epoch %llu/%llu: train loss %s, test accuracy %.4f"
              " (mini-batch %llu, %.1f s)\n",
              static_cast<unsigned long long>(epoch),
              static_cast<unsigned long long>(epochs), said, acc,
              static_cast<unsigned long long>(step), secs);
  // A replica taking over the reports opens the file now (tried once).
  if (!st.metrics_failed)
    if (auto why = open_metrics(self, true); !why.empty()) {
      st.metrics_failed = true;
      TROUPE_LOG(warning, who(self), why);
    }
  if (!st.metrics.is_open())
    return;
  // Every replica's samples since the generation began, or the last line;
  // null (as the trainer's) where none ran.
  double samples = double(step - st.rate_step) * st.cfg.train.batch *
                   double(replicas_going(self));
  double rate = step > st.rate_step && secs > st.rate_secs
                    ? samples / (secs - st.rate_secs)
                    : std::nan("");
  st.metrics << "{\"epoch\":" << epoch
             << ",\"train_loss\":" << json_number(loss)
             << ",\"test_accuracy\":" << json_number(acc)
             << ",\"samples_per_s\":" << json_number(rate)
             << ",\"mini_batch\":" << step << ",\"elapsed_s\":" << secs << "}\n"
             << std::flush;
  st.rate_step = step;
  st.rate_secs = secs;
}

} // namespace troupe::pipe

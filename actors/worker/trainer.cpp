// The trainer worker: a worker_logic (actors/worker/worker.hpp) that trains a
// kernels/ model on Fashion-MNIST. Rank 0 evaluates at every evaluation
// point on the weights the next step pulls, and once more at the end.
#include "actors/worker/trainer.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <utility>

#include <caf/send.hpp>

#include "actors/base/exit_codes.hpp"
#include "actors/base/log.hpp"
#include "actors/base/metrics.hpp"
#include "actors/server/server_optimizer.hpp"
#include "actors/worker/worker.hpp"
#include "kernels/blas.hpp"
#include "kernels/idx.hpp"
#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "kernels/partition.hpp"
#include "messages/errors.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;
using arrays = std::vector<named_array>;

arrays to_arrays(const std::vector<param_ref>& ps) {
  arrays out;
  for (size_t i = 0; i < ps.size(); ++i)
    out.push_back(named_array{
        i + 1, std::vector<float>(ps[i].data, ps[i].data + ps[i].size)});
  return out;
}

/// Accuracy of `net` on the first `limit` samples of `d` (0 = all).
double evaluate(model& net, const dataset& d, size_t limit) {
  size_t n = limit == 0 ? d.labels.size() : std::min(limit, d.labels.size());
  size_t per = net.input_size(), correct = 0;
  for (size_t first = 0; first < n; first += 1000) {
    size_t b = std::min<size_t>(1000, n - first);
    net.forward(d.images.data() + first * per, b);
    size_t c = 0;
    accuracy_count_cpu(net.logits().data(), d.labels.data() + first, b,
                       net.output_size(), &c);
    correct += c;
  }
  return double(correct) / double(n);
}

class trainer final : public worker_logic {
public:
  void on_progress(progress_fn fn) { progress_ = std::move(fn); }
  void use_devices(std::shared_ptr<device_team> d) { devices_ = std::move(d); }

  trainer(const trainer_settings& cfg, model net, dataset train, dataset test)
      : cfg_(cfg.train), net_(std::move(net)), train_(std::move(train)),
        test_(std::move(test)), local_opt_(cfg.optimizer.on == "worker"),
        summing_(cfg.optimizer.name == "sum"),
        optimizer_(make_optimizer_fn(cfg.optimizer)) {
    if (cfg.worker.overlap) // blocks of gradients pushed as made
      net_.set_row_blocks(cfg_.block_floats);
    net_.init_parameters(cfg_.seed); // every replica starts alike
    for (auto& p : net_.parameters())
      sizes_.push_back(p.size);
    blocks_ = push_blocks(net_);
    taken_.assign(blocks_.size(), false);
    block_of_.resize(sizes_.size());
    for (size_t b = 0; b < blocks_.size(); ++b)
      for (auto i : blocks_[b])
        block_of_[i] = b;
    first_bias_ = net_.row_blocks(0); // dense0.w(.k), then dense0.b
  }

  /// The model's arrays in the order backward finishes them: each row
  /// block alone, the arrays between row blocks together.
  static std::vector<std::vector<size_t>> push_blocks(const model& m) {
    std::vector<std::vector<size_t>> out(1);
    for (auto i : m.gradient_order()) {
      out.back().push_back(i);
      if (m.is_row_block(i))
        out.emplace_back();
    }
    if (out.back().empty())
      out.pop_back();
    return out;
  }

  std::vector<std::vector<uint64_t>> blocks() override {
    std::vector<std::vector<uint64_t>> out;
    for (auto& b : blocks_) {
      out.emplace_back();
      for (auto i : b)
        out.back().push_back(i + 1); // keys as in to_arrays
    }
    return out;
  }

  /// step_taking() whose blocks leave as backward finishes them: with the
  /// optimizer on the servers, each block's gradient storage is swapped
  /// out of the model into the arrays pushed, no copy.
  caf::error step_blocked(uint64_t clock, arrays& weights,
                          const emit_fn& emit) override {
    step_timer timer{*this};
    if (!fits(weights)) {
      drop_begun();
      return caf::make_error(errc::bad_shape, "pulled arrays do not match",
                             cfg_.model);
    }
    bool swapped = !local_opt_;
    if (swapped) { // blocks weights_arrived took hold the last weights now
      for (size_t b = 0; b < blocks_.size(); ++b)
        if (!taken_[b])
          for (auto j : blocks_[b])
            net_.swap_parameter(j, weights[j].values); // sizes fit
    } else {
      take_pulled(clock, weights);
    }
    std::fill(taken_.begin(), taken_.end(), false);
    // Arrays still to finish per block.
    std::vector<size_t> left(blocks_.size());
    for (size_t b = 0; b < blocks_.size(); ++b)
      left[b] = blocks_[b].size();
    // Copied from (optimizer on the workers: no swaps, so they stay valid).
    auto gs = swapped ? std::vector<param_ref>{} : net_.gradients();
    auto ready = [&](size_t i) {
      auto b = block_of_[i];
      if (--left[b] > 0)
        return;
      arrays out;
      for (auto j : blocks_[b]) {
        if (swapped) { // weights[j] held the last weights: now scratch
          net_.swap_gradient(j, weights[j].values);
          out.push_back(named_array{j + 1, std::move(weights[j].values)});
        } else {
          out.push_back(
              named_array{j + 1, {gs[j].data, gs[j].data + gs[j].size}});
        }
      }
      emit(b, std::move(out));
    };
    return compute(clock, ready);
  }

  /// Takes the storage of a block's weights for step `clock` (the last
  /// weights go back in it), and runs the first layer's forward on each
  /// of its row blocks that is in, in order, while later blocks are on
  /// their way. Not on an evaluation point (the evaluation needs the
  /// model whole first), nor with the optimizer on the workers.
  void weights_arrived(uint64_t clock, size_t b, arrays& xs) override {
    if (local_opt_ || !too_big_.empty() || b >= blocks_.size() || taken_[b] ||
        (rank_ == 0 && (is_eval_point(clock) || missed_eval_ != 0)) ||
        xs.size() != blocks_[b].size())
      return;
    for (size_t i = 0; i < xs.size(); ++i)
      if (xs[i].values.size() != sizes_[blocks_[b][i]])
        return; // step_blocked says what is wrong
    step_timer timer{*this};
    for (size_t i = 0; i < xs.size(); ++i)
      net_.swap_parameter(blocks_[b][i], xs[i].values);
    taken_[b] = true;
    // The first layer's bias seeds its output; its row blocks are the
    // first parameters, in order.
    size_t row_blocks = first_bias_;
    if (begun_ != clock + 1 && taken_[block_of_[first_bias_]]) {
      gather_batch(clock);
      if (net_.forward_begin(batch_x_, cfg_.batch) != kernel_status::ok)
        return;
      begun_ = clock + 1;
    }
    while (begun_ == clock + 1 && net_.forward_blocks_added() < row_blocks &&
           taken_[block_of_[net_.forward_blocks_added()]])
      if (net_.forward_next() != kernel_status::ok) {
        begun_ = 0;
        return;
      }
  }

  arrays parameters() override {
    auto out = to_arrays(net_.parameters());
    if (local_opt_) // the kv holds each round's mean gradient
      for (auto& a : out)
        std::fill(a.values.begin(), a.values.end(), 0.0f);
    return out;
  }

  void start(uint32_t rank, uint32_t workers) override {
    rank_ = rank;
    workers_ = workers;
    // Every worker runs the same number of steps, or sync rounds stall.
    steps_per_epoch_ = (train_.labels.size() / workers_) / cfg_.batch;
    if (steps_per_epoch_ == 0) { // said by the first step, which fails
      steps_per_epoch_ = 1;      // divides clocks until then
      too_big_ = "--train.batch " + std::to_string(cfg_.batch) +
                 " is more than this worker's share of the " +
                 std::to_string(train_.labels.size()) + " training samples (" +
                 std::to_string(workers_) +
                 (workers_ == 1 ? " worker" : " workers") + "): at most " +
                 std::to_string(train_.labels.size() / workers_);
      return;
    }
    if (rank_ == 0) {
      if (!cfg_.metrics_file.empty()) {
        metrics_.open(cfg_.metrics_file, std::ios::app);
        if (!metrics_) // training goes on: the lines still print
          TROUPE_LOG(error, "trainer", "--train.metrics-file: cannot open ",
                     cfg_.metrics_file, ": ", std::strerror(errno),
                     "; no metrics written");
      }
      auto math = devices_ ? devices_->describe() : blas_description();
      std::printf("training %s on Fashion-MNIST: %u workers, batch %u each, "
                  "%u epochs (math: %s)\n",
                  cfg_.model.c_str(), workers_, cfg_.batch, cfg_.epochs,
                  math.c_str());
      if (auto w = blas_core_warning(); !w.empty())
        std::printf("*** warning: %s\n", w.c_str());
      std::fflush(stdout);
    }
    started_ = part_begin_ = clock_type::now();
  }

  bool done(uint64_t clock) override {
    return too_big_.empty() &&
           clock >= uint64_t{cfg_.epochs} * steps_per_epoch_;
  }

  /// Rank 0 came back in the middle of an evaluation point's step: the
  /// report is made at the next step, on its weights (one round on),
  /// under the evaluation point's clock.
  void step_skipped(uint64_t clock) override {
    if (rank_ == 0 && is_eval_point(clock))
      missed_eval_ = clock;
  }

  caf::expected<arrays> step(uint64_t clock, const arrays& weights) override {
    step_timer timer{*this};
    if (!fits(weights))
      return caf::make_error(errc::bad_shape, "pulled arrays do not match",
                             cfg_.model);
    take_pulled(clock, weights);
    if (auto err = compute(clock))
      return err;
    return to_arrays(net_.gradients());
  }

  /// With the optimizer on the servers, the pulled arrays become the
  /// model's weights and come back holding the gradients: no copy of the
  /// model in either direction.
  caf::expected<arrays> step_taking(uint64_t clock, arrays& weights) override {
    if (local_opt_ || !swap_in(weights, &model::swap_parameter))
      return step(clock, weights);
    step_timer timer{*this};
    if (auto err = compute(clock))
      return err;
    if (!swap_in(weights, &model::swap_gradient)) // sizes checked above
      return caf::make_error(errc::bad_shape, "gradients swap");
    return std::move(weights);
  }

  void finish(const arrays& weights) override {
    auto clock = uint64_t{cfg_.epochs} * steps_per_epoch_;
    if (!fits(weights)) {
      stderr_line() << "*** the final weights do not match " << cfg_.model
                    << '\n';
      return;
    }
    take_pulled(clock, weights);
    if (rank_ != 0) { // rank 0 speaks for the job on stdout
      TROUPE_LOG(info, "worker " + std::to_string(rank_), cfg_.epochs,
                 " epochs done");
      return;
    }
    if (missed_eval_ != 0) // the last step was the one given up
      report(std::exchange(missed_eval_, 0));
    report(clock);
    std::printf("final test accuracy: %.4f\n", evaluate(net_, test_, 0));
    std::fflush(stdout);
  }

private:
  /// Splits the time of a step from the one before: from handing the
  /// previous step's arrays back to entering this one is waiting (push,
  /// the round, pull: the system's part), the rest is this worker's own
  /// work less any evaluation. Lives for one step call.
  struct step_timer {
    trainer& t;
    clock_type::time_point in = clock_type::now();
    explicit step_timer(trainer& owner) : t(owner) {
      if (t.stepped_) {
        auto wait = seconds(in - t.last_out_);
        t.wait_s_ += wait;
        live().wait.Observe(wait);
      }
      t.eval_s_ = 0;
    }
    ~step_timer() {
      t.last_out_ = clock_type::now();
      t.stepped_ = true;
      auto compute = seconds(t.last_out_ - in) - t.eval_s_;
      t.compute_s_ += compute;
      auto& m = live();
      m.compute.Observe(compute);
      m.samples.Increment(double(t.cfg_.batch));
    }
  };
  /// The trainer's metrics (--metrics.port): what step_timer measures.
  struct step_metrics {
    prometheus::Counter& samples = metrics::counter(
        "troupe_samples_total", "training samples this worker stepped over");
    prometheus::Histogram& compute =
        metrics::histogram("troupe_step_compute_seconds",
                           "a step's own work: forward, backward, local update",
                           metrics::latency_buckets());
    prometheus::Histogram& wait = metrics::histogram(
        "troupe_step_wait_seconds",
        "between steps: push, the round, pull (the system's part)",
        metrics::latency_buckets());
  };
  static step_metrics& live() {
    static step_metrics m;
    return m;
  }

  static double seconds(clock_type::duration d) {
    return std::chrono::duration<double>(d).count();
  }

  /// True if `xs` holds one array per parameter array, of its size.
  bool fits(const arrays& xs) const {
    if (xs.size() != sizes_.size())
      return false;
    for (size_t i = 0; i < sizes_.size(); ++i)
      if (xs[i].values.size() != sizes_[i])
        return false;
    return true;
  }

  /// Swaps each array of `xs` with the model's array of the same index
  /// (`which`: parameters or gradients); false, with nothing swapped, if
  /// the count or a size differs.
  bool swap_in(arrays& xs, bool (model::*which)(size_t, std::vector<float>&)) {
    if (!fits(xs))
      return false;
    for (size_t i = 0; i < xs.size(); ++i)
      (net_.*which)(i, xs[i].values);
    return true;
  }

  /// The forward and backward pass of step `clock` on the model's weights.
  caf::error compute(uint64_t clock, const model::ready_fn& ready = {}) {
    if (!too_big_.empty())
      return caf::make_error(errc::invalid_config, too_big_);
    bool begun = begun_ == clock + 1; // weights_arrived began its forward
    begun_ = 0;
    if (!begun) {
      if (missed_eval_ != 0) // rank 0 only
        report(std::exchange(missed_eval_, 0));
      if (rank_ == 0 && is_eval_point(clock))
        report(clock);
      gather_batch(clock);
      if (!devices_ &&
          net_.forward_begin(batch_x_, cfg_.batch) != kernel_status::ok)
        return caf::make_error(errc::bad_shape, "forward of step", clock);
    }
    float loss = 0;
    if (devices_) { // no blocks there: --worker.overlap is refused
      if (auto err =
              devices_->step(net_, batch_x_, ys_.data(), cfg_.batch, &loss))
        return err;
    } else if (auto st = net_.finish_gradients(ys_.data(), &loss, ready);
               st != kernel_status::ok) {
      return caf::make_error(errc::bad_shape, "gradients", to_string(st));
    }
    if (!std::isfinite(loss)) // its gradients would poison the weights
      return caf::make_error(errc::non_finite,
                             "training diverged: the loss of step " +
                                 std::to_string(clock) + " is " +
                                 std::to_string(loss) + diverged_hint());
    loss_sum_ += loss;
    ++part_steps_;
    return caf::none;
  }

  /// What to try when the loss is not finite.
  std::string diverged_hint() const {
    if (summing_) // the default; the servers' too where they run it
      return " (lower --optimizer.lr, or check the data; --optimizer.name=sum,"
             " the default, is the counter task's: it adds the raw gradients"
             " to the weights, so give every node sgd, momentum, nesterov or"
             " adam, as deploy/local.ini does)";
    return " (lower --optimizer.lr, or check the data)";
  }

  /// A pull at `clock` returned the weights, or (optimizer on the workers)
  /// the mean gradient of round clock - 1, which is applied once.
  void take_pulled(uint64_t clock, const arrays& xs) {
    auto ps = net_.parameters();
    if (!local_opt_) {
      for (size_t i = 0; i < ps.size(); ++i)
        std::memcpy(ps[i].data, xs[i].values.data(),
                    ps[i].size * sizeof(float));
      return;
    }
    if (clock == 0 || rounds_applied_ == clock)
      return;
    for (size_t i = 0; i < ps.size(); ++i) {
      scratch_.assign(ps[i].data, ps[i].data + ps[i].size);
      optimizer_(slice_id{xs[i].key, 0}, scratch_, xs[i].values.data(), 1);
      std::memcpy(ps[i].data, scratch_.data(), ps[i].size * sizeof(float));
    }
    rounds_applied_ = clock;
  }

  /// True if the steps before `clock` end a part of an epoch.
  bool is_eval_point(uint64_t clock) const {
    if (clock == 0)
      return false;
    auto in_epoch = clock % steps_per_epoch_;
    for (uint32_t p = 1; p < cfg_.evals_per_epoch; ++p)
      if (in_epoch == steps_per_epoch_ * p / cfg_.evals_per_epoch)
        return true;
    return in_epoch == 0;
  }

  /// Samples of step `clock` from this worker's partition of its epoch,
  /// into batch_x_ and ys_: the inputs into the devices' batch memory
  /// (pinned on a GPU, which reads it without a staging copy), else our
  /// own.
  void gather_batch(uint64_t clock) {
    auto epoch = clock / steps_per_epoch_;
    if (idx_.empty() || epoch != idx_epoch_) {
      epoch_partition(train_.labels.size(), epoch, cfg_.seed, rank_, workers_,
                      idx_);
      idx_epoch_ = epoch;
    }
    size_t per = net_.input_size(),
           first = (clock % steps_per_epoch_) * cfg_.batch;
    batch_x_ = devices_ ? devices_->batch_memory(cfg_.batch * per) : nullptr;
    if (!batch_x_) {
      xs_.resize(cfg_.batch * per);
      batch_x_ = xs_.data();
    }
    ys_.resize(cfg_.batch);
    for (size_t i = 0; i < cfg_.batch; ++i) {
      auto s = idx_[first + i];
      std::memcpy(batch_x_ + i * per, train_.images.data() + s * per,
                  per * sizeof(float));
      ys_[i] = train_.labels[s];
    }
  }

  /// Rank 0: evaluates the current weights; one progress and metrics line.
  void report(uint64_t clock) {
    auto began = clock_type::now();
    auto secs = seconds(began - part_begin_);
    train_secs_ += secs;
    auto acc = evaluate(net_, test_, cfg_.eval_samples);
    double epoch = double(clock) / double(steps_per_epoch_);
    // No step of this rank since the last line (it came back, say): no
    // loss or rate to tell.
    bool stepped = part_steps_ > 0;
    double loss = stepped ? loss_sum_ / part_steps_ : 0.0;
    double rate = double(part_steps_ * cfg_.batch) * workers_ / secs;
    auto fixed = [stepped](double x, int digits) {
      char buf[64] = "-";
      if (stepped)
        std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
      return std::string{buf};
    };
    // JSON has no NaN or infinity: a diverged loss is null, as a part
    // without steps is (a reader would reject the whole line otherwise).
    auto json = [stepped](double x) {
      return stepped ? json_number(x) : std::string{"null"};
    };
    auto elapsed = seconds(clock_type::now() - started_);
    // This rank's steps since the last report: its own work and its wait
    // for the rounds (the part's first wait is in the part before).
    auto busy = compute_s_ + wait_s_;
    double wait_share = busy > 0 ? wait_s_ / busy : 0.0;
    std::printf("epoch %.*f/%u  train loss %s  test accuracy %.4f  "
                "samples/s %s  waiting %.0f%%  elapsed %.1f s\n",
                cfg_.evals_per_epoch > 1 ? 2 : 0, epoch, cfg_.epochs,
                fixed(loss, 4).c_str(), acc, fixed(rate, 0).c_str(),
                100 * wait_share, elapsed);
    std::fflush(stdout);
    if (metrics_)
      metrics_ << "{\"epoch\":" << epoch << ",\"train_loss\":" << json(loss)
               << ",\"test_accuracy\":" << json_number(acc)
               << ",\"samples_per_s\":" << json(rate)
               << ",\"train_s\":" << train_secs_ << ",\"elapsed_s\":" << elapsed
               << ",\"compute_s\":" << compute_s_ << ",\"wait_s\":" << wait_s_
               << "}\n"
               << std::flush;
    if (progress_) {
      char line[160];
      std::snprintf(line, sizeof(line), "epoch=%.4f accuracy=%.4f", epoch, acc);
      std::string detail = line;
      if (stepped) {
        std::snprintf(line, sizeof(line), " loss=%.6g samples_per_s=%.0f", loss,
                      rate);
        detail += line;
      }
      progress_(detail);
    }
    loss_sum_ = 0;
    part_steps_ = 0;
    compute_s_ = wait_s_ = 0;
    part_begin_ = clock_type::now(); // evaluation is not training time
    eval_s_ += seconds(part_begin_ - began);
  }

  const train_settings cfg_;
  model net_;
  dataset train_, test_;
  bool local_opt_;
  bool summing_; ///< --optimizer.name=sum (here; likely the servers' too)
  update_fn optimizer_;
  uint64_t rounds_applied_ = 0;
  uint32_t rank_ = 0, workers_ = 1;
  uint64_t steps_per_epoch_ = 1;
  std::string too_big_; ///< not "": the batch is more than a worker's share
  std::vector<size_t> sizes_; // of the parameter arrays, fixed by the model
  std::vector<std::vector<size_t>> blocks_; // parameters() indices per block
  std::vector<size_t> block_of_;            // parameters() index -> block
  std::vector<bool> taken_;  // blocks weights_arrived swapped into the model
  size_t first_bias_ = 0;    // parameters() index of dense0.b
  uint64_t begun_ = 0;       // clock + 1 of a forward weights_arrived began
  uint64_t missed_eval_ = 0; // an evaluation point's step skipped (rank 0)

  /// Forgets a forward and blocks weights_arrived took (a failed step).
  void drop_begun() {
    begun_ = 0;
    std::fill(taken_.begin(), taken_.end(), false);
  }
  std::vector<size_t> idx_;
  uint64_t idx_epoch_ = 0;
  std::vector<float> xs_, scratch_;
  float* batch_x_ = nullptr; // the inputs gather_batch gathered last
  std::vector<uint8_t> ys_;
  double loss_sum_ = 0, train_secs_ = 0;
  // Per part of an epoch, rank 0's split of its steps (step_timer).
  double compute_s_ = 0, wait_s_ = 0, eval_s_ = 0;
  bool stepped_ = false;
  clock_type::time_point last_out_;
  uint64_t part_steps_ = 0;
  std::ofstream metrics_;
  progress_fn progress_;
  std::shared_ptr<device_team> devices_; // null: the CPU, in this thread
  clock_type::time_point started_, part_begin_;
};

} // namespace

std::shared_ptr<worker_logic>
make_trainer(const trainer_settings& cfg, model net, dataset train,
             dataset test, progress_fn progress,
             std::shared_ptr<device_team> devices) {
  auto t = std::make_shared<trainer>(cfg, std::move(net), std::move(train),
                                     std::move(test));
  t->on_progress(std::move(progress));
  t->use_devices(std::move(devices));
  return t;
}

} // namespace troupe

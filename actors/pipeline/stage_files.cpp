// A stage driver's data and checkpoint files (stage_driver.hpp; the
// metrics file: stage_reports.cpp).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "actors/base/log.hpp"
#include "actors/pipeline/stage_driver_internal.hpp"
#include "messages/checkpoint.hpp"
#include "messages/errors.hpp"

namespace troupe::pipe {

namespace fs = std::filesystem;

std::string load_stage_data(const train_settings& t, uint32_t stage,
                            uint32_t stages, stage_data& out) {
  if (auto why = load_fashion_mnist(t.data_dir, "train", out.train);
      !why.empty())
    return why;
  bool first = stage == 0;
  bool last = stage + 1 == stages;
  if (first || last) {
    if (auto why = load_fashion_mnist(t.data_dir, "t10k", out.test);
        !why.empty())
      return why;
    if (auto why = splits_match(t.data_dir, out.train, out.test); !why.empty())
      return why;
  }
  out.train_n = out.train.labels.size();
  out.cols = out.train_n ? out.train.images.size() / out.train_n : 0;
  out.classes = std::max(classes_of(out.train), classes_of(out.test));
  out.test_n = out.test.labels.size();
  if (t.eval_samples > 0)
    out.test_n = std::min<size_t>(out.test_n, t.eval_samples);
  if (!first) { // the images stay with stage 0
    out.train.images = tensor{};
    out.test.images = tensor{};
  }
  if (!last) {
    out.train.labels.clear();
    out.test.labels.clear();
  }
  return "";
}

std::string checkpoint_path(const std::string& dir, uint32_t stage,
                            uint64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "stage-%u-%012llu.ckpt", stage,
                static_cast<unsigned long long>(step));
  return (fs::path{dir} / name).string();
}

std::vector<uint64_t> checkpoint_steps(const std::string& dir, uint32_t stage) {
  std::vector<uint64_t> out{0};
  std::error_code ec;
  auto prefix = "stage-" + std::to_string(stage) + "-";
  for (auto& e : fs::directory_iterator{dir, ec}) {
    auto name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || e.path().extension() != ".ckpt")
      continue;
    auto digits = name.substr(prefix.size(), name.size() - prefix.size() - 5);
    if (digits.empty() ||
        !std::all_of(digits.begin(), digits.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    auto step = std::stoull(digits);
    if (step > 0)
      out.push_back(step);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint64_t> whole_checkpoint_steps(const std::string& dir,
                                             uint32_t stage) {
  auto steps = checkpoint_steps(dir, stage);
  std::vector<uint64_t> out;
  for (auto step : steps) {
    if (step == 0) { // the seed's weights, in no file
      out.push_back(step);
      continue;
    }
    auto f = read_checked_file(checkpoint_path(dir, stage, step));
    if (f)
      out.push_back(step);
    else
      TROUPE_LOG(warning, "stage " + std::to_string(stage),
                 "checkpoint of step ", step,
                 " is passed over: ", describe(f.error()));
  }
  return out;
}

caf::error write_stage_checkpoint(const std::string& dir,
                                  const stage_checkpoint& x) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return caf::make_error(errc::bad_file,
                           "cannot make " + dir + ": " + ec.message());
  if (auto err =
          write_checked_file(checkpoint_path(dir, x.stage, x.step), encode(x)))
    return err;
  auto steps = checkpoint_steps(dir, x.stage);
  for (size_t i = 0; i + 2 < steps.size(); ++i)
    if (steps[i] > 0)
      fs::remove(checkpoint_path(dir, x.stage, steps[i]), ec);
  return caf::none;
}

void remove_stage_checkpoints(const std::string& dir, uint32_t stage) {
  std::error_code ec;
  for (auto step : checkpoint_steps(dir, stage))
    if (step > 0)
      fs::remove(checkpoint_path(dir, stage, step), ec);
  fs::remove(dir, ec); // only if empty: another stage's files, a fault mark
}

caf::expected<std::vector<named_array>>
read_stage_checkpoint(const std::string& dir, const stage_checkpoint& want) {
  auto path = checkpoint_path(dir, want.stage, want.step);
  auto bytes = read_checked_file(path);
  if (!bytes)
    return std::move(bytes.error());
  stage_checkpoint x;
  if (auto err = decode(*bytes, x))
    return caf::make_error(errc::bad_file, path + ": " + describe(err));
  if (x.stage != want.stage || x.step != want.step)
    return caf::make_error(errc::bad_file,
                           path + ": the checkpoint of another stage or step");
  // The same file under the same flags fails again: a configuration's
  // error (exit 2), not restarted.
  if (x.spec != want.spec || x.first != want.first || x.last != want.last)
    return caf::make_error(
        errc::invalid_config,
        path + ": the checkpoint of another model or cut (" + x.spec +
            ", layers " + std::to_string(x.first) + ".." +
            std::to_string(x.last) +
            "): start with the same --train.model and --pipeline.cut, or"
            " another --pipeline.checkpoint-dir");
  if (x.optimizer != want.optimizer)
    return caf::make_error(
        errc::invalid_config,
        path + ": the checkpoint of another optimizer (" + x.optimizer +
            ", its state beside the weights): start with --optimizer.name=" +
            x.optimizer + ", or another --pipeline.checkpoint-dir");
  return std::move(x.arrays);
}

} // namespace troupe::pipe

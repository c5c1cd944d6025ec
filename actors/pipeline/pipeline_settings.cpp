// Checks of the pipeline settings.
#include "actors/pipeline/pipeline_settings.hpp"

#include <string>
#include <string_view>

#include <caf/expected.hpp>

#include "messages/errors.hpp"

namespace troupe {

namespace {

/// `t` as a number below 10^`digits` (digits only: sscanf's %u took
/// "-1", and wrapped 4294967297 to 1).
template <class T> bool digits_of(const std::string& t, T& out, size_t digits) {
  if (t.empty() || t.size() > digits ||
      t.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = static_cast<T>(std::stoull(t));
  return true;
}

/// "S" or "S/R" (a stage of any replica, or of replica R) of the fault
/// flags; false if it is neither.
bool stage_of(const std::string& t, uint32_t& stage, uint32_t& replica) {
  auto slash = t.find('/');
  replica = pipeline_settings::any_replica;
  if (slash == std::string::npos)
    return digits_of(t, stage, 9);
  return digits_of(t.substr(0, slash), stage, 9) &&
         digits_of(t.substr(slash + 1), replica, 9);
}

/// A fault flag's target in `x`: "S" or "S/R" (`step` null), else
/// "S@K" or "S/R@K"; false if it is not, or names a stage or replica `x`
/// has not.
bool target_of(const std::string& t, const pipeline_settings& x,
               uint32_t& stage, uint32_t& replica, uint64_t* step) {
  auto sign = step ? t.find('@') : t.size();
  return sign != std::string::npos &&
         stage_of(t.substr(0, sign), stage, replica) &&
         (!step || digits_of(t.substr(sign + 1), *step, 18)) &&
         stage < x.stages &&
         (replica == pipeline_settings::any_replica || replica < x.replicas);
}

/// A --pipeline.fault-lose-* flag `text` (`flag`): its stage, replica
/// and, where `step` is given, mini-batch; none where `text` is "".
caf::error parse_loss(const std::string& text, const char* flag,
                      const pipeline_settings& x, uint32_t& stage,
                      uint32_t& replica, uint64_t* step = nullptr) {
  stage = pipeline_settings::none;
  replica = pipeline_settings::any_replica;
  if (step)
    *step = pipeline_settings::no_fault;
  if (text.empty())
    return caf::none;
  uint32_t s = 0, r = 0;
  uint64_t k = 0;
  if (!target_of(text, x, s, r, step ? &k : nullptr))
    return caf::make_error(errc::invalid_config,
                           std::string{flag} + " must be STAGE[/REPLICA]" +
                               (step ? "@MINI_BATCH" : "") +
                               " with STAGE below --pipeline.stages and"
                               " REPLICA below --pipeline.replicas, got",
                           text);
  stage = s;
  replica = r;
  if (step)
    *step = k;
  return caf::none;
}

/// "2,3" -> {2, 3}; an error for anything but increasing positive numbers.
caf::error parse_cut(const std::string& text, std::vector<size_t>& out) {
  out.clear();
  size_t at = 0;
  while (at < text.size()) {
    auto end = text.find(',', at);
    if (end == std::string::npos)
      end = text.size();
    auto part = text.substr(at, end - at);
    size_t used = 0;
    unsigned long v = 0;
    try {
      v = std::stoul(part, &used);
    } catch (...) {
      used = 0;
    }
    if (part.empty() || used != part.size() || v == 0 ||
        (!out.empty() && v <= out.back()))
      return caf::make_error(errc::invalid_config,
                             "--pipeline.cut must be increasing layer"
                             " numbers above 0, such as 2,3; got",
                             text);
    out.push_back(v);
    at = end + 1;
  }
  return caf::none;
}

} // namespace

caf::error validate(pipeline_settings& x) {
  if (x.stages < 2 || x.stages > 64)
    return caf::make_error(errc::invalid_config,
                           "--pipeline.stages must be in 2..64, got", x.stages);
  if (x.replicas == 0 || x.replicas > 1024)
    return caf::make_error(errc::invalid_config,
                           "--pipeline.replicas must be in 1..1024, got",
                           x.replicas);
  auto s = parse_schedule(x.schedule_text);
  if (!s)
    return std::move(s.error());
  x.schedule = *s;
  if (x.micro_batches == 0 || x.micro_batches > 1024)
    return caf::make_error(errc::invalid_config,
                           "--pipeline.micro-batches must be in 1..1024, got",
                           x.micro_batches);
  if (auto err = parse_cut(x.cut_text, x.cut_inner))
    return err;
  if (!x.cut_inner.empty() && x.cut_inner.size() + 1 != x.stages)
    return caf::make_error(errc::invalid_config, "--pipeline.cut names",
                           x.cut_inner.size(), "boundaries; --pipeline.stages",
                           x.stages, "needs", x.stages - 1);
  x.fault_step = pipeline_settings::no_fault;
  x.fault_replica = pipeline_settings::any_replica;
  if (!x.fault_kill.empty()) {
    std::string text = x.fault_kill;
    auto ends_with = [&text](std::string_view end) { // and cuts it off
      bool yes = text.size() > end.size() &&
                 text.compare(text.size() - end.size(), end.size(), end) == 0;
      if (yes)
        text.resize(text.size() - end.size());
      return yes;
    };
    using at = pipeline_settings::fault_at;
    x.fault_in = ends_with(":push")     ? at::push
                 : ends_with(":eval")   ? at::eval
                 : ends_with(":device") ? at::device
                 : ends_with(":stall")  ? at::stall
                                        : at::step;
    uint32_t stage = 0, replica = 0;
    uint64_t step = 0;
    if (!target_of(text, x, stage, replica, &step))
      return caf::make_error(
          errc::invalid_config,
          "--pipeline.fault-kill must be"
          " STAGE[/REPLICA]@MINI_BATCH[:push|:eval|:device|:stall] with"
          " STAGE below --pipeline.stages and REPLICA below"
          " --pipeline.replicas, got",
          x.fault_kill);
    x.fault_replica = replica;
    x.fault_stage = stage;
    x.fault_step = step;
  }
  if (auto err = parse_loss(x.fault_lose_sync, "--pipeline.fault-lose-sync", x,
                            x.lose_sync_stage, x.lose_sync_replica))
    return err;
  if (auto err = parse_loss(x.fault_lose_commit, "--pipeline.fault-lose-commit",
                            x, x.lose_commit_stage, x.lose_commit_replica,
                            &x.lose_commit_step))
    return err;
  if (auto err = parse_loss(x.fault_lose_finish, "--pipeline.fault-lose-finish",
                            x, x.lose_finish_stage, x.lose_finish_replica))
    return err;
  if (x.checkpoint_every == 0)
    return caf::make_error(errc::invalid_config,
                           "--pipeline.checkpoint-every must be at least 1");
  return caf::none;
}

caf::expected<std::vector<size_t>> cut_for(const pipeline_settings& x,
                                           size_t layers,
                                           const std::vector<size_t>& even) {
  if (x.cut_inner.empty()) {
    if (even.size() != size_t{x.stages} + 1)
      return caf::make_error(errc::invalid_config, "--pipeline.stages",
                             x.stages, "is more than the model's", layers,
                             "layers");
    return even;
  }
  std::vector<size_t> cut{0};
  cut.insert(cut.end(), x.cut_inner.begin(), x.cut_inner.end());
  if (cut.back() >= layers)
    return caf::make_error(errc::invalid_config, "--pipeline.cut", x.cut_text,
                           "leaves a stage without layers: the model has",
                           layers, "layers");
  cut.push_back(layers);
  return cut;
}

} // namespace troupe

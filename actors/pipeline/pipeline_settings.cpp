// Checks of the pipeline settings.
#include "actors/pipeline/pipeline_settings.hpp"

#include <cstdio>
#include <string>
#include <string_view>

#include <caf/expected.hpp>

#include "messages/errors.hpp"

namespace troupe {

namespace {

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
    unsigned stage = 0, replica = 0;
    unsigned long long step = 0;
    char tail = 0;
    std::string text = x.fault_kill;
    auto ends_with = [&text](std::string_view end) { // and cuts it off
      bool yes = text.size() > end.size() &&
                 text.compare(text.size() - end.size(), end.size(), end) == 0;
      if (yes)
        text.resize(text.size() - end.size());
      return yes;
    };
    using at = pipeline_settings::fault_at;
    x.fault_in = ends_with(":push")   ? at::push
                 : ends_with(":eval") ? at::eval
                                      : at::step;
    bool of_replica = std::sscanf(text.c_str(), "%u/%u@%llu%c", &stage,
                                  &replica, &step, &tail) == 3;
    if ((!of_replica &&
         std::sscanf(text.c_str(), "%u@%llu%c", &stage, &step, &tail) != 2) ||
        stage >= x.stages || (of_replica && replica >= x.replicas))
      return caf::make_error(errc::invalid_config,
                             "--pipeline.fault-kill must be"
                             " STAGE[/REPLICA]@MINI_BATCH[:push|:eval] with"
                             " STAGE below --pipeline.stages and REPLICA below"
                             " --pipeline.replicas, got",
                             x.fault_kill);
    if (of_replica)
      x.fault_replica = replica;
    x.fault_stage = stage;
    x.fault_step = step;
  }
  x.lose_sync_stage = pipeline_settings::none;
  x.lose_sync_replica = pipeline_settings::any_replica;
  if (!x.fault_lose_sync.empty()) {
    // Digits only, at most 9 (sscanf's %u wraps 4294967297 to 1).
    auto number = [](const std::string& t, uint32_t& out) {
      if (t.empty() || t.size() > 9 ||
          t.find_first_not_of("0123456789") != std::string::npos)
        return false;
      out = static_cast<uint32_t>(std::stoul(t));
      return true;
    };
    uint32_t stage = 0, replica = 0;
    auto& text = x.fault_lose_sync;
    auto slash = text.find('/');
    bool of_replica = slash != std::string::npos;
    bool ok = of_replica ? number(text.substr(0, slash), stage) &&
                               number(text.substr(slash + 1), replica)
                         : number(text, stage);
    if (!ok || stage >= x.stages || (of_replica && replica >= x.replicas))
      return caf::make_error(errc::invalid_config,
                             "--pipeline.fault-lose-sync must be"
                             " STAGE[/REPLICA] with STAGE below"
                             " --pipeline.stages and REPLICA below"
                             " --pipeline.replicas, got",
                             text);
    x.lose_sync_stage = stage;
    if (of_replica)
      x.lose_sync_replica = replica;
  }
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

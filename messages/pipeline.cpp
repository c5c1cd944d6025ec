// Pipeline conversation: codec.
#include "messages/pipeline.hpp"

#include <cstring>

#include "messages/checkpoint.hpp"
#include "messages/errors.hpp"
#include "messages/frame_codec.hpp"
#include "messages/pipeline.capnp.h"

namespace troupe {

using detail::decode_guarded;
using detail::frame_reader;
using detail::to_frame;

frame encode(const stage_tensor& x) {
  auto bytes = x.values.size() * sizeof(float);
  capnp::MallocMessageBuilder msg{
      static_cast<uint32_t>(std::min<size_t>(16 + bytes / 8, 1u << 29))};
  auto b = msg.initRoot<schema::StageTensor>();
  b.setStep(x.step);
  b.setMicro(x.micro);
  b.setRows(x.rows);
  b.setCols(x.cols);
  b.setGen(x.gen);
  if (bytes > 0)
    std::memcpy(b.initValues(bytes).begin(), x.values.data(), bytes);
  return to_frame(msg);
}

caf::error decode(bytes_view f, stage_tensor& x) {
  return decode_guarded(f, "StageTensor", [&x](frame_reader& rd) {
    auto r = rd.get<schema::StageTensor>();
    auto values = r.getValues();
    uint64_t floats = uint64_t{r.getRows()} * r.getCols();
    if (floats > max_stage_tensor_floats || values.size() != floats * 4)
      return caf::make_error(errc::malformed_message,
                             "StageTensor: values are not rows x cols floats",
                             r.getRows(), r.getCols(), values.size());
    x.step = r.getStep();
    x.micro = r.getMicro();
    x.rows = r.getRows();
    x.cols = r.getCols();
    x.gen = r.getGen();
    x.values.resize(floats);
    if (floats > 0)
      std::memcpy(x.values.data(), values.begin(), floats * 4);
    return caf::error{};
  });
}

frame encode(const stage_checkpoint& x) {
  size_t bytes = 0;
  for (auto& a : x.arrays)
    bytes += a.values.size() * sizeof(float);
  capnp::MallocMessageBuilder msg{
      static_cast<uint32_t>(std::min<size_t>(64 + bytes / 8, 1u << 29))};
  auto b = msg.initRoot<schema::StageCheckpoint>();
  b.setStage(x.stage);
  b.setStep(x.step);
  b.setSpec(x.spec);
  b.setFirst(x.first);
  b.setLast(x.last);
  b.setOptimizer(x.optimizer);
  auto n = static_cast<unsigned>(x.arrays.size());
  auto keys = b.initKeys(n);
  auto values = b.initValues(n);
  for (unsigned i = 0; i < n; ++i) {
    auto& a = x.arrays[i];
    keys.set(i, a.key);
    auto d = values.init(i, a.values.size() * sizeof(float));
    if (!a.values.empty())
      std::memcpy(d.begin(), a.values.data(), d.size());
  }
  return to_frame(msg);
}

caf::error decode(bytes_view f, stage_checkpoint& x) {
  return decode_guarded(
      f, "StageCheckpoint",
      [&x](frame_reader& rd) {
        auto r = rd.get<schema::StageCheckpoint>();
        auto keys = r.getKeys();
        auto values = r.getValues();
        if (keys.size() != values.size())
          return caf::make_error(
              errc::malformed_message,
              "StageCheckpoint: keys and arrays differ in count", keys.size(),
              values.size());
        x.stage = r.getStage();
        x.step = r.getStep();
        x.spec = r.getSpec();
        x.first = r.getFirst();
        x.last = r.getLast();
        x.optimizer = r.hasOptimizer() ? r.getOptimizer().cStr() : "sgd";
        if (x.optimizer.empty())
          x.optimizer = "sgd";
        x.arrays.clear();
        for (unsigned i = 0; i < keys.size(); ++i) {
          auto d = values[i];
          if (d.size() % sizeof(float) != 0)
            return caf::make_error(
                errc::malformed_message,
                "StageCheckpoint: an array is not whole floats");
          named_array a{keys[i], std::vector<float>(d.size() / sizeof(float))};
          if (!a.values.empty())
            std::memcpy(a.values.data(), d.begin(), d.size());
          x.arrays.push_back(std::move(a));
        }
        return caf::error{};
      },
      max_checkpoint_bytes); // 3x the weights' with adam
}

} // namespace troupe

// Pipeline conversation: codec.
#include "messages/pipeline.hpp"

#include <cstring>

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
    x.values.resize(floats);
    if (floats > 0)
      std::memcpy(x.values.data(), values.begin(), floats * 4);
    return caf::error{};
  });
}

} // namespace troupe

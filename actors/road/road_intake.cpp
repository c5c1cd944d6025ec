#include "actors/road/road_intake.hpp"

#include "actors/base/log.hpp"
#include "messages/errors.hpp"

namespace troupe {

caf::error road_intake::check_size(const member_id& from,
                                   uint64_t bytes) const {
  auto limit = frame_limit_.load();
  if (bytes <= limit)
    return caf::none;
  return caf::make_error(
      errc::message_too_large,
      str("a frame of ", bytes, " bytes from ", to_string(from),
          " is over this server's limit of ", limit,
          " bytes: give every node the same --kv.max-message-bytes"));
}

caf::error road_intake::take(const member_id& from, uint64_t bytes) {
  if (auto err = check_size(from, bytes))
    return err;
  auto now = in_flight_.fetch_add(bytes) + bytes;
  if (now <= budget_)
    return caf::none;
  in_flight_ -= bytes;
  return caf::make_error(errc::timeout,
                         str("server busy: ", (now - bytes) >> 20,
                             " MiB of workers' frames in"
                             " flight, the budget is ",
                             budget_ >> 20, " MiB (--server.inflight-bytes)"));
}

} // namespace troupe

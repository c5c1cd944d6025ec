// Names and rendering of troupe's error codes.
#include "messages/errors.hpp"

#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace troupe {

caf::error scheduler_gone() {
  // A node stopped (SIGSTOP, a long pause) past the heartbeat timeout is
  // cut off too, while the scheduler lives: it read as if the scheduler had
  // died, and told a cluster that went on to start again.
  return caf::make_error(
      errc::peer_down,
      "the scheduler is gone (it died, this node lost its network, or this"
      " node was stopped longer than --middleman.connection-timeout and the"
      " cluster went on without it), so this node stops; if the scheduler"
      " still runs, start this node again (its agent does) and it rejoins;"
      " if the scheduler died, restart the whole cluster, with --resume to"
      " continue from the last checkpoint in --checkpoint.dir");
}

std::string to_string(errc x) {
  switch (x) {
  case errc::malformed_message:
    return "malformed_message";
  case errc::slice_not_owned:
    return "slice_not_owned";
  case errc::bad_shape:
    return "bad_shape";
  case errc::clock_gap:
    return "clock_gap";
  case errc::not_a_member:
    return "not_a_member";
  case errc::unknown_key:
    return "unknown_key";
  case errc::size_conflict:
    return "size_conflict";
  case errc::timeout:
    return "timeout";
  case errc::not_connected:
    return "not_connected";
  case errc::invalid_config:
    return "invalid_config";
  case errc::bad_file:
    return "bad_file";
  case errc::peer_down:
    return "peer_down";
  case errc::unreplicated:
    return "unreplicated";
  case errc::cluster_full:
    return "cluster_full";
  case errc::non_finite:
    return "non_finite";
  case errc::message_too_large:
    return "message_too_large";
  case errc::device_failed:
    return "device_failed";
  case errc::member_missing:
    return "member_missing";
  case errc::values_lost:
    return "values_lost";
  }
  return "errc(" + std::to_string(static_cast<int>(x)) + ")";
}

namespace {

/// "a b c": a context's elements, strings without quotes.
std::string words_of(const caf::message& ctx) {
  std::string out;
  for (size_t i = 0; i < ctx.size(); ++i) {
    out += i == 0 ? "" : " ";
    out += ctx.match_element<std::string>(i) ? ctx.get_as<std::string>(i)
                                             : ctx.stringify(i);
  }
  return out;
}

} // namespace

std::string render_troupe_error(uint8_t code, const caf::message& ctx) {
  // "code: a b c": one readable line.
  auto out = to_string(static_cast<errc>(code));
  if (ctx.size() > 0)
    out += ": " + words_of(ctx);
  return out;
}

std::string describe(const caf::error& err) {
  if (!err)
    return "no error";
  if (err.category() == caf::atom("troupe"))
    return render_troupe_error(err.code(), err.context());
  // One of CAF's codes with our words (the worker's code threw, say):
  // "runtime_error: WORDS", not system_error(runtime_error, ("WORDS")).
  if (err.category() == caf::atom("system") &&
      err.context().match_elements<std::string>())
    return caf::to_string(static_cast<caf::sec>(err.code())) + ": " +
           err.context().get_as<std::string>(0);
  return caf::to_string(err);
}

std::string describe_words(const caf::error& err) {
  if (!err || err.category() != caf::atom("troupe"))
    return describe(err);
  return words_of(err.context());
}

} // namespace troupe

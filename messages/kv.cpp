// Encode/decode of the kv conversation. Values travel as raw little-endian
// float32 in Cap'n Proto Data fields.
#include "messages/kv.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include <caf/sec.hpp>

#include "messages/errors.hpp"
#include "messages/frame_codec.hpp"
#include "messages/kv.capnp.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "troupe sends float32 as little-endian bytes");

namespace troupe {

namespace {

using detail::decode_guarded;
using detail::frame_reader;
using detail::to_frame;
using detail::to_outbound;

constexpr size_t max_failure_chars = 4096;

caf::error bad(const char* what) {
  return caf::make_error(errc::malformed_message, what);
}

/// A request naming one slice twice is malformed: a push would add it twice,
/// an init would keep one of two values, a pull would get it back twice.
/// `List` holds elements with getKey() and getIndex().
template <class List>
caf::error check_distinct(const List& in, const char* what) {
  if (in.size() > max_slices_per_message)
    return bad("too many slices");
  std::vector<slice_id> ids;
  ids.reserve(in.size());
  for (auto s : in)
    ids.push_back(slice_id{s.getKey(), s.getIndex()});
  std::sort(ids.begin(), ids.end());
  auto twice = std::adjacent_find(ids.begin(), ids.end());
  if (twice != ids.end())
    return caf::make_error(errc::malformed_message,
                           "slice (key " + std::to_string(twice->key) +
                               ", index " + std::to_string(twice->index) +
                               ") named twice in one " + what);
  return caf::none;
}

/// Slices at least this large are referenced, not copied, when they can be.
constexpr size_t min_external_bytes = 4096;

/// True if `x` may become an external segment: Cap'n Proto needs a word-
/// aligned start, and reads whole words, so the size must be too.
bool external(const slice_view& x) {
  auto bytes = x.size * sizeof(float);
  return bytes >= min_external_bytes && bytes % sizeof(capnp::word) == 0 &&
         reinterpret_cast<uintptr_t>(x.data) % sizeof(capnp::word) == 0;
}

/// Writes `xs` into `out`; with `msg`, large slices are referenced in place.
void write_slices(capnp::List<schema::Slice>::Builder out,
                  const std::vector<slice_view>& xs,
                  capnp::MessageBuilder* msg = nullptr) {
  for (size_t i = 0; i < xs.size(); ++i) {
    out[i].setKey(xs[i].id.key);
    out[i].setIndex(xs[i].id.index);
    auto bytes = xs[i].size * sizeof(float);
    if (msg != nullptr && external(xs[i])) {
      auto first = reinterpret_cast<const kj::byte*>(xs[i].data);
      out[i].adoptValues(msg->getOrphanage().referenceExternalData(
          capnp::Data::Reader{first, bytes}));
      continue;
    }
    auto data = out[i].initValues(bytes);
    if (bytes > 0)
      std::memcpy(data.begin(), xs[i].data, bytes);
  }
}

/// The first segment of a message with no values in it: its root and a
/// few words (a pull adds 2 words per slice named). Cap'n Proto's default
/// is 1024 words, a zeroed 8 KiB allocation per request or reply, which
/// showed in the profiles of small requests 8 in flight (malloc, memset).
constexpr uint32_t small_message_words = 16;

/// Words a message with these slices needs, so that it is built in one
/// segment (beside the external ones) instead of a chain of growing ones:
/// a Slice is 3 words in its list, and a referenced one 2 more for the
/// landing pad of its far pointer. Everything but the values then lies in
/// the first segment, which a reader that lands the values in place
/// (actors/kv/kv_pull.hpp) reads before them.
uint32_t words_for(const std::vector<slice_view>& xs) {
  size_t words = 64;
  for (auto& x : xs)
    words += 5 + (external(x) ? 0 : (x.size * sizeof(float) + 7) / 8);
  return static_cast<uint32_t>(std::min<size_t>(words, 1u << 29));
}

caf::error read_slices(capnp::List<schema::Slice>::Reader in,
                       std::vector<slice_data>& xs) {
  if (in.size() > max_slices_per_message)
    return bad("too many slices");
  xs.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    auto s = in[i];
    auto data = s.getValues(); // fetched once: each get counts
    if (data.size() % sizeof(float) != 0)
      return caf::make_error(errc::malformed_message,
                             "slice bytes not a multiple of 4", s.getKey(),
                             s.getIndex());
    xs[i].id = slice_id{s.getKey(), s.getIndex()};
    auto first = reinterpret_cast<const float*>(data.begin());
    if (reinterpret_cast<uintptr_t>(first) % alignof(float) == 0) {
      xs[i].values.assign(first, first + data.size() / sizeof(float));
    } else { // Data is only byte-aligned in principle
      xs[i].values.resize(data.size() / sizeof(float));
      std::memcpy(xs[i].values.data(), data.begin(), data.size());
    }
  }
  return caf::none;
}

using slice_fn = std::function<caf::error(slice_id, const float*, size_t)>;

/// Hands each slice of `in` to `fn` in place.
caf::error visit_slices(capnp::List<schema::Slice>::Reader in,
                        const slice_fn& fn) {
  if (in.size() > max_slices_per_message)
    return bad("too many slices");
  for (auto s : in) {
    auto data = s.getValues(); // fetched once: each get counts
    if (data.size() % sizeof(float) != 0)
      return bad("slice bytes not a multiple of 4");
    // Data starts on a word boundary of an aligned segment.
    auto first = reinterpret_cast<const float*>(data.begin());
    if (auto err = fn(slice_id{s.getKey(), s.getIndex()}, first,
                      data.size() / sizeof(float)))
      return err;
  }
  return caf::none;
}

} // namespace

std::vector<slice_view> views_of(const std::vector<slice_data>& xs) {
  std::vector<slice_view> out;
  out.reserve(xs.size());
  for (auto& x : xs)
    out.push_back(slice_view{x.id, x.values.data(), x.values.size()});
  return out;
}

frame encode(const init_request& x) {
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::Init>();
  b.setWorker(x.worker);
  b.setEpoch(x.epoch);
  write_slices(b.initSlices(x.slices.size()), views_of(x.slices));
  return to_frame(msg);
}

frame encode(const push_request& x) {
  return encode_push(x, views_of(x.slices)).flatten();
}

outbound encode_push(const push_request& x,
                     const std::vector<slice_view>& slices) {
  auto msg = std::make_unique<capnp::MallocMessageBuilder>(words_for(slices));
  auto b = msg->initRoot<schema::Push>();
  b.setWorker(x.worker);
  b.setClock(x.clock);
  b.setEpoch(x.epoch);
  b.setPart(x.part);
  b.setParts(x.parts);
  b.setAcked(x.acked);
  write_slices(b.initSlices(slices.size()), slices, msg.get());
  return to_outbound(std::move(msg));
}

frame encode(const push_reply& x) {
  capnp::MallocMessageBuilder msg{small_message_words};
  auto b = msg.initRoot<schema::PushReply>();
  b.setVersion(x.version);
  b.setDuplicate(x.duplicate);
  return to_frame(msg);
}

outbound encode(const replicate_request& x) {
  auto& p = x.payload;
  bool ref = p.size >= min_external_bytes &&
             p.size % sizeof(capnp::word) == 0 &&
             reinterpret_cast<uintptr_t>(p.data) % sizeof(capnp::word) == 0;
  size_t words = 64 + x.numbers.size() + (ref ? 0 : (p.size + 7) / 8);
  auto msg = std::make_unique<capnp::MallocMessageBuilder>(
      static_cast<uint32_t>(std::min<size_t>(words, 1u << 29)));
  auto b = msg->initRoot<schema::Replicate>();
  b.setPrimary(x.primary);
  b.setLink(x.link);
  b.setStore(x.store);
  b.setOrigin(x.origin);
  b.setOp(x.op);
  auto numbers = b.initNumbers(x.numbers.size());
  for (size_t i = 0; i < x.numbers.size(); ++i)
    numbers.set(i, x.numbers[i]);
  if (ref)
    b.adoptPayload(msg->getOrphanage().referenceExternalData(
        capnp::Data::Reader{p.data, p.size}));
  else if (p.size > 0)
    std::memcpy(b.initPayload(p.size).begin(), p.data, p.size);
  return to_outbound(std::move(msg));
}

frame encode(const pull_request& x) {
  capnp::MallocMessageBuilder msg{static_cast<uint32_t>(
      std::min<size_t>(small_message_words + 2 * x.slices.size(), 1u << 29))};
  auto b = msg.initRoot<schema::Pull>();
  b.setWorker(x.worker);
  b.setClock(x.clock);
  b.setEpoch(x.epoch);
  b.setAcked(x.acked);
  auto refs = b.initSlices(x.slices.size());
  for (size_t i = 0; i < x.slices.size(); ++i) {
    refs[i].setKey(x.slices[i].key);
    refs[i].setIndex(x.slices[i].index);
  }
  return to_frame(msg);
}

frame encode(const pull_reply& x) {
  return encode_pull_reply(x.version, views_of(x.slices), x.clock).flatten();
}

outbound encode_pull_reply(uint64_t version,
                           const std::vector<slice_view>& slices,
                           uint64_t clock) {
  auto msg = std::make_unique<capnp::MallocMessageBuilder>(words_for(slices));
  auto b = msg->initRoot<schema::PullReply>();
  b.setVersion(version);
  b.setClock(clock);
  write_slices(b.initSlices(slices.size()), slices, msg.get());
  return to_outbound(std::move(msg));
}

frame encode_failure(const caf::error& err) {
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::Failure>();
  auto troupe = err.category() == caf::atom("troupe");
  b.setCode(troupe ? err.code() : 0);
  // A troupe code travels apart: its words alone, or the receiver's error
  // said "non_finite: non_finite: worker 0 pushed ...".
  auto text = describe_words(err);
  if (text.size() > max_failure_chars)
    text.resize(max_failure_chars);
  b.setContext(text);
  return to_frame(msg);
}

caf::error decode_failure(bytes_view f) {
  caf::error out;
  auto err = decode_guarded(f, "Failure", [&out](frame_reader& rd) {
    auto r = rd.get<schema::Failure>();
    auto text = r.getContext();
    if (text.size() > max_failure_chars)
      return bad("failure text too long");
    std::string what{text.cStr()};
    if (r.getCode() == 0 || r.getCode() > static_cast<uint8_t>(last_errc))
      out = caf::make_error(caf::sec::runtime_error, std::move(what));
    else if (what.empty())
      out = caf::make_error(static_cast<errc>(r.getCode()));
    else
      out = caf::make_error(static_cast<errc>(r.getCode()), std::move(what));
    return caf::error{};
  });
  return err ? err : out;
}

caf::error decode(bytes_view f, init_request& x) {
  return decode_guarded(f, "Init", [&x](frame_reader& rd) {
    auto r = rd.get<schema::Init>();
    x.worker = r.getWorker();
    x.epoch = r.getEpoch();
    if (auto err = check_distinct(r.getSlices(), "init"))
      return err;
    return read_slices(r.getSlices(), x.slices);
  });
}

caf::error decode(bytes_view f, push_request& x) {
  x.slices.clear();
  return visit_push(f, x, [&x](slice_id id, const float* xs, size_t n) {
    x.slices.push_back(slice_data{id, {xs, xs + n}});
    return caf::error{};
  });
}

caf::error decode(bytes_view f, push_reply& x) {
  return decode_guarded(f, "PushReply", [&x](frame_reader& rd) {
    auto r = rd.get<schema::PushReply>();
    x.version = r.getVersion();
    x.duplicate = r.getDuplicate();
    return caf::error{};
  });
}

caf::error decode(bytes_view f, replicate_request& x) {
  return decode_guarded(f, "Replicate", [&x](frame_reader& rd) {
    auto r = rd.get<schema::Replicate>();
    x.primary = r.getPrimary();
    x.link = r.getLink();
    x.store = r.getStore();
    x.origin = r.getOrigin();
    x.op = r.getOp();
    auto numbers = r.getNumbers();
    x.numbers.clear();
    x.numbers.reserve(numbers.size());
    for (auto n : numbers)
      x.numbers.push_back(n);
    auto payload = r.getPayload(); // a frame: read as one, in place
    if (payload.size() % sizeof(capnp::word) != 0 ||
        reinterpret_cast<uintptr_t>(payload.begin()) % sizeof(capnp::word) != 0)
      return bad("replica payload not whole aligned words");
    x.payload = bytes_view{payload.begin(), payload.size()};
    return caf::error{};
  });
}

caf::error decode(bytes_view f, pull_request& x) {
  return decode_guarded(f, "Pull", [&x](frame_reader& rd) {
    auto r = rd.get<schema::Pull>();
    x.worker = r.getWorker();
    x.clock = r.getClock();
    x.epoch = r.getEpoch();
    x.acked = r.getAcked();
    auto refs = r.getSlices();
    if (auto err = check_distinct(refs, "pull"))
      return err;
    x.slices.resize(refs.size());
    for (size_t i = 0; i < refs.size(); ++i)
      x.slices[i] = slice_id{refs[i].getKey(), refs[i].getIndex()};
    return caf::error{};
  });
}

caf::error decode(bytes_view f, pull_reply& x) {
  return decode_guarded(f, "PullReply", [&x](frame_reader& rd) {
    auto r = rd.get<schema::PullReply>();
    x.version = r.getVersion();
    x.clock = r.getClock();
    return read_slices(r.getSlices(), x.slices);
  });
}

caf::error visit_pull_reply(
    bytes_view f, uint64_t& version,
    const std::function<caf::error(slice_id, const float*, size_t)>& fn,
    uint64_t* clock) {
  return decode_guarded(f, "PullReply", [&](frame_reader& rd) {
    auto r = rd.get<schema::PullReply>();
    version = r.getVersion();
    if (clock != nullptr)
      *clock = r.getClock();
    return visit_slices(r.getSlices(), fn);
  });
}

caf::error visit_push(
    bytes_view f, push_request& x,
    const std::function<caf::error(slice_id, const float*, size_t)>& fn) {
  return decode_guarded(f, "Push", [&](frame_reader& rd) {
    auto r = rd.get<schema::Push>();
    x.worker = r.getWorker();
    x.clock = r.getClock();
    x.epoch = r.getEpoch();
    x.part = r.getPart();
    x.parts = r.getParts();
    x.acked = r.getAcked();
    if (x.parts == 0 || x.part >= x.parts)
      return bad("push part out of range");
    if (auto err = check_distinct(r.getSlices(), "push"))
      return err;
    return visit_slices(r.getSlices(), fn);
  });
}

} // namespace troupe

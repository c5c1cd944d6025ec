// Reading a road: the reader thread's loop, one message read off the
// stream or the peer's ring, and replies read apart where a landing
// places their segments.
#include "actors/road/road_conn.hpp"

#include <cerrno>
#include <cstring>
#include <exception>

#include "actors/base/log.hpp"
#include "actors/road/road_intake.hpp"
#include "actors/road/road_internal.hpp"
#include "messages/errors.hpp"

namespace troupe {

namespace road_detail {

thread_local const road_conn* reading_conn = nullptr;
thread_local bool reading_a_road = false;
std::atomic<uint64_t> spins_found{0};
std::atomic<uint64_t> frame_spins_found{0};

} // namespace road_detail

using namespace road_detail;

namespace {

std::atomic<uint64_t> landed_bytes{0};

/// Most segments a landed frame may have: a pull reply has one per slice
/// of at least 4 KiB, and one message holds at most kv.max-message-bytes.
constexpr uint32_t max_landed_segments = 4096;

} // namespace

// -- statistics and the reading thread ----------------------------------------

uint64_t road_spins_found() {
  return spins_found.load(std::memory_order_relaxed);
}

uint64_t road_frame_spins_found() {
  return frame_spins_found.load(std::memory_order_relaxed);
}

uint64_t road_landed_bytes() {
  return landed_bytes;
}

bool on_road_reader() {
  return reading_a_road;
}

bool road_reply_corked() {
  return reading_conn && reading_conn->corked_.load();
}

// -- the reader thread --------------------------------------------------------

void road_conn::read_loop() {
  reading_a_road = true;
  read_messages();
}

void road_conn::read_messages() {
  // The hello, the only message with file descriptors, is read before.
  // Descriptors a peer sends later are dropped by the kernel.
  reading_conn = this;
  while (wait_for_turn()) {
    if (wake_efd_ >= 0 && stream_->buffered() < sizeof(wire_header) &&
        !await_input())
      continue; // a caller wants the road: wait_for_turn leaves it (1)
    if (!read_one(true))
      break;
    if (corked_ && small_requests_buffered(1) == 0)
      flush_cork(); // before the reader may wait
  }
  reading_conn = nullptr;
  flush_cork();
}

// -- one message --------------------------------------------------------------

bool road_conn::read_one(bool on_reader) {
  try {
    return read_next(on_reader);
  } catch (const std::exception& e) { // e.g. no memory for a huge frame
    fail(caf::make_error(errc::peer_down, "road reader failed", e.what()));
    return false;
  }
}

bool road_conn::read_next(bool on_reader) {
  auto& in = *stream_;
  wire_header h;
  if (!in.read(&h, sizeof(h))) {
    fail(caf::make_error(errc::peer_down, "road connection lost",
                         errno ? std::string{strerror(errno)}
                               : std::string{"closed by peer"}));
    return false;
  }
  if (auto err = check_header(h)) {
    TROUPE_LOG_LIMITED(warning, "road", "dropping a connection from ", peer(),
                       ": ", describe(err));
    fail(err);
    return false;
  }
  auto op = static_cast<road_op>(h.op);
  if (op == road_op::release) {
    released(h.offset, h.bytes);
    return !closed_;
  }
  note_frame(h.bytes);
  auto m = std::make_shared<road_message>();
  m->op = op;
  m->id = h.id;
  m->conn = shared_from_this();
  if (auto err = take_intake(h.bytes, h.in_ring != 0, *m)) {
    // Refused unread: the server answers the request with `err`.
    if (!skip_frame(h.bytes, h.in_ring != 0, h.offset))
      return false;
    TROUPE_LOG_LIMITED(warning, "road", "refused a frame from ", peer(), ": ",
                       describe(err));
    m->refused = std::move(err);
    if (on_msg_)
      on_msg_(std::move(m));
    return true;
  }
  if (!read_frame(h.bytes, h.in_ring != 0, h.offset, *m))
    return false;
  road_bytes(kind_, false).Increment(double(h.bytes));
  if (op == road_op::reply || op == road_op::failure)
    note_reply_read(on_reader);
  if (on_msg_)
    on_msg_(std::move(m));
  return true;
}

bool road_conn::read_frame(uint64_t bytes, bool in_ring, uint64_t offset,
                           road_message& m) {
  auto op = m.op;
  if (in_ring) {
    if (!ring_region_ok(offset, bytes))
      return false;
    m.bytes = bytes_view{in_.base + offset, bytes};
    m.ring_offset = offset;
    m.ring_bytes = bytes;
  } else if (auto l = op == road_op::reply || op == road_op::failure
                          ? take_landing(m.id)
                          : nullptr;
             l && op == road_op::reply) {
    if (!read_landed(bytes, *l, m))
      return false;
    m.landing = std::move(l);
  } else {
    m.buffer = take_buffer(bytes / 8 + 1, m.buffer_words);
    if (!read_bounded(m.buffer.get(), bytes))
      return lost_mid_frame();
    m.bytes = bytes_view{reinterpret_cast<uint8_t*>(m.buffer.get()), bytes};
  }
  return true;
}

bool road_conn::read_bounded(void* dst, uint64_t bytes) {
  // A member's frame must keep coming, and come whole in time: one that
  // stalls for the send timeout, or takes longer than that plus its size
  // at road_min_frame_rate, ends the connection, so that no peer holds a
  // buffer (up to the frame limit) with part of a frame. At bc0f027 four
  // such connections held 1.3 GiB for good.
  if (!admitted_ || bytes <= stream_->buffered())
    return stream_->read(dst, bytes);
  set_timeout(read_fd_, SO_RCVTIMEO, send_timeout_ms_);
  stream_->set_deadline(std::chrono::steady_clock::now() + frame_time(bytes));
  bool ok = stream_->read(dst, bytes);
  int why = errno;
  stream_->set_deadline(no_deadline);
  set_timeout(read_fd_, SO_RCVTIMEO, 0);
  errno = why;
  return ok;
}

bool road_conn::ring_region_ok(uint64_t offset, uint64_t bytes) {
  if (in_.base && offset <= in_.bytes && bytes <= in_.bytes - offset)
    return true;
  fail(caf::make_error(errc::malformed_message,
                       "road: ring region out of bounds"));
  return false;
}

std::chrono::milliseconds road_conn::frame_time(uint64_t bytes) const {
  return std::chrono::milliseconds{send_timeout_ms_ +
                                   bytes * 1000 / road_min_frame_rate};
}

// -- frames refused unread ----------------------------------------------------

caf::error road_conn::take_intake(uint64_t bytes, bool in_ring,
                                  road_message& m) {
  if (!intake_ || !admitted_ || member_.kind != role::worker)
    return caf::none;
  // A frame in the peer's ring takes no memory of ours: only its size counts.
  if (in_ring)
    return intake_->check_size(member_, bytes);
  if (auto err = intake_->take(member_, bytes))
    return err;
  m.intake = intake_;
  m.intake_bytes = bytes;
  return caf::none;
}

bool road_conn::skip_frame(uint64_t bytes, bool in_ring, uint64_t offset) {
  if (in_ring) {
    if (!ring_region_ok(offset, bytes))
      return false;
    release(offset, bytes);
    return true;
  }
  // Read away in pieces, each bounded as read_bounded bounds a frame, and
  // the whole within the time the frame would have had.
  constexpr size_t chunk = 64 * 1024;
  std::unique_ptr<char[]> scratch{new char[chunk]};
  auto until = std::chrono::steady_clock::now() + frame_time(bytes);
  for (uint64_t left = bytes; left > 0;) {
    auto n = std::min<uint64_t>(left, chunk);
    if (!read_bounded(scratch.get(), n) || !before(until))
      return lost_mid_frame();
    left -= n;
  }
  return true;
}

void road_conn::note_reply_read(bool on_reader) {
  std::lock_guard<std::mutex> guard{turn_mtx_};
  outstanding_ -= outstanding_ > 0 ? 1 : 0;
  // The last reply due: the reader thread leaves the road (1, if a caller
  // asked) before handing the reply over, so that the caller, woken by
  // it, finds the road its own for the next call.
  if (on_reader)
    leave_to_callers_if_asked();
}

bool road_conn::lost_mid_frame() {
  if (errno == EAGAIN || errno == EWOULDBLOCK) // a caller's read deadline
    fail(caf::make_error(errc::timeout, "road peer sent nothing more of a",
                         "frame for", send_timeout_ms_, "ms"));
  else if (errno == ETIMEDOUT) // the frame's deadline (read_bounded)
    fail(caf::make_error(errc::timeout, "road peer sent a frame too slowly",
                         "(under", road_min_frame_rate, "bytes/s)"));
  else
    fail(caf::make_error(errc::peer_down, "road connection lost mid-frame",
                         errno ? std::string{strerror(errno)}
                               : std::string{"closed by peer"}));
  return false;
}

// -- replies landed in place --------------------------------------------------

bool road_conn::read_landed(uint64_t bytes, road_landing& l, road_message& m) {
  auto& in = *stream_;
  m.buffer = take_buffer(bytes / 8 + 1, m.buffer_words);
  auto* base = reinterpret_cast<uint8_t*>(m.buffer.get());
  m.bytes = bytes_view{base, bytes};
  size_t got = 0;
  // Whatever is not a well-formed segment table is read flat: the decoder
  // then says what is wrong with it.
  auto rest_flat = [&] {
    return in.read(base + got, bytes - got) || lost_mid_frame();
  };
  if (bytes < 8) // check_header saw to whole words
    return rest_flat();
  if (!in.read(base, 8))
    return lost_mid_frame();
  got = 8;
  uint32_t first = 0;
  std::memcpy(&first, base, 4);
  if (first >= max_landed_segments)
    return rest_flat();
  size_t count = size_t{first} + 1;
  size_t table = (4 * (count + 1) + 7) & ~size_t{7};
  if (table > bytes)
    return rest_flat();
  if (!in.read(base + got, table - got))
    return lost_mid_frame();
  got = table;
  std::vector<uint32_t> words(count);
  std::memcpy(words.data(), base + 4, 4 * count);
  uint64_t total = table;
  for (auto w : words)
    total += uint64_t{w} * 8;
  if (total != bytes)
    return rest_flat();
  m.segments.resize(count);
  for (size_t i = 0, off = table; i < count; off += size_t{words[i]} * 8, ++i)
    m.segments[i] = bytes_view{base + off, size_t{words[i]} * 8};
  if (!in.read(base + got, m.segments[0].size))
    return lost_mid_frame();
  std::vector<uint8_t*> at(count, nullptr);
  l.place(m.segments, at);
  for (size_t i = 1; i < count; ++i) {
    auto& seg = m.segments[i];
    if (at[i] != nullptr && reinterpret_cast<uintptr_t>(at[i]) % 8 == 0) {
      seg.data = at[i];
      landed_bytes += seg.size;
    }
    if (!in.read(const_cast<uint8_t*>(seg.data), seg.size))
      return lost_mid_frame();
  }
  m.bytes.segments = m.segments.data();
  m.bytes.segment_count = m.segments.size();
  return true;
}

void road_conn::land_reply(uint64_t id, road_landing_ptr l) {
  if (kind_ != road_kind::tcp || !l)
    return;
  std::lock_guard<std::mutex> guard{landing_mtx_};
  landings_[id] = std::move(l);
}

void road_conn::forget_landing(uint64_t id) {
  std::lock_guard<std::mutex> guard{landing_mtx_};
  landings_.erase(id);
}

road_landing_ptr road_conn::take_landing(uint64_t id) {
  std::lock_guard<std::mutex> guard{landing_mtx_};
  auto i = landings_.find(id);
  if (i == landings_.end())
    return nullptr;
  auto l = std::move(i->second);
  landings_.erase(i);
  return l;
}

} // namespace troupe

// Writing on a road: a frame's one copy into the ring or its pieces
// gathered into one sendmsg, the releases that ride along, and the cork
// that holds small replies while more requests wait.
#include "actors/road/road_conn.hpp"

#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "actors/road/road_internal.hpp"
#include "messages/errors.hpp"

namespace troupe {

using namespace road_detail;

namespace {

/// Frames from this size on are copied into the ring in chunks of
/// split_copy_chunk bytes by the sender's loop, if it gave one.
constexpr size_t min_split_copy = 256 * 1024;
constexpr size_t split_copy_chunk = 64 * 1024;

/// The largest message a reply may be corked behind, and the largest
/// corked reply.
constexpr size_t max_cork_frame = 4096;

/// Corked bytes that are sent at once, whatever comes next.
constexpr size_t max_cork_bytes = 64 * 1024;

std::atomic<uint64_t> corked_messages{0};

/// Copies `pieces` one after another to `dst`: in chunks that `loop` runs,
/// or (no loop) in place.
void copy_pieces(const std::vector<outbound::piece>& pieces, uint8_t* dst,
                 const loop_fn* loop) {
  if (!loop) {
    for (auto& p : pieces) {
      std::memcpy(dst, p.data, p.size);
      dst += p.size;
    }
    return;
  }
  struct chunk {
    uint8_t* to;
    const uint8_t* from;
    size_t n;
  };
  std::vector<chunk> chunks;
  for (auto& p : pieces)
    for (size_t at = 0; at < p.size; at += split_copy_chunk) {
      auto n = std::min(split_copy_chunk, p.size - at);
      chunks.push_back(chunk{dst, p.data + at, n});
      dst += n;
    }
  (*loop)(chunks.size(), [&](size_t k) {
    std::memcpy(chunks[k].to, chunks[k].from, chunks[k].n);
  });
}

} // namespace

// -- sending ------------------------------------------------------------------

caf::error road_conn::send(road_op op, uint64_t id, const outbound& out,
                           const loop_fn* copy) {
  return write_guarded(op, id, out.pieces(), out.bytes(), copy);
}

caf::error road_conn::send(road_op op, uint64_t id, bytes_view f) {
  return write_guarded(op, id, {outbound::piece{f.data, f.size}}, f.size);
}

caf::error road_conn::write_guarded(road_op op, uint64_t id,
                                    const std::vector<outbound::piece>& pieces,
                                    size_t bytes, const loop_fn* copy) {
  try {
    return write_pieces(op, id, pieces, bytes, copy);
  } catch (const std::exception& e) {
    // No memory for the cork or the copy's chunks, a copy loop that could
    // not start: the message may be half in the cork or the ring, so the
    // connection ends (its rings and buffers with it) and the caller sees
    // why, as for any failed write.
    auto err = caf::make_error(errc::peer_down, "road send failed", e.what());
    fail(err);
    return err;
  }
}

caf::error road_conn::write_pieces(road_op op, uint64_t id,
                                   const std::vector<outbound::piece>& pieces,
                                   size_t bytes, const loop_fn* copy) {
  if (closed_)
    return caf::make_error(errc::peer_down, "road closed");
  note_send(op); // before the bytes leave: the reply may come at once
  note_frame(bytes);
  road_bytes(kind_, true).Increment(double(bytes)); // corked ones too
  wire_header h;
  h.op = static_cast<uint8_t>(op);
  h.id = id;
  h.bytes = bytes;
  std::lock_guard<std::mutex> guard{write_mtx_};
  // Releases waiting to go out ride along, in the same write.
  auto& rel = write_releases_;
  auto& iov = write_iov_;
  iov.clear();
  take_releases(rel, iov);
  iov.push_back(iovec{&h, sizeof(h)});
  auto off = SIZE_MAX;
  if (out_space_ && bytes >= min_ring_frame)
    off = out_space_->take(bytes);
  if (off == SIZE_MAX && bytes <= max_cork_frame && reading_conn == this &&
      small_requests_buffered(2) >= (corked_ ? 1 : 2)) {
    if (!cork_message(iov, pieces, bytes))
      return caf::none;
    iov.assign(1, iovec{cork_.data(), cork_.size()}); // full: out it goes
  } else {
    if (!cork_.empty()) // what was corked goes first
      iov.insert(iov.begin(), iovec{cork_.data(), cork_.size()});
    if (off != SIZE_MAX) { // the one copy: into the ring
      copy_pieces(pieces, out_.base + off,
                  copy && bytes >= min_split_copy ? copy : nullptr);
      h.in_ring = 1;
      h.offset = off;
      ring_bytes_sent_ += bytes;
    } else {
      for (auto& p : pieces)
        if (p.size > 0)
          iov.push_back(iovec{const_cast<uint8_t*>(p.data), p.size});
      inline_bytes_ += bytes;
    }
  }
  auto err = send_all(write_fd_, iov);
  cork_.clear();
  corked_ = false;
  if (err) {
    if (off != SIZE_MAX)
      out_space_->give(off, bytes);
    fail(err);
  }
  return err;
}

// -- releases -----------------------------------------------------------------

void road_conn::release(uint64_t offset, uint64_t bytes) {
  if (closed_)
    return;
  std::lock_guard<std::mutex> guard{write_mtx_};
  pending_releases_.emplace_back(offset, bytes);
  // The next message we send carries it: no wake-up of its own. A reader
  // never writes by itself (its peer may wait for it to read): there
  // releases always wait for the next message.
  if (pending_releases_.size() < max_pending_releases || on_road_reader())
    return;
  write_iov_.clear();
  take_releases(write_releases_, write_iov_);
  if (auto err = send_all(write_fd_, write_iov_))
    fail(err);
}

void road_conn::take_releases(std::vector<release_header>& headers,
                              std::vector<iovec>& iov) {
  headers.resize(pending_releases_.size());
  for (size_t i = 0; i < headers.size(); ++i) {
    wire_header h;
    h.op = static_cast<uint8_t>(road_op::release);
    h.offset = pending_releases_[i].first;
    h.bytes = pending_releases_[i].second;
    static_assert(sizeof(h) == sizeof(release_header));
    std::memcpy(headers[i].bytes, &h, sizeof(h));
    iov.push_back(iovec{headers[i].bytes, sizeof(h)});
  }
  pending_releases_.clear();
}

// -- the cork -----------------------------------------------------------------

bool road_conn::cork_message(const std::vector<iovec>& iov,
                             const std::vector<outbound::piece>& pieces,
                             size_t bytes) {
  for (auto& v : iov) {
    auto p = static_cast<const uint8_t*>(v.iov_base);
    cork_.insert(cork_.end(), p, p + v.iov_len);
  }
  for (auto& p : pieces)
    cork_.insert(cork_.end(), p.data, p.data + p.size);
  inline_bytes_ += bytes;
  ++corked_messages;
  corked_ = true;
  return cork_.size() >= max_cork_bytes;
}

size_t road_conn::small_requests_buffered(size_t enough) const {
  auto& in = *stream_;
  size_t n = 0;
  for (size_t at = 0;
       n < enough && in.buffered() - at >= sizeof(wire_header);) {
    wire_header h;
    std::memcpy(&h, in.peek() + at, sizeof(h));
    at += sizeof(h);
    if (h.op == static_cast<uint8_t>(road_op::release))
      continue; // a header alone (its `bytes` are the region's): no request
    if (h.bytes > max_cork_frame)
      break;
    if (!h.in_ring) { // the frame follows the header
      if (in.buffered() - at < h.bytes)
        break;
      at += h.bytes;
    }
    ++n;
  }
  return n;
}

void road_conn::flush_cork() {
  if (!corked_)
    return;
  std::lock_guard<std::mutex> guard{write_mtx_};
  if (cork_.empty())
    return;
  std::vector<iovec> iov{iovec{cork_.data(), cork_.size()}};
  auto err = closed_ ? caf::none : send_all(write_fd_, iov);
  cork_.clear();
  corked_ = false;
  if (err)
    fail(err);
}

uint64_t road_corked_messages() {
  return corked_messages.load();
}

} // namespace troupe

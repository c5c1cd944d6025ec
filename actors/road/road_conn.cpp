// A road connection's life: made, started, closed or failed, and the
// receive buffers it keeps for reuse.
#include "actors/road/road_conn.hpp"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>

#include "actors/base/log.hpp"
#include "actors/base/metrics.hpp"
#include "actors/road/road_auth.hpp"
#include "actors/road/road_internal.hpp"
#include "messages/errors.hpp"

namespace troupe {

using namespace road_detail;

namespace {

std::atomic<uint64_t> next_serial{1};

/// A frame this large takes long enough to make (a part of a large pull)
/// that a caller does not poll for the next one, nor take the road from
/// the reader thread for it, while such frames are recent: within the
/// last large_traffic_frames frames sent or read on the connection.
constexpr uint64_t min_large_frame = 64 * 1024;

/// Receive buffers kept per connection, and the smallest worth keeping.
constexpr size_t pooled_buffers = 4;
constexpr size_t min_pooled_words = 64 * 1024 / 8;
constexpr size_t max_pooled_words = road_pool_budget / 8;

} // namespace

namespace road_detail {

road_conn_ptr adopt(int fd, road_kind kind, uint32_t send_timeout_ms,
                    const road_settings& settings) {
  try {
    return std::make_shared<road_conn>(fd, kind, send_timeout_ms, settings);
  } catch (...) {
    ::close(fd); // the connection never owned it
    throw;
  }
}

} // namespace road_detail

// -- life ---------------------------------------------------------------------

road_conn::road_conn(int fd, road_kind kind, uint32_t send_timeout_ms,
                     road_settings settings)
    : fd_(fd), read_fd_(fd), write_fd_(fd), send_timeout_ms_(send_timeout_ms),
      kind_(kind), settings_(settings), serial_(next_serial++) {
  set_timeout(fd_, SO_SNDTIMEO, send_timeout_ms);
  if (kind_ == road_kind::tcp) {
    no_delay(fd_);
    keep_alive(fd_);
  }
}

road_conn::~road_conn() {
  close();
  if (reader_.joinable()) {
    if (reader_.get_id() == std::this_thread::get_id())
      reader_.detach(); // the reader held the last reference and is ending
    else
      reader_.join();
  }
  if (out_.base)
    ::munmap(out_.base, out_.bytes);
  if (in_.base)
    ::munmap(in_.base, in_.bytes);
  ::close(fd_);
  if (int side = side_fd_; side >= 0)
    ::close(side);
  if (int efd = wake_efd_; efd >= 0)
    ::close(efd);
}

void road_conn::use_reply_socket(int fd, bool we_read) {
  side_fd_ = fd;
  if (we_read) {
    read_fd_ = fd;
  } else {
    write_fd_ = fd;
    set_timeout(fd, SO_SNDTIMEO, send_timeout_ms_);
  }
}

void road_conn::start(road_handler on_msg, road_down_handler on_down) {
  stream_ = std::make_unique<road_stream>(read_fd_, settings_);
  on_msg_ = std::move(on_msg);
  on_down_ = std::move(on_down);
  reader_ = std::thread{[self = shared_from_this()] {
    self->reader_id_ = std::this_thread::get_id();
    self->read_loop();
  }};
}

void road_conn::start_accepted(std::shared_ptr<road_keyring> keys,
                               road_handler on_msg, road_down_handler on_down,
                               std::shared_ptr<road_pairing> pairing,
                               std::shared_ptr<road_intake> intake) {
  stream_ = std::make_unique<road_stream>(read_fd_, settings_);
  intake_ = std::move(intake);
  on_msg_ = std::move(on_msg);
  on_down_ = std::move(on_down);
  accepted_at_ = std::chrono::steady_clock::now();
  reader_ = std::thread{[self = shared_from_this(), keys = std::move(keys),
                         pairing = std::move(pairing)] {
    self->reader_id_ = std::this_thread::get_id();
    auto deadline =
        self->accepted_at_ + std::chrono::milliseconds{road_hello_timeout_ms};
    auto who = check_member(self->fd(), *keys, deadline);
    bool handed_over = false;
    auto err = who ? accept_hello(*self, deadline, pairing.get(), handed_over)
                   : std::move(who.error());
    if (err) {
      TROUPE_LOG_LIMITED(warning, "road", "refused a connection from ",
                         self->peer(), ": ", describe(err));
      self->fail(err);
      return;
    }
    if (handed_over) {
      self->end_handed_over();
      return;
    }
    self->member_ = *who;
    self->admitted_ = true;
    self->read_loop();
  }};
}

void road_conn::close() {
  down_told_ = true; // the owner closes: it knows
  if (!closed_.exchange(true))
    shut_down();
  wake_reader();
  if (reader_id_.load() == std::this_thread::get_id())
    return; // the reader itself: it ends on its own
  std::lock_guard<std::mutex> guard{join_mtx_}; // one joins, others wait
  if (reader_.joinable())
    reader_.join();
}

void road_conn::shut_down() {
  ::shutdown(fd_, SHUT_RDWR);
  if (int side = side_fd_; side >= 0)
    ::shutdown(side, SHUT_RDWR);
}

void road_conn::end_handed_over() {
  closed_ = true; // the socket lives on in the connection that took it
  wake_reader();
  if (!down_told_.exchange(true) && on_down_)
    on_down_(serial_, caf::error{});
}

void road_conn::fail(caf::error err) {
  closed_ = true;
  shut_down();
  wake_reader();
  if (!down_told_.exchange(true) && on_down_)
    on_down_(serial_, err);
}

// -- receive buffers ----------------------------------------------------------

std::unique_ptr<uint64_t[]> road_conn::take_buffer(size_t words,
                                                   size_t& capacity) {
  {
    std::lock_guard<std::mutex> guard{pool_mtx_};
    for (auto i = pool_.begin(); i != pool_.end(); ++i)
      if (i->first >= words) {
        capacity = i->first;
        auto buf = std::move(i->second);
        pool_.erase(i);
        return buf;
      }
  }
  capacity = words;
  return std::unique_ptr<uint64_t[]>(new uint64_t[words]); // not zeroed
}

void road_conn::give_buffer(std::unique_ptr<uint64_t[]> buf, size_t capacity) {
  if (capacity < min_pooled_words || capacity > max_pooled_words)
    return;
  std::lock_guard<std::mutex> guard{pool_mtx_};
  // Keep the largest, up to pooled_buffers of them and road_pool_budget
  // bytes in all: smaller ones go first to make room.
  pool_.emplace_back(capacity, std::move(buf));
  std::sort(pool_.begin(), pool_.end(),
            [](const auto& x, const auto& y) { return x.first > y.first; });
  size_t words = 0;
  size_t keep = 0;
  while (keep < pool_.size() && keep < pooled_buffers &&
         words + pool_[keep].first <= max_pooled_words)
    words += pool_[keep++].first;
  pool_.resize(keep);
}

size_t road_conn::pooled_bytes() const {
  std::lock_guard<std::mutex> guard{pool_mtx_};
  size_t words = 0;
  for (auto& x : pool_)
    words += x.first;
  return words * 8;
}

// -- large traffic ------------------------------------------------------------

void road_conn::note_frame(uint64_t bytes) {
  auto n = frames_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (bytes >= min_large_frame)
    last_large_frame_.store(n, std::memory_order_relaxed);
}

bool road_conn::large_traffic() const {
  auto last = last_large_frame_.load(std::memory_order_relaxed);
  return last != 0 &&
         frames_.load(std::memory_order_relaxed) - last < large_traffic_frames;
}

std::string road_conn::peer() const {
  return peer_address(read_fd_);
}

prometheus::Counter& road_detail::road_bytes(road_kind kind, bool sent) {
  // Made on a kind's first frame: a road never used shows no line.
  static prometheus::Counter* made[3][2] = {};
  static std::once_flag once[3];
  auto k = static_cast<int>(kind);
  std::call_once(once[k], [kind, k] {
    for (int dir = 0; dir < 2; ++dir)
      made[k][dir] = &metrics::counter(
          "troupe_road_bytes_total",
          "frame bytes on the fast roads, by road and direction",
          {{"road", to_string(kind)},
           {"direction", dir ? "sent" : "received"}});
  });
  return *made[k][sent ? 1 : 0];
}

} // namespace troupe

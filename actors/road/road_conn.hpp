// One end of a road connection: thread-safe sends, one reader thread, and
// the turn machine that lets a blocking caller read its own replies
// (actors/road/road.hpp has the design).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <caf/error.hpp>

#include "actors/base/helper_pool.hpp"
#include "actors/base/member_secret.hpp"
#include "actors/road/road_ring.hpp"
#include "actors/road/road_settings.hpp"
#include "actors/road/road_wire.hpp"
#include "messages/frame.hpp"

namespace troupe {

/// TCP keepalive on tcp roads: a peer whose machine vanished (a crash, a
/// partition) sends no FIN, and nothing may be written to it for long;
/// probes after this much idle time, this far apart, this many unanswered,
/// end the connection (its reader, socket and buffers with it) ~16 s on.
constexpr int road_keepalive_idle_s = 10;
constexpr int road_keepalive_gap_s = 2;
constexpr int road_keepalive_probes = 3;

/// Bytes of receive buffers a road connection keeps for reuse, at most:
/// a frame larger than this gets a buffer of its own each time (a server
/// with many workers sending 256 MiB frames would otherwise keep a GiB
/// per connection).
constexpr size_t road_pool_budget = size_t{64} << 20;

class road_stream;  // the buffered reading side of a connection
class road_pairing; // a listener's tcp connections awaiting their pair
class road_keyring; // the cluster key a listener checks members against
class road_intake;  // what a server takes in from workers (road_intake.hpp)

/// One end of a road connection. Thread-safe sends; one reader thread.
class road_conn : public std::enable_shared_from_this<road_conn> {
public:
  struct ring {
    uint8_t* base = nullptr;
    size_t bytes = 0;
  };
  /// Owns `fd`; its readers and callers poll as `settings` say.
  road_conn(int fd, road_kind kind, uint32_t send_timeout_ms,
            road_settings settings);
  ~road_conn();
  road_conn(const road_conn&) = delete;
  road_conn& operator=(const road_conn&) = delete;

  /// Sends `out` (or `f`) as message `op` with `id`; an error closes the
  /// connection. With `copy`, a large frame's copy into the ring is split
  /// over that loop (a thread pool's: see helper_pool.hpp).
  caf::error send(road_op op, uint64_t id, const outbound& out,
                  const loop_fn* copy = nullptr);
  caf::error send(road_op op, uint64_t id, bytes_view f);

  /// Ends the connection: the reader stops, on_down runs (if not yet),
  /// later sends fail. Safe from any thread, more than once.
  void close();
  /// Breaks the connection as a network that drops it would (fault
  /// injection): both directions shut, so the readers on either side find
  /// it ended and on_down runs, as for any connection that ends by itself.
  void sever() { shut_down(); }
  /// Ends the connection for `why` as if it had ended by itself: on_down
  /// runs (once), later sends fail. Safe from any thread; does not wait
  /// for the reader.
  void end(caf::error why) { fail(std::move(why)); }

  /// The reply to request `id` (not yet sent) lands where `l` places it;
  /// the reader drops the landing with that reply (or failure). Only a
  /// tcp road lands frames: elsewhere this does nothing.
  void land_reply(uint64_t id, road_landing_ptr l);
  /// Drops the landing of `id`, if the reader has not taken it: the caller
  /// gave up on the reply.
  void forget_landing(uint64_t id);

  road_kind kind() const { return kind_; }
  bool closed() const { return closed_; }
  /// Unique per process, to tell connections of one peer apart.
  uint64_t serial() const { return serial_; }
  /// Bytes of frames sent inline and through the ring (for benchmarks).
  uint64_t inline_bytes() const { return inline_bytes_; }
  uint64_t ring_bytes_sent() const { return ring_bytes_sent_; }

  // -- used by road_listener and road_dial ------------------------------------

  /// Maps the rings: `out` is written by us, `in` by the peer.
  caf::error map_rings(int out_fd, int in_fd, size_t bytes);
  /// Takes `fd`, a unix stream socket, as the reply socket of an shm
  /// connection: the worker's end (`we_read`) is what its reader reads,
  /// the server's end is where it writes. Call before start().
  void use_reply_socket(int fd, bool we_read);
  /// Starts the reader thread.
  void start(road_handler on_msg, road_down_handler on_down);
  /// Starts the reader thread of an accepted connection: it checks the
  /// member's handshake against `keys` (road_auth.hpp), then reads the
  /// hello, both within road_hello_timeout_ms, before any message. A tcp
  /// hello may pair the connection with another through `pairing` (the
  /// first answers on the second; the second then ends here, quietly).
  /// A worker's frames go through `intake` (road_intake.hpp), if given.
  void start_accepted(std::shared_ptr<road_keyring> keys, road_handler on_msg,
                      road_down_handler on_down,
                      std::shared_ptr<road_pairing> pairing = nullptr,
                      std::shared_ptr<road_intake> intake = nullptr);
  /// An accepted connection: true once its member proved itself and its
  /// hello was answered.
  bool admitted() const { return admitted_; }
  /// When an accepted connection was accepted.
  std::chrono::steady_clock::time_point accepted_at() const {
    return accepted_at_;
  }
  /// Gives a region of our out ring back (the peer released it).
  void released(uint64_t offset, uint64_t bytes);
  /// Tells the peer we are done with a region of its ring.
  void release(uint64_t offset, uint64_t bytes);
  /// A receive buffer of at least `words` words, reused when one is free.
  std::unique_ptr<uint64_t[]> take_buffer(size_t words, size_t& capacity);
  /// Gives a receive buffer back for reuse: kept while the pool holds
  /// fewer than 4 and road_pool_budget bytes in all, else freed.
  void give_buffer(std::unique_ptr<uint64_t[]> buf, size_t capacity);
  /// Bytes of receive buffers kept for reuse (for tests).
  size_t pooled_bytes() const;
  /// The connection's socket (the hello goes over it).
  int fd() const { return fd_; }
  /// The socket our messages go out on: fd(), or the reply socket where a
  /// server answers on one.
  int write_fd() const { return write_fd_; }
  /// The socket our reader reads: fd(), or the reply socket where a worker
  /// reads its answers on one.
  int read_fd() const { return read_fd_; }
  /// "ADDRESS:PORT" of the peer (or "a local socket"), for log lines.
  std::string peer() const;
  /// The member at the other end of an accepted connection, as its
  /// handshake proved it; set before any of its messages is read.
  const member_id& member() const { return member_; }
  /// True if this connection answers or reads on a reply socket (shm, and
  /// tcp unless --road.single-conn).
  bool has_reply_socket() const { return side_fd_ >= 0; }
  const ring& in_ring() const { return in_; }

  // -- a blocking caller reading its own replies ------------------------------

  /// On a thread waiting for a reply sent in a road_caller_scope: reads and
  /// dispatches a message here, with any others already buffered behind it
  /// (waiting up to `wait` for one), if the
  /// reader thread has left the connection to callers. Else asks it to:
  /// with replies outstanding, the reader thread is woken to leave at its
  /// next message boundary, and this waits up to `wait` for that (true
  /// either way: look at the mailbox, then pump again); with none, it
  /// leaves once the next request is answered: false, wait as usual, as
  /// once the connection has ended, or once the callers' road holds no
  /// reply any more (the caller's went elsewhere: it comes by mail).
  bool pump_once(std::chrono::milliseconds wait);
  /// This caller stops reading: the connection stays with callers if no
  /// reply is outstanding, else goes back to the reader thread.
  void caller_done();
  /// Requests sent and not yet answered (for tests).
  uint64_t outstanding() const;
  /// True while callers, not the reader thread, read the road (for tests).
  bool read_by_callers() const;

private:
  // -- the turn machine -------------------------------------------------------
  //
  // Who reads the connection: its reader thread, or callers (one at a
  // time: the kv client's blocking caller), idle or reading. The numbers
  // are cited where each transition is made (road_caller.cpp,
  // road_read.cpp).
  //
  //                            1
  //        reader ---------------------------> callers_idle
  //          ^  ^             2, 5               |      ^
  //          |  +--------------------------------+      |
  //          |                                 3 |      | 4
  //          |                 5                 v      |
  //          +------------------------------- caller_reading
  //
  //   1: the reader thread leaves the road (leave_to_callers_if_asked, in
  //      wait_for_turn or on reading the last reply due): a caller asked
  //      (pump_once) and no reply is outstanding, or a caller waits for
  //      the replies outstanding (it woke the reader thread out of
  //      await_input through wake_efd_). Not amid large frames: there
  //      pump_once asks but never waits (large_traffic).
  //   2: a send outside a caller scope (note_send): nobody on our side
  //      would read its reply, so the reader thread must.
  //   3: pump_once: the caller reads and dispatches what comes, the
  //      messages already buffered behind the first with it.
  //   4: caller_done with no reply outstanding, or pump_once finding
  //      none due and nothing buffered (the caller's reply went to a
  //      scheduler thread): the road waits for the next caller.
  //   5: caller_done with replies still outstanding (from either
  //      callers' state): whatever the peer writes is read.
  //   Any state: close() or fail() wakes the reader thread, which ends.
  enum class turn : uint8_t { reader, callers_idle, caller_reading };
  /// Reads one message and hands it to on_msg_; false once the connection
  /// failed (fail() has run). `on_reader`: the reader thread reads, and
  /// leaves the road to callers with the last reply due, if they asked.
  bool read_one(bool on_reader);
  /// read_one without its guard against exceptions.
  bool read_next(bool on_reader);
  /// Reads the frame of a message into `m` (op, id set): from the peer's
  /// ring, where a landing places it, or into a receive buffer. False
  /// once the connection failed.
  bool read_frame(uint64_t bytes, bool in_ring, uint64_t offset,
                  road_message& m);
  /// Notes a reply (or failure) read: one fewer outstanding; on the
  /// reader thread, it may leave the road to callers (1).
  void note_reply_read(bool on_reader);
  /// Reads `bytes` of a frame into `dst`: from a member, within
  /// frame_time(bytes) and never stalling for the send timeout. False on
  /// EOF or error (errno set; ETIMEDOUT: too slow).
  bool read_bounded(void* dst, uint64_t bytes);
  /// True if `bytes` at `offset` lie in the peer's ring; else fails the
  /// connection.
  bool ring_region_ok(uint64_t offset, uint64_t bytes);
  /// How long a member's frame of `bytes` may take to arrive.
  std::chrono::milliseconds frame_time(uint64_t bytes) const;
  /// A worker's frame of `bytes` against the intake: an error if it is
  /// refused; else what it took of the budget goes with `m`.
  caf::error take_intake(uint64_t bytes, bool in_ring, road_message& m);
  /// Passes over a refused frame: reads it away in pieces (bounded as
  /// read_bounded) or gives its ring region back. False once the
  /// connection failed.
  bool skip_frame(uint64_t bytes, bool in_ring, uint64_t offset);
  /// Fails the connection: it ended in the middle of a frame. False.
  bool lost_mid_frame();
  /// Reads the frame of `h` into `m`, its segments where `l` places them;
  /// a frame that is no well-formed segment table is read flat.
  bool read_landed(uint64_t bytes, road_landing& l, road_message& m);
  /// The landing of reply `id`, taken out; null if none.
  road_landing_ptr take_landing(uint64_t id);
  /// The reader thread leaves the road to callers if one asked and no
  /// reply is outstanding (1). Needs turn_mtx_.
  void leave_to_callers_if_asked();
  /// The reader thread: leaves the connection to callers if one asked and
  /// nothing is outstanding, then waits until it is its turn; false once
  /// the connection is closed.
  bool wait_for_turn();
  /// Counts a request going out and notes the send for a caller scope; a
  /// send outside one takes the connection back for the reader thread (2).
  void note_send(road_op op);
  /// Wakes a reader thread waiting for its turn (the connection ended).
  void wake_reader();
  /// pump_once's part under turn_mtx_: takes the turn for this caller (3),
  /// asking the reader thread for it first (and waiting up to `wait` with
  /// replies outstanding) while it has it. None once the turn is the
  /// caller's, else what pump_once returns.
  std::optional<bool> take_caller_turn(std::chrono::milliseconds wait);
  /// pump_once's read: waits up to `wait` for input, then reads and
  /// dispatches what came together.
  bool caller_read(std::chrono::milliseconds wait);
  /// write_pieces; an exception it throws fails the connection instead.
  caf::error write_guarded(road_op op, uint64_t id,
                           const std::vector<outbound::piece>& pieces,
                           size_t bytes, const loop_fn* copy = nullptr);
  caf::error write_pieces(road_op op, uint64_t id,
                          const std::vector<outbound::piece>& pieces,
                          size_t bytes, const loop_fn* copy = nullptr);
  void read_loop();
  void read_messages();
  void fail(caf::error err);
  /// Ends a connection whose socket another connection now answers on
  /// (a tcp reply connection): no shutdown, on_down runs with no error.
  void end_handed_over();
  /// Shuts both sockets down: the readers on either side wake to EOF.
  void shut_down();
  /// A release message on the wire (a 40-byte header).
  struct release_header {
    alignas(8) uint8_t bytes[40];
  };
  /// Writes the pending releases as wire headers into `headers` and points
  /// `iov` at them; empties the list. Needs write_mtx_.
  void take_releases(std::vector<release_header>& headers,
                     std::vector<iovec>& iov);
  /// Releases wait for our next message (so that they cost the peer no
  /// wake-up of their own), but no more than this many.
  static constexpr size_t max_pending_releases = 16;

  int fd_;
  /// The reply socket, if any. Atomic: a server sets it on an accepted
  /// connection's reader thread while close() may shut it down elsewhere.
  std::atomic<int> side_fd_{-1};
  int read_fd_;  // fd_ or the reply socket (the worker's end)
  int write_fd_; // fd_ or the reply socket (the server's end)
  uint32_t send_timeout_ms_;
  road_kind kind_;
  /// How this connection's reader and callers poll (set at construction).
  road_settings settings_;
  uint64_t serial_;
  std::mutex write_mtx_;
  std::vector<std::pair<uint64_t, uint64_t>> pending_releases_; // write_mtx_
  /// Corked messages, whole, in order (write_mtx_).
  std::vector<uint8_t> cork_;
  /// A write's pieces and the releases that ride along, kept for the next
  /// write instead of allocated per message (write_mtx_).
  std::vector<iovec> write_iov_;
  std::vector<release_header> write_releases_;
  /// Whether cork_ holds any: read without the lock, so that a reader
  /// that corked nothing never waits for the write lock (a client's
  /// reader must always read).
  std::atomic<bool> corked_{false};
  /// How many of the next messages (up to `enough`) the reader's buffer
  /// holds whole, each small: replies may wait for them (corked). Reading
  /// thread only.
  size_t small_requests_buffered(size_t enough) const;
  /// Appends a message (its headers `iov`, its frame `pieces`) to the
  /// cork; true once the cork is full and must go out now. Needs
  /// write_mtx_.
  bool cork_message(const std::vector<iovec>& iov,
                    const std::vector<outbound::piece>& pieces, size_t bytes);
  /// Sends what is corked, if anything.
  void flush_cork();
  friend bool road_reply_corked();
  std::atomic<bool> closed_{false};
  std::atomic<bool> admitted_{false};
  member_id member_;
  std::shared_ptr<road_intake> intake_; // set before the reader starts
  std::chrono::steady_clock::time_point accepted_at_;
  std::atomic<bool> down_told_{false};
  ring out_;
  ring in_;
  std::unique_ptr<ring_space> out_space_;
  road_handler on_msg_;
  road_down_handler on_down_;
  std::thread reader_;
  std::atomic<std::thread::id> reader_id_{}; // set by the reader itself
  std::mutex join_mtx_;                      // close() from several threads
  std::unique_ptr<road_stream> stream_;      // read under the turn
  /// Frames sent and read (releases aside), and the number of the last
  /// large one (0: none): see large_traffic().
  std::atomic<uint64_t> frames_{0};
  std::atomic<uint64_t> last_large_frame_{0};
  static constexpr uint64_t large_traffic_frames = 16;
  /// Counts a frame of `bytes` sent or read.
  void note_frame(uint64_t bytes);
  /// True if one of the last frames sent or read was large: then a
  /// caller neither polls nor takes the road from the reader thread.
  bool large_traffic() const;
  mutable std::mutex turn_mtx_;
  std::condition_variable turn_cv_;
  turn turn_ = turn::reader;  // turn_mtx_
  bool callers_want_ = false; // turn_mtx_: a caller asked for the turn
  /// turn_mtx_: a caller waits for the turn in pump_once with replies
  /// outstanding: the reader thread leaves at its next message boundary.
  bool caller_waiting_ = false;
  /// An eventfd that wakes the reader thread from its wait for input so
  /// that it leaves the road to a waiting caller: made at a caller's first
  /// such wait (-1 before; a server's connections never make one).
  std::atomic<int> wake_efd_{-1};
  /// The reader thread: waits until the socket has input (true) or a
  /// caller wakes it to take the turn (false).
  bool await_input();
  uint64_t outstanding_ = 0; // turn_mtx_: requests sent, not answered
  mutable std::mutex pool_mtx_;
  std::vector<std::pair<size_t, std::unique_ptr<uint64_t[]>>> pool_;
  std::atomic<uint64_t> inline_bytes_{0};
  std::atomic<uint64_t> ring_bytes_sent_{0};
  std::mutex landing_mtx_;
  std::map<uint64_t, road_landing_ptr> landings_; // landing_mtx_
};

using road_conn_ptr = std::shared_ptr<road_conn>;

// -- process-wide statistics (read-only: no knobs) ----------------------------

/// Times a reader of this process (a reader thread or a blocking caller)
/// found its socket readable while it polled, i.e. read without sleeping
/// first, over the process's life.
uint64_t road_spins_found();
/// Times a reader of this process found more of a large frame while it
/// polled for it (road_settings::frame_spin_us), over the process's life.
uint64_t road_frame_spins_found();

/// Bytes of reply segments this process's roads read straight into the
/// place a landing gave (road_landing), since it started: for tests and
/// benchmarks.
uint64_t road_landed_bytes();

/// Messages this process's roads corked (sent later, with others in one
/// write) since it started.
uint64_t road_corked_messages();

// -- the thread a handler runs on ---------------------------------------------

/// True on a thread that reads a road (its handlers run there): code that
/// may run on one must not block on a road write, since the peer may wait
/// for this very thread to read.
bool on_road_reader();

/// True on a thread reading a road that holds corked replies: they go out
/// once the reader is back from its handler (or with the next write), so
/// a handler running an actor here should not run its whole mailbox
/// first (send_and_run_here's `stop`).
bool road_reply_corked();

} // namespace troupe

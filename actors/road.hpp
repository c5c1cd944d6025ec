// The fast road for the kv conversation: one direct connection per
// (worker, server) pair that carries the Cap'n Proto frames of Init, Push,
// Pull and their replies beside CAF, which keeps membership, views,
// barriers and failure detection. Actor code never sees which road a frame
// took: the kv client and the shard server send through `road_conn` when
// the pair has one, and through CAF otherwise (--kv.road=middleman).
//
//   tcp  A TCP connection. Writes are scatter-gather (sendmsg) from the
//        frame's own pieces, which point into a user's arrays or a
//        server's store; reads land in 8-byte-aligned buffers that are
//        reused. A reply whose request named a landing (road_landing: a
//        pull's destination arrays) is read apart instead: its segment
//        table and first segment into the buffer, then each segment the
//        landing places straight into its destination, so a pulled
//        tensor is copied once, by the kernel. A reader inside a large
//        frame polls for its rest instead of sleeping each time it
//        catches up with the sender (set_road_frame_spin). The server
//        answers on a second connection the worker dials (unless
//        --road.single-conn): each direction has a socket of its own, as
//        on the shm road.
//   shm  Same machine (equal road_info::machine): an abstract unix socket
//        plus two memfd rings, one per direction, that the worker creates
//        and passes at hello (SCM_RIGHTS). A frame is copied once into the
//        sender's ring and read in place by the receiver; the socket
//        carries only a header saying where. A frame that finds no room in
//        the ring goes inline on the socket instead.
//        The server answers on a reply socket (one end of a socketpair the
//        worker passes at hello with the rings), so each direction has a
//        socket of its own. With one unix stream socket both ways, reading
//        a message wakes the peer's reader, asleep on the same socket
//        (unix_write_space): a wasted wake-up per message, which doubles a
//        small round trip on a VM (measured 45 vs 20-22 us).
//
// Wire: a 40-byte header, then `bytes` bytes of frame unless the frame is
// in the ring. The worker opens with hello and waits for the server's
// hello. Requests and replies pair by id; a reader done with a ring region
// sends release so the writer may reuse it. Releases wait for the next
// message the reader sends (a reply, the next request) and go in the same
// write, up to 16 of them: each would otherwise wake the peer's reader.
// For the same reason a server's replies are corked while more requests
// wait: a small reply (4 KiB at most, not in the ring) written on the
// thread that reads the connection, while the reader's buffer already
// holds the next two small requests whole (one, once a reply is corked),
// is kept back and goes out in one write with the replies after it: as
// soon as the buffer holds no such request (the reader would wait), or
// ahead of any other write on the connection. So requests that arrive
// together are answered in one write, which wakes the peer once, and a
// reply never waits for the peer. A pair (kv push_pull: push, then pull)
// is not corked: the peer reads the first reply while the second is made.
// A reader thread never writes on its own account (releases made there
// always wait), and a worker's reader, which runs the kv client for a
// reply, leaves the writes that reply leads to to a scheduler thread: so
// whatever a server writes to a worker is always read.
//
// A blocking caller may read its own replies (road_caller_scope): once no
// reply is outstanding, the reader thread leaves the connection to callers
// and sleeps; a caller that sent on it reads and dispatches what comes
// (pump_once) while it waits, so its reply wakes it directly instead of
// waking the reader, which then wakes the caller. A caller that waits
// while replies are outstanding (several requests in flight) wakes the
// reader thread through an eventfd, which the reader then also waits on
// for input, and it leaves at its next message boundary. Amid large
// frames (one of the last 16 sent or read on the connection is 64 KiB or
// more) a caller does neither that nor poll: a wake-up is nothing beside
// their copies, which need the cores; and a caller whose road holds no
// reply any more (its own went to a scheduler thread) waits by mail. A
// send by anyone else gives the connection back to the reader thread, and
// so does a caller done with replies still outstanding: whatever the peer
// writes is read. A caller's read that waits mid-frame longer than the
// connection's send timeout (a stopped peer) fails the connection, so a
// caller is never held past it.
//
// Faults: a dead peer ends the connection (EOF, reset); a silent one makes
// writes fail after the send timeout. Either way the owner's `on_down`
// runs once, every later send fails, and the owner fails what waited.
// Rings are anonymous memfds: they vanish with the last mapping, so a
// crash on either side leaks no shared memory; a survivor unmaps when its
// last message from the ring is gone.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/helper_pool.hpp"
#include "messages/frame.hpp"
#include "messages/membership.hpp"

namespace troupe {

/// TCP keepalive on tcp roads: a peer whose machine vanished (a crash, a
/// partition) sends no FIN, and nothing may be written to it for long;
/// probes after this much idle time, this far apart, this many unanswered,
/// end the connection (its reader, socket and buffers with it) ~16 s on.
constexpr int road_keepalive_idle_s = 10;
constexpr int road_keepalive_gap_s = 2;
constexpr int road_keepalive_probes = 3;

/// How long a road connection's reader thread (and any reader waiting for
/// the rest of a small frame; large ones: set_road_frame_spin) polls its
/// socket before it sleeps, yielding the core between polls: a message
/// that comes meanwhile wakes no thread (a wake-up costs 20-60 us on the
/// VMs here). It burns the time it polls, on a core other threads may
/// need: 0 (off) by default; --road.spin-us sets it. One setting per
/// process.
void set_road_spin(std::chrono::microseconds x);
/// How long a blocking caller reading its own reply (road_conn::pump_once:
/// the kv class's calls) polls its socket before it sleeps, by default.
/// Unlike a reader thread's poll, this one costs only a thread that
/// waits for that very reply anyway, and it takes the wake-up out of a
/// round trip: on the 2-vCPU VMs here a small push+pull one at a time
/// went from 9-10k to 20-25k pairs/s (bench/kv_throughput). A reply
/// slower than this (a large pull) costs the poll once per call.
constexpr uint32_t road_caller_spin_default_us = 200;
/// Sets that poll for this process (--road.caller-spin-us); 0 = off.
void set_road_caller_spin(std::chrono::microseconds x);
/// Whether this process's tcp roads ask the server to answer on a second
/// connection (on by default; --road.single-conn turns it off), so that each
/// direction has a socket of its own. On loopback here, with 8 small requests
/// in flight: 35-38k -> 45-61k push+pull pairs/s (batched 42-47k -> 49-78k);
/// one at a time, each direction's pure ACKs, which one socket both ways
/// folds into the replies, cost 20-21k -> 13-14k (bench/kv_throughput).
void set_road_reply_connection(bool on);
/// Times a reader of this process (a reader thread or a blocking caller)
/// found its socket readable while it polled, i.e. read without sleeping
/// first, over the process's life.
uint64_t road_spins_found();
/// How long a reader inside a large frame (its rest 32 KiB or more, read
/// straight to its destination) polls for more bytes before it sleeps. The
/// sender is writing that frame now, so more comes within microseconds:
/// a reader that slept each time it caught up with the sender had to be
/// woken for every 64 KiB or so, at 20-30 us of idle core each on the VMs
/// here, and the sender paid for each wake-up in its sendmsg. Polling
/// only within a frame costs at most this much per pause of the sender.
/// tcp road, 4 MiB push+pull, four alternations on a 2-vCPU VM: 3.70-4.58
/// -> 5.01-6.20 GB/s, 0.66-0.77 -> 0.88-0.96 of plain TCP
/// (bench/kv_throughput --road=tcp --rows=large --road-frame-spin-us=0|50).
constexpr uint32_t road_frame_spin_default_us = 50;
/// Sets that poll for this process (--road.frame-spin-us); 0 = off.
void set_road_frame_spin(std::chrono::microseconds x);
/// Times a reader of this process found more of a large frame while it
/// polled for it (set_road_frame_spin), over the process's life.
uint64_t road_frame_spins_found();

/// Bytes of receive buffers a road connection keeps for reuse, at most:
/// a frame larger than this gets a buffer of its own each time (a server
/// with many workers sending 256 MiB frames would otherwise keep a GiB
/// per connection).
constexpr size_t road_pool_budget = size_t{64} << 20;

/// Which road kv frames take.
enum class road_kind : uint8_t { middleman, tcp, shm };

/// Parses --kv.road: auto (shm on the same machine, else tcp) | tcp |
/// middleman. `auto` yields shm; road_dial falls back to tcp.
caf::expected<road_kind> parse_road(const std::string& x);

const char* to_string(road_kind x);

/// Message kinds on the wire.
enum class road_op : uint8_t {
  hello = 1,
  init,
  push,
  pull,
  reply,
  failure,
  release,
  replicate, // server -> its backup: a replica operation
};

class road_conn;
class road_stream;  // the buffered reading side of a connection (road.cpp)
class road_pairing; // a listener's tcp connections awaiting their pair

/// Where the segments of one reply's frame may be read straight to, on a
/// tcp road: the kv client's pull destinations, so that a pulled tensor is
/// copied once, by the kernel, from the socket into its array. The reader
/// reads the segment table and the first segment into its buffer, then
/// asks `place`; what it leaves null goes to the buffer as usual.
struct road_landing {
  virtual ~road_landing() = default;
  /// `segs`: every segment of the frame, the first read, the others where
  /// the receive buffer would hold them (not read yet). Sets `at[i]`
  /// (i >= 1) to where segment i's `segs[i].size` bytes go instead: 8-byte
  /// aligned memory the landing keeps alive while it lives. Runs on the
  /// reading thread; must not throw.
  virtual void place(const std::vector<bytes_view>& segs,
                     std::vector<uint8_t*>& at) = 0;
};

using road_landing_ptr = std::shared_ptr<road_landing>;

/// A message read off a road: `bytes` stays valid while it lives; dropping
/// it gives its buffer or ring region back.
struct road_message {
  road_op op = road_op::reply;
  uint64_t id = 0;
  bytes_view bytes;
  std::shared_ptr<road_conn> conn;    // to reply on, and to release into
  std::unique_ptr<uint64_t[]> buffer; // inline frames (8-byte aligned)
  size_t buffer_words = 0;
  uint64_t ring_offset = 0;
  uint64_t ring_bytes = 0; // > 0: the frame is in the peer's ring
  /// A frame read apart (road_landing): its segments, which `bytes` names,
  /// and the landing that owns the memory some of them lie in.
  std::vector<bytes_view> segments;
  road_landing_ptr landing;
  road_message() = default;
  road_message(const road_message&) = delete;
  road_message& operator=(const road_message&) = delete;
  ~road_message();
};

using road_message_ptr = std::shared_ptr<road_message>;
using road_handler = std::function<void(road_message_ptr)>;
/// Runs once when a connection ends by itself: its serial and why.
using road_down_handler =
    std::function<void(uint64_t serial, const caf::error&)>;

/// Free space of a ring, first fit; thread-safe.
class ring_space {
public:
  explicit ring_space(size_t bytes);
  /// An offset for `n` bytes (rounded up to 64), or SIZE_MAX if none.
  size_t take(size_t n);
  /// Gives back a region `take` handed out; false (and nothing changes)
  /// for anything else: a peer may not free what is not in use.
  bool give(size_t offset, size_t n);
  size_t free_bytes() const;

private:
  mutable std::mutex mtx_;
  std::vector<std::pair<size_t, size_t>> free_; // (offset, bytes), sorted
  std::map<size_t, size_t> taken_;              // offset -> bytes
};

/// One end of a road connection. Thread-safe sends; one reader thread.
class road_conn : public std::enable_shared_from_this<road_conn> {
public:
  struct ring {
    uint8_t* base = nullptr;
    size_t bytes = 0;
  };
  road_conn(int fd, road_kind kind, uint32_t send_timeout_ms);
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

  // -- used by road_listener and road_dial ----------------------------------

  /// Maps the rings: `out` is written by us, `in` by the peer.
  caf::error map_rings(int out_fd, int in_fd, size_t bytes);
  /// Takes `fd`, a unix stream socket, as the reply socket of an shm
  /// connection: the worker's end (`we_read`) is what its reader reads,
  /// the server's end is where it writes. Call before start().
  void use_reply_socket(int fd, bool we_read);
  /// Starts the reader thread.
  void start(road_handler on_msg, road_down_handler on_down);
  /// Starts the reader thread of an accepted connection: it reads the
  /// hello (waiting up to `timeout_ms`) before any message. A tcp hello
  /// may pair the connection with another through `pairing` (the first
  /// answers on the second; the second then ends here, quietly).
  void start_accepted(uint32_t timeout_ms, road_handler on_msg,
                      road_down_handler on_down,
                      std::shared_ptr<road_pairing> pairing = nullptr);
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
  /// True if this connection answers or reads on a reply socket (shm, and
  /// tcp unless --road.single-conn).
  bool has_reply_socket() const { return side_fd_ >= 0; }
  const ring& in_ring() const { return in_; }

  // -- a blocking caller reading its own replies -----------------------------

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
  /// Who reads the connection: its reader thread, or callers (one at a
  /// time: the kv client's blocking caller), idle or reading.
  enum class turn : uint8_t { reader, callers_idle, caller_reading };
  /// Reads one message and hands it to on_msg_; false once the connection
  /// failed (fail() has run). `on_reader`: the reader thread reads, and
  /// leaves the road to callers with the last reply due, if they asked.
  bool read_one(bool on_reader);
  /// read_one without its guard against exceptions.
  bool read_next(bool on_reader);
  /// Fails the connection: it ended in the middle of a frame. False.
  bool lost_mid_frame();
  /// Reads the frame of `h` into `m`, its segments where `l` places them;
  /// a frame that is no well-formed segment table is read flat.
  bool read_landed(uint64_t bytes, road_landing& l, road_message& m);
  /// The landing of reply `id`, taken out; null if none.
  road_landing_ptr take_landing(uint64_t id);
  /// The reader thread leaves the road to callers if one asked and no
  /// reply is outstanding. Needs turn_mtx_.
  void leave_to_callers_if_asked();
  /// The reader thread: leaves the connection to callers if one asked and
  /// nothing is outstanding, then waits until it is its turn; false once
  /// the connection is closed.
  bool wait_for_turn();
  /// Counts a request going out and notes the send for a caller scope; a
  /// send outside one takes the connection back for the reader thread.
  void note_send(road_op op);
  /// Wakes a reader thread waiting for its turn (the connection ended).
  void wake_reader();
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
  /// Sends what is corked, if anything.
  void flush_cork();
  friend bool road_reply_corked();
  std::atomic<bool> closed_{false};
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

/// A server's listening end: TCP on host:port and, for the same machine,
/// an abstract unix socket. Each accepted connection gets a reader thread
/// that hands requests to `on_msg`.
class road_listener {
public:
  static caf::expected<std::unique_ptr<road_listener>>
  start(const std::string& host, uint16_t port, uint32_t send_timeout_ms,
        road_handler on_msg);
  ~road_listener();
  /// What the server advertises in its Register.
  const road_info& info() const { return info_; }
  /// Live connections (for tests and logs).
  size_t connections() const;
  /// Tcp reply connections offered and not yet taken (for tests).
  size_t reply_connections_waiting() const;

private:
  road_listener() = default;
  void accept_loop();
  void accept_one(int lfd, road_kind kind);
  void start_conn(int fd, road_kind kind);
  /// Connections a listener keeps at most; more are refused.
  static constexpr size_t max_connections = 1024;
  /// Drops an ended connection: its rings go once its messages are gone.
  void forget(uint64_t serial);

  road_info info_;
  std::shared_ptr<road_pairing> pairing_;
  int tcp_fd_ = -1;
  int unix_fd_ = -1;
  int wake_fd_ = -1; // eventfd that ends accept_loop
  uint32_t send_timeout_ms_ = 0;
  road_handler on_msg_;
  mutable std::mutex mtx_;
  std::vector<road_conn_ptr> conns_;
  std::thread acceptor_;
};

/// While it lives, the road sends of this thread are a blocking caller's,
/// which will read their replies itself (road_conn::pump_once): they leave
/// a connection with callers, and the scope notes which they went on. A
/// caller reads one connection at most (claim_only_conn); when the scope
/// ends, the others go back to their reader threads if replies are due.
class road_caller_scope {
public:
  road_caller_scope();
  ~road_caller_scope();
  road_caller_scope(const road_caller_scope&) = delete;
  road_caller_scope& operator=(const road_caller_scope&) = delete;
  /// The one connection sent on in this scope, which the caller then
  /// reads and gives up with caller_done; null if none or several.
  road_conn_ptr claim_only_conn();
  /// Every connection sent on in this scope.
  const std::vector<road_conn_ptr>& conns() const { return conns_; }
  /// Notes a send on `c` (road_conn does, on the sending thread).
  void note(road_conn_ptr c);
  /// The scope of this thread, or null.
  static road_caller_scope* current();

private:
  road_caller_scope* outer_;
  std::vector<road_conn_ptr> conns_;
  bool claimed_ = false;
};

/// Gives the road a caller read (pump_once) back when it goes
/// (road_conn::caller_done): the reader thread's again if replies are due.
/// Empty, it does nothing.
struct road_caller_done {
  road_conn_ptr conn;
  road_caller_done() = default;
  explicit road_caller_done(road_conn_ptr c) : conn(std::move(c)) {}
  road_caller_done(const road_caller_done&) = delete;
  road_caller_done& operator=(const road_caller_done&) = delete;
  ~road_caller_done() {
    if (conn)
      conn->caller_done();
  }
};

/// Bytes of reply segments this process's roads read straight into the
/// place a landing gave (road_landing), since it started: for tests and
/// benchmarks.
uint64_t road_landed_bytes();

/// Messages this process's roads corked (sent later, with others in one
/// write) since it started.
uint64_t road_corked_messages();

/// True on a thread that reads a road (its handlers run there): code that
/// may run on one must not block on a road write, since the peer may wait
/// for this very thread to read.
bool on_road_reader();

/// True on a thread reading a road that holds corked replies: they go out
/// once the reader is back from its handler (or with the next write), so
/// a handler running an actor here should not run its whole mailbox
/// first (send_and_run_here's `stop`).
bool road_reply_corked();

/// This machine's identity for road_info::machine: boot id and network
/// namespace (abstract unix sockets are per namespace).
std::string road_machine_id();

/// How long road_dial waits, at most, for the connection and then for
/// the server's hello: a connect on one machine or a LAN takes
/// milliseconds, and a road port that a firewall drops (CAF's port open)
/// costs a worker this long per server before CAF carries that server's
/// frames, not its request timeout.
constexpr uint32_t road_dial_deadline_ms = 2000;

/// Connects a worker to a server's road: shm when `want` is shm and the
/// server is on this machine, else tcp. Waits up to `timeout_ms`, and at
/// most road_dial_deadline_ms, for the connection and the server's hello
/// together (a failed shm connect, before tcp, may take as long again);
/// `timeout_ms` bounds the connection's sends.
caf::expected<road_conn_ptr> road_dial(const std::string& host,
                                       const road_info& info, road_kind want,
                                       size_t ring_bytes, uint32_t timeout_ms,
                                       road_handler on_msg,
                                       road_down_handler on_down);

} // namespace troupe

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
//        catches up with the sender (road_settings::frame_spin_us). The server
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
//        (unix_write_space): a wasted wake-up per message, which a small
//        round trip feels (docs/benchmarks.md).
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
// A blocking caller may read its own replies (road_caller_scope; the
// turn machine in road_conn.hpp draws who reads when): once no
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
//
// Every connection opens with a handshake that proves its member
// (road_auth.hpp).
//
// Files: road_auth.hpp (the handshake), road_wire.hpp (ops, messages,
// landings), road_ring.hpp (ring space), road_conn.hpp (a connection and its
// turn machine), road_caller.hpp (a blocking caller's scope), road_listener.hpp
// (the server's end), road_dial.hpp (the worker's end), road_settings.hpp (how
// roads poll); road_internal.hpp is shared by the .cpp files only. This
// header includes them all.
#pragma once

#include "actors/road/road_auth.hpp"
#include "actors/road/road_caller.hpp"
#include "actors/road/road_conn.hpp"
#include "actors/road/road_dial.hpp"
#include "actors/road/road_listener.hpp"
#include "actors/road/road_ring.hpp"
#include "actors/road/road_settings.hpp"
#include "actors/road/road_wire.hpp"

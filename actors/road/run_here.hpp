// Delivers a message to a local actor and, if that actor was idle, runs it
// on the calling thread instead of waking a scheduler thread for it: a
// road reader hands a request to its shard server (or a reply to its kv
// client) without a thread hop, and a blocking caller runs the kv client
// that carries its request.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/message.hpp>

namespace troupe {

class road_conn;

/// Enqueues `msg` (anonymous) to `to`; if `to` was waiting for messages, it
/// runs here, on this thread, for up to `max_messages` messages or until
/// its mailbox is empty (CAF still runs an actor on one thread at a time;
/// what is left goes to the scheduler). Messages the actor sends meanwhile
/// to other idle actors go to the scheduler as usual. For threads outside
/// CAF's scheduler only, and only where running the actor here cannot
/// wait on this thread's own work (a road reader: peers always drain what
/// the actor writes to them; a kv client defers its writes while on one).
/// The actor's system is kept from shutting down until this returns.
/// `stop`, if given, is asked after each message run here: true leaves the
/// rest to the scheduler (a road reader whose replies wait corked must
/// not run an actor's whole mailbox before it sends them).
void send_and_run_here(caf::actor to, caf::message msg,
                       size_t max_messages = SIZE_MAX,
                       bool (*stop)() = nullptr);

/// Runs `send`, in which the blocking actor `self` (a scoped_actor on a
/// thread outside CAF's scheduler) sends messages: each idle actor such a
/// message wakes runs here, on this thread, as send_and_run_here runs it,
/// instead of waking a scheduler thread while this thread only waits for
/// the reply. The system is kept from shutting down until this returns.
void run_here_while(caf::local_actor* self, const std::function<void()>& send);

/// For a blocking actor (a scoped_actor outside CAF's scheduler) whose
/// requests went out on `conn` in a road_caller_scope that it claimed
/// (claim_only_conn): reads `conn` on this thread, each message dispatched
/// here (the kv client runs here for a reply, which lands in `self`'s
/// mailbox), at least once and until `self`'s mailbox holds a message:
/// true. The replies
/// then wake no thread at all. False, and the caller waits as usual (the
/// reply comes the usual way), once `deadline` has passed, or the road is
/// not the caller's to read: it ended, or its reader thread kept it. The
/// caller gives the road back with conn.caller_done() when it is done.
bool read_road_until_mail(caf::blocking_actor& self, road_conn& conn,
                          std::chrono::steady_clock::time_point deadline);

} // namespace troupe

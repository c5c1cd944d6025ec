// Delivers a message to a local actor and, if that actor was idle, runs it
// on the calling thread instead of waking a scheduler thread for it: a
// road reader hands a request to its shard server without a thread hop.
#pragma once

#include <caf/actor.hpp>
#include <caf/message.hpp>

namespace troupe {

/// Enqueues `msg` (anonymous) to `to`; if `to` was waiting for messages, it
/// runs here, on this thread, until its mailbox is empty (CAF still runs an
/// actor on one thread at a time). Messages the actor sends meanwhile to
/// other idle actors go to the scheduler as usual. For threads outside
/// CAF's scheduler only, and only where running the actor here cannot
/// wait on this thread's own work (a road reader: peers always drain what
/// the actor writes to them).
/// The actor's system is kept from shutting down until this returns.
void send_and_run_here(caf::actor to, caf::message msg);

} // namespace troupe

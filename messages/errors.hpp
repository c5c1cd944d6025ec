// troupe's error codes: each one says what the caller should do.
#pragma once

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/make_message.hpp>

namespace troupe {

enum class errc : uint8_t {
  /// Bytes did not decode or break an invariant. Drop the message, log the
  /// sender; do not retry the same bytes.
  malformed_message = 1,
  /// The slice is not owned by this server. Refresh the view and resend.
  slice_not_owned,
  /// A slice or array has another length than declared. Caller bug.
  bad_shape,
  /// A push skipped clocks. Caller bug: clocks go 0, 1, 2, ...
  clock_gap,
  /// The sender is not in the cluster view. Re-register, then retry.
  not_a_member,
  /// The key was never declared. Declare (kv init) it first.
  unknown_key,
  /// The key was declared before with another size. Caller bug.
  size_conflict,
  /// A peer did not answer in time. Treat it as dead or retry later.
  timeout,
  /// No connection to a peer named in the view. Retry after back-off.
  not_connected,
  /// A flag or config value is invalid. Fix the configuration.
  invalid_config,
  /// A file is missing or unreadable. Fix the path or install the data.
  bad_file,
  /// The peer died before answering. The control path decides what follows.
  peer_down,
  /// The server applied the operation, but its backup may lack it (the
  /// scheduler did not confirm in time that it told the backup so, or the
  /// backup refused it while the server stays the slices' server): not
  /// acknowledged. Resend once a newer view places the slices, or after a
  /// pause to the same server (it drops the duplicate, and acknowledges it
  /// once it stands replicated or the backup has been told).
  unreplicated,
  /// The scheduler admits no more nodes of this kind: --cluster.servers or
  /// --cluster.workers are live. Retry once one leaves or is found dead (a
  /// restart may come before its predecessor's death is seen), or raise
  /// the count.
  cluster_full,
  /// A push holds a NaN or an infinity: refused whole, the sender fails
  /// (a diverged worker must not poison the weights). Fix the cause: a
  /// learning rate too high, bad data.
  non_finite,
  /// A frame is over what the server takes (--kv.max-message-bytes and the
  /// view's slice bound): skipped unread. Give every node the same
  /// --kv.max-message-bytes.
  message_too_large,
  /// A device (a GPU, its library, a device actor, the communicator of a
  /// node's devices) failed a step or did not answer. The worker stops
  /// with the device's own words and its agent restarts it; a device that
  /// cannot be opened is a configuration error instead.
  device_failed,
  /// A member the job cannot do without (a stage of a pipeline) has been
  /// out of the cluster longer than its bound (--pipeline.stage-wait-ms).
  /// The job ends (exit_job_stuck): bring the member back, and start the
  /// job again, which resumes from its checkpoints.
  member_missing,
  /// The job lost values (the scheduler's event log holds a "lost" event:
  /// a dead server's slices came back with no replica): what it would
  /// train on from them is not what it trained. A worker that checks its
  /// job for losses (run_worker, unless --cluster.allow-loss) ends at once
  /// (exit_job_failed), rather than at its end.
  values_lost,
};

/// The last code of errc (decoders refuse codes past it).
constexpr errc last_errc = errc::values_lost;

/// What a member gets when the scheduler dies: the job is over, and says
/// how to continue it.
caf::error scheduler_gone();

/// Name of `x`, as it appears in rendered errors.
std::string to_string(errc x);

/// Renders an error of category "troupe" with its context, for logs.
std::string render_troupe_error(uint8_t code, const caf::message& ctx);

/// One readable line for any error, without an actor system at hand.
std::string describe(const caf::error& err);

/// describe() without a troupe error's leading code ("worker 0 pushed a
/// NaN ..." for "non_finite: worker 0 pushed a NaN ..."), for words that
/// go inside another error or travel beside their code.
std::string describe_words(const caf::error& err);

} // namespace troupe

CAF_ERROR_CODE_ENUM(troupe::errc, "troupe")

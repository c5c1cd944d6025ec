// What a troupe-node's exit code says, for the agent that supervises it.
#pragma once

namespace troupe {

/// Done: not restarted.
constexpr int exit_done = 0;
/// Failed (a crash, a lost peer): the agent restarts it.
constexpr int exit_failed = 1;
/// Bad configuration (a flag, a file, a device that is not there): one line
/// said what. Not restarted: the agent gives the child up at once.
constexpr int exit_bad_config = 2;
/// The job reached its end, but its result failed a check (the counter's
/// sums, lost values): not restarted, since running the end again cannot
/// change the result; the agent ends non-zero, naming it.
constexpr int exit_job_failed = 4;
/// The job cannot go on: a member it cannot do without (a stage of a
/// pipeline) has been out of the cluster longer than its bound; one line
/// said which. Not restarted, since a restart would wait for it again; the
/// agent ends non-zero, naming it.
constexpr int exit_job_stuck = 5;

} // namespace troupe

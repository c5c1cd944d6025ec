// What a troupe-node's exit code says, for the agent that supervises it.
#pragma once

#include <caf/error.hpp>

#include "messages/errors.hpp"

namespace troupe {

/// Done: not restarted.
constexpr int exit_done = 0;
/// Failed (a crash, a lost peer): the agent restarts it.
constexpr int exit_failed = 1;
/// Bad configuration (a flag, a file, a device that is not there): one line
/// said what. Not restarted: the agent gives the child up at once.
constexpr int exit_bad_config = 2;
/// The job's result failed a check: the counter's sums at its end, or
/// lost values (said as soon as the scheduler hears of them): not
/// restarted, since running it again cannot change the result; the agent
/// ends non-zero, naming it.
constexpr int exit_job_failed = 4;
/// The job cannot go on: a member it cannot do without (a stage of a
/// pipeline) was given up by its agent, or has been out of the cluster
/// longer than its bound; one line said which. Not restarted, since a restart
/// would wait for it again; the agent ends non-zero, naming it.
constexpr int exit_job_stuck = 5;

/// The exit code of a process whose work ended with `err`: exit_job_stuck
/// for a member the job cannot do without (member_missing),
/// exit_job_failed for a job that lost values (values_lost: a restart
/// cannot bring them back), exit_bad_config for a setting that cannot work
/// (it fails the same after a restart), else exit_failed (restarted).
inline int exit_code_of(const caf::error& err) {
  if (err == errc::member_missing)
    return exit_job_stuck;
  if (err == errc::values_lost)
    return exit_job_failed;
  return err == errc::invalid_config ? exit_bad_config : exit_failed;
}

/// An exit that ends the job without a restart although it is not done: the
/// code, the agent's closing words after the child's name, its log line
/// after the child's name and pid, and the event's kind. The supervisor's
/// restart decision and the agent's report both read this one list.
struct job_end {
  int code;
  const char* summary;
  const char* log;
  const char* kind;
};

inline constexpr job_end job_ends[] = {
    {exit_job_failed,
     " failed its job's check (the sums differed at the end, or the job"
     " lost values: its output says which)",
     " finished, and its check failed", "check-failed"},
    {exit_job_stuck,
     " could not go on: a member the job needs is gone (given up, or out"
     " longer than its bound: its output says which)",
     " ended: a member the job needs is missing", "stuck"},
};

/// Whether exit code `code` ends the job (done, or one of job_ends).
constexpr bool ends_the_job(int code) {
  if (code == exit_done)
    return true;
  for (auto& end : job_ends)
    if (end.code == code)
      return true;
  return false;
}

} // namespace troupe

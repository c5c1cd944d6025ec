// What each element of the counter task's arrays must hold, from the
// scheduler's event log (docs/atomic-pushes.md, "Accounting"): every
// incarnation of a worker rank says the clock it starts at ("started"),
// and the cut of each departure says how many clocks every server kept
// ("cut"). Each kept push adds 1 to every element.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/membership.hpp"

namespace troupe {

struct push_accounting {
  /// Every departure of a worker in the log has its cut: the sum is final.
  bool complete = false;
  /// Pushes kept per element, over every rank and incarnation.
  uint64_t pushes = 0;
  /// Per rank, the clocks each incarnation kept, for people: "rank 0:
  /// 0-6000; rank 1: 0-2311 (cut), 2400-6000".
  std::string explained;
  /// Non-empty if the log contradicts itself (a cut that keeps clocks of
  /// no incarnation that started): the sum cannot be trusted.
  std::string unexplained;
};

/// The accounting of the log so far, for a job of `steps` clocks whose
/// live incarnations all reached the end. With `resumed` (--resume), each
/// rank's clocks below its first start came from the checkpoint, whole.
push_accounting account_pushes(const std::vector<event_record>& log,
                               uint64_t steps, bool resumed);

} // namespace troupe

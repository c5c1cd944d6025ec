// Worker ranks given up: named, inferred, and the rank a worker takes.
#include "actors/scheduler/given_up_ranks.hpp"

#include <algorithm>

namespace troupe::sched {

void given_up_ranks::gave_up(std::optional<uint32_t> rank,
                             const std::set<uint32_t>& free) {
  if (rank) // free, or soon: its agent may tell before its link does
    named_.insert(*rank);
  else if (!free.empty()) // (else one refused: the cluster was full)
    ++unnamed_;
}

void given_up_ranks::joined(uint32_t rank, const std::set<uint32_t>& free) {
  of(free); // what the last view said
  named_.erase(rank);
  ended_.erase(rank);
  if (free.size() == 1 && free.count(rank) != 0)
    unnamed_ = 0; // every rank live now: none of them came
}

std::vector<uint32_t> given_up_ranks::of(const std::set<uint32_t>& free) {
  std::vector<uint32_t> rest;
  for (auto r : free)
    if (named_.count(r) == 0)
      rest.push_back(r);
  if (!rest.empty() && rest.size() <= unnamed_) { // no other process to come
    named_.insert(rest.begin(), rest.end());
    unnamed_ -= static_cast<uint32_t>(rest.size());
  }
  std::vector<uint32_t> out;
  for (auto r : named_)
    if (free.count(r) != 0)
      out.push_back(r);
  return out;
}

uint32_t given_up_ranks::pick(const std::set<uint32_t>& free) {
  auto gone = of(free);
  for (auto r : free)
    if (ended_.count(r) == 0 &&
        !std::binary_search(gone.begin(), gone.end(), r))
      return r;
  return *free.begin();
}

} // namespace troupe::sched

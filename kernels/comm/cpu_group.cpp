// The communicator's stand-in over host memory (communicator.hpp): ranks on
// threads of one process meet at each collective. The last to arrive checks
// that all asked the same, and sums (in rank order) or picks the root's;
// then each copies the result into its own array, and the next collective
// may begin once all have.
#include "kernels/comm/communicator.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace troupe {

namespace {

enum class op_kind { all_reduce_sum, broadcast };

struct call {
  op_kind kind = op_kind::all_reduce_sum;
  size_t n = 0;
  int root = 0;
  float* data = nullptr;
};

std::string describe(int rank, const call& c) {
  auto s = "rank " + std::to_string(rank) + ": ";
  if (c.kind == op_kind::all_reduce_sum)
    return s + "all_reduce_sum of " + std::to_string(c.n) + " floats";
  return s + "broadcast of " + std::to_string(c.n) + " floats from rank " +
         std::to_string(c.root);
}

class group {
public:
  group(int ranks, std::chrono::milliseconds wait)
      : ranks_(ranks), wait_(wait), calls_(size_t(ranks)) {}

  int ranks() const { return ranks_; }

  comm_status run(int rank, call c) {
    std::unique_lock<std::mutex> lk{mu_};
    // A collective still copying out: ours is the next one.
    if (!cv_.wait_for(lk, wait_,
                      [this] { return !copying_ || !broken_.empty(); }))
      fail("rank " + std::to_string(rank) +
           " waited for the collective before to end");
    if (!broken_.empty())
      return {broken_};
    calls_[size_t(rank)] = c;
    auto round = round_;
    if (++arrived_ == ranks_)
      gather();
    else if (!cv_.wait_for(lk, wait_, [this, round] {
               return copying_ || round_ != round || !broken_.empty();
             }))
      fail(missing(c));
    if (!broken_.empty())
      return {broken_};
    // Copy out: the sum, or the root's values.
    auto& mine = *calls_[size_t(rank)];
    if (c.kind == op_kind::all_reduce_sum)
      std::copy(result_.begin(), result_.end(), mine.data);
    else if (rank != c.root)
      std::copy(result_.begin(), result_.end(), mine.data);
    if (++copied_ == ranks_) {
      copying_ = false;
      arrived_ = copied_ = 0;
      for (auto& x : calls_)
        x.reset();
      ++round_;
      cv_.notify_all();
    }
    return {};
  }

private:
  /// The last to arrive: checks the calls agree, then computes.
  void gather() {
    auto& first = *calls_[0];
    for (int r = 0; r < ranks_; ++r) {
      auto& c = *calls_[size_t(r)];
      if (c.kind != first.kind || c.n != first.n ||
          (c.kind == op_kind::broadcast && c.root != first.root)) {
        fail("the ranks disagree: " + describe(0, first) + ", " +
             describe(r, c));
        return;
      }
      if (c.data == nullptr && c.n > 0) {
        fail(describe(r, c) + " with no array");
        return;
      }
    }
    if (first.kind == op_kind::broadcast &&
        (first.root < 0 || first.root >= ranks_)) {
      fail(describe(0, first) + ": no such rank");
      return;
    }
    if (first.kind == op_kind::all_reduce_sum) {
      result_.assign(first.data, first.data + first.n);
      for (int r = 1; r < ranks_; ++r) {
        auto* x = calls_[size_t(r)]->data;
        for (size_t i = 0; i < first.n; ++i)
          result_[i] += x[i];
      }
    } else {
      auto* x = calls_[size_t(first.root)]->data;
      result_.assign(x, x + first.n);
    }
    copying_ = true;
    cv_.notify_all();
  }

  /// Names the ranks that never came to `c`'s collective.
  std::string missing(const call& c) const {
    std::string who;
    for (int r = 0; r < ranks_; ++r)
      if (!calls_[size_t(r)])
        who += (who.empty() ? "" : ", ") + std::to_string(r);
    auto what =
        c.kind == op_kind::all_reduce_sum ? "all_reduce_sum" : "broadcast";
    return "rank(s) " + who + " did not join the " + what + " of " +
           std::to_string(c.n) + " floats within " +
           std::to_string(wait_.count()) + " ms";
  }

  void fail(const std::string& why) {
    if (broken_.empty())
      broken_ = "communicator: " + why +
                " (the group is failed: build a"
                " new one)";
    cv_.notify_all();
  }

  const int ranks_;
  const std::chrono::milliseconds wait_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::optional<call>> calls_;
  int arrived_ = 0, copied_ = 0;
  bool copying_ = false;
  uint64_t round_ = 0;
  std::vector<float> result_;
  std::string broken_;
};

class cpu_communicator : public communicator {
public:
  cpu_communicator(std::shared_ptr<group> g, int rank)
      : group_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->ranks(); }
  comm_status all_reduce_sum(float* data, size_t n) override {
    return group_->run(rank_, {op_kind::all_reduce_sum, n, 0, data});
  }
  comm_status broadcast(float* data, size_t n, int root) override {
    return group_->run(rank_, {op_kind::broadcast, n, root, data});
  }

private:
  std::shared_ptr<group> group_;
  int rank_;
};

} // namespace

std::vector<std::unique_ptr<communicator>>
make_cpu_group(int ranks, std::chrono::milliseconds wait) {
  std::vector<std::unique_ptr<communicator>> out;
  if (ranks <= 0)
    return out;
  auto g = std::make_shared<group>(ranks, wait);
  for (int r = 0; r < ranks; ++r)
    out.push_back(std::make_unique<cpu_communicator>(g, r));
  return out;
}

} // namespace troupe

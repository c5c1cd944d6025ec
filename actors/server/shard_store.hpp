// The slices of one shard server and the rules of its consistency mode,
// without any actor: the shard server feeds it requests and views, and asks
// it which waiting pulls may be answered. Deterministic, so tests can drive
// any interleaving.
//
// Clocks: worker w's clock is the number of clocks it has pushed whole
// (all parts). A push must carry exactly that clock; a lower one (or a part
// already seen) is a duplicate, acknowledged and dropped. Only a worker's
// first push since it (re)joined may carry a higher clock, which it then
// takes: a server that joined late (a restarted one) starts where the
// workers are. In async and ssp, a worker placed where the others were
// when it joined takes the clock of its first push also if it is lower:
// servers place it where each saw the others, and the others go on
// meanwhile, so it resumes at the smallest of its clocks over them.
// A worker that leaves and comes back (a restarted process under its old
// rank) goes on from its own clock if the rounds have not passed it, so
// that a push of its that already sits in an open round is not added again.
//   sync   round t is applied (sum of every live worker's push, one update)
//          when every live worker's clock passed t; version = rounds applied;
//          a worker at clock c reads once version >= c. Pushes are summed in
//          rank order, whatever order they came in, once a store awaits
//          cuts (docs/atomic-pushes.md); then a worker that leaves with its
//          clock not whole here takes its parts of it out of the round.
//   async  each push is applied on arrival; reads never wait.
//   ssp:s  each push is applied on arrival; a worker at clock c reads once
//          the slowest live worker's clock is >= c - s.
//          Once a store awaits cuts, async and ssp hold each push until
//          its worker says every server acknowledged it (the `acked` of a
//          later Push or Pull: pulled()), or the cluster's cut of a
//          departed worker keeps it; ssp's clocks count the pushes applied.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/base/helper_pool.hpp"
#include "actors/cluster/consistency.hpp"
#include "messages/checkpoint.hpp"
#include "messages/kv.hpp"

namespace troupe {

/// Applies an aggregated update to a slice: `values` += f(`sum`). The hook
/// where optimizers plug in; `sum` has values.size() floats (it may point
/// straight into a received frame); `contributors` = pushes summed in it.
using update_fn = std::function<void(slice_id id, std::vector<float>& values,
                                     const float* sum, uint32_t contributors)>;

/// The default update: values += sum (aggregation is a sum).
void add_update(slice_id id, std::vector<float>& values, const float* sum,
                uint32_t contributors);

class shard_store {
public:
  /// The highest clock a push may carry (2^48 steps: far beyond any run,
  /// far from wrapping); one beyond is malformed.
  static constexpr uint64_t max_clock = uint64_t{1} << 48;

  explicit shard_store(consistency mode = {}, update_fn fn = add_update);

  /// Sets the slices this store owns, with their lengths in floats. Slices
  /// no longer owned are dropped; new ones start uninitialised.
  void set_owned(const std::map<slice_id, uint32_t>& owned);

  /// Sets the live workers. A newcomer starts at the clock the others
  /// reached (a rank back, at its own clock if the rounds have not passed
  /// it); a leaver no longer holds back rounds or reads.
  void set_workers(const std::set<uint32_t>& live);

  /// First values of slices; a slice already initialised keeps its values.
  caf::error init(const init_request& req);

  /// What init(req) would refuse it with, changing nothing (none: it
  /// would take it). A server with several stores asks each first.
  caf::error check_init(const init_request& req) const;

  /// Accepts one part of a push (all slices or none). `slices` (not
  /// `header.slices`) holds the values, read during the call only; or,
  /// with `frame`, valid as long as `frame` lives: a part the store keeps
  /// (a sync round's, a held push) then keeps `frame` and reads the values
  /// there, instead of a copy of them.
  caf::expected<push_reply> push(const push_request& header,
                                 const std::vector<slice_view>& slices,
                                 std::shared_ptr<const void> frame = nullptr);

  /// The same with the values in `req.slices`.
  caf::expected<push_reply> push(const push_request& req);

  /// What push(header, slices) would do, changing nothing: its error, or
  /// true for a duplicate it would acknowledge and drop, false for a part
  /// it would take. A server with several stores asks each before any
  /// takes a part, so that none takes what another refuses.
  caf::expected<bool> check_push(const push_request& header,
                                 const std::vector<slice_view>& slices) const;

  /// Checks that `worker` may pull as a worker at `clock`: it is live and
  /// has pushed every clock before `clock` but at most one (a pull waits
  /// for others, never for the puller itself).
  caf::error check_pull(uint32_t worker, uint64_t clock) const;

  /// `worker`, which check_pull let pull at `clock`, reads there, and every
  /// server acknowledged its pushes below `acked`.
  /// sync: a worker back that has pushed nothing since it joined starts at
  /// `clock` if that is past its clock here, as its first push would: a
  /// server whose rounds lagged by one when it joined placed it a clock
  /// lower than the others, and the round it lagged in must not wait for
  /// it (it resumes at the largest of its clocks, kv_settings).
  /// async and ssp awaiting cuts: its held pushes below `acked` are
  /// applied. Returns true if that changed anything (a backup must then
  /// hear of it: op_pulled).
  bool pulled(uint32_t worker, uint64_t clock, uint64_t acked = 0);

  /// True if a worker at `clock` may read now under the mode.
  bool readable_at(uint64_t clock) const;

  /// The slices this store owns, with their lengths in floats.
  std::map<slice_id, uint32_t> owned() const;

  /// True while nothing was initialised or pushed: a replica can start
  /// from the same empty state without a copy of ours.
  bool pristine() const;

  /// True if this store owns `id`.
  bool owns(const slice_id& id) const { return slices_.count(id) != 0; }

  /// True if every slice in `ids` is owned and initialised.
  bool initialised(const std::vector<slice_id>& ids) const;

  /// Values of `ids`; errors if one is not owned.
  caf::expected<pull_reply> read(const std::vector<slice_id>& ids) const;

  /// Views of the values of `ids`, valid until the store next changes;
  /// errors if one is not owned.
  caf::error read_views(const std::vector<slice_id>& ids,
                        std::vector<slice_view>& out) const;

  /// sync: rounds applied; async and ssp: updates applied.
  uint64_t version() const { return version_; }

  /// Clock of the slowest live worker (0 if none).
  uint64_t min_clock() const;

  /// Clocks `worker` has pushed whole here (0 if not live).
  uint64_t clock_of(uint32_t worker) const;

  const consistency& mode() const { return mode_; }

  /// The update hook (checkpoints reach an optimizer's state through it).
  update_fn& hook() { return update_; }

  /// How loops over the slices of one push or one round run (adding a
  /// push, applying a round): `fn` may run the slices at the same time on
  /// several threads (a helper_pool), so the update hook must then be safe
  /// to call at once for distinct slices. Default: serially.
  void set_loop(loop_fn fn);

  // -- checkpoints ----------------------------------------------------------

  /// The applied state: slices, worker clocks, version. A sync round that
  /// is still open is left out (its workers push it again after a resume),
  /// so worker clocks are cut at the rounds applied. Optimizer state is the
  /// caller's to add (slice_snapshot's updates, step, state).
  store_snapshot snapshot() const;

  /// Takes the state of a checkpoint: `version` and `rounds`, the clock of
  /// each worker rank (a live worker that has not pushed takes it now,
  /// another when it joins), and the values of each owned slice found in
  /// `slices` that is not initialised yet.
  /// Returns how many slices it restored.
  size_t restore(uint64_t version, uint64_t rounds,
                 const std::vector<worker_snapshot>& workers,
                 const std::map<slice_id, const slice_snapshot*>& slices);

  /// Runs `fn` once the version is exactly `v`: now if it is, else when a
  /// sync round brings it there (before the next round is applied). An
  /// error if the version is past `v`, or the mode is not sync and `v` is
  /// not the current version. Calls for the same `v` all run, in order.
  caf::error at_version(uint64_t v, std::function<void()> fn);

  // -- atomic pushes (docs/atomic-pushes.md) -------------------------------

  /// Takes a copy of the state of the update hook it is given, and returns
  /// what puts the copy back into the hook it is then given (the store, and
  /// its hook with it, may have moved in between).
  using restore_fn = std::function<void(update_fn&)>;
  using capture_fn = std::function<restore_fn(update_fn&)>;
  /// The update of slice `id` out of place, as the undo image is taken:
  /// the values before are `in` (the image's), the values after go to
  /// `out` (n floats each); the gradient is g0 + g1 (g1 null: g0 alone),
  /// `contributors` pushes; the hook puts its own state before aside, as
  /// after a capture. False if it cannot (the store then copies the
  /// values into the image and updates in place).
  using step_from_fn = std::function<bool(
      update_fn& hook, slice_id id, const float* in, float* out, size_t n,
      const float* g0, const float* g1, uint32_t contributors)>;

  /// From now on the cluster decides, for each worker that leaves, how
  /// many of its clocks every server keeps (cut()). Without it a departed
  /// worker's clocks are kept as they came (a sync round keeps one running
  /// sum, so a clock not whole here stays in it too). With it, a departed
  /// worker's clock not whole here is dropped at once, and
  /// sync: a round that holds a departed worker's push stays tentative
  ///   until its cut: it is applied at once, over an undo image of the
  ///   slices and of the hook's state (`capture`, null when the hook keeps
  ///   none);
  /// async, ssp: a push is held until every server acknowledged it (the
  ///   `acked` its worker sends later), or the cut keeps it.
  /// With `step`, a primary's round steps from the image instead of
  /// copying the values into it.
  void await_cuts(capture_fn capture, step_from_fn step = nullptr);

  /// The cluster keeps the pushes of clocks below `keep` of worker `w`,
  /// which left: its parts of later clocks are taken out of the rounds,
  /// and applied rounds they were in are applied again without them. A
  /// worker live here (a new process under its rank) is left alone, as is
  /// a store that does not await cuts: returns false.
  bool cut(uint32_t w, uint64_t keep);

  /// The clocks departed worker `w` pushed whole here: the cluster keeps
  /// the least of them over its servers (without await_cuts the cut is
  /// only the accounting's: the store keeps what it took). For a process
  /// that pushed nothing here, its clock here if that is known (it starts
  /// at the largest of its clocks over the servers, so it had nothing here
  /// at or above it). Empty if `w` is live here, or pushed nothing here
  /// and its clock here is not known.
  std::optional<uint64_t> whole_clocks(uint32_t w) const;

  /// A replica (on) applies a sync round only once it is settled (each
  /// contributor has pushed later, or its cut is known), with no undo
  /// image: nothing reads a replica, so it may lag a round. Off (it is
  /// promoted), and before anything but pushes, pulls, views and cuts
  /// changes it, the rounds it holds back are applied as a primary holds
  /// them: tentatively, over an undo image. Needs await_cuts.
  void replica(bool on);

  /// True while an applied round may still be undone by a cut.
  bool tentative() const { return image_.taken; }

  /// Sync rounds complete but not applied yet (a replica's, replica()).
  size_t deferred() const { return deferred_.size(); }

  /// Pushes held (async, ssp awaiting cuts), over every worker.
  size_t held() const;

  /// True if no push waits in an open sync round (always outside sync):
  /// then snapshot() holds every push accepted.
  bool between_rounds() const;

private:
  struct slice_state {
    uint32_t floats = 0;
    bool ready = false; // initialised
    std::vector<float> values;
  };
  /// One worker's slices of one clock (sync), as taken: kept apart from
  /// the other workers' until its round is settled, so that a departed
  /// worker's part can be taken out (docs/atomic-pushes.md).
  /// Its floats are the pushed frame's, kept alive by `frame`, while the
  /// part is as it came; a copy of its own once it changes (or when there
  /// is no frame to keep).
  struct contribution {
    std::vector<float> values; // its own floats, or none
    const float* view = nullptr;
    std::shared_ptr<const void> frame; // what keeps `view` valid
    size_t n = 0;
    uint32_t pushes = 0; // a part may name a slice twice: each is added
    const float* data() const { return view ? view : values.data(); }
    /// Takes `buffer` (n floats) as its own: the caller fills it.
    float* own(std::vector<float> buffer) {
      values = std::move(buffer);
      view = nullptr;
      frame.reset();
      return values.data();
    }
  };
  /// The parts of one round (or of one held push), by rank.
  struct round_parts {
    std::map<uint32_t, std::map<slice_id, contribution>> ranks;
    /// Per slice of a sync round awaiting cuts: the sum of its parts in
    /// rank order, added as each came (while its frame is in cache), as
    /// long as they came in rank order (two in either: a + b == b + a).
    /// apply_round takes it when it holds every part of the slice.
    struct running {
      std::vector<float> values;
      uint32_t parts = 0;  // parts added in
      uint32_t top = 0;    // the highest rank added
      bool broken = false; // a part came out of order, or changed
    };
    std::map<slice_id, running> sums;
    bool summing = true; // false once a part was taken out
    bool empty() const { return ranks.empty(); }
    /// Takes worker `w`'s parts out (and the sums they are in); true if
    /// it had any.
    bool erase(uint32_t w) {
      if (ranks.erase(w) == 0)
        return false;
      sums.clear();
      summing = false;
      return true;
    }
  };
  /// The rank a round's one running sum is kept under when the store does
  /// not await cuts (no worker has it: ranks are below --cluster.workers).
  static constexpr uint32_t all_workers = ~uint32_t{0};
  /// The values of the slices before the oldest tentative round, and what
  /// puts the update hook's state back as it was then.
  /// Kept between rounds, once taken: its buffers are reused (taking it
  /// anew each round, the allocations and first touches of fresh pages
  /// cost more than the copy).
  /// A slice's values are copied into it as the first tentative round
  /// that changes the slice is applied (in the same pass, while in cache).
  struct undo_image {
    bool taken = false;
    struct slice_copy {
      bool taken = false;
      std::vector<float> values;
    };
    std::map<slice_id, slice_copy> slices;
    restore_fn restore_hook;
  };
  struct worker_clock {
    uint64_t clock = 0;
    std::set<uint32_t> parts; // parts seen of `clock`
    /// View epoch of the cut those parts belong to; 0 = not known (none
    /// came yet, or restored from a checkpoint).
    uint64_t cut = 0;
    std::set<slice_id> taken; // slices of `clock` taken (any cut)
    bool fresh = true;        // no push accepted since it (re)joined
    /// Its clock is where the others were when it joined, not its own
    /// (async and ssp: its first push takes its clock, lower or higher).
    bool placed = false;
    /// Its clock here bounds what a process of it that pushed nothing here
    /// has kept: it is its own (the process before it), or this store
    /// placed it on seeing it join (in a view after its first: a store
    /// that meets workers in its first view knows nothing of them).
    bool known = false;
    /// async and ssp awaiting cuts: its pushes taken and not applied yet,
    /// by clock (each under its rank, as a round's).
    std::map<uint64_t, round_parts> held;
    /// Clocks whose pushes are applied: below `clock` and the first held.
    uint64_t applied() const {
      return held.empty() ? clock : std::min(clock, held.begin()->first);
    }
    /// True if `req`, a part of `clock`, is of a newer cut than the parts
    /// taken: its parts replace theirs.
    bool recut_by(const push_request& req) const {
      return req.clock == clock && !parts.empty() && cut != 0 &&
             req.epoch > cut;
    }
    /// At clock `c` with nothing of it taken yet.
    void start_at(uint64_t c) {
      clock = c;
      parts.clear();
      cut = 0;
      taken.clear();
    }
  };

  caf::error check_slices(const std::vector<slice_view>& xs) const;
  void apply_now(const std::vector<slice_view>& xs);
  /// Adds `worker`'s slices `xs` to its contribution in `r`, and with
  /// `sum` to r's running sums.
  void add_part(round_parts& r, uint32_t worker,
                const std::vector<slice_view>& xs, bool sum,
                const std::shared_ptr<const void>& frame);
  /// True if pushes wait for their worker's acknowledgements (async and
  /// ssp awaiting cuts).
  bool holds_pushes() const;
  /// Applies `wc`'s held pushes of clocks below `upto`, in clock order;
  /// true if there were any.
  bool release(worker_clock& wc, uint64_t upto);
  /// Applies the sum of a round's contributions, in rank order; with
  /// `image`, first copies into image_ each slice it changes that is not
  /// there yet.
  void apply_round(const round_parts& r, bool image);
  void complete_rounds();
  /// Round `clock` cannot be undone any more: each contributor has pushed
  /// later here, or its cut is known.
  bool settled(uint64_t clock, const round_parts& r) const;
  /// Drops the undo image once every tentative round is settled; then
  /// applies a replica's deferred rounds that are settled, in order.
  void settle();
  /// Applies every deferred round, tentatively (a replica that is
  /// promoted, or about to change otherwise than by rounds).
  void catch_up();

  /// Runs body(0 .. n - 1) through loop_, serially if two items would
  /// touch the same slice (a push naming a slice twice).
  void for_slices(const std::vector<const void*>& targets,
                  const loop_body& body);

  consistency mode_;
  update_fn update_;
  loop_fn loop_ = run_serially;
  std::map<slice_id, slice_state> slices_;
  std::map<uint32_t, worker_clock> workers_;
  std::map<uint64_t, round_parts> rounds_;    // sync: open rounds
  std::map<uint64_t, round_parts> tentative_; // sync: applied, not settled
  /// sync, a replica: complete, not applied (after tentative_'s).
  std::map<uint64_t, round_parts> deferred_;
  bool replica_ = false;
  undo_image image_; // before tentative_'s first
  /// Buffers of settled rounds, reused for the next rounds' parts and sums.
  std::vector<std::vector<float>> spare_;
  /// A buffer of `n` floats (contents undefined), from spare_ if one is.
  std::vector<float> take_buffer(size_t n);
  /// Gives the buffers of `r` back to spare_.
  void recycle(round_parts& r);
  capture_fn capture_;
  step_from_fn step_from_;
  bool await_cuts_ = false;
  /// Ranks whose last departure's cut is known: the clocks kept.
  std::map<uint32_t, uint64_t> cuts_;
  uint64_t rounds_applied_ = 0;
  uint64_t version_ = 0;
  std::map<uint32_t, worker_clock> resume_clocks_; // from a checkpoint
  /// Workers that left (their last clock): a rank that comes back goes on
  /// from there while the rounds have not passed it.
  std::map<uint32_t, worker_clock> departed_;
  std::map<uint64_t, std::vector<std::function<void()>>> at_version_;
  bool had_view_ = false; // set_workers ran before
};

} // namespace troupe

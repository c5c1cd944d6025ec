// The update hook of a shard server when the optimizer lives with the slices
// (update_on_server): each slice keeps its own optimizer state, and every
// aggregated gradient is averaged over the pushes it holds, then applied.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "actors/server/optimizer_settings.hpp"
#include "actors/server/shard_store.hpp"
#include "kernels/optimizer.hpp"

namespace troupe {

/// An optimizer with per-slice state, callable as an update_fn: averages
/// the pushes summed in an update, then applies the optimizer. Copies own
/// their state. Checkpoints save and restore the state per slice. Calls
/// for distinct slices may run at the same time (a store's helper_pool);
/// save and load must not run beside them.
class slice_optimizer {
public:
  explicit slice_optimizer(optimizer_settings x);
  slice_optimizer(const slice_optimizer& other);

  void operator()(slice_id id, std::vector<float>& values, const float* sum,
                  uint32_t contributors);

  /// Copies the state of `s.id` into `s` (updates, step, state arrays).
  void save(slice_snapshot& s) const;

  /// Takes the state of `s.id` from `s`; an error if its arrays do not fit
  /// this optimizer.
  caf::error load(const slice_snapshot& s);

  struct slice_state { // what one slice remembers between updates
    uint64_t updates = 0;
    momentum_state momentum;
    adam_state adam;
  };
  /// Begins a store's undo image (shard_store::await_cuts): from now on
  /// each slice's state is copied aside as it is first updated (in the
  /// update's own pass, into the buffers of the last copy). restore()
  /// puts the copies back: the states as they were at capture().
  void capture();
  void restore();

  /// The update of `id` out of place (shard_store::step_from_fn): values
  /// before `w_in`, after into `w_out` (n floats), gradient g0 + g1 (g1
  /// may be null); the state before goes aside by swapping buffers, as
  /// capture() would copy it. Only while capturing and for a slice not
  /// yet put aside since capture(): false, and nothing done, otherwise.
  bool step_from(slice_id id, const float* w_in, float* w_out, size_t n,
                 const float* g0, const float* g1, uint32_t contributors);

private:
  /// The state of `id`, made on first use under states_mtx_.
  slice_state& state_of(slice_id id);

  optimizer_settings x_;
  std::map<slice_id, slice_state> states_;
  struct capture_slot {
    bool taken = false;   // copied since the last capture()
    bool existed = false; // the slice had a state then
    slice_state state;
  };
  /// Copies the state of `id` aside unless it was since capture().
  void capture_slice(slice_id id);
  /// The slot of `id` to put its state aside in, marked taken (and whether
  /// the slice had a state); null if it was put aside since capture().
  capture_slot* claim_slot(slice_id id);
  std::map<slice_id, capture_slot> captured_;
  bool capturing_ = false; // capture() ran
  std::unique_ptr<std::mutex> states_mtx_ = std::make_unique<std::mutex>();
};

/// The slice_optimizer inside `fn` (made by make_optimizer_fn), or null if
/// it holds none (sum, optimizer on the workers, another hook).
slice_optimizer* optimizer_of(update_fn& fn);

/// Captures the state of the slice_optimizer inside the hook it is given
/// for an undo image (shard_store::await_cuts); nothing for other hooks.
shard_store::restore_fn capture_optimizer(update_fn& fn);

/// slice_optimizer::step_from of the optimizer inside `fn`; false for
/// other hooks (shard_store::await_cuts).
bool step_from_optimizer(update_fn& fn, slice_id id, const float* w_in,
                         float* w_out, size_t n, const float* g0,
                         const float* g1, uint32_t contributors);

/// The update hook of a server for `x`: with the optimizer on the workers,
/// values = mean of the round's pushes; else make_optimizer_fn(x).
update_fn make_update_fn(const optimizer_settings& x);

/// The optimizer of `x` as an update: add_update for "sum", else the
/// optimizer with per-slice state applied to the mean of the pushes. Each
/// copy owns its state: give every server (or worker) its own copy.
update_fn make_optimizer_fn(const optimizer_settings& x);

} // namespace troupe

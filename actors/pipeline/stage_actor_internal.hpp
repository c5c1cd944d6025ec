// Shared by the stage actor's files only (stage_actor.hpp says what the
// actor does): stage_actor.cpp runs the plan, stage_actor_roads.cpp moves
// tensors between neighbours, on their roads or over CAF, stage_update.cpp
// applies the optimizer and keeps its state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <caf/error.hpp>
#include <caf/make_message.hpp>
#include <caf/result.hpp>

#include "actors/pipeline/stage_actor.hpp"
#include "messages/frame.hpp"

namespace troupe {

struct road_message;

namespace stage_impl {

/// "stage S", for logs.
std::string who(stage_ptr self);

/// Keeps a neighbour's tensor for its step, if it is not an old one, and
/// runs what it lets run.
void keep(stage_ptr self, stage_state::box& box, stage_tensor x,
          const char* what);
/// The same for the bytes of a StageTensor (dropped, and logged, if they
/// are none).
void keep(stage_ptr self, stage_state::box& box, bytes_view f,
          const char* what);

/// Sends tensor `f` to the next stage (`forward`: activations) or to the
/// one before (input gradients): on the road to it if one is up, else
/// over CAF.
void send_to_neighbour(stage_ptr self, bool forward, frame f);

/// Dials the roads to the neighbours in prev and next where they are new
/// (a reset, a link): asks each for a ticket first. Meanwhile CAF carries
/// the tensors. `settled` (if any) runs once both roads are up or given
/// up.
void link_roads(stage_ptr self, std::function<void()> settled = {});

/// The ticket for neighbour `rank` to dial this stage's road.
caf::result<std::string, uint16_t, std::string, std::string, std::string>
road_ticket(stage_ptr self, uint32_t rank);

/// What one of the stage's roads read: a neighbour's tensor (checked to
/// come from that neighbour, then acknowledged), or the acknowledgement
/// of one of ours.
void on_road(stage_ptr self, std::shared_ptr<road_message> m);

/// The road with `serial` ended: what it did not acknowledge goes again
/// over CAF, which carries that neighbour's tensors from now on.
void on_road_down(stage_ptr self, uint64_t serial);

// -- the optimizer (stage_update.cpp) -----------------------------------------

/// Checks the stage's optimizer (cfg.update) and makes room for its
/// state; an error if it is none a stage applies, or a bad one.
caf::error take_update(stage_ptr self);

/// The optimizer's step (cfg.update at `lr`) on parameter array `i`,
/// weights `w` and gradient `g`, with that array's state.
kernel_status update_array(stage_ptr self, float lr, size_t i,
                           const param_ref& w, const param_ref& g);

/// Takes `w` as the stage's weights after `step` mini-batches: the arrays
/// its pull names (the weights, then the optimizer's state); an error,
/// and nothing taken, if they do not fit.
caf::error load_weights(stage_ptr self, const std::vector<named_array>& w,
                        uint64_t step);

/// `xs` (the weights or the gradients) keyed by stage_key.
std::vector<named_array> arrays_of(stage_ptr self,
                                   const std::vector<param_ref>& xs);

/// The weights, then the optimizer's state arrays (zeros before its first
/// update), as pull_atom gives them.
std::vector<named_array> weights_and_state(stage_ptr self);

} // namespace stage_impl
} // namespace troupe

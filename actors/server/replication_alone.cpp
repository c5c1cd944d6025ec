// The primary's notice of a dropped link (replication.hpp, N1-N5): what it
// acknowledges alone waits until the scheduler has told the backup.
#include "actors/server/shard_server_internal.hpp"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "actors/base/log.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::server_impl {
namespace {

/// The scheduler answered our notice of link `link` (`err`: it did not
/// pass it on): the acknowledgements alone that waited go out (N2), or
/// fail (N3).
void notice_answered(self_ptr self, uint64_t link, const caf::error& err) {
  auto& a = self->state.alone;
  if (!a || a->link != link)
    return; // a later drop's notice took over what waited
  auto held = std::move(a->held);
  a->held.clear();
  a->asked = false;
  a->confirmed = !err;
  if (err)
    TROUPE_LOG(warning, who(self), "the scheduler did not tell backup ",
               a->backup, " that we dropped our link (", describe(err),
               "): ", held.size(),
               " operations it may lack are not acknowledged");
  // Taken for dead (not_a_member), we will not be told otherwise: the
  // slices' next server is in the view to come. Else (no answer in time)
  // a second try may get one.
  auto why = caf::make_error(err == errc::not_a_member ? errc::peer_down
                                                       : errc::unreplicated,
                             "our backup could not be told that it may lack"
                             " this operation");
  for (auto& h : held)
    h.then(err ? why : caf::error{});
}

/// How long the scheduler has to answer a notice, and an acknowledgement
/// alone to wait for it: the drop took up to three quarters of the
/// workers' request timeout (half, or half and a road tick), and the
/// answer must come in what is left.
std::chrono::milliseconds notice_limit(self_ptr self) {
  return std::chrono::milliseconds{self->state.request_timeout_ms / 5};
}

/// Sends the scheduler the notice of our dropped link, once.
void ask_scheduler(self_ptr self) {
  auto& st = self->state;
  auto& a = *st.alone;
  if (a.asked)
    return;
  a.asked = true;
  auto link = a.link;
  self->request(st.scheduler, notice_limit(self), stale_atom_v, a.backup, link)
      .then(
          [self, link](uint64_t) { notice_answered(self, link, {}); },
          [self, link](caf::error& err) { notice_answered(self, link, err); });
}

} // namespace

/// Each hold has a check of its own due when it expires.
void expire_held(self_ptr self) {
  auto& a = self->state.alone;
  if (!a)
    return;
  auto now = std::chrono::steady_clock::now();
  std::vector<alone_notice::held_ack> over;
  for (auto i = a->held.begin(); i != a->held.end();)
    if (i->until <= now) {
      over.push_back(std::move(*i));
      i = a->held.erase(i);
    } else {
      ++i;
    }
  if (over.empty())
    return;
  TROUPE_LOG(warning, who(self), "no answer from the scheduler for ",
             over.size(), " operations backup ", a->backup,
             " may lack: not acknowledged");
  auto why = caf::make_error(errc::unreplicated,
                             "the scheduler did not confirm in time that our"
                             " backup was told it may lack this operation");
  for (auto& h : over)
    h.then(why);
}

/// At once, unless we dropped a link to a backup the view still names and
/// the scheduler has not yet told it (N4).
void stands_alone(self_ptr self, replica_done then) {
  auto& a = self->state.alone;
  if (!a || a->confirmed) {
    then(caf::none);
    return;
  }
  a->held.push_back(
      {std::chrono::steady_clock::now() + notice_limit(self), std::move(then)});
  self->delayed_send(self, notice_limit(self), stale_atom_v, tick_atom_v);
  ask_scheduler(self);
}

void notice_drop(self_ptr self, const backup_link& b, const char* why) {
  auto& st = self->state;
  // What an earlier notice held waits for this one, which covers it
  // (that one's answer, if it is still to come, is for another link).
  if (!st.alone)
    st.alone.emplace();
  st.alone->backup = b.rank;
  st.alone->link = replica_link_tag(st.joined_epoch, b.serial);
  st.alone->asked = st.alone->confirmed = false;
  // Asked at once, whatever waits: a notice left unsent could be
  // replaced by a later drop's, and this backup never told.
  ask_scheduler(self);
  std::string versions;
  for (auto& h : st.stores)
    versions += str(versions.empty() ? "" : ", ", h.store.version());
  report(self, "unreplicated",
         str("backup ", b.rank, " ", why, ": our ", st.stores.size(),
             " stores (versions ", versions,
             ") stand on this server alone until the backup has their"
             " copies"));
}

} // namespace troupe::server_impl

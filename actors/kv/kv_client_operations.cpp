// The kv client's operations: init, push, pull, push_pull and the resume
// clock, each cut into one request per server (parts above
// kv.max-message-bytes) and gathered into one reply.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <signal.h>
#include <unistd.h>

#include "actors/base/log.hpp"
#include "actors/base/metrics.hpp"
#include "actors/cluster/placement.hpp"
#include "actors/kv/kv_client_internal.hpp"
#include "actors/kv/kv_pull.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::kv_internal {

// -- push ---------------------------------------------------------------------

namespace {

/// Times a kv request, from its start to its last reply, into `h`.
struct kv_timer {
  prometheus::Histogram* h;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  void done() const {
    auto d = std::chrono::steady_clock::now() - t0;
    h->Observe(std::chrono::duration<double>(d).count());
  }
};

/// troupe_kv_seconds{op}, for push (every server acknowledged), pull, and
/// push_pull (a training step's round).
enum class kv_op { push, pull, push_pull };
kv_timer time_op(kv_op op) {
  static prometheus::Histogram* hs[3] = {};
  static std::once_flag once;
  std::call_once(once, [] {
    const char* names[3] = {"push", "pull", "push_pull"};
    for (int k = 0; k < 3; ++k)
      hs[k] = &metrics::histogram(
          "troupe_kv_seconds",
          "kv requests, start to last reply: push (every server"
          " acknowledged), pull, push_pull (a training step's round)",
          metrics::latency_buckets(), {{"op", names[k]}});
  });
  return kv_timer{hs[static_cast<int>(op)]};
}

/// True if a part of `count` slices and `bytes` of values is full before
/// a slice of `b` more: the server's frame limit is worker_frame_bound.
bool part_full(self_ptr self, size_t count, size_t bytes, size_t b) {
  auto limit = self->state.cfg.max_message_bytes;
  return count > 0 &&
         (bytes + b > limit || count >= max_slices_per_part(limit));
}

/// Cuts one server's slices into parts of at most max-message-bytes.
std::vector<std::vector<slice_view>> cut_parts(self_ptr self,
                                               std::vector<slice_view> xs) {
  std::vector<std::vector<slice_view>> parts(1);
  size_t bytes = 0;
  for (auto& x : xs) {
    auto b = x.size * sizeof(float);
    if (part_full(self, parts.back().size(), bytes, b)) {
      parts.emplace_back();
      bytes = 0;
    }
    bytes += b;
    parts.back().push_back(x);
  }
  return parts;
}

/// Pushes whose arrays become spare memory once their frames are gone.
constexpr size_t max_pushes_kept = 8;

/// Moves the arrays of the pushes nothing else holds any more (no frame
/// points into them) into `spare`, one per key: newer replace older.
void harvest_spares(self_ptr self) {
  auto& st = self->state;
  for (auto i = st.pushed.begin(); i != st.pushed.end();)
    if (i->use_count() == 1) {
      for (auto& x : **i)
        if (x.values.size() > 0)
          st.spare[x.key] = std::move(x.values);
      i = st.pushed.erase(i);
    } else {
      ++i;
    }
}

/// Notes the arrays of a push, to be spare memory once it is done.
void keep_for_spares(self_ptr self, const std::shared_ptr<arrays>& keep) {
  harvest_spares(self);
  auto& xs = self->state.pushed;
  if (std::find(xs.begin(), xs.end(), keep) != xs.end())
    return; // a resend of a push noted already
  if (xs.size() >= max_pushes_kept)
    xs.erase(xs.begin()); // the oldest stays with its frames only
  xs.push_back(keep);
}

/// Full-size memory for a pull of `key` (`n` floats): a spare (harvested
/// before), or empty.
std::vector<float> take_spare(self_ptr self, uint64_t key, size_t n) {
  auto& spare = self->state.spare;
  std::vector<float> out;
  auto s = spare.find(key);
  if (s != spare.end() && s->second.size() == n) {
    out = std::move(s->second);
    spare.erase(s);
  }
  return out;
}

} // namespace

void do_push(self_ptr self, uint64_t clock, std::shared_ptr<arrays> keep,
             std::function<void(caf::expected<uint64_t>)> reply) {
  auto& xs = *keep;
  if (auto err = check_arrays(self, xs)) {
    reply(std::move(err));
    return;
  }
  auto& st = self->state;
  if (clock >= st.push_fence) {
    reply(caf::make_error(
        errc::peer_down, "stage worker", st.fence_rank,
        "of this replica died with its clocks from", st.push_fence,
        "not on every server: no push of clock", clock, "before it is back"));
    return;
  }
  st.pushed_top = std::max(st.pushed_top, clock + 1);
  auto by_server = slices_by_server(self, xs);
  keep_for_spares(self, keep);
  self->state.unacked.insert(clock); // a resend's is in already
  auto acked = acked_through(self);
  std::vector<kv_request> msgs;
  // Every server hears from us each clock, even with nothing to add, so
  // that its sync rounds and ssp clocks advance.
  for (auto& s : self->state.view.servers) {
    auto parts = cut_parts(self, std::move(by_server[s.rank]));
    for (uint32_t p = 0; p < parts.size(); ++p)
      msgs.push_back(kv_request{
          s.rank, encode_push(push_request{self->state.rank,
                                           clock,
                                           self->state.view.epoch,
                                           p,
                                           static_cast<uint32_t>(parts.size()),
                                           {},
                                           acked},
                              parts[p])});
  }
  auto g = std::make_shared<gather>();
  auto answer = share(std::move(reply));
  g->on_error = [answer](caf::error err) { (*answer)(std::move(err)); };
  if (clock == self->state.kill_in_push && !msgs.empty()) {
    // Fault injection: the first server's parts alone, then death.
    auto first = msgs.front().rank;
    msgs.erase(std::remove_if(
                   msgs.begin(), msgs.end(),
                   [first](const kv_request& m) { return m.rank != first; }),
               msgs.end());
    answer = share(std::function<void(caf::expected<uint64_t>)>{
        [self, clock, first](caf::expected<uint64_t>) {
          TROUPE_LOG(warning, who(self),
                     "fault injection: killing its process in its push of"
                     " clock ",
                     clock, ", which server ", first, " alone took");
          ::kill(::getpid(), SIGKILL);
        }});
  }
  auto version = std::make_shared<uint64_t>(UINT64_MAX);
  scatter(
      self, push_atom_v, road_op::push, g, std::move(msgs),
      [version](bytes_view f) {
        push_reply r;
        auto err = decode(f, r);
        *version = std::min(*version, r.version);
        return err;
      },
      [self, clock, answer, version, timer = time_op(kv_op::push)] {
        timer.done();
        auto& st = self->state;
        st.unacked.erase(clock);
        st.acked_top = std::max(st.acked_top, clock + 1);
        (*answer)(*version == UINT64_MAX ? 0 : *version);
      },
      keep);
}

// -- pull ---------------------------------------------------------------------

namespace {

/// Pull requests for every slice of `t`, at least one per owning server,
/// cut so that no reply exceeds the message bound.
std::vector<kv_request> pull_messages(self_ptr self, const pull_target& t,
                                      uint64_t clock) {
  std::map<uint32_t, std::vector<std::pair<slice_id, size_t>>> by_server;
  auto bound = self->state.view.slice_floats;
  for (size_t k = 0; k < t.out.size(); ++k) {
    auto key = t.out[k].key;
    auto n = t.floats[k];
    for (uint32_t i = 0; i < slice_count(n, bound); ++i) {
      auto r = slice_range(n, bound, i);
      by_server[self->state.owner.at(slice_id{key, i})].emplace_back(
          slice_id{key, i}, (r.second - r.first) * sizeof(float));
    }
  }
  std::vector<kv_request> msgs;
  for (auto& [rank, slices] : by_server) {
    pull_request req{self->state.rank,
                     clock,
                     self->state.view.epoch,
                     {},
                     acked_through(self)};
    size_t bytes = 0;
    for (auto& [id, n] : slices) {
      if (part_full(self, req.slices.size(), bytes, n)) {
        msgs.push_back(kv_request{rank, encode(req), bytes});
        req.slices.clear();
        bytes = 0;
      }
      req.slices.push_back(id);
      bytes += n;
    }
    msgs.push_back(kv_request{rank, encode(req), bytes});
  }
  return msgs;
}

/// Replies to the pulls in `msgs` that go on a tcp road land in place:
/// the arrays of `t` are sized in full first. Where no spare was at hand
/// that is a zero fill, which costs about what landing saves (measured):
/// with spares, as in a training loop, landing saves a copy.
void land_in_place(self_ptr self, const std::shared_ptr<pull_target>& t,
                   std::vector<kv_request>& msgs) {
  auto on_tcp = [self](const kv_request& m) {
    auto link = self->state.roads.find(m.rank);
    return link != self->state.roads.end() &&
           link->second.conn->kind() == road_kind::tcp;
  };
  if (std::none_of(msgs.begin(), msgs.end(), on_tcp))
    return;
  for (size_t k = 0; k < t->out.size(); ++k)
    t->out[k].values.resize(t->floats[k]); // a spare is sized already
  auto l = std::make_shared<pull_landing>(t, self->state.view.slice_floats);
  for (auto& m : msgs)
    if (on_tcp(m))
      m.landing = l;
}

} // namespace

void do_pull(self_ptr self, uint64_t clock, const std::vector<uint64_t>& keys,
             std::function<void(caf::expected<arrays>)> reply) {
  auto t = std::make_shared<pull_target>();
  auto bound = self->state.view.slice_floats;
  harvest_spares(self); // once for all keys
  for (auto k : keys) {
    auto i = self->state.sizes.find(k);
    if (i == self->state.sizes.end()) {
      reply(never_declared(k));
      return;
    }
    if (auto err = check_placed(self, k, i->second)) {
      reply(std::move(err));
      return;
    }
    t->add(k, i->second, bound, take_spare(self, k, i->second));
  }
  auto g = std::make_shared<gather>();
  auto answer = share(std::move(reply));
  g->on_error = [answer](caf::error err) { (*answer)(std::move(err)); };
  auto msgs = pull_messages(self, *t, clock);
  land_in_place(self, t, msgs);
  scatter(
      self, pull_atom_v, road_op::pull, g, std::move(msgs),
      [t, bound](bytes_view f) { return copy_reply(f, *t, bound); },
      [answer, t, timer = time_op(kv_op::pull)] {
        if (auto err = t->complete())
          return (*answer)(std::move(err));
        timer.done();
        (*answer)(std::move(t->out));
      });
}

/// Push, then pull at the next clock, sent together: one round trip per
/// server for a training step. Replies with the pulled arrays once both
/// finished; the first error wins.
void do_push_pull(self_ptr self, uint64_t clock, std::shared_ptr<arrays> keep,
                  const std::vector<uint64_t>& keys,
                  std::function<void(caf::expected<arrays>)> reply) {
  struct joint {
    std::function<void(caf::expected<arrays>)> reply;
    bool pushed = false;
    bool failed = false;
    std::optional<arrays> pulled;
    void fail(caf::error err) {
      if (!failed) {
        failed = true;
        reply(std::move(err));
      }
    }
    void finish() {
      if (!failed && pushed && pulled)
        reply(std::move(*pulled));
    }
  };
  auto j = std::make_shared<joint>();
  j->reply = [reply = std::move(reply),
              timer = time_op(kv_op::push_pull)](caf::expected<arrays> r) {
    if (r)
      timer.done();
    reply(std::move(r));
  };
  do_push(self, clock, std::move(keep), [j](caf::expected<uint64_t> r) {
    if (!r)
      return j->fail(std::move(r.error()));
    j->pushed = true;
    j->finish();
  });
  do_pull(self, clock + 1, keys, [j](caf::expected<arrays> r) {
    if (!r)
      return j->fail(std::move(r.error()));
    j->pulled = std::move(*r);
    j->finish();
  });
}

/// The clock this worker resumes at (0 on a first run), over the servers
/// that hold slices: in sync the largest of its clocks there, else the
/// smallest (kv_settings::resume_at_largest). A sync server whose rounds
/// lagged by one when a restarted worker joined holds it a clock lower
/// than the others, and applies that round without it once it pulls at
/// the larger clock (shard_store::pulled): resuming at the smallest
/// instead, its first push was a duplicate where the round had passed and
/// was taken where it had not, and the servers' sums differed by one
/// (seen with the counter task's exact accounting). A server with no
/// slices (a restarted one) does not count: it takes the clock of the
/// worker's first push.
void do_clock(self_ptr self,
              std::function<void(caf::expected<uint64_t>)> reply) {
  auto& st = self->state;
  std::set<uint32_t> holders;
  for (auto& [id, rank] : st.owner)
    holders.insert(rank);
  std::vector<kv_request> msgs;
  for (auto& s : st.view.servers) // an empty pull: only the clock comes back
    if (holders.empty() || holders.count(s.rank) != 0)
      msgs.push_back(kv_request{
          s.rank, encode(pull_request{
                      st.rank, 0, st.view.epoch, {}, acked_through(self)})});
  auto g = std::make_shared<gather>();
  g->on_error = [reply](caf::error err) { reply(std::move(err)); };
  auto largest = st.cfg.resume_at_largest;
  auto lo = std::make_shared<uint64_t>(UINT64_MAX);
  auto hi = std::make_shared<uint64_t>(0);
  scatter(
      self, pull_atom_v, road_op::pull, g, std::move(msgs),
      [lo, hi](bytes_view f) {
        uint64_t version = 0, clock = 0;
        auto err = visit_pull_reply(
            f, version,
            [](slice_id id, const float*, size_t) {
              return caf::make_error(errc::malformed_message, "unasked slice",
                                     id.key, id.index);
            },
            &clock);
        *lo = std::min(*lo, clock);
        *hi = std::max(*hi, clock);
        return err;
      },
      [reply, lo, hi, largest] {
        reply(largest ? *hi : *lo == UINT64_MAX ? 0 : *lo);
      });
}

// -- init ---------------------------------------------------------------------

namespace {

void send_inits(self_ptr self, const arrays& xs,
                const std::vector<uint64_t>& mine, std::function<void()> then,
                gather_ptr g) {
  arrays own;
  for (auto& x : xs)
    if (std::find(mine.begin(), mine.end(), x.key) != mine.end())
      own.push_back(x);
  // A view without servers (the last one died) places nothing: fail as a
  // push does, and go again with a view that does (the kv client threw
  // out_of_range here, and its caller waited out its timeout).
  for (auto& x : own)
    if (auto err = check_placed(self, x.key, x.values.size())) {
      g->fail(std::move(err));
      return;
    }
  std::vector<kv_request> msgs;
  for (auto& [rank, slices] : slices_by_server(self, own))
    for (auto& part : cut_parts(self, std::move(slices))) {
      init_request req{self->state.rank, self->state.view.epoch, {}};
      for (auto& v : part) // rare: once per array and run
        req.slices.push_back({v.id, {v.data, v.data + v.size}});
      msgs.push_back(kv_request{rank, encode(req)});
    }
  scatter(
      self, init_atom_v, road_op::init, g, std::move(msgs),
      [](bytes_view f) {
        push_reply r;
        return decode(f, r);
      },
      std::move(then));
}

} // namespace

/// Sends our Init of the keys others initialise while our init is not
/// done (our own Inits on their way, or the pull after them waiting): a
/// worker left, and it may have been their initialiser, gone before its
/// Init arrived. Servers keep the first Init of a slice, so where the
/// initialiser's came first, ours changes nothing. Our own keys' Inits are
/// sent already, or fail our init (which is then resent).
void init_in_place_of_the_gone(self_ptr self,
                               const kv_client_state::open_init& open) {
  auto xs = open.arrays;
  auto& ours = open.initialising;
  std::vector<uint64_t> keys;
  for (auto& x : *xs)
    if (std::find(ours.begin(), ours.end(), x.key) == ours.end())
      keys.push_back(x.key);
  if (keys.empty())
    return;
  TROUPE_LOG(info, who(self),
             "a worker left before our init was done: sending our Init"
             " of the keys others initialise, in case it was theirs");
  auto g = std::make_shared<gather>();
  g->on_error = [self](caf::error err) {
    TROUPE_LOG(warning, who(self),
               "Init in place of a departed worker failed: ", describe(err));
  };
  send_inits(
      self, *xs, keys, [] {}, g);
}

/// `xs` is shared, never copied: arrays may be large, and a resend runs
/// this again.
void do_init(self_ptr self, std::shared_ptr<const arrays> xs,
             uint32_t clocks_per_step, reply_to<arrays> reply) {
  if (auto key = key_twice(*xs)) { // the scheduler reads it as corruption
    reply(caf::make_error(errc::invalid_config,
                          "key " + std::to_string(*key) +
                              " is declared twice in one init"));
    return;
  }
  declare_request req{self->state.rank, {}, clocks_per_step};
  std::vector<uint64_t> keys;
  for (auto& x : *xs) {
    req.keys.push_back(key_info{x.key, x.values.size()});
    keys.push_back(x.key);
  }
  // Our init is over, either way: no Init in place of a departed worker.
  auto serial = self->state.next_init++;
  auto done = [self, serial, reply](caf::expected<arrays> r) {
    self->state.open_inits.erase(serial);
    reply(std::move(r));
  };
  auto g = std::make_shared<gather>();
  g->on_error = [done](caf::error err) { done(std::move(err)); };
  track(self, UINT32_MAX, g); // failed if we stop
  TROUPE_LOG(debug, who(self), "declaring ", keys.size(), " arrays");
  self->request(self->state.scheduler, timeout_of(self), declare_atom_v,
                encode(req))
      .then(
          [self, xs, keys, g, done, serial](const frame& f) {
            declare_reply dr;
            if (auto err = decode(f, dr)) {
              g->fail(err);
              return;
            }
            apply_view(self, dr.view);
            // From the scheduler's answer on, a worker that leaves may be
            // the initialiser of keys we do not initialise, gone before its
            // Init arrived: also while our own Inits are on their way.
            self->state.open_inits[serial] = {xs, dr.initialiser};
            when_ready(
                self,
                [self, xs, keys, g, done, mine = dr.initialiser] {
                  send_inits(
                      self, *xs, mine,
                      [self, keys, done] { do_pull(self, 0, keys, done); }, g);
                },
                [g](caf::error err) { g->fail(std::move(err)); });
          },
          [g, limit = timeout_of(self)](caf::error& err) {
            // Declares wait until --cluster.servers servers have joined.
            g->fail(scheduler_timeout(
                std::move(err),
                "declare (the scheduler answers once every expected server"
                " has joined)",
                limit));
          });
}

} // namespace troupe::kv_internal

// Encode/decode of the membership conversation, with validation.
#include "messages/membership.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "messages/errors.hpp"
#include "messages/frame_codec.hpp"
#include "messages/membership.capnp.h"

namespace troupe {

namespace {

using detail::decode_guarded;
using detail::frame_reader;
using detail::to_frame;

constexpr size_t max_host_chars = 255;

caf::error bad(const char* what) {
  return caf::make_error(errc::malformed_message, what);
}

caf::error read_role(schema::Role r, role& out) {
  auto v = static_cast<uint16_t>(r);
  if (v > static_cast<uint16_t>(role::worker))
    return bad("unknown role");
  out = static_cast<role>(v);
  return caf::none;
}

// -- views ------------------------------------------------------------------

void write_road(schema::Road::Builder b, const road_info& x) {
  b.setPort(x.port);
  b.setMachine(x.machine);
  b.setSocket(x.socket);
}

caf::error read_road(schema::Road::Reader r, road_info& x) {
  if (r.getMachine().size() > max_host_chars ||
      r.getSocket().size() > max_host_chars)
    return bad("road name too long");
  x.port = r.getPort();
  x.machine = r.getMachine().cStr();
  x.socket = r.getSocket().cStr();
  return caf::none;
}

void write_node(schema::Node::Builder b, const node_info& x) {
  b.setRole(static_cast<schema::Role>(x.kind));
  b.setRank(x.rank);
  b.setHost(x.host);
  b.setPort(x.port);
  b.setPid(x.pid);
  write_road(b.initRoad(), x.road);
}

caf::error read_node(schema::Node::Reader r, node_info& x) {
  if (auto err = read_role(r.getRole(), x.kind))
    return err;
  if (r.getHost().size() > max_host_chars)
    return bad("host name too long");
  x.rank = r.getRank();
  x.host = r.getHost().cStr();
  x.port = r.getPort();
  x.pid = r.getPid();
  return read_road(r.getRoad(), x.road);
}

void write_view(schema::ClusterView::Builder b, const cluster_view& x) {
  b.setEpoch(x.epoch);
  b.setSliceFloats(x.slice_floats);
  b.setExpectedWorkers(x.expected_workers);
  auto put = [](auto list, const std::vector<uint32_t>& ranks) {
    for (size_t i = 0; i < ranks.size(); ++i)
      list.set(i, ranks[i]);
  };
  put(b.initGivenUp(x.given_up.size()), x.given_up);
  put(b.initEnded(x.ended.size()), x.ended);
  put(b.initFinished(x.finished.size()), x.finished);
  auto servers = b.initServers(x.servers.size());
  for (size_t i = 0; i < x.servers.size(); ++i)
    write_node(servers[i], x.servers[i]);
  auto workers = b.initWorkers(x.workers.size());
  for (size_t i = 0; i < x.workers.size(); ++i)
    write_node(workers[i], x.workers[i]);
  auto keys = b.initKeys(x.keys.size());
  for (size_t i = 0; i < x.keys.size(); ++i) {
    keys[i].setKey(x.keys[i].key);
    keys[i].setSize(x.keys[i].size);
  }
  auto places = b.initPlacement(x.placement.size());
  for (size_t i = 0; i < x.placement.size(); ++i) {
    places[i].setKey(x.placement[i].key);
    places[i].setIndex(x.placement[i].index);
    places[i].setServer(x.placement[i].server);
  }
}

caf::error read_nodes(capnp::List<schema::Node>::Reader r, role expected,
                      std::vector<node_info>& out) {
  if (r.size() > max_nodes)
    return bad("too many nodes");
  out.resize(r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    if (auto err = read_node(r[i], out[i]))
      return err;
    if (out[i].kind != expected)
      return bad("node listed under the wrong role");
  }
  return caf::none;
}

caf::error read_keys(capnp::List<schema::KeyInfo>::Reader r,
                     std::vector<key_info>& out) {
  out.resize(r.size());
  for (size_t i = 0; i < r.size(); ++i)
    out[i] = key_info{r[i].getKey(), r[i].getSize()};
  return caf::none;
}

caf::error read_view(schema::ClusterView::Reader r, cluster_view& x) {
  x.epoch = r.getEpoch();
  x.slice_floats = r.getSliceFloats();
  x.expected_workers = r.getExpectedWorkers();
  if (r.getGivenUp().size() > max_nodes || r.getEnded().size() > max_nodes ||
      r.getFinished().size() > max_nodes)
    return bad("too many ranks given up, ended or finished");
  auto take = [](auto list, std::vector<uint32_t>& out) {
    out.clear();
    for (auto rank : list)
      out.push_back(rank);
  };
  take(r.getGivenUp(), x.given_up);
  take(r.getEnded(), x.ended);
  take(r.getFinished(), x.finished);
  if (auto err = read_nodes(r.getServers(), role::server, x.servers))
    return err;
  if (auto err = read_nodes(r.getWorkers(), role::worker, x.workers))
    return err;
  read_keys(r.getKeys(), x.keys);
  auto places = r.getPlacement();
  x.placement.resize(places.size());
  for (size_t i = 0; i < places.size(); ++i)
    x.placement[i] = slice_place{places[i].getKey(), places[i].getIndex(),
                                 places[i].getServer()};
  return validate(x);
}

caf::error check_keys(const std::vector<key_info>& keys) {
  std::set<uint64_t> seen;
  for (auto& k : keys) {
    if (k.size == 0 || k.size > max_key_size)
      return caf::make_error(errc::malformed_message, "key size out of range",
                             k.key, k.size);
    if (!seen.insert(k.key).second)
      return caf::make_error(errc::malformed_message, "key listed twice",
                             k.key);
  }
  return caf::none;
}

caf::error check_ranks(const std::vector<node_info>& nodes) {
  std::set<uint32_t> ranks;
  for (auto& n : nodes)
    if (!ranks.insert(n.rank).second)
      return caf::make_error(errc::malformed_message, "rank listed twice",
                             n.rank);
  return caf::none;
}

void write_event(schema::Event::Builder b, const event_record& x) {
  b.setAtMs(x.at_ms);
  b.setKind(x.kind);
  b.setRole(static_cast<schema::Role>(x.about));
  b.setRank(x.rank);
  b.setPid(x.pid);
  b.setDetail(x.detail);
  b.setSource(x.source);
  b.setHasClock(x.clock.has_value());
  b.setClock(x.clock.value_or(0));
}

caf::error read_event(schema::Event::Reader r, event_record& x) {
  auto kind = r.getKind();
  if (kind.size() == 0 || kind.size() > max_event_kind)
    return bad("event kind must have 1..32 characters");
  if (r.getDetail().size() > max_event_text ||
      r.getSource().size() > max_event_text)
    return bad("event text too long");
  if (auto err = read_role(r.getRole(), x.about))
    return err;
  x.at_ms = r.getAtMs();
  x.kind = kind.cStr();
  x.rank = r.getRank();
  x.pid = r.getPid();
  x.detail = r.getDetail().cStr();
  x.source = r.getSource().cStr();
  x.clock.reset();
  if (r.getHasClock())
    x.clock = r.getClock();
  return caf::none;
}

} // namespace

void agent_ranks::learn(const std::string& host, uint32_t pid, role about,
                        uint32_t rank) {
  if (pid == 0)
    return;
  auto key = std::make_pair(host, pid);
  if (by_process_.count(key) == 0) {
    order_.push_back(key);
    if (order_.size() > max_known) {
      by_process_.erase(order_.front());
      order_.pop_front();
    }
  }
  by_process_[key] = {about, rank};
}

bool agent_ranks::apply(event_record& e, const std::string& host) {
  if (e.source.rfind("agent", 0) != 0)
    return false;
  auto slot =
      host + '|' + e.source + '|' + e.detail.substr(0, e.detail.find(':'));
  std::optional<rank_of> found;
  if (auto p = by_process_.find({host, e.pid}); p != by_process_.end())
    found = p->second;
  else if (auto s = by_slot_.find(slot); s != by_slot_.end())
    found = s->second;
  if (!found)
    return false;
  if (by_slot_.size() >= max_known && by_slot_.count(slot) == 0)
    by_slot_.clear();
  by_slot_[slot] = *found;
  e.about = found->first;
  e.rank = found->second;
  return true;
}

std::vector<std::string> agent_ranks::worker_pid_hosts(uint32_t pid) const {
  std::vector<std::string> out;
  for (auto& [process, rank] : by_process_)
    if (pid != 0 && process.second == pid && rank.first == role::worker)
      out.push_back(process.first);
  return out;
}

const char* to_string(role x) {
  switch (x) {
  case role::scheduler:
    return "scheduler";
  case role::server:
    return "server";
  case role::worker:
    return "worker";
  }
  return "unknown";
}

bool node_info::operator==(const node_info& y) const {
  return kind == y.kind && rank == y.rank && host == y.host && port == y.port &&
         pid == y.pid && road == y.road;
}

bool cluster_view::operator==(const cluster_view& y) const {
  return epoch == y.epoch && servers == y.servers && workers == y.workers &&
         keys == y.keys && placement == y.placement &&
         slice_floats == y.slice_floats &&
         expected_workers == y.expected_workers && given_up == y.given_up &&
         ended == y.ended && finished == y.finished;
}

caf::error validate(const cluster_view& x) {
  if (x.epoch == 0)
    return bad("view epoch 0");
  if (x.slice_floats == 0 || x.slice_floats > max_slice_floats)
    return bad("slice bound out of range");
  if (auto err = check_ranks(x.servers))
    return err;
  if (auto err = check_ranks(x.workers))
    return err;
  if (auto err = check_keys(x.keys))
    return err;
  std::set<uint32_t> working;
  for (auto& w : x.workers)
    working.insert(w.rank);
  for (auto* ranks : {&x.given_up, &x.ended, &x.finished})
    for (size_t i = 0; i < ranks->size(); ++i) {
      auto rank = (*ranks)[i];
      if (i > 0 && rank <= (*ranks)[i - 1])
        return bad("ranks given up, ended or finished not ascending");
      if (working.count(rank) != 0)
        return caf::make_error(
            errc::malformed_message,
            "a live worker listed as given up, ended or finished", rank);
    }
  std::set<uint32_t> live;
  for (auto& s : x.servers)
    live.insert(s.rank);
  std::map<uint64_t, uint64_t> slices_of; // key -> expected slice count
  for (auto& k : x.keys)
    slices_of[k.key] = (k.size + x.slice_floats - 1) / x.slice_floats;
  std::set<std::pair<uint64_t, uint32_t>> placed;
  for (auto& p : x.placement) {
    auto i = slices_of.find(p.key);
    if (i == slices_of.end() || p.index >= i->second)
      return caf::make_error(errc::malformed_message,
                             "placement of an undeclared slice", p.key,
                             p.index);
    if (live.count(p.server) == 0)
      return caf::make_error(errc::malformed_message,
                             "slice placed on a server not in the view", p.key,
                             p.index, p.server);
    if (!placed.emplace(p.key, p.index).second)
      return bad("slice placed twice");
  }
  uint64_t expected = 0;
  for (auto& kv : slices_of)
    expected += kv.second;
  // With no server alive, declared arrays have no place until one joins.
  if (!x.servers.empty() && placed.size() != expected)
    return bad("declared slices without a place");
  return caf::none;
}

// -- encode -----------------------------------------------------------------

frame encode(const register_request& x) {
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::Register>();
  b.setRole(static_cast<schema::Role>(x.kind));
  b.setHost(x.host);
  b.setPort(x.port);
  b.setPid(x.pid);
  write_road(b.initRoad(), x.road);
  b.setStageGroup(x.stage_group);
  b.setOptimizer(x.optimizer);
  b.setMode(x.mode);
  b.setWork(x.work);
  return to_frame(msg);
}

frame encode(const register_reply& x) {
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::RegisterReply>();
  b.setRank(x.rank);
  write_view(b.initView(), x.view);
  b.setRoadKey(capnp::Data::Reader{
      reinterpret_cast<const kj::byte*>(x.road_key.data()), x.road_key.size()});
  return to_frame(msg);
}

frame encode(const cluster_view& x) {
  capnp::MallocMessageBuilder msg;
  write_view(msg.initRoot<schema::ClusterView>(), x);
  return to_frame(msg);
}

frame encode(const declare_request& x) {
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::Declare>();
  b.setWorker(x.worker);
  b.setClocksPerStep(x.clocks_per_step);
  auto keys = b.initKeys(x.keys.size());
  for (size_t i = 0; i < x.keys.size(); ++i) {
    keys[i].setKey(x.keys[i].key);
    keys[i].setSize(x.keys[i].size);
  }
  return to_frame(msg);
}

frame encode(const declare_reply& x) {
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::DeclareReply>();
  write_view(b.initView(), x.view);
  auto init = b.initInitialiser(x.initialiser.size());
  for (size_t i = 0; i < x.initialiser.size(); ++i)
    init.set(i, x.initialiser[i]);
  return to_frame(msg);
}

frame encode(const barrier_request& x) {
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::Barrier>();
  b.setName(x.name);
  b.setRole(static_cast<schema::Role>(x.kind));
  b.setRank(x.rank);
  return to_frame(msg);
}

frame encode(const event_record& x) {
  capnp::MallocMessageBuilder msg;
  write_event(msg.initRoot<schema::Event>(), x);
  return to_frame(msg);
}

frame encode(const std::vector<event_record>& log) {
  capnp::MallocMessageBuilder msg;
  auto events = msg.initRoot<schema::EventLog>().initEvents(log.size());
  for (size_t i = 0; i < log.size(); ++i)
    write_event(events[i], log[i]);
  return to_frame(msg);
}

// -- decode -----------------------------------------------------------------

caf::error decode(const frame& f, register_request& x) {
  return decode_guarded(f, "Register", [&x](frame_reader& rd) {
    auto r = rd.get<schema::Register>();
    if (auto err = read_role(r.getRole(), x.kind))
      return err;
    if (r.getHost().size() > max_host_chars)
      return bad("host name too long");
    x.host = r.getHost().cStr();
    x.port = r.getPort();
    x.pid = r.getPid();
    x.stage_group = r.getStageGroup();
    if (r.getOptimizer().size() > max_host_chars) // as long as a host
      return bad("optimizer too long");
    x.optimizer = r.getOptimizer().cStr();
    if (r.getMode().size() > max_host_chars)
      return bad("mode too long");
    x.mode = r.getMode().cStr();
    if (r.getWork().size() > max_host_chars)
      return bad("work too long");
    x.work = r.getWork().cStr();
    return read_road(r.getRoad(), x.road);
  });
}

caf::error decode(const frame& f, register_reply& x) {
  return decode_guarded(f, "RegisterReply", [&x](frame_reader& rd) {
    auto r = rd.get<schema::RegisterReply>();
    x.rank = r.getRank();
    auto key = r.getRoadKey();
    if (key.size() != 0 && key.size() != road_key_bytes)
      return caf::make_error(errc::malformed_message, "road key of",
                             static_cast<uint64_t>(key.size()), "bytes");
    x.road_key.assign(reinterpret_cast<const char*>(key.begin()), key.size());
    return read_view(r.getView(), x.view);
  });
}

caf::error decode(const frame& f, cluster_view& x) {
  return decode_guarded(f, "ClusterView", [&x](frame_reader& rd) {
    return read_view(rd.get<schema::ClusterView>(), x);
  });
}

caf::error decode(const frame& f, declare_request& x) {
  return decode_guarded(f, "Declare", [&x](frame_reader& rd) {
    auto r = rd.get<schema::Declare>();
    x.worker = r.getWorker();
    x.clocks_per_step = std::max<uint32_t>(r.getClocksPerStep(), 1);
    read_keys(r.getKeys(), x.keys);
    return check_keys(x.keys);
  });
}

caf::error decode(const frame& f, declare_reply& x) {
  return decode_guarded(f, "DeclareReply", [&x](frame_reader& rd) {
    auto r = rd.get<schema::DeclareReply>();
    if (auto err = read_view(r.getView(), x.view))
      return err;
    auto init = r.getInitialiser();
    x.initialiser.clear();
    for (auto k : init)
      x.initialiser.push_back(k);
    return caf::error{};
  });
}

caf::error decode(const frame& f, barrier_request& x) {
  return decode_guarded(f, "Barrier", [&x](frame_reader& rd) {
    auto r = rd.get<schema::Barrier>();
    auto name = r.getName();
    if (name.size() == 0 || name.size() > max_barrier_name)
      return bad("barrier name must have 1..64 characters");
    if (auto err = read_role(r.getRole(), x.kind))
      return err;
    x.name = name.cStr();
    x.rank = r.getRank();
    return caf::error{};
  });
}

} // namespace troupe

namespace troupe {

caf::error decode(const frame& f, event_record& x) {
  return decode_guarded(f, "Event", [&x](frame_reader& rd) {
    return read_event(rd.get<schema::Event>(), x);
  });
}

caf::error decode(const frame& f, std::vector<event_record>& log) {
  return decode_guarded(f, "EventLog", [&log](frame_reader& rd) {
    auto events = rd.get<schema::EventLog>().getEvents();
    log.resize(events.size());
    for (size_t i = 0; i < events.size(); ++i)
      if (auto err = read_event(events[i], log[i]))
        return err;
    return caf::error{};
  });
}

} // namespace troupe

// Membership conversation (messages/membership.capnp) as plain C++ values,
// with encode/decode. decode validates everything the bytes alone can tell.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/frame.hpp"

namespace troupe {

/// What a node does in the cluster.
enum class role : uint8_t { scheduler = 0, server = 1, worker = 2 };

/// Name of `x`: "scheduler", "server" or "worker".
const char* to_string(role x);

/// One member of the cluster.
/// Where a server's fast road for tensors listens (actors/road/road.hpp).
struct road_info {
  uint16_t port = 0;   ///< TCP port on the node's host, 0 = no fast road
  std::string machine; ///< equal on both ends: shared memory is possible
  std::string socket;  ///< abstract unix socket name, "" = no shm road
  bool operator==(const road_info& y) const {
    return port == y.port && machine == y.machine && socket == y.socket;
  }
};

struct node_info {
  role kind = role::worker;
  uint32_t rank = 0; ///< dense per role
  std::string host;  ///< published address, "" if not published
  uint16_t port = 0; ///< published port, 0 if not published
  uint32_t pid = 0;  ///< operating-system process id
  road_info road;    ///< servers: their fast road
  bool operator==(const node_info& y) const;
};

/// A declared parameter array: `size` float32 elements under `key`.
struct key_info {
  uint64_t key = 0;
  uint64_t size = 0;
  bool operator==(const key_info& y) const {
    return key == y.key && size == y.size;
  }
};

/// Slice `index` of array `key` lives on server `server` (a rank).
struct slice_place {
  uint64_t key = 0;
  uint32_t index = 0;
  uint32_t server = 0;
  bool operator==(const slice_place& y) const {
    return key == y.key && index == y.index && server == y.server;
  }
};

/// What every node acts on; later epochs replace earlier ones.
struct cluster_view {
  uint64_t epoch = 0; ///< 0 = no view yet; published views start at 1
  std::vector<node_info> servers;
  std::vector<node_info> workers;
  std::vector<key_info> keys;
  std::vector<slice_place> placement;
  uint32_t slice_floats = 0; ///< slice bound in floats
  /// Workers the job expects (--cluster.workers): data partitions.
  uint32_t expected_workers = 0;
  /// Worker ranks, none live, whose process its agent gave up on (no
  /// restart will come; given_up_ranks), ascending.
  std::vector<uint32_t> given_up;
  /// Worker ranks, none live, that ended saying why (not restarted; a
  /// stage of a replica that cannot go on), ascending.
  std::vector<uint32_t> ended;
  /// Worker ranks, none live, that did their work and left, ascending.
  std::vector<uint32_t> finished;
  bool operator==(const cluster_view& y) const;
};

/// Node -> scheduler at start.
struct register_request {
  role kind = role::worker;
  std::string host;
  uint16_t port = 0;
  uint32_t pid = 0;
  road_info road;
  /// A pipeline stage with shard servers: stages per replica (worker ranks
  /// r*P .. r*P+P-1 are replica r, cut as one); 0 = no stage.
  uint32_t stage_group = 0;
  /// The optimizer it applies or expects (optimizer_fingerprint); "" says
  /// nothing (a custom worker, the counter task, a stage).
  std::string optimizer;
  /// Its --server.mode as the servers run it (sync_device: sync); "" says
  /// nothing (a kv client of the caller's own settings).
  std::string mode;
  /// A worker: what decides how many clocks it runs, in its flags' words
  /// (kv_settings::work); "" says nothing.
  std::string work;
};

/// Scheduler -> node: its rank and the first view that has it.
struct register_reply {
  uint32_t rank = 0;
  cluster_view view;
  /// A server: the cluster's road key; a worker: its road token (32 bytes,
  /// or empty: no road).
  std::string road_key;
};

/// Worker -> scheduler: arrays it will use.
struct declare_request {
  uint32_t worker = 0;
  std::vector<key_info> keys;
  /// Servers' clocks per training step: an overlapped worker pushes each
  /// step in this many blocks, one clock each (checkpoints cut between
  /// steps); 1 otherwise.
  uint32_t clocks_per_step = 1;
};

/// Scheduler -> worker: the placed arrays, and which it must initialise.
struct declare_reply {
  cluster_view view;
  std::vector<uint64_t> initialiser;
};

/// Node -> scheduler: arrived at barrier `name` (1..64 characters).
struct barrier_request {
  std::string name;
  role kind = role::worker;
  uint32_t rank = 0;
};

/// A failure, restart, promotion or rejoin (membership.capnp Event).
struct event_record {
  int64_t at_ms = 0; ///< wall-clock ms since 1970 when it was observed
  std::string kind;  ///< joined, rejoined, left, crashed, exited, ...
  role about = role::worker;
  uint32_t rank = 0;
  uint32_t pid = 0;   ///< 0 = unknown
  std::string detail; ///< for people
  std::string source; ///< who observed it
  /// The training clock it is about: a cut's clocks kept, a worker's first
  /// clock ("started"); none for other kinds.
  std::optional<uint64_t> clock = std::nullopt;
  bool operator==(const event_record& y) const;
};

/// Wall-clock now, in ms since 1970: the time base of events.
int64_t now_ms();

/// One line of JSON: {"at_ms":..,"kind":..,"role":..,"rank":..,"pid":..,
/// "detail":..,"source":..[,"clock":..]}, strings escaped.
std::string to_json(const event_record& x);

/// The event of one line that to_json wrote (an events.jsonl line), or
/// malformed_message naming what is wrong with it.
caf::expected<event_record> event_from_json(const std::string& line);

/// An agent names its children by its own slots ("worker-1" is its second
/// worker), the scheduler by the ranks it gave them in order of joining:
/// one process can be "worker-1" to its agent and worker 0 to the
/// scheduler. This puts the scheduler's role and rank on an agent's event:
/// that of the event's process, found by host and pid among the processes
/// the scheduler admitted (learn); else (a restart before its process
/// joins, a process that never joins) the last one found for the event's
/// slot. Otherwise the event keeps the slot's number. The slot stays at the
/// front of the detail ("worker-1: ..."). A host is what tells machines (or
/// containers, each with pids of its own) apart: the host part of a CAF
/// node id online; "" in a log read back, which has no hosts.
class agent_ranks {
public:
  /// Process `pid` on `host` holds rank `rank` of `about` (a join; pid 0
  /// is ignored).
  void learn(const std::string& host, uint32_t pid, role about, uint32_t rank);
  /// Gives event `e` of an agent on `host` the scheduler's role and rank
  /// where known (an event from another source is left alone); true if it
  /// was.
  bool apply(event_record& e, const std::string& host);
  /// The hosts on which a worker process `pid` was learned.
  std::vector<std::string> worker_pid_hosts(uint32_t pid) const;

private:
  /// Most processes and slots remembered (then the oldest processes are
  /// forgotten, and every slot).
  static constexpr size_t max_known = 65536;
  using rank_of = std::pair<role, uint32_t>;
  std::map<std::pair<std::string, uint32_t>, rank_of> by_process_;
  std::deque<std::pair<std::string, uint32_t>> order_; // oldest first
  /// (host, agent, slot) -> what the slot's process was last found to be.
  std::map<std::string, rank_of> by_slot_;
};

// -- limits checked by decode -----------------------------------------------

/// Most nodes of one role in a view.
constexpr size_t max_nodes = 4096;
/// Most elements of one array (2^36 floats = 256 GiB).
constexpr uint64_t max_key_size = uint64_t{1} << 36;
/// Largest slice bound, in floats (64 Mi floats = 256 MiB).
constexpr uint32_t max_slice_floats = 64u << 20;
/// Longest barrier name.
constexpr size_t max_barrier_name = 64;
/// Length of a RegisterReply's road key (when it has one).
constexpr size_t road_key_bytes = 32;
/// Longest event kind, and event detail or source.
constexpr size_t max_event_kind = 32;
constexpr size_t max_event_text = 1024;

// -- codec ------------------------------------------------------------------

frame encode(const register_request& x);
frame encode(const register_reply& x);
frame encode(const cluster_view& x);
frame encode(const declare_request& x);
frame encode(const declare_reply& x);
frame encode(const barrier_request& x);
frame encode(const event_record& x);
frame encode(const std::vector<event_record>& log);

caf::error decode(const frame& f, register_request& x);
caf::error decode(const frame& f, register_reply& x);
caf::error decode(const frame& f, cluster_view& x);
caf::error decode(const frame& f, declare_request& x);
caf::error decode(const frame& f, declare_reply& x);
caf::error decode(const frame& f, barrier_request& x);
caf::error decode(const frame& f, event_record& x);
caf::error decode(const frame& f, std::vector<event_record>& log);

/// Checks the invariants of a view: unique ranks, every slice of every
/// declared array placed exactly once on a live server.
caf::error validate(const cluster_view& x);

} // namespace troupe

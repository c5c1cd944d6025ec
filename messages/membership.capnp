# Membership: who is in the cluster, and the cluster view everyone acts on.
#
#   node (server, worker)  -> scheduler : Register        -> RegisterReply
#   scheduler -> every node              : ClusterView     (on every change)
#   worker kv client       -> scheduler : Declare         -> DeclareReply
#   any node               -> scheduler : Barrier         -> (empty reply)
#   agent, server          -> scheduler : Event           (no reply)
#   anyone                 -> scheduler : (events query)  -> EventLog
@0xc3eeedaf328c9725;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

enum Role {
  scheduler @0;
  server @1;     # shard server: owns slices of parameter arrays
  worker @2;     # pushes gradients, pulls weights
}

struct Node {
  # One member of the cluster as the scheduler knows it.
  role @0 :Role;
  rank @1 :UInt32;   # dense per role: 0 .. (count of that role - 1) at join
  host @2 :Text;     # address its actor is published on; "" = not published
  port @3 :UInt16;   # 0 = not published (workers)
  pid  @4 :UInt32;   # operating-system process id, for logs and deploy tools
  road @5 :Road;     # servers: where their fast road listens
}

struct Road {
  # Where a server's fast road for tensors listens (actors/road/road.hpp).
  port    @0 :UInt16;  # TCP port on the node's host; 0 = no fast road
  machine @1 :Text;    # boot id + network namespace: equal = same machine
  socket  @2 :Text;    # abstract unix socket of the shared-memory road;
                       # "" = none
}

struct Register {
  # Node -> scheduler, once at start. Answered with RegisterReply.
  role @0 :Role;
  host @1 :Text;     # where the node's actor is published ("" if not)
  port @2 :UInt16;   # its port (0 if not published)
  pid  @3 :UInt32;   # operating-system process id
  road @4 :Road;     # servers: where their fast road listens
  stageGroup @5 :UInt32;
  # A pipeline stage with shard servers: the stages per replica, P (the
  # worker ranks r*P .. r*P+P-1 form replica r, which the servers' cuts
  # treat as one); 0 = no stage.
  optimizer @6 :Text;
  # The optimizer it applies or expects, as "NAME@ON lr=..." (servers and
  # trainers; "" = says nothing): the scheduler refuses a node whose
  # optimizer disagrees with the members' (docs/trust.md).
  mode @7 :Text;
  # Its --server.mode as the servers run it ("sync", "async", "ssp:S"; a
  # worker's sync_device is "sync"); "" = says nothing (a kv user's own
  # settings): the scheduler refuses a node whose mode is not its own.
  work @8 :Text;
  # Workers: what decides how many clocks it runs, as its flags say it
  # ("--worker.steps=20 --worker.keys=4"); "" = says nothing. In sync and
  # ssp the scheduler refuses a worker whose work is not a live worker's:
  # the one that ends first would leave the others' rounds short.
}

struct SlicePlace {
  # Where one slice of a parameter array lives.
  key    @0 :UInt64;  # the array's key
  index  @1 :UInt32;  # slice number within the array, 0-based
  server @2 :UInt32;  # rank of the server that owns it
}

struct KeyInfo {
  # A declared parameter array.
  key   @0 :UInt64;   # the array's key
  size  @1 :UInt64;   # number of float32 elements in the whole array
}

struct ClusterView {
  # Scheduler -> every node, on every change. Later epochs replace earlier.
  epoch       @0 :UInt64;         # strictly increasing; 1 is the first view
  servers     @1 :List(Node);     # live servers, by rank
  workers     @2 :List(Node);     # live workers, by rank
  keys        @3 :List(KeyInfo);  # declared arrays
  placement   @4 :List(SlicePlace);  # every slice of every declared array
  sliceFloats @5 :UInt32;         # slice bound: floats per slice (> 0)
  expectedWorkers @6 :UInt32;     # --cluster.workers: training data is
                                  # partitioned this many ways, whoever is
                                  # live at the moment
  givenUp     @7 :List(UInt32);   # worker ranks not live whose process its
                                  # agent gave up on: no restart will come
  ended       @8 :List(UInt32);   # worker ranks not live that ended saying
                                  # why (a pipeline replica that cannot go
                                  # on): not restarted either
  finished    @9 :List(UInt32);   # worker ranks not live that did their
                                  # work and left
}

struct RegisterReply {
  # Scheduler -> node: its rank and the view that includes it.
  rank @0 :UInt32;
  view @1 :ClusterView;
  roadKey @2 :Data;  # 32 bytes: a server gets the cluster's road key, a
                     # worker its own token (actors/base/member_secret.hpp);
                     # empty: no road (a scheduler that has none)
}

struct Declare {
  # Worker -> scheduler: the arrays this worker will push and pull.
  # The scheduler slices and places them; answered with DeclareReply once
  # the expected number of servers has joined.
  worker @0 :UInt32;          # the declaring worker's rank
  keys   @1 :List(KeyInfo);   # same key declared twice must keep its size
  clocksPerStep @2 :UInt32;   # servers' clocks per training step (an
                              # overlapped worker's blocks); 0 = 1
}

struct DeclareReply {
  # Scheduler -> worker.
  view        @0 :ClusterView;   # includes the declared arrays
  initialiser @1 :List(UInt64);  # keys this worker must initialise (first
                                 # declarer of a key); others wait for them
}

struct Barrier {
  # Node -> scheduler. Answered when every expected live node of `role` has
  # arrived at the barrier `name`.
  name @0 :Text;   # 1..64 characters
  role @1 :Role;   # whose arrivals count
  rank @2 :UInt32; # the arriving node's rank within `role`
}

struct Event {
  # A failure, restart, promotion or rejoin: agents and servers report them
  # to the scheduler, which adds its own (joins, departures), logs each one
  # and keeps them all in order of arrival.
  atMs   @0 :Int64;   # wall-clock time it was observed, ms since 1970 (UTC)
  kind   @1 :Text;    # joined | rejoined | left | crashed | exited |
                      # restarting | restarted | gave-up | resumed |
                      # agent-down | ... (1..32 characters)
  role   @2 :Role;    # role of the process it is about
  rank   @3 :UInt32;  # its rank (agents: index of the child of that role)
  pid    @4 :UInt32;  # its process id; 0 = unknown
  detail @5 :Text;    # for people, at most 1024 bytes
  source @6 :Text;    # who observed it, e.g. "scheduler", "agent 1234"
  clock  @7 :UInt64;  # the training clock it is about, if hasClock: a
                      # cut's clocks kept, a worker's first clock (started)
  hasClock @8 :Bool;
}

struct EventLog {
  # Scheduler -> whoever asked: every event so far, oldest first.
  events @0 :List(Event);
}

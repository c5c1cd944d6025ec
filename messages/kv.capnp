# Key-value conversation between a worker's kv client and shard servers,
# and between a server and its backup.
#
#   worker -> server  : Init      -> PushReply  first initialiser wins; the
#                                               reply carries the server's
#                                               version, duplicate = false
#   worker -> server  : Push      -> PushReply  one per server per clock
#   worker -> server  : Pull      -> PullReply  waits per the consistency mode
#   primary -> backup : Replicate -> PushReply  one replica operation (chain
#                                               replication, fast road)
#   server -> worker  : Failure                 fast road only: in place of a
#   server -> primary                           reply (CAF carries errors
#                                               itself)
@0xeadaba6383c36339;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

struct Slice {
  # Values of one slice: raw little-endian float32.
  key    @0 :UInt64;  # the array's key
  index  @1 :UInt32;  # slice number within the array
  values @2 :Data;    # 4 * n bytes, n <= slice bound of the view
}

struct SliceRef {
  # Names one slice without values.
  key   @0 :UInt64;
  index @1 :UInt32;
}

struct Init {
  # Worker -> server: first values of slices it owns. The first Init of a
  # slice wins; later ones are acknowledged and ignored.
  worker @0 :UInt32;        # sender's rank
  epoch  @1 :UInt64;        # sender's view epoch
  slices @2 :List(Slice);
}

struct Push {
  # Worker -> server, once per clock (cut into parts only when the slices
  # exceed the message bound). Acknowledged with PushReply.
  worker @0 :UInt32;        # sender's rank in the view
  clock  @1 :UInt64;        # (worker, clock, part) is unique; a repeat is
                            # acknowledged and dropped
  epoch  @2 :UInt64;        # sender's view epoch
  part   @3 :UInt32;        # 0 .. parts-1
  parts  @4 :UInt32;        # >= 1; the clock is complete when all arrived
  slices @5 :List(Slice);   # every slice of this part held by the receiver
  acked  @6 :UInt64;        # every server acknowledged the sender's pushes
                            # of the clocks below this one: with
                            # --server.atomic-pushes, async and ssp servers
                            # apply a clock's parts once it is below
                            # (docs/atomic-pushes.md)
}

struct PushReply {
  version   @0 :UInt64;     # server version after this push was accepted
  duplicate @1 :Bool;       # true: already had it, nothing applied
}

struct Pull {
  # Worker -> server. Answered once the mode allows a worker at `clock`
  # to read and every requested slice is initialised.
  worker @0 :UInt32;        # sender's rank in the view
  clock  @1 :UInt64;        # sender's clock: sync serves version >= clock,
                            # ssp:s serves slowest clock >= clock - s
  epoch  @2 :UInt64;        # sender's view epoch
  slices @3 :List(SliceRef);
  acked  @4 :UInt64;        # as Push's
}

struct PullReply {
  version @0 :UInt64;       # server version the values belong to
  slices  @1 :List(Slice);  # in the order they were asked for
  clock   @2 :UInt64;       # the puller's clock here: clocks it has pushed
                            # whole, over the server's stores (a rejoining
                            # worker resumes from the largest over the
                            # servers holding slices in sync and with
                            # atomic pushes, else the smallest; a server
                            # reports its stores' alike)
}

struct Failure {
  # Server -> worker on the fast road (actors/road/road.hpp), in place of the
  # reply to a request that failed.
  code    @0 :UInt8;   # troupe::errc value; 0 = not a troupe error
  context @1 :Text;    # the error rendered for people, at most 4096 bytes
}

struct Replicate {
  # Primary server -> its backup on the fast road: one replica operation,
  # as the CAF replicate message carries it (actors/server/replication.hpp).
  # Answered with a PushReply (the replica's version) or a Failure.
  primary @0 :UInt32;        # rank of the sending server
  store   @1 :UInt64;        # id of the replicated store
  origin  @2 :UInt32;        # rank of the server that created the store
  op      @3 :UInt8;         # which operation (replica_op)
  numbers @4 :List(UInt64);  # its numbers: owned (key, index, floats)
                             # triples, or live worker ranks
  payload @5 :Data;          # its frame (init, push, restore), or empty
  link    @6 :UInt64;        # the primary's link to this backup: a later
                             # link has a larger number, and the backup
                             # refuses operations of links older than the
                             # newest it has seen (replica_link_tag)
}

# Checkpoints: what a shard server writes to disk, and the manifest the
# scheduler writes once every server has written a generation.
#
# On disk each is one file: a 24-byte header (the 8 bytes "TROUPECK", the
# payload's length and its FNV-1a 64 hash, both little-endian UInt64) and
# then the flat message. Files are written to NAME.tmp, fsynced and renamed,
# so a crash mid-write leaves the previous file whole.
@0xd1c7a0b5e26f4c13;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

struct SliceState {
  # One slice: values and the optimizer's state of it.
  key     @0 :UInt64;
  index   @1 :UInt32;
  floats  @2 :UInt32;      # length in floats
  ready   @3 :Bool;        # initialised; if false, values is empty
  values  @4 :Data;        # 4 * floats bytes of float32
  updates @5 :UInt64;      # optimizer updates applied (the lr schedule's)
  step    @6 :UInt64;      # adam's step (bias correction)
  state   @7 :List(Data);  # optimizer arrays, each empty (zeros) or
                           # 4 * floats bytes: momentum and nesterov
                           # [velocity], adam [m, v]
}

struct WorkerClock {
  rank  @0 :UInt32;
  clock @1 :UInt64;        # clocks pushed whole
  parts @2 :List(UInt32);  # parts seen of `clock` (async, ssp)
  cut   @3 :UInt64;        # view epoch those parts were cut under; 0 = unknown
  taken @4 :List(TakenSlice); # slices of `clock` taken so far
  held  @5 :List(HeldSlice);  # async and ssp with --server.atomic-pushes:
                              # its pushes taken and not yet applied
                              # (docs/atomic-pushes.md)
}

struct HeldSlice {
  clock  @0 :UInt64;       # the push's clock
  key    @1 :UInt64;
  index  @2 :UInt32;
  pushes @3 :UInt32;       # how many times the push named the slice
  values @4 :Data;         # their sum, float32
}

struct TakenSlice {
  key   @0 :UInt64;
  index @1 :UInt32;
}

struct StoreState {
  id      @0 :UInt64;      # store id (actors/server/shard_server.hpp)
  origin  @1 :UInt32;      # rank of the server that created it
  version @2 :UInt64;      # sync: rounds applied; else updates applied
  rounds  @3 :UInt64;      # sync: rounds applied
  workers @4 :List(WorkerClock);
  slices  @5 :List(SliceState);
}

struct Checkpoint {
  # One server's stores at one generation.
  generation @0 :UInt64;
  server     @1 :UInt32;   # rank of the server that wrote it
  mode       @2 :Text;     # consistency mode, e.g. "sync", "ssp:2"
  optimizer  @3 :Text;     # optimizer name and placement, "momentum@server"
  stores     @4 :List(StoreState);
}

struct Manifest {
  # The last generation every server wrote: what --resume loads.
  generation @0 :UInt64;
  version    @1 :UInt64;   # sync: the round all stores were cut at
  mode       @2 :Text;     # as the scheduler was started (informational:
  optimizer  @3 :Text;     # servers check their own files' against theirs)
  files      @4 :List(Text);  # file names in the checkpoint folder
  timeMs     @5 :UInt64;   # wall clock when it was written
  clocksPerStep @6 :UInt32; # servers' clocks per training step of the
                            # job's workers (overlapped: their blocks);
                            # 0 = not recorded (an older manifest)
}

# Pipeline conversation between the stage actors of one model-parallel
# pipeline (actors/pipeline/).
#
#   stage s -> stage s + 1 : StageTensor  activations of one micro-batch
#   stage s + 1 -> stage s : StageTensor  the gradient at stage s + 1's
#                                         input (B), for that micro-batch
#   stage s -> stage s + 1 : StageTensor  an evaluation chunk's activations
#                                         (eval_atom; micro = the chunk)
#   driver -> its disk     : StageCheckpoint  a stage's weights
@0x980f91b626cf9a23;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

struct StageTensor {
  step   @0 :UInt64;  # mini-batch number: a late tensor of an older one is
                      # dropped
  micro  @1 :UInt32;  # micro-batch within the mini-batch
  rows   @2 :UInt32;  # samples of the micro-batch
  cols   @3 :UInt32;  # floats per sample
  values @4 :Data;    # rows * cols float32, little-endian
  gen    @5 :UInt64;  # the pipeline's generation (stage_driver.hpp: the
                      # view epoch it last restarted under); 0 = none. A
                      # tensor of an older generation is dropped
}

struct StageCheckpoint {
  # One stage's weights after `step` mini-batches, written by its driver
  # (actors/pipeline/stage_driver.hpp) through write_checked_file.
  stage  @0 :UInt32;        # which stage of the pipeline
  step   @1 :UInt64;        # mini-batches applied
  spec   @2 :Text;          # the whole model's spec
  first  @3 :UInt32;        # the stage's layers: [first, last)
  last   @4 :UInt32;
  keys   @5 :List(UInt64);  # one per array, as the stage's pull names them
  values @6 :List(Data);    # float32 arrays, little-endian, one per key
  optimizer @7 :Text;       # whose state follows the weights' arrays: sgd
                            # (none; "" in files written before it),
                            # momentum, nesterov or adam
}

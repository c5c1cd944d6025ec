# Pipeline conversation between the stage actors of one model-parallel
# pipeline (actors/pipeline/).
#
#   stage s -> stage s + 1 : StageTensor  activations of one micro-batch
#   stage s + 1 -> stage s : StageTensor  the gradient at stage s + 1's
#                                         input (B), for that micro-batch
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
}

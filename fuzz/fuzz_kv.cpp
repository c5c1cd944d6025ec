// libFuzzer harness of the kv conversation's decoders (messages/kv.hpp), and
// of the pipeline's StageTensor (messages/pipeline.hpp): the input is one
// frame as a server, worker or stage receives it, given to every decoder in
// turn. A replicate's payload goes on to the decoders a backup
// gives it to, and a pull reply is also read apart, as a landed reply.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_input.hpp"
#include "messages/checkpoint.hpp"
#include "messages/kv.hpp"
#include "messages/pipeline.hpp"

namespace {

using namespace troupe;

/// What the harness does with a slice a visitor hands out: read it all.
caf::error read_slice(slice_id, const float* xs, size_t n) {
  fuzz::touch(xs, n);
  return caf::error{};
}

/// The frame a replica operation carries, as the backup reads it
/// (actors/server/replication_backup.cpp): an Init, a Push or a Checkpoint.
void decode_payload(bytes_view f) {
  init_request init;
  static_cast<void>(decode(f, init));
  push_request push;
  static_cast<void>(visit_push(f, push, read_slice));
  checkpoint_data restore;
  static_cast<void>(decode(f, restore));
}

/// Every decoder of the conversation on `f`. Errors are the answer to
/// malformed bytes; only a crash or a sanitizer report is a finding.
void decode_all(bytes_view f) {
  init_request init;
  static_cast<void>(decode(f, init));
  push_request push;
  static_cast<void>(decode(f, push));
  static_cast<void>(visit_push(f, push, read_slice));
  push_reply ack;
  static_cast<void>(decode(f, ack));
  pull_request pull;
  static_cast<void>(decode(f, pull));
  pull_reply reply;
  static_cast<void>(decode(f, reply));
  uint64_t version = 0;
  uint64_t clock = 0;
  static_cast<void>(visit_pull_reply(f, version, read_slice, &clock));
  static_cast<void>(decode_failure(f));
  replicate_request rep;
  if (!decode(f, rep) && rep.payload.size > 0)
    decode_payload(rep.payload);
  stage_tensor tensor;
  if (!decode(f, tensor))
    fuzz::touch(tensor.values.data(), tensor.values.size());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::aligned_copy in{data, size};
  decode_all(in.view());
  // The kv client lands pull replies in place (actors/kv/kv_pull.hpp).
  fuzz::read_apart apart{in};
  if (apart.apart()) {
    uint64_t version = 0;
    static_cast<void>(visit_pull_reply(apart.view(), version, read_slice));
    pull_reply reply;
    static_cast<void>(decode(apart.view(), reply));
  }
  return 0;
}

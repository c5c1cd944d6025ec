// Writes the seed corpora of the fuzz harnesses (fuzz/corpus/<harness>/): a
// few small valid inputs each, made with troupe's own encoders. Run once when
// a schema changes: make_seeds fuzz/corpus (the output is deterministic).
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <zlib.h>

#include "messages/checkpoint.hpp"
#include "messages/errors.hpp"
#include "messages/kv.hpp"
#include "messages/membership.hpp"
#include "messages/pipeline.hpp"

namespace {

using namespace troupe;
using bytes = std::vector<uint8_t>;

std::string out_dir;
bool failed = false;

void put(const std::string& harness, const std::string& name,
         const bytes& data) {
  auto dir = out_dir + "/" + harness;
  mkdir(out_dir.c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  auto path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  bool ok = f != nullptr &&
            std::fwrite(data.data(), 1, data.size(), f) == data.size();
  if (f == nullptr || std::fclose(f) != 0 || !ok) {
    std::cerr << "*** cannot write " << path << '\n';
    failed = true;
  }
}

void put(const std::string& harness, const std::string& name, const frame& f) {
  put(harness, name, f.bytes);
}

std::vector<float> ramp(size_t n) {
  std::vector<float> xs(n);
  for (size_t i = 0; i < n; ++i)
    xs[i] = 0.5f * static_cast<float>(i);
  return xs;
}

// -- kv and frames ------------------------------------------------------------

void kv_seeds() {
  push_request push{3, 7, 2, 0, 1, {}};
  push.slices = {slice_data{{1, 0}, ramp(4)}, slice_data{{1, 1}, ramp(2)}};
  // One slice of 4 KiB goes as a segment of its own: a frame to read apart.
  auto big = ramp(1024);
  auto split = encode_push(push, {slice_view{{2, 0}, big.data(), big.size()}});
  pull_reply reply{9, push.slices, 7};
  auto reply_split =
      encode_pull_reply(9, {slice_view{{2, 0}, big.data(), big.size()}}, 7);
  put("kv", "init", encode(init_request{3, 2, push.slices}));
  put("kv", "push", encode(push));
  put("kv", "push-split", split.flatten());
  put("kv", "push-reply", encode(push_reply{42, true}));
  put("kv", "pull", encode(pull_request{3, 7, 2, {{1, 0}, {1, 1}}}));
  put("kv", "pull-reply", encode(reply));
  put("kv", "pull-reply-split", reply_split.flatten());
  put("kv", "failure",
      encode_failure(caf::make_error(errc::slice_not_owned, "slice", 1)));
  auto inner = encode(push);
  replicate_request rep{1, 5, 77, 0, 2, {1, 0, 4}, bytes_view{inner}};
  put("kv", "replicate", encode(rep).flatten());
  put("kv", "stage-tensor",
      encode(stage_tensor{3, 1, 2, 3, {1, 2, 3, 4, 5, 6}}));
  put("frame", "push-reply", encode(push_reply{42, true}));
  put("frame", "push", encode(push));
  put("frame", "pull-reply-split", reply_split.flatten());
}

// -- membership ---------------------------------------------------------------

cluster_view small_view() {
  cluster_view v;
  v.epoch = 3;
  v.slice_floats = 4;
  v.expected_workers = 1;
  v.servers = {node_info{role::server, 0, "127.0.0.1", 4301, 100,
                         road_info{4400, "machine-a", "troupe-road-0"}},
               node_info{role::server, 1, "127.0.0.1", 4302, 101, {}}};
  v.workers = {node_info{role::worker, 0, "127.0.0.1", 4303, 102, {}}};
  v.keys = {key_info{1, 6}, key_info{2, 4}};
  v.placement = {slice_place{1, 0, 0}, slice_place{1, 1, 1},
                 slice_place{2, 0, 1}};
  return v;
}

void membership_seeds() {
  auto v = small_view();
  put("membership", "register",
      encode(register_request{role::server, "127.0.0.1", 4301, 100,
                              road_info{4400, "machine-a", "road-0"}, 0,
                              "momentum@server lr=0.05 weight-decay=0"}));
  put("membership", "register-reply",
      encode(register_reply{1, v, std::string(32, 'k')}));
  put("membership", "view", encode(v));
  put("membership", "declare",
      encode(declare_request{0, {key_info{1, 6}, key_info{2, 4}}, 2}));
  put("membership", "declare-reply", encode(declare_reply{v, {1}}));
  put("membership", "barrier",
      encode(barrier_request{"start", role::worker, 0}));
  event_record crash;
  crash.at_ms = 1700000000000;
  crash.kind = "crashed";
  crash.about = role::server;
  crash.rank = 1;
  crash.pid = 101;
  crash.detail = "exit \"signal\" 9\n"; // escaped in its JSON line
  crash.source = "agent";
  auto rejoin = crash;
  rejoin.kind = "rejoined";
  rejoin.pid = 103;
  rejoin.detail = "";
  put("membership", "event", encode(crash));
  put("membership", "event-log",
      encode(std::vector<event_record>{crash, rejoin}));
}

// -- checkpoints --------------------------------------------------------------

void checkpoint_seeds() {
  checkpoint_data ck;
  ck.generation = 4;
  ck.server = 1;
  ck.mode = "sync";
  ck.optimizer = "adam@server";
  store_snapshot st;
  st.id = 77;
  st.version = 12;
  st.rounds = 12;
  st.workers = {worker_snapshot{0, 12, {0, 1}, 3, {{1, 0}}},
                worker_snapshot{1, 11, {}, 0, {}}};
  st.slices = {
      slice_snapshot{{1, 0}, 4, true, ramp(4), 12, 12, {ramp(4), ramp(4)}},
      slice_snapshot{{1, 1}, 2, false, {}, 0, 0, {}}};
  ck.stores = {st};
  put("checkpoint", "checkpoint", encode(ck));
  checkpoint_manifest m;
  m.generation = 4;
  m.version = 12;
  m.mode = "sync";
  m.optimizer = "adam@server";
  m.files = {checkpoint_file_name(4, 0), checkpoint_file_name(4, 1)};
  m.time_ms = 1700000000000;
  m.clocks_per_step = 1;
  put("checkpoint", "manifest", encode(m));
}

// -- IDX files ----------------------------------------------------------------

void be32(bytes& out, uint32_t x) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<uint8_t>(x >> shift));
}

/// `plain` compressed as a gzip file (no name, no time: deterministic).
bytes gzipped(const bytes& plain) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  bytes out(deflateBound(&z, plain.size()) + 32);
  z.next_in = const_cast<Bytef*>(plain.data());
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void idx_seeds() {
  bytes images;
  be32(images, 0x00000803);
  be32(images, 2); // images
  be32(images, 3); // rows
  be32(images, 3); // cols
  for (int i = 0; i < 18; ++i)
    images.push_back(static_cast<uint8_t>(i * 14));
  bytes labels;
  be32(labels, 0x00000801);
  be32(labels, 3);
  labels.insert(labels.end(), {0, 9, 4});
  put("idx", "images", images);
  put("idx", "images.gz", gzipped(images));
  put("idx", "labels", labels);
  put("idx", "labels.gz", gzipped(labels));
}

// -- INI files ----------------------------------------------------------------

bytes text(const std::string& s) {
  return bytes(s.begin(), s.end());
}

void ini_seeds() {
  put("ini", "local.ini", text(R"(; a local cluster
[global]
scheduler-host="127.0.0.1"
scheduler-port=0          ; 0 = any free port
log-level="info"

[cluster]
slice-floats=16384
balance-slack=0.05

[server]
mode="ssp:2"

[kv]
scheduler-only=false

[optimizer]
name="momentum"
lr=0.05

[middleman]
heartbeat-interval=250ms
app-identifiers=["troupe",
                 "other"]
)"));
  put("ini", "typo.ini", text("[kv]\nrequest-timeot-ms=10\n"));
  put("ini", "scheduler.ini",
      text("[scheduler]\npolicy='sharing'\nmax-threads=1\n"
           "[logger]\nverbosity='info'\n[train]\nseed=18446744073709551615\n"));
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds OUT_DIR (e.g. fuzz/corpus)\n";
    return 2;
  }
  out_dir = argv[1];
  kv_seeds();
  membership_seeds();
  checkpoint_seeds();
  idx_seeds();
  ini_seeds();
  return failed ? 1 : 0;
}

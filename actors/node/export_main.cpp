// troupe-export: a checkpoint's arrays as a NumPy .npz file.
//
// usage: troupe-export CHECKPOINT_DIR OUT.npz
//   numpy.load("OUT.npz")["key_1"] is array 1, float32, flat (the order
//   the trainer declares them in: each layer's weights, then its bias).
#include <cstdio>
#include <iostream>
#include <string>

#include "actors/node/export_npz.hpp"
#include "messages/errors.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: troupe-export CHECKPOINT_DIR OUT.npz\n";
    return 2;
  }
  if (auto why = troupe::not_an_npz(argv[2]); !why.empty()) {
    std::cerr << "*** " << why << '\n';
    return 2;
  }
  auto arrays = troupe::checkpoint_arrays(argv[1]);
  if (!arrays) {
    std::cerr << "*** reading the checkpoint failed: "
              << troupe::describe(arrays.error()) << '\n';
    return 1;
  }
  if (auto err = troupe::write_npz(argv[2], *arrays)) {
    std::cerr << "*** writing " << argv[2]
              << " failed: " << troupe::describe(err) << '\n';
    return 1;
  }
  size_t floats = 0;
  for (auto& [key, xs] : *arrays)
    floats += xs.size();
  std::printf("%zu arrays (%zu floats) from %s written to %s\n", arrays->size(),
              floats, argv[1], argv[2]);
  return 0;
}

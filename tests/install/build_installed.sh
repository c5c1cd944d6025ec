#!/bin/sh
# Installs the troupe of build folder BUILD into OUT/prefix and builds
# examples/custom_worker against it as a project of its own (OUT/build),
# as a user outside the tree would: find_package(troupe) and nothing else.
# Usage: build_installed.sh SOURCE BUILD OUT
set -eu
src=$1 build=$2 out=$3
rm -rf "$out"
mkdir -p "$out"
cmake --install "$build" --prefix "$out/prefix" > "$out/install.log"
for f in lib/libtroupe.a lib/cmake/troupe/troupeConfig.cmake \
  include/troupe/actors/worker/worker.hpp \
  include/troupe/messages/kv.capnp.h bin/troupe-node; do
  if [ ! -e "$out/prefix/$f" ]; then
    echo "build_installed: $f is not installed" >&2
    exit 1
  fi
done
# Only the install: the example must not find troupe's source or build.
cmake -S "$src/examples/custom_worker" -B "$out/build" \
  -DCMAKE_PREFIX_PATH="$out/prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON
cmake --build "$out/build" -j2
if grep -q -e "$src/actors" -e "$build/messages" \
  "$out/build/CMakeFiles/linear_regression.dir/flags.make"; then
  echo "build_installed: the example saw troupe's source or build tree" >&2
  exit 1
fi
echo "build_installed: $out/build/linear_regression built against $out/prefix"

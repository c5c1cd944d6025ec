// Element-wise loops over whole slices that a shard server runs each round
// (the optimizers' updates, the sums of pushes) are built twice: for AVX2
// and for any x86-64, and the loader picks the one the CPU runs (GCC's
// function multi-versioning). The build itself targets any x86-64, so
// without this they would run 4 floats wide on every machine. Momentum
// over 235k floats (mlp:784-256-128-10) in cache: 55 us instead of 80 us
// on the 2-vCPU machines here; in a training round, whose slices mostly
// come from memory, the gain is smaller (about 10%).
//
// AVX2 alone, without FMA: a fused multiply-add rounds once where the other
// build rounds twice, so the two would disagree in the last bit. Without
// it every element gets the same operations in the same order, and the
// results are bit for bit those of a plain loop on any machine
// (tests/kernels/optimizer_test.cpp checks it).
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define TROUPE_WIDE_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define TROUPE_WIDE_LOOP
#endif

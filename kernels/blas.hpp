// Process-wide OpenBLAS settings; the only place outside the kernels that
// needs to know which BLAS the CPU kernels use.
#pragma once

namespace troupe {

/// Caps the threads OpenBLAS uses for every later call in this process;
/// n >= 1. Set 1 where several processes share few cores.
void set_blas_threads(int n);

} // namespace troupe

// Process-wide OpenBLAS settings; the only place outside the kernels that
// needs to know which BLAS the CPU kernels use.
#pragma once

#include <string>

namespace troupe {

/// Caps the threads OpenBLAS uses for every later call in this process;
/// n >= 1. Set 1 where several processes share few cores: OpenBLAS's
/// threads spin (sched_yield) while they wait for work, and on a machine
/// with more threads than cores they take the cores from the math.
void set_blas_threads(int n);

/// The name of the CPU kernels OpenBLAS picked for this machine (its
/// DYNAMIC_ARCH core, e.g. "Haswell"), or what OPENBLAS_CORETYPE forced.
std::string blas_core();

/// One line saying which BLAS runs the math: version, core and the threads
/// it uses ("OpenBLAS 0.3.21, Haswell kernels, 1 thread").
std::string blas_description();

/// A warning when `core` (a blas_core() name) predates AVX2 although the
/// CPU has it (`cpu_has_avx2`): a VM whose CPUID hides the CPU model makes
/// OpenBLAS fall back to old kernels, several times slower (measured 3.7x
/// on a 2-core training step). Says how to choose the kernels
/// (OPENBLAS_CORETYPE). Empty when there is nothing to say.
std::string blas_core_warning(const std::string& core, bool cpu_has_avx2);

/// blas_core_warning for this process's BLAS and CPU.
std::string blas_core_warning();

} // namespace troupe

// Process-wide OpenBLAS settings.
#include "kernels/blas.hpp"

#include <cblas.h>

namespace troupe {

void set_blas_threads(int n) {
  openblas_set_num_threads(n < 1 ? 1 : n);
}

} // namespace troupe

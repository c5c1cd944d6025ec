// A global Boost.Test fixture for tests that call BLAS: one OpenBLAS thread,
// since test processes share few cores and more threads only oversubscribe.
#pragma once

#include <boost/test/unit_test.hpp>

#include "kernels/blas.hpp"

/// Caps OpenBLAS at one thread before the first test case runs.
struct one_blas_thread {
  one_blas_thread() { troupe::set_blas_threads(1); }
};

BOOST_TEST_GLOBAL_FIXTURE(one_blas_thread);

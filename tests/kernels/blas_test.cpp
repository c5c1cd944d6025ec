// Which BLAS kernels run the math, and the warning when OpenBLAS fell back
// to kernels older than the CPU (a VM hiding its CPU model).
#define BOOST_TEST_MODULE blas_tests
#include <boost/test/unit_test.hpp>

#include <string>

#include "kernels/blas.hpp"

using namespace troupe;

BOOST_AUTO_TEST_SUITE(blas_tests)

BOOST_AUTO_TEST_CASE(old_kernels_on_an_avx2_cpu_get_a_warning) {
  for (auto core : {"Prescott", "Sandybridge", "Core2", "Nehalem", "Barcelona",
                    "Piledriver"}) {
    auto w = blas_core_warning(core, true);
    BOOST_TEST_INFO("core " << core);
    BOOST_CHECK_NE(w.find(core), std::string::npos);
    BOOST_CHECK_NE(w.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(avx2_kernels_need_no_warning) {
  for (auto core : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "COOPERLAKE",
                    "SapphireRapids", "Excavator"}) {
    BOOST_TEST_INFO("core " << core);
    BOOST_CHECK_EQUAL(blas_core_warning(core, true), "");
  }
}

BOOST_AUTO_TEST_CASE(a_cpu_without_avx2_needs_no_warning) {
  BOOST_CHECK_EQUAL(blas_core_warning("Prescott", false), "");
  BOOST_CHECK_EQUAL(blas_core_warning("Sandybridge", false), "");
}

BOOST_AUTO_TEST_CASE(this_process_names_its_blas_and_kernels) {
  auto core = blas_core();
  BOOST_CHECK(!core.empty());
  BOOST_CHECK_NE(core, "unknown");
  auto d = blas_description();
  BOOST_CHECK_EQUAL(d.rfind("OpenBLAS ", 0), 0u);
  BOOST_CHECK_NE(d.find(core + " kernels"), std::string::npos);
  BOOST_TEST_MESSAGE("this machine: " << d);
}

BOOST_AUTO_TEST_CASE(the_description_names_the_threads_set) {
  // Read back from OpenBLAS, not from what was asked: a worker's line says
  // what its math runs on. 2 works on any machine (OpenBLAS starts the
  // threads it lacks).
  set_blas_threads(2);
  auto two = blas_description();
  set_blas_threads(1);
  auto one = blas_description();
  auto ends_with = [](const std::string& s, const std::string& end) {
    return s.size() >= end.size() &&
           s.compare(s.size() - end.size(), end.size(), end) == 0;
  };
  BOOST_CHECK_MESSAGE(ends_with(two, " kernels, 2 threads"), two);
  BOOST_CHECK_MESSAGE(ends_with(one, " kernels, 1 thread"), one);
}

BOOST_AUTO_TEST_SUITE_END()

// Process-wide OpenBLAS settings.
#include "kernels/blas.hpp"

#include <algorithm>
#include <cctype>
#include <iterator>

#include <cblas.h>

namespace troupe {

namespace {

std::string lower(std::string x) {
  std::transform(x.begin(), x.end(), x.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return x;
}

/// OpenBLAS x86-64 cores (0.3.21) whose kernels use AVX2 or more.
constexpr const char* avx2_cores[] = {
    "haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"};

} // namespace

void set_blas_threads(int n) {
  openblas_set_num_threads(n < 1 ? 1 : n);
}

std::string blas_core() {
  auto* name = openblas_get_corename();
  return name ? name : "unknown";
}

std::string blas_description() {
  auto* config = openblas_get_config();
  std::string out = config ? config : "OpenBLAS";
  auto space = out.find(' ', out.find(' ') + 1); // "OpenBLAS 0.3.21"
  if (space != std::string::npos)
    out.resize(space);
  auto threads = openblas_get_num_threads();
  return out + ", " + blas_core() + " kernels, " + std::to_string(threads) +
         (threads == 1 ? " thread" : " threads");
}

std::string blas_core_warning(const std::string& core, bool cpu_has_avx2) {
  if (!cpu_has_avx2 || std::find(std::begin(avx2_cores), std::end(avx2_cores),
                                 lower(core)) != std::end(avx2_cores))
    return {};
  return "OpenBLAS runs its " + core +
         " kernels although this CPU has AVX2 (a VM may hide the CPU "
         "model): the math may run several times slower. Set "
         "OPENBLAS_CORETYPE=Haswell (or SkylakeX where the CPU has "
         "AVX-512) in the environment of every troupe process.";
}

std::string blas_core_warning() {
  return blas_core_warning(blas_core(), __builtin_cpu_supports("avx2") != 0);
}

} // namespace troupe

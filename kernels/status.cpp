// Names of kernel results, for log lines.
#include "kernels/status.hpp"

namespace troupe {

const char* to_string(kernel_status x) {
  switch (x) {
  case kernel_status::ok:
    return "ok";
  case kernel_status::shape_mismatch:
    return "shape_mismatch";
  case kernel_status::bad_input:
    return "bad_input";
  }
  return "unknown kernel_status";
}

} // namespace troupe

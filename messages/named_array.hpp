// The value users push and pull: a whole parameter array under its key.
#pragma once

#include <cstdint>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace troupe {

/// A parameter array: `values.size()` float32 elements under `key`.
struct named_array {
  uint64_t key = 0;
  std::vector<float> values;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, named_array& x) {
  return f(caf::meta::type_name("named_array"), x.key, x.values);
}

} // namespace troupe

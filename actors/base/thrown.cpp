// Exceptions of user code as errors; see the header.
#include "actors/base/thrown.hpp"

#include <cstdlib>
#include <typeinfo>

#include <cxxabi.h>

#include <caf/sec.hpp>

namespace troupe {

caf::error thrown(const std::string& whose, const std::exception_ptr& e) {
  auto type = [](const std::type_info& t) {
    int status = 0;
    char* name = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
    std::string out = status == 0 && name != nullptr ? name : t.name();
    std::free(name);
    return out;
  };
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return caf::make_error(caf::sec::runtime_error, whose + " code threw " +
                                                        type(typeid(x)) + ": " +
                                                        x.what());
  } catch (...) {
    auto* t = abi::__cxa_current_exception_type();
    return caf::make_error(caf::sec::runtime_error,
                           whose + " code threw " +
                               (t != nullptr ? type(*t) : "something"));
  }
}

} // namespace troupe

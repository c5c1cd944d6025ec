// What an exception thrown by user code was, as an error: its type and
// what(), for the process's last line, where CAF's own handler ends the
// actor with a bare system_error(runtime_error).
#pragma once

#include <exception>
#include <string>

#include <caf/error.hpp>

namespace troupe {

/// sec::runtime_error "WHOSE code threw TYPE: WHAT" ("the worker's code
/// threw std::out_of_range: vector::_M_range_check ..."), or "... threw
/// TYPE" for what is no std::exception.
caf::error thrown(const std::string& whose, const std::exception_ptr& e);

} // namespace troupe

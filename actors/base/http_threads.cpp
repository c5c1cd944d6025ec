// The HTTP servers' options, and thread stacks that hold the libraries'
// thread-local storage; see http_threads.hpp.
#include "actors/base/http_threads.hpp"

#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cerrno>

namespace troupe {

std::vector<std::string> http_options(const std::string& listen) {
  return {"listening_ports",    listen, "num_threads", "4",
          "request_timeout_ms", "3000"};
}

} // namespace troupe

/// Ours before libc's (the program's symbols come first): a stack asked for
/// is at least troupe::least_thread_stack (http_threads.hpp says why).
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr,
                                         size_t size) noexcept {
  using call = int (*)(pthread_attr_t*, size_t);
  static auto libc =
      reinterpret_cast<call>(::dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  if (libc == nullptr)
    return ENOSYS;
  return libc(attr, std::max(size, troupe::least_thread_stack));
}

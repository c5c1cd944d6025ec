// The two HTTP servers of a node (the scheduler's status page and
// --metrics.port) are civetweb's: the options both start it with, and
// stacks its threads can live on.
#pragma once

#include <string>
#include <vector>

namespace troupe {

/// civetweb's options for a server on `listen` (HOST:PORT): 4 threads, and
/// a request that is not whole within 3 s (a client that stops halfway) is
/// dropped, so that a few such clients cannot hold every thread for
/// civetweb's default 30 s (a scrape gives up after 10 s).
///
/// Using them also links in what keeps civetweb's threads from crashing:
/// civetweb asks for 100 KiB stacks, and glibc takes each thread's static
/// thread-local storage (OpenBLAS alone has 60 KiB of it) out of the size
/// asked for (sourceware bug 11787). civetweb's own answers (405 to a HEAD
/// or POST, 404 to a path without a handler) then overflowed what was
/// left, and one `curl -I` ended the node with SIGSEGV. This process's
/// pthread_attr_setstacksize raises a size below 1 MiB to 1 MiB before
/// glibc's own (http_threads.cpp); no size asked for is lowered. It works
/// from the executable (libtroupe is static), exported because a shared
/// library it links (civetweb) asks for the name; a wholly static link
/// would clash with libc's. http_threads_test checks it.
std::vector<std::string> http_options(const std::string& listen);

/// The least stack a thread of this process is given where one is asked
/// for (pthread_attr_setstacksize).
constexpr size_t least_thread_stack = size_t{1} << 20;

} // namespace troupe

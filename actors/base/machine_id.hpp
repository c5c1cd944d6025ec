// Which machine this process runs on, as its peers need to know: boot id
// and network namespace (loopback addresses and abstract unix sockets are
// per namespace, so two namespaces of one host are two machines here).
#pragma once

#include <string>

namespace troupe {

/// "BOOT_ID/net:[INODE]" of this process.
std::string machine_id();

/// True if `host` names a loopback address (127.0.0.0/8, ::1, localhost):
/// one only its own machine reaches.
bool is_loopback(const std::string& host);

} // namespace troupe

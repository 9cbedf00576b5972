// What identifies "the same host" for processes that may share memory: the kernel's boot id,
// the host name, /dev/shm's device, and the pid and network namespaces (pidfds and abstract
// Unix sockets work only within them). Ranks with one identity share a host in the topology;
// transports use it to decide who can reach whom through memory.
#pragma once
#include <string>

namespace hora {

// 32 hex digits; computed once per process.
const std::string& hostIdentity();

}  // namespace hora

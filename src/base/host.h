// What identifies "the same host" for processes that may share memory: the kernel's boot id,
// the host name, /dev/shm's device, and the pid and network namespaces (pidfds and abstract
// Unix sockets work only within them). Ranks with one identity share a host in the topology;
// transports use it to decide who can reach whom through memory.
#pragma once
#include <string>

namespace hora {

// 32 hex digits; computed once per process.
const std::string& hostIdentity();
// What identifies one running kernel (its boot id): processes with one machine identity share
// its processors even when they are in different network namespaces (hosts of their own for
// hostIdentity), so they count together when deciding whether ranks outnumber the cores.
const std::string& machineIdentity();

// Why a process of this host (and pid namespace) cannot make progress, from its state in
// /proc: "is stopped (...)" for a job-control or debugger stop, "has exited" for a zombie or a
// pid that is gone; "" when it runs or sleeps (or pid is 0: not known).
std::string processStalled(int pid);

}  // namespace hora

// What identifies "the same host" for processes that may share memory: the kernel's boot id,
// the host name, /dev/shm's device, and the pid and network namespaces (pidfds and abstract
// Unix sockets work only within them). Ranks with one identity share a host in the topology;
// transports use it to decide who can reach whom through memory.
#pragma once
#include <string>

#include "base/socket.h"

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

// A process of this host (and pid namespace), held so that a later process given its pid is
// never taken for it: by a pidfd (pidfd_open, Linux 5.3) where the kernel has them, else by its
// pid and its start time (/proc/PID/stat's 22nd field), read when it is taken.
class ProcessRef {
 public:
  ProcessRef() = default;
  // Takes `pid`, a process alive now (0: none). usePidfd false takes the fallback (for tests).
  explicit ProcessRef(int pid, bool usePidfd = true);
  int pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }  // pollable: readable once it exits; -1 without
  explicit operator bool() const { return pid_ > 0; }
  bool alive() const;
  // processStalled's verdict for this process; "has exited" also once its pid names another.
  std::string stalled() const;

 private:
  bool exited() const;  // by the pidfd
  int pid_ = 0;
  Fd pidfd_;
  unsigned long long start_ = 0;  // without a pidfd: its start time (0: not known)
};

}  // namespace hora

// hora-info's parts (tools/hora_info.cc): the check of --check, which runs a 2-rank job over
// one transport in a child process of hora-info itself (tools/hora_info_check.cc).
#pragma once
#include <string>

namespace hora::info {

struct CheckResult {
  bool ok = false;
  std::string why;  // the library's last-error text, or why the job gave no answer
};

// Runs `self` (hora-info) as `self --check-one` with HORA_TRANSPORTS=transport, and waits at
// most deadlineSeconds for its answer; the child is killed after that.
CheckResult checkTransport(const std::string& self, const std::string& transport, int deadlineSeconds);

// The child's side (--check-one): two ranks as threads of this process make a communicator
// through the C ABI and run one allreduce with a known result. Prints "ok" or the failure on
// stdout; returns the exit status.
int checkOne();

}  // namespace hora::info

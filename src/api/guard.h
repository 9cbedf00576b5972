// The ABI boundary: every exported function runs its body through guard(), which turns any
// exception into a result code and the last-error text, so nothing throws across the ABI.
#pragma once
#include <cstring>
#include <functional>
#include <new>
#include <string>

#include "base/error.h"
#include "base/log.h"
#include "comm/comm.h"
#include "comm/device.h"
#include "comm/stream.h"
#include "hora.h"

#define HORA_API extern "C" __attribute__((visibility("default")))

namespace hora::api {

void setLastError(horaComm* comm, const std::string& text);
const char* tLastErrorText();

// The communicator if it is a live one, else nullptr (for error reporting only).
inline horaComm* liveComm(horaComm* c) { return horaComm::isLive(c) && c->magic == horaComm::kMagic ? c : nullptr; }

// Counts the threads inside an entry point on a communicator, so that horaCommAbort can wait
// until every other caller has stopped touching it before it frees it.
class CallerScope {
 public:
  explicit CallerScope(horaComm* c) : c_(c) {
    if (c_) c_->callers.fetch_add(1);
  }
  ~CallerScope() {
    if (c_) c_->callers.fetch_sub(1);
  }
  CallerScope(const CallerScope&) = delete;
  CallerScope& operator=(const CallerScope&) = delete;

 private:
  horaComm* c_;
};

template <class F>
horaResult_t guard(const char* fn, horaComm* comm, F&& body) noexcept {
  std::string text;
  horaResult_t code;
  // Looked up once: the set of live communicators is behind a lock (horaComm::isLive).
  horaComm* const live = liveComm(comm);
  CallerScope caller(live);
  try {
    log::RankScope scope(live ? live->self().rank : -1);
    body();
    return horaSuccess;
  } catch (const PeerFailure& e) {
    // Another rank's text, unchanged; which rank this is follows.
    code = static_cast<horaResult_t>(e.code());
    text = e.what();
    if (live) text += format(" (on rank %d of %d)", live->self().rank, live->self().nranks);
  } catch (const Error& e) {
    code = static_cast<horaResult_t>(e.code());
    text = e.what();
  } catch (const std::bad_alloc&) {
    code = horaSystemError;
    text = "out of memory";
  } catch (const std::exception& e) {
    code = horaInternalError;
    text = std::string("internal error: ") + e.what();
  } catch (...) {
    code = horaInternalError;
    text = "internal error: unknown exception";
  }
  try {
    text = std::string(fn) + ": " + text;
    setLastError(live, text);
    if (code == horaInvalidArgument || code == horaInvalidUsage) {
      HORA_INFO(log::kAll, "%s", text.c_str());
    }
  } catch (...) {
  }
  return code;
}

// As guard(), for an entry point whose work may go on in the background (a non-blocking init,
// split, shrink or finalize): the body returns true when it does, and the call then returns
// horaInProgress.
template <class F>
horaResult_t guardPending(const char* fn, horaComm* comm, F&& body) noexcept {
  bool pending = false;
  const horaResult_t r = guard(fn, comm, [&] { pending = body(); });
  return r == horaSuccess && pending ? horaInProgress : r;
}

// The value of an enum argument as the caller passed it. A C caller may pass any int; reading
// it as the C++ enum type would be undefined for values outside the enum's range.
template <class E>
int rawInt(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "enums of the ABI are int-sized");
  int v;
  memcpy(&v, &e, sizeof v);
  return v;
}

// Argument checks shared by the entry points; each throws Errc::InvalidArgument.
// A live communicator that is ready for calls (not in a non-blocking operation: InvalidUsage).
horaComm* checkComm(horaComm_t comm);
// A live communicator, ready or not (for the calls that ask about it, destroy or abort it).
horaComm* checkCommAny(horaComm_t comm);

// The options of a config (NULL: the defaults); throws InvalidArgument for a bad one.
CommOptions optionsFrom(const horaConfig_t* config);
// A child's options: the parent's, with what config defines.
CommOptions inherit(const horaComm* parent, const horaConfig_t* config);
// Makes the communicator *out of `rank` among `nranks` sharing id, then runs `after` (may be
// null): now (blocking), in the background (returns true: the caller returns horaInProgress),
// or, inside a group, at its outermost end. On a blocking failure *out is left NULL.
bool makeComm(horaComm_t* out, const UniqueId& id, int nranks, int rank, const CommOptions& o,
              const std::function<void()>& after);
// The host stream behind stream (nullptr for NULL); throws for anything else.
device::StreamRef checkStream(horaStream_t stream);
DataType checkType(int t);  // pass rawInt(datatype)

}  // namespace hora::api

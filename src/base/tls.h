// Thread-local state on a call's path. In a shared library each access to a thread_local costs a
// call to __tls_get_addr, and to one with a constructor two (its guard, then the variable): on
// the path of a small collective, nine of them were about 5% of its instructions. The library is
// built with TLS descriptors where the compiler has them (meson.build: -mtls-dialect=gnu2), which
// make an access a short call that returns a fixed offset; PerThread<T> keeps a T that has a
// constructor (vectors and the like) behind a plain pointer, so that an access is one of those.
// (The initial-exec model would be a single load, but it makes the library's whole TLS block
// static, and a library loaded by dlopen, as Python's ctypes does, then fails to load when the
// process's small static TLS surplus is short of it.)
#pragma once

namespace hora {

template <class T>
class PerThread {
 public:
  static T& get() {
    T* p = fast_;
    if (__builtin_expect(p != nullptr, 1)) return *p;
    return slow();
  }

 private:
  __attribute__((noinline)) static T& slow() {
    thread_local T owner;  // destroyed at the thread's exit
    fast_ = &owner;
    return owner;
  }
  static inline thread_local T* fast_ = nullptr;
};

}  // namespace hora

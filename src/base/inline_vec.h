// A vector of at most N elements held in place: building a small call's program uses these for
// its short lists (a tree's children, a pipeline's staging slots, an op's dependencies), so that
// a call allocates nothing. Adding past N is an internal error, not a reallocation.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <new>
#include <utility>

#include "base/error.h"

namespace hora {

template <class T, size_t N>
class InlineVec {
 public:
  InlineVec() = default;
  InlineVec(std::initializer_list<T> l) {
    for (const T& x : l) push_back(x);
  }
  InlineVec(const InlineVec& o) {
    for (const T& x : o) push_back(x);
  }
  InlineVec& operator=(const InlineVec& o) {
    if (this != &o) {
      clear();
      for (const T& x : o) push_back(x);
    }
    return *this;
  }
  ~InlineVec() { clear(); }

  template <class... A>
  T& emplace_back(A&&... a) {
    if (n_ == N) fail(Errc::Internal, "a list of at most %zu elements is full", N);
    T* p = new (buf_ + n_ * sizeof(T)) T(std::forward<A>(a)...);
    ++n_;
    return *p;
  }
  void push_back(const T& x) { emplace_back(x); }
  void clear() {
    while (n_) data()[--n_].~T();
  }

  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  static constexpr size_t capacity() { return N; }
  T* data() { return std::launder(reinterpret_cast<T*>(buf_)); }
  const T* data() const { return std::launder(reinterpret_cast<const T*>(buf_)); }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + n_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + n_; }
  std::reverse_iterator<const T*> rbegin() const { return std::reverse_iterator<const T*>(end()); }
  std::reverse_iterator<const T*> rend() const { return std::reverse_iterator<const T*>(begin()); }

 private:
  alignas(T) unsigned char buf_[N * sizeof(T)];
  size_t n_ = 0;
};

}  // namespace hora

// A FIFO queue over a power-of-two ring that grows by doubling and never shrinks, so a queue
// in steady use allocates nothing.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

namespace hora {

template <class T>
class RingQueue {
 public:
  explicit RingQueue(size_t capacity = 16) : slots_(roundUp(capacity)) {}

  bool empty() const { return head_ == tail_; }
  size_t size() const { return tail_ - head_; }
  T& front() { return slots_[head_ & (slots_.size() - 1)]; }
  const T& front() const { return slots_[head_ & (slots_.size() - 1)]; }
  // i-th element from the front.
  T& at(size_t i) { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  const T& at(size_t i) const { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  void push(T v) {
    if (size() == slots_.size()) grow();
    slots_[tail_ & (slots_.size() - 1)] = std::move(v);
    ++tail_;
  }
  void pop() { ++head_; }
  void clear() { head_ = tail_ = 0; }

 private:
  static size_t roundUp(size_t n) {
    size_t c = 1;
    while (c < n) c <<= 1;
    return c;
  }
  void grow() {
    std::vector<T> bigger(slots_.size() * 2);
    for (size_t i = 0; i < size(); ++i) bigger[i] = std::move(at(i));
    tail_ = size();
    head_ = 0;
    slots_ = std::move(bigger);
  }
  std::vector<T> slots_;
  size_t head_ = 0, tail_ = 0;
};

}  // namespace hora

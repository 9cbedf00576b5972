#include "kernels/cpu/scalar.h"

#include <cstring>

namespace hora::kernels {

Scalar scalarFromBytes(const void* value, DataType dtype) {
  Scalar s{0.0};
  auto load = [&](auto v) {
    memcpy(&v, value, sizeof v);
    return v;
  };
  switch (dtype) {
    case DataType::Int8: s.i = load(int8_t{}); break;
    case DataType::Uint8: s.i = load(uint8_t{}); break;
    case DataType::Int32: s.i = load(int32_t{}); break;
    case DataType::Uint32: s.i = load(uint32_t{}); break;
    case DataType::Int64: s.i = load(int64_t{}); break;
    case DataType::Uint64: s.i = static_cast<int64_t>(load(uint64_t{})); break;
    case DataType::Float16: s.f = halfToFloat(load(uint16_t{})); break;
    case DataType::Bfloat16: s.f = bfloat16ToFloat(load(uint16_t{})); break;
    case DataType::Float8e4m3: s.f = fp8e4m3ToFloat(load(uint8_t{})); break;
    case DataType::Float8e5m2: s.f = fp8e5m2ToFloat(load(uint8_t{})); break;
    case DataType::Float32: s.f = load(float{}); break;
    case DataType::Float64: s.f = load(double{}); break;
  }
  return s;
}

}  // namespace hora::kernels

// Internal vocabulary shared by every layer: data types and reduction ops.
// The numbering is the public ABI's (include/hora.h), so a value converts by a cast after
// it has been checked by isValid().
#pragma once
#include <cstddef>
#include <cstdint>

namespace hora {

enum class DataType : uint8_t {
  Int8 = 0,
  Uint8 = 1,
  Int32 = 2,
  Uint32 = 3,
  Int64 = 4,
  Uint64 = 5,
  Float16 = 6,
  Float32 = 7,
  Float64 = 8,
  Bfloat16 = 9,
  Float8e4m3 = 10,
  Float8e5m2 = 11,
};
inline constexpr int kNumDataTypes = 12;

enum class RedOp : uint8_t {
  Sum = 0,
  Prod = 1,
  Max = 2,
  Min = 3,
  Avg = 4,
  PreMulSum = 5,  // sum of (per-rank scalar * input); not a public enum value
};
inline constexpr int kNumRedOps = 6;

inline constexpr size_t dataTypeSize(DataType t) {
  switch (t) {
    case DataType::Int8: case DataType::Uint8:
    case DataType::Float8e4m3: case DataType::Float8e5m2: return 1;
    case DataType::Float16: case DataType::Bfloat16: return 2;
    case DataType::Int32: case DataType::Uint32: case DataType::Float32: return 4;
    case DataType::Int64: case DataType::Uint64: case DataType::Float64: return 8;
  }
  return 0;
}

inline constexpr bool isFloating(DataType t) {
  switch (t) {
    case DataType::Float16: case DataType::Float32: case DataType::Float64:
    case DataType::Bfloat16: case DataType::Float8e4m3: case DataType::Float8e5m2: return true;
    default: return false;
  }
}

inline constexpr bool isSigned(DataType t) {
  return t == DataType::Int8 || t == DataType::Int32 || t == DataType::Int64;
}

const char* dataTypeName(DataType t);
const char* redOpName(RedOp op);

}  // namespace hora

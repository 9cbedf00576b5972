#include "base/types.h"

namespace hora {

const char* dataTypeName(DataType t) {
  switch (t) {
    case DataType::Int8: return "int8";
    case DataType::Uint8: return "uint8";
    case DataType::Int32: return "int32";
    case DataType::Uint32: return "uint32";
    case DataType::Int64: return "int64";
    case DataType::Uint64: return "uint64";
    case DataType::Float16: return "half";
    case DataType::Float32: return "float";
    case DataType::Float64: return "double";
    case DataType::Bfloat16: return "bfloat16";
    case DataType::Float8e4m3: return "f8e4m3";
    case DataType::Float8e5m2: return "f8e5m2";
  }
  return "?";
}

const char* redOpName(RedOp op) {
  switch (op) {
    case RedOp::Sum: return "sum";
    case RedOp::Prod: return "prod";
    case RedOp::Max: return "max";
    case RedOp::Min: return "min";
    case RedOp::Avg: return "avg";
    case RedOp::PreMulSum: return "premulsum";
  }
  return "?";
}

}  // namespace hora

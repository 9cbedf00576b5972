// Reading one value of a datatype into the kernels' scalar (PreMulSum's factor).
#pragma once
#include "kernels/cpu/reduce.h"

namespace hora::kernels {

// Floating types widen to double (.f); integer types to int64 (.i), sign- or zero-extended.
Scalar scalarFromBytes(const void* value, DataType dtype);

}  // namespace hora::kernels

// Conversions between float and the narrow floating types (see convert_inl.h for the
// algorithms). Portable scalar code, built for the baseline ISA.
#include "kernels/cpu/convert_inl.h"
#include "kernels/cpu/reduce.h"

namespace hora::kernels {

float halfToFloat(uint16_t h) { return conv::halfToFloat(h); }
uint16_t floatToHalf(float f) { return conv::floatToHalf(f); }
float bfloat16ToFloat(uint16_t b) { return conv::bf16ToFloat(b); }
uint16_t floatToBfloat16(float f) { return conv::floatToBf16(f); }
float fp8e4m3ToFloat(uint8_t v) { return conv::e4m3ToFloat(v); }
uint8_t floatToFp8e4m3(float f) { return conv::floatToE4m3(f); }
float fp8e5m2ToFloat(uint8_t v) { return conv::e5m2ToFloat(v); }
uint8_t floatToFp8e5m2(float f) { return conv::floatToE5m2(f); }

}  // namespace hora::kernels

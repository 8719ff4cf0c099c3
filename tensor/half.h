// The two 16-bit floats weights are stored in: IEEE half (F16) and bfloat16 (BF16).
// To float exactly; from float rounded to nearest, ties to even (NaN stays NaN, overflow
// goes to infinity, half's subnormals kept). safetensors, GGUF and Q8_0's block scale
// (tensor/quant.h) all use these.
#pragma once

#include <cstdint>
#include <cstring>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
uint16_t float_to_bf16(float f);
inline float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace attend
#pragma GCC visibility pop

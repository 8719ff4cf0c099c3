#include "tensor/quant.h"

#include <cmath>
#include <cstring>

#include "tensor/half.h"

namespace attend::quant {

void quantize_q8_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    uint8_t* ob = out + b * kQ8BlockBytes;
    float amax = 0.0f;
    for (int64_t j = 0; j < kQ8Block; ++j) {
      const float v = std::fabs(xb[j]);
      amax = amax > v ? amax : v;  // llama.cpp's MAX(amax, v), NaN and all
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = float_to_half(d);
    std::memcpy(ob, &h, 2);
    for (int64_t j = 0; j < kQ8Block; ++j)
      ob[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(xb[j] * id)));
  }
}

void dequantize_q8_0(const uint8_t* blocks, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    const uint8_t* ib = blocks + b * kQ8BlockBytes;
    uint16_t h;
    std::memcpy(&h, ib, 2);
    const float d = half_to_float(h);
    for (int64_t j = 0; j < kQ8Block; ++j)
      out[b * kQ8Block + j] = d * static_cast<float>(static_cast<int8_t>(ib[2 + j]));
  }
}

void round_to_q8_0(float* x, int64_t n) {
  uint8_t block[kQ8BlockBytes];
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    quantize_q8_0(x + b * kQ8Block, kQ8Block, block);
    dequantize_q8_0(block, kQ8Block, x + b * kQ8Block);
  }
}

}  // namespace attend::quant

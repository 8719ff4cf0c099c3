#include "tensor/quant.h"

#include <immintrin.h>

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

namespace {

// One block of quantize_q8_0 in AVX2 registers. Each step is the scalar's f32 operation:
// |x| and the maximum are exact (the order of a maximum does not matter without NaNs);
// d and id are the scalar's own expressions; x * id is one rounded product a lane; and
// round half away from zero is t = trunc(v), plus sign(v) where |v - t| >= 0.5 (v - t is
// exact for |v| < 2^23). Returns false, writing nothing, for a block the plain code must
// take: one holding NaN or infinity, or whose d is so small that 1 / d overflows (there
// the plain code converts infinities and NaNs to int8, whatever the compiler makes of it).
__attribute__((target("avx2,fma"))) bool quantize_block_avx2(const float* x, uint8_t* out) {
  const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(INFINITY);
  __m256 v[4], m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    const __m256 a = _mm256_andnot_ps(sign, v[i]);
    m = _mm256_max_ps(m, a);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));  // NaN or infinity
  }
  if (_mm256_movemask_ps(bad) != 0) return false;
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  const float amax = _mm_cvtss_f32(m4);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  if (!std::isfinite(id)) return false;  // d subnormal: 1 / d overflows
  const uint16_t h = float_to_half(d);
  std::memcpy(out, &h, 2);
  const __m256 vid = _mm256_set1_ps(id), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    const __m256 p = _mm256_mul_ps(v[i], vid);
    const __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(p, t)), half, _CMP_GE_OQ);
    const __m256 step = _mm256_or_ps(_mm256_and_ps(p, sign), one);  // +-1 with p's sign
    q[i] = _mm256_cvtps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, step)));
  }
  // int32 -> int8 with saturation (the values are within +-127, so it is exact), in order
  const __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
  const __m256i b = _mm256_packs_epi16(w01, w23);  // lanes interleaved by 128-bit halves
  const __m256i ordered = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2), ordered);
  return true;
}

const bool kHasAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");

}  // namespace

void quantize_q8_0_fast(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    uint8_t* ob = out + b * kQ8BlockBytes;
    if (!kHasAvx2 || !quantize_block_avx2(xb, ob)) quantize_q8_0(xb, kQ8Block, ob);
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
    quantize_q8_0_fast(x + b * kQ8Block, kQ8Block, block);
    dequantize_q8_0(block, kQ8Block, x + b * kQ8Block);
  }
}

}  // namespace attend::quant

#include "tensor/random.h"

#include <immintrin.h>

#include <cmath>
#include <type_traits>

#include "tensor/parallel.h"

namespace attend {

PhiloxCounter philox4x32(PhiloxCounter c, PhiloxKey k) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(M0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(M1) * c[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += W0;
    k[1] += W1;
  }
  return c;
}

namespace {

const bool kPhiloxAvx2 = __builtin_cpu_supports("avx2");

// The hi and lo 32 bits of m * x in each of eight 32-bit lanes: vpmuludq multiplies the
// even lanes, and the odd lanes shifted down; the halves are blended back in place.
__attribute__((target("avx2"))) inline void mul_hi_lo(__m256i x, __m256i m, __m256i& hi,
                                                      __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(x, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), m);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

// Eight Philox 4x32-10 blocks in AVX2 registers, lane l = block l: exact integer
// arithmetic, so the same blocks as philox4x32 (tested). Four times faster than the loop
// below, which GCC left at 8 ns a block (dropout masks draw every block through here).
__attribute__((target("avx2"))) void philox_x8_avx2(const PhiloxCounter* in, PhiloxCounter* out,
                                                    PhiloxKey k) {
  alignas(32) uint32_t c[4][8];
  for (int l = 0; l < 8; ++l)
    for (int w = 0; w < 4; ++w) c[w][l] = in[l][static_cast<size_t>(w)];
  __m256i x0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(c[0]));
  __m256i x1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(c[1]));
  __m256i x2 = _mm256_load_si256(reinterpret_cast<const __m256i*>(c[2]));
  __m256i x3 = _mm256_load_si256(reinterpret_cast<const __m256i*>(c[3]));
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  uint32_t k0 = k[0], k1 = k[1];
  for (int round = 0; round < 10; ++round) {
    __m256i hi0, lo0, hi1, lo1;
    mul_hi_lo(x0, m0, hi0, lo0);
    mul_hi_lo(x2, m1, hi1, lo1);
    const __m256i n0 =
        _mm256_xor_si256(_mm256_xor_si256(hi1, x1), _mm256_set1_epi32(static_cast<int>(k0)));
    const __m256i n2 =
        _mm256_xor_si256(_mm256_xor_si256(hi0, x3), _mm256_set1_epi32(static_cast<int>(k1)));
    x1 = lo1;
    x3 = lo0;
    x0 = n0;
    x2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(c[0]), x0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(c[1]), x1);
  _mm256_store_si256(reinterpret_cast<__m256i*>(c[2]), x2);
  _mm256_store_si256(reinterpret_cast<__m256i*>(c[3]), x3);
  for (int l = 0; l < 8; ++l) out[l] = {c[0][l], c[1][l], c[2][l], c[3][l]};
}

}  // namespace

void philox4x32_x8(const PhiloxCounter* in, PhiloxCounter* out, PhiloxKey k) {
  if (kPhiloxAvx2) {
    philox_x8_avx2(in, out, k);
    return;
  }
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  alignas(32) uint32_t c0[8], c1[8], c2[8], c3[8];
  for (int l = 0; l < 8; ++l)
    c0[l] = in[l][0], c1[l] = in[l][1], c2[l] = in[l][2], c3[l] = in[l][3];
  uint32_t k0 = k[0], k1 = k[1];
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int l = 0; l < 8; ++l) {
      const uint64_t p0 = static_cast<uint64_t>(M0) * c0[l];
      const uint64_t p1 = static_cast<uint64_t>(M1) * c2[l];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
      c1[l] = static_cast<uint32_t>(p1);
      c3[l] = static_cast<uint32_t>(p0);
      c0[l] = n0;
      c2[l] = n2;
    }
    k0 += W0;
    k1 += W1;
  }
  for (int l = 0; l < 8; ++l) out[l] = {c0[l], c1[l], c2[l], c3[l]};
}

namespace {

const bool kMaskAvx2 = __builtin_cpu_supports("avx2");

// 32 mask elements from eight Philox blocks' words (word w of block l is element 4l + w):
// 0 where the word as a unit float is below p, else 1/(1-p). The scalar rule exactly:
// (x >> 8) converts to float exactly and times 2^-24 is exact, and "not below" is ">=".
__attribute__((target("avx2"))) void mask_32(const uint32_t* words, float threshold, float scale,
                                             float* out) {
  const __m256 thr = _mm256_set1_ps(threshold), keep = _mm256_set1_ps(scale),
               unit = _mm256_set1_ps(0x1p-24f);
  for (int q = 0; q < 32; q += 8) {
    const __m256i x =
        _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + q)), 8);
    const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(x), unit);
    _mm256_storeu_ps(out + q, _mm256_and_ps(_mm256_cmp_ps(u, thr, _CMP_GE_OQ), keep));
  }
}

}  // namespace

void check_dropout_range(const DropoutStream& d, int64_t n) {
  ATTEND_CHECK(
      d.index < 65536 && d.micro_step < 65536 && d.step < (1ull << 56) && n / 4 < (1ll << 32),
      "dropout: index ", d.index, ", micro-step ", d.micro_step, ", step ", d.step, " or ", n,
      " elements outside the dropout stream's ranges (2^16, 2^16, 2^56, 2^34)");
}

template <typename T>
void dropout_fill(const DropoutStream& d, uint64_t first, int64_t len, T* out) {
  const float threshold = static_cast<float>(d.p);
  const double scale = 1.0 / (1.0 - d.p);
  const T keep = static_cast<T>(scale);
  // Element first + i is word (first + i) % 4 of block (first + i) / 4; o is the output
  // index of word 0 of block blk (negative for a block that starts before `first`).
  uint64_t blk = first / 4;
  int64_t o = -static_cast<int64_t>(first % 4);
  PhiloxCounter in[8], r[8];
  while (o < len) {
    for (int l = 0; l < 8; ++l) in[l] = dropout_counter(blk + l, d.step, d.index, d.micro_step);
    philox4x32_x8(in, r, d.key);
    bool done = false;
    if constexpr (std::is_same_v<T, float>) {
      if (kMaskAvx2 && o >= 0 && o + 32 <= len) {  // 32 whole elements
        static_assert(sizeof(r) == 32 * sizeof(uint32_t));
        mask_32(r[0].data(), threshold, static_cast<float>(scale), out + o);
        done = true;
      }
    }
    if (!done)
      for (int l = 0; l < 8; ++l)
        for (int w = 0; w < 4; ++w) {
          const int64_t i = o + 4 * l + w;
          if (i >= 0 && i < len) out[i] = u32_to_unit_float(r[l][w]) < threshold ? T(0) : keep;
        }
    blk += 8;
    o += 32;
  }
}

template void dropout_fill<float>(const DropoutStream&, uint64_t, int64_t, float*);
template void dropout_fill<double>(const DropoutStream&, uint64_t, int64_t, double*);

PhiloxCounter Generator::block(uint64_t i) const {
  return philox4x32(generator_counter(i), philox_key(state_.seed));
}

namespace {

// Fills a contiguous tensor; value(block) maps one Philox block to one element.
template <typename F>
void fill_blocks(const Tensor& t, Generator& gen, const char* op, F value) {
  ATTEND_CHECK(t.is_contiguous(), op, ": expected a contiguous tensor");
  const int64_t n = t.numel();
  const uint64_t base = gen.advance(static_cast<uint64_t>(n));
  dispatch_all(t.dtype(), [&]<typename T>() {
    T* p = t.data<T>();
    parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(value(gen.block(base + i)));
    });
  });
}

// Box-Muller on two 53-bit uniforms; u1 in (0, 1] keeps log finite.
double standard_normal(const PhiloxCounter& r) {
  double u1 = 1.0 - u64_to_unit_double(r[0], r[1]);
  double u2 = u64_to_unit_double(r[2], r[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace

void uniform_(const Tensor& t, double low, double high, Generator& gen) {
  ATTEND_CHECK(is_floating(t.dtype()), "uniform_: expected a floating tensor, got ",
               dtype_name(t.dtype()));
  ATTEND_CHECK(low <= high, "uniform_: expected low <= high, got ", low, " > ", high);
  fill_blocks(t, gen, "uniform_", [=](const PhiloxCounter& r) {
    return low + (high - low) * u64_to_unit_double(r[0], r[1]);
  });
}

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  ATTEND_CHECK(is_floating(t.dtype()), "normal_: expected a floating tensor, got ",
               dtype_name(t.dtype()));
  ATTEND_CHECK(std >= 0, "normal_: expected std >= 0, got ", std);
  fill_blocks(t, gen, "normal_",
              [=](const PhiloxCounter& r) { return mean + std * standard_normal(r); });
}

Tensor uniform(const Shape& shape, double low, double high, Generator& gen, DType dtype) {
  Tensor t = empty(shape, dtype);
  uniform_(t, low, high, gen);
  return t;
}

Tensor normal(const Shape& shape, double mean, double std, Generator& gen, DType dtype) {
  Tensor t = empty(shape, dtype);
  normal_(t, mean, std, gen);
  return t;
}

Tensor rand(const Shape& shape, Generator& gen, DType dtype) {
  return uniform(shape, 0.0, 1.0, gen, dtype);
}

Tensor randn(const Shape& shape, Generator& gen, DType dtype) {
  return normal(shape, 0.0, 1.0, gen, dtype);
}

Tensor randint(const Shape& shape, int64_t low, int64_t high, Generator& gen, DType dtype) {
  ATTEND_CHECK(is_integer(dtype), "randint: expected an integer dtype, got ", dtype_name(dtype));
  ATTEND_CHECK(low < high, "randint: expected low < high, got [", low, ", ", high, ")");
  Tensor t = empty(shape, dtype);
  const uint64_t range = static_cast<uint64_t>(high - low);
  // 64 random bits mod range: bias below 2^-32 for ranges under 2^32.
  fill_blocks(t, gen, "randint", [=](const PhiloxCounter& r) {
    uint64_t x = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    return static_cast<double>(low + static_cast<int64_t>(x % range));
  });
  return t;
}

}  // namespace attend

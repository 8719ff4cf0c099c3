// Rotary position embedding (declared in tensor/kernels.h).
//
// Note [RoPE]
// ~~~~~~~~~~~
// A head's HS channels form HS/2 pairs; pair i turns by the angle
//   a(p, i) = p * theta^(-2i / HS)           p the position (0, 1, ...), theta 10000 (Llama 2)
//   (y_a, y_b) = (x_a cos a - x_b sin a,  x_a sin a + x_b cos a)
// so a query at position m and a key at position n score
//   q_m . k_n = sum_i Re[(q_a + i q_b)(k_a - i k_b) e^{i (m - n) theta_i}]:
// only m - n enters. attend pairs channels as Meta's Llama and llama2.c do, (2i, 2i + 1)
// (the interleaved pairs, "complex numbers"). Hugging Face's Llama pairs (i, i + HS/2)
// (rotate_half, "halves"). The two are the same model with the rows of Wq and Wk permuted
// within each head: attend's channel 2i + r is Hugging Face's channel r HS/2 + i (r = 0, 1).
// An importer permutes Hugging Face's rows into attend's order, an exporter back.
//
// Angles are computed in double (p times the frequency, then cos and sin) and rounded
// once; Meta and Hugging Face form them in f32, which differs by f32 rounding of the angle
// (about 1e-4 rad at position 4096).
//
// Shapes: x (B, T, D) with positions along T (pos0 + t), heads of HS along D; the first
// `rotated` columns turn (q and k of a packed q | k | v), the rest are copied. The backward
// of a rotation is the rotation by -a (sign -1): the transpose of an orthogonal map.
#include <cmath>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/parallel.h"

namespace attend::kernel {

namespace {

// cos and sin of every (t, i) of positions pos0..pos0+T-1, rounded once.
template <typename E>
void rope_table(int64_t HS, int64_t pos0, int64_t T, double theta, int sign, E* cs, E* sn) {
  const int64_t half = HS / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(HS));
    for (int64_t t = 0; t < T; ++t) {
      const double a = static_cast<double>(pos0 + t) * freq;
      cs[t * half + i] = static_cast<E>(std::cos(a));
      sn[t * half + i] = static_cast<E>(sign * std::sin(a));
    }
  }
}

// One row (D columns) turned by one position's table; never inlined, so rotary and
// rotary_row_f32 run the same code.
template <typename E>
[[gnu::noinline]] void rope_row(const E* in, E* out, int64_t D, int64_t HS, int64_t rotated,
                                const E* c, const E* sv) {
  const int64_t half = HS / 2;
  for (int64_t h0 = 0; h0 < rotated; h0 += HS)
    for (int64_t i = 0; i < half; ++i) {
      const E a = in[h0 + 2 * i], b = in[h0 + 2 * i + 1];
      out[h0 + 2 * i] = a * c[i] - b * sv[i];
      out[h0 + 2 * i + 1] = a * sv[i] + b * c[i];
    }
  for (int64_t j = rotated; j < D; ++j) out[j] = in[j];
}

}  // namespace

void rotary_row_f32(const float* x, float* y, int64_t D, int64_t HS, int64_t rotated, int64_t pos,
                    double theta) {
  thread_local std::vector<float> table;
  table.resize(static_cast<size_t>(HS));
  rope_table<float>(HS, pos, 1, theta, 1, table.data(), table.data() + HS / 2);
  rope_row<float>(x, y, D, HS, rotated, table.data(), table.data() + HS / 2);
}

Tensor rotary(const Tensor& x, int64_t HS, int64_t rotated, int64_t pos0, double theta, int sign) {
  ATTEND_CHECK(x.dim() == 3, "rotary: expected x of shape (B, T, D), got ", shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  ATTEND_CHECK(HS > 0 && HS % 2 == 0, "rotary: head size ", HS, " must be positive and even");
  ATTEND_CHECK(rotated >= 0 && rotated <= D && rotated % HS == 0, "rotary: rotated columns ",
               rotated, " must be a multiple of the head size ", HS, " within D ", D);
  ATTEND_CHECK(pos0 >= 0, "rotary: first position ", pos0, " must be >= 0");
  ATTEND_CHECK(theta > 1, "rotary: theta ", theta, " must be > 1");
  ATTEND_CHECK(sign == 1 || sign == -1, "rotary: sign must be 1 or -1");
  const int64_t half = HS / 2;
  Tensor xc = contiguous(x), y = empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "rotary", [&]<typename E>() {
    std::vector<E> cs(static_cast<size_t>(T * half)), sn(static_cast<size_t>(T * half));
    rope_table<E>(HS, pos0, T, theta, sign, cs.data(), sn.data());
    const E* xp = xc.data<E>();
    E* yp = y.data<E>();
    parallel_for(B * T, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(D, 1)),
                 [&](int64_t s, int64_t e) {
                   for (int64_t r = s; r < e; ++r) {
                     const int64_t t = r % T;
                     rope_row<E>(xp + r * D, yp + r * D, D, HS, rotated, cs.data() + t * half,
                                 sn.data() + t * half);
                   }
                 });
  });
  return y;
}

}  // namespace attend::kernel

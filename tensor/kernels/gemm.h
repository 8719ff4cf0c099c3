// C (M, N), row-major with leading dimension ldc, = A (M, K) @ B (K, N), where A and B are
// read through arbitrary element strides (row stride, column stride), so a transposed
// view costs nothing. `parallel` lets the blocked kernel use OpenMP threads; callers that
// are themselves inside a parallel loop pass false.
#pragma once

#include <cstdint>
#include <string>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::kernel {

template <typename T>
struct MatrixRef {
  const T* data;
  int64_t row_stride, col_stride;
};

// The depth of the blocked GEMM's K blocks. Every kernel (the blocked one, the few-rows
// one) sums each K block from zero and then stores it (the first block, without
// `accumulate`) or adds it to C, in order; so a product split along K at multiples of
// kGemmKBlock, its first part computed plainly and each later part with `accumulate`, gives
// the bits of the whole product, in f32 and in bf16 (tests/tensor/test_gemm.cpp).
constexpr int64_t kGemmKBlock = 256;

// Cache-blocked with packed panels and a register-tiled micro-kernel (AVX-512 or AVX2/FMA when the
// CPU has it, checked at run time; a portable one otherwise). Every output element sums its K
// products in the same order whatever the thread count: threads split M and N, never K.
// With `accumulate`, C += A @ B (each element adds its finished sum once).
// (Instantiated in gemm.cpp for f32 and f64, so exported by this attribute, not by the
// pragma: autograd's Linear calls it with `accumulate`.)
template <typename T>
__attribute__((visibility("default"))) void gemm(int64_t M, int64_t N, int64_t K, MatrixRef<T> A,
                                                 MatrixRef<T> B, T* C, int64_t ldc, bool parallel,
                                                 bool accumulate = false);

// B packed once for several products that share it (attention's K and V across query
// blocks and heads): pack_b_all writes B (K, N), N <= 3072, into packed_b_size(K, N)
// elements; gemm_prepacked then computes C (M, n) = A (M, k) @ B[:k, :n] for any k <= K,
// n <= N, serially, with the same bits as gemm on that B[:k, :n].
template <typename T>
int64_t packed_b_size(int64_t K, int64_t N);
template <typename T>
void pack_b_all(int64_t K, int64_t N, MatrixRef<T> B, T* out);
template <typename T>
void gemm_prepacked(int64_t M, int64_t n, int64_t k, MatrixRef<T> A, const T* packed, int64_t K,
                    int64_t N, T* C, int64_t ldc, bool accumulate = false);

// Sampling's products against a weight kept for decoding (infer::DecodingWeights):
// C (M, N) = A (M, K) @ B with B = W^T (K, N) stored in column panels: panel p holds
// columns [p P, min(N, (p + 1) P)) as rows of `width` elements, P = kDecodePanel, the panels
// one after another:
//   f32   K rows of f32 values (to_decode_panels; N K floats in all);
//   bf16  ceil(K / 2) rows of pair words, the bf16 bits (to_bf16_bits) of k in the low half
//         and of k + 1 in the high half (zero past K), the blocked GEMM's packed layout and
//         vdpbf16ps's operand (to_decode_panels_bf16; decode_panels_bf16_words in all).
// Each thread streams its own share of the columns (gemm_rows.cpp). gemm_f32_panels gives
// gemm's bits for that B; gemm_bf16_panels the bits gemm gives for the f32 B under bf16
// precision, at half the bytes read. Only for what gemm_panels_apply says this machine's
// kernels take (the AVX2 kernels in use, 1 <= M <= 4, N >= 8, K >= 1); elsewhere multiply by
// the f32 weight. A's rows contiguous (column stride 1).
inline constexpr int64_t kDecodePanel = 128;
bool gemm_panels_apply(int64_t M, int64_t N, int64_t K);
void gemm_f32_panels(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, const float* panels,
                     float* C, int64_t ldc, bool parallel);
void gemm_bf16_panels(int64_t M, int64_t N, int64_t K, MatrixRef<float> A,
                      const uint32_t* panels, float* C, int64_t ldc, bool parallel);
void to_decode_panels(const float* W, int64_t N, int64_t K, float* out);
void to_decode_panels_bf16(const float* W, int64_t N, int64_t K, uint32_t* out);
int64_t decode_panels_bf16_words(int64_t N, int64_t K);
// Products with a frozen bf16 weight (tensor/dtype.h's bf16: LoRA's base under train
// --base_weights bf16), W row-major bits, A f32 with column stride 1:
//   gemm_bf16_weight_t  C (M, N) = A (M, K) W^T,  W (N, K)   (a Linear's forward)
//   gemm_bf16_weight    C (M, N) = A (M, K) W,    W (K, N)   (its input's gradient)
// Each widens W a block of rows at a time (at most kBf16WeightBlockBytes of f32) and
// multiplies by gemm, so the result has gemm's bits on W's f32 values, in f32 and bf16
// precision, at any thread count: blocks of W^T's columns change no element's sum, and
// blocks of W's rows split K at multiples of kGemmKBlock (see above). With `accumulate`,
// C += the product. The f32 copy of the whole W is never made.
inline constexpr int64_t kBf16WeightBlockBytes = int64_t{8} << 20;
void gemm_bf16_weight_t(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, const uint16_t* W,
                        float* C, int64_t ldc, bool accumulate = false);
void gemm_bf16_weight(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, const uint16_t* W,
                      float* C, int64_t ldc, bool accumulate = false);

// Under bf16 products only: C (M, N) = A (M, K) @ B, B (K, N) given as bf16 bits, row-major
// with row stride ldb (a tensor kept for backward as bf16, kept_operand.h: Linear's x in
// dW = dY^T x). gemm's bits on B's f32 values (rounding a bf16 value to bf16 gives its bits
// back), at any thread count, without widening B: its panels are packed from the bits. With
// `accumulate`, C += the product. An internal error under f32 products.
void gemm_bf16_bits_b(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, const uint16_t* B,
                      int64_t ldb, float* C, int64_t ldc, bool accumulate = false);

// Under bf16 products only, serial: C (M, N) = A (M, K) @ B, B (K, N) given as bf16 bits
// through any strides (a decoder's bf16 key and value cache: K^T, a row per key, and V).
// gemm's bits on B's f32 values; B read in place, widened as it is read, where the few-rows
// products take the shape (gemm_rows.h), else widened into a buffer first.
void gemm_bf16_bits(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, MatrixRef<uint16_t> B,
                    float* C, int64_t ldc);

// Under bf16 products only: gemm (C = A @ B, not accumulating) that also writes A's bf16
// bits (to_bf16_bits' values; row-major, row stride K) to a_bits as it packs A, instead of a
// second pass over A: what a Linear keeps of its input for backward (kept_operand.h). A's
// columns adjacent (column stride 1). The same C as gemm.
void gemm_bf16_keep_a(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, MatrixRef<float> B,
                      float* C, int64_t ldc, uint16_t* a_bits);

// The plain triple loop, accumulating in double: the test oracle.
template <typename T>
void gemm_naive(int64_t M, int64_t N, int64_t K, MatrixRef<T> A, MatrixRef<T> B, T* C, int64_t ldc);

// The f32 micro-kernel: AVX-512 (6 x 32 tiles) where the CPU has it, else AVX2/FMA (6 x 16),
// else portable C++. The AVX-512 and AVX2 kernels give the same bits (same products, same
// order, same fused multiply-adds). The environment variable ATTEND_GEMM (avx512, avx2,
// portable) picks one at start-up; gemm_env_problem says why it could not be honoured ("" if
// it was, or is unset), and the attend program refuses to run then. set_gemm_kernel picks
// one now (clamped to what the CPU has) and returns the previous one. f64 uses AVX2 under
// either SIMD kernel.
enum class GemmKernel { portable, avx2, avx512 };
GemmKernel gemm_kernel();
GemmKernel set_gemm_kernel(GemmKernel k);
const char* gemm_kernel_name(GemmKernel k);
std::string gemm_env_problem();

// The precision of f32 products. f32 (the default): f32 products and sums. bf16: each
// operand rounded to bf16 (nearest even) as it is packed, products of bf16 pairs summed in
// f32 (gemm_bf16.h states the exact arithmetic), by AVX512_BF16's vdpbf16ps where the CPU
// has it and the AVX-512 kernel is in use, else by an emulation that gives the same bits.
// Thread counts change no bits in either. Applies to gemm (and so to matmul, Linear and
// the fused attention), and to pack_b_all + gemm_prepacked, which must run under the same
// precision; the few-rows path (sampling's, gemm_rows.h) gives the same bits in either.
// f64 products are never rounded.
//
// Note [Precision is scoped]: the precision is chosen where a job starts (a training run, a
// sampling or eval command) by holding a PrecisionScope for the job's length, and read only
// here in tensor/ (the GEMM driver, KeptOperand, StoredWeight); no other room reads or sets
// it. set_gemm_precision (returns the previous one) is for tests and benchmarks that switch
// within one function.
enum class GemmPrecision { f32, bf16 };
GemmPrecision gemm_precision();
GemmPrecision set_gemm_precision(GemmPrecision p);
const char* gemm_precision_name(GemmPrecision p);  // "f32", "bf16"
// "f32" or "bf16" -> the precision; anything else throws naming `what` (a flag or a field)
// and the value: "--precision: must be f32 or bf16, got f16".
GemmPrecision parse_gemm_precision(const std::string& text, const std::string& what);
// What runs bf16 products on this machine, as one line for the log: AVX512_BF16, or the
// emulation and why. `native` says which (a warning is due when false).
std::string gemm_bf16_note(bool* native);

// Products made while it lives use `p`; the previous precision comes back when it ends.
class PrecisionScope {
 public:
  explicit PrecisionScope(GemmPrecision p) : previous_(set_gemm_precision(p)) {}
  ~PrecisionScope() { set_gemm_precision(previous_); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  GemmPrecision previous_;
};
bool gemm_has_native_bf16();  // AVX512_BF16 on this CPU
// Which kernel runs bf16 products where the AVX-512 f32 kernel is in use: vdpbf16ps
// (`native`, needs AVX512_BF16) or the emulation in AVX-512 FMAs (`fma`: two FMAs a pair,
// the same bits). By default native where vdpbf16ps outruns two FMAs (AMD's Zen 4 and 5:
// twice the f32 rate) and fma on Intel CPUs (Sapphire and Emerald Rapids: vdpbf16ps at half
// the f32 FMA rate, measured) and where AVX512_BF16 is missing; ATTEND_BF16=native|fma
// overrides it at start-up (the attend program refuses another value). The setter clamps
// native to fma without AVX512_BF16 and returns the previous choice.
enum class Bf16Kernel { native, fma };
Bf16Kernel gemm_bf16_kernel();
Bf16Kernel set_gemm_bf16_kernel(Bf16Kernel k);

// Which kernel gemm_bf16_panels runs with the AVX-512 kernels in use: vdpbf16ps (native,
// the default where the CPU has AVX512_BF16, Intel's included: a token's products wait on
// memory, not on the arithmetic) or the emulation in FMAs; the same bits. The setter
// returns the previous choice (native without AVX512_BF16 becomes fma).
Bf16Kernel decode_bf16_kernel();
Bf16Kernel set_decode_bf16_kernel(Bf16Kernel k);

float round_to_bf16(float x);  // the packing's rounding, for tests and checkers
// n f32 values -> their bf16 bits by that rounding, and back (bits << 16, exact): a tensor
// kept for backward in half the bytes (tensor/kernels/kept_operand.h). In parallel, any thread count.
void to_bf16_bits(const float* x, uint16_t* out, int64_t n);
void from_bf16_bits(const uint16_t* x, float* out, int64_t n);

}  // namespace attend::kernel
#pragma GCC visibility pop

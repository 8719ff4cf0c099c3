// Which f32 micro-kernel the GEMM runs: the widest the CPU has, ATTEND_GEMM's choice, or
// set_gemm_kernel's (declared in tensor/kernels/gemm.h).
#include <atomic>
#include <cstdlib>
#include <string>

#include "tensor/kernels/gemm_bf16.h"
#include "tensor/kernels/gemm_micro.h"
#include "tensor/error.h"
#include "tensor/parallel.h"

namespace attend::kernel {

namespace gemm_detail {

const bool kHasAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
const bool kHasAvx512 = kHasAvx2 && __builtin_cpu_supports("avx512f");

// Why ATTEND_GEMM could not be honoured ("" when it is unset or honoured).
namespace {

std::string& env_problem() {
  static std::string problem;
  return problem;
}

// The f32 kernel in use: the widest the CPU has, unless ATTEND_GEMM (avx512, avx2,
// portable) or set_gemm_kernel picked another. A value the CPU cannot run or that is not a
// kernel's name leaves the widest and is reported by gemm_env_problem.
GemmKernel initial_kernel() {
  const GemmKernel best = kHasAvx512 ? GemmKernel::avx512
                          : kHasAvx2 ? GemmKernel::avx2
                                     : GemmKernel::portable;
  const char* e = std::getenv("ATTEND_GEMM");
  if (!e) return best;
  const std::string v = e;
  if (v == "portable") return GemmKernel::portable;
  if (v == "avx2" && kHasAvx2) return GemmKernel::avx2;
  if (v == "avx512" && kHasAvx512) return GemmKernel::avx512;
  if (v == "avx2" || v == "avx512")
    env_problem() =
        "ATTEND_GEMM=" + v + ": this CPU has no " + (v == "avx2" ? "AVX2/FMA" : "AVX-512");
  else
    env_problem() = "ATTEND_GEMM='" + v + "': expected avx512, avx2 or portable";
  return best;
}
}  // namespace

std::atomic<GemmKernel> g_kernel{initial_kernel()};
const bool kHasAvx512Bf16 = kHasAvx512 && __builtin_cpu_supports("avx512bf16");

namespace {
// vdpbf16ps where it outruns two FMAs (AMD), the FMA emulation on Intel (gemm.h), unless
// ATTEND_BF16 says which.
Bf16Kernel initial_bf16_kernel() {
  const Bf16Kernel best =
      kHasAvx512Bf16 && !__builtin_cpu_is("intel") ? Bf16Kernel::native : Bf16Kernel::fma;
  const char* e = std::getenv("ATTEND_BF16");
  if (!e) return best;
  const std::string v = e;
  if (v == "fma") return Bf16Kernel::fma;
  if (v == "native" && kHasAvx512Bf16) return Bf16Kernel::native;
  const std::string why = v == "native" ? "ATTEND_BF16=native: this CPU has no AVX512_BF16"
                                        : "ATTEND_BF16='" + v + "': expected native or fma";
  env_problem() += (env_problem().empty() ? "" : "; ") + why;
  return best;
}
}  // namespace

std::atomic<Bf16Kernel> g_bf16_kernel{initial_bf16_kernel()};
std::atomic<GemmPrecision> g_precision{GemmPrecision::f32};

}  // namespace gemm_detail

using gemm_detail::env_problem;
using gemm_detail::g_kernel;
using gemm_detail::kHasAvx2;
using gemm_detail::kHasAvx512;

GemmKernel gemm_kernel() { return g_kernel.load(); }

std::string gemm_env_problem() {
  (void)g_kernel.load();  // initialised, so env_problem is set
  return env_problem();
}

GemmKernel set_gemm_kernel(GemmKernel k) {
  if (k == GemmKernel::avx512 && !kHasAvx512) k = GemmKernel::avx2;
  if (k == GemmKernel::avx2 && !kHasAvx2) k = GemmKernel::portable;
  return g_kernel.exchange(k);
}

GemmPrecision gemm_precision() { return gemm_detail::g_precision.load(); }
GemmPrecision set_gemm_precision(GemmPrecision p) { return gemm_detail::g_precision.exchange(p); }
bool gemm_has_native_bf16() { return gemm_detail::kHasAvx512Bf16; }
Bf16Kernel gemm_bf16_kernel() { return gemm_detail::g_bf16_kernel.load(); }
Bf16Kernel set_gemm_bf16_kernel(Bf16Kernel k) {
  if (!gemm_detail::kHasAvx512Bf16) k = Bf16Kernel::fma;
  return gemm_detail::g_bf16_kernel.exchange(k);
}

const char* gemm_precision_name(GemmPrecision p) {
  return p == GemmPrecision::bf16 ? "bf16" : "f32";
}

GemmPrecision parse_gemm_precision(const std::string& text, const std::string& what) {
  if (text == "f32") return GemmPrecision::f32;
  if (text == "bf16") return GemmPrecision::bf16;
  throw Error(str(what, ": must be f32 or bf16, got ", text));
}

std::string gemm_bf16_note(bool* native) {
  const gemm_detail::Bf16Path path = gemm_detail::bf16_path();
  *native = path == gemm_detail::Bf16Path::native || path == gemm_detail::Bf16Path::avx512;
  if (path == gemm_detail::Bf16Path::native)
    return "precision bf16: matrix products by this CPU's AVX512_BF16 (vdpbf16ps)";
  if (path == gemm_detail::Bf16Path::avx512)
    return gemm_detail::kHasAvx512Bf16
               ? "precision bf16: matrix products by AVX-512 FMAs on the bf16 values (this "
                 "CPU's vdpbf16ps runs at half the f32 FMA rate; the same bits; ATTEND_BF16="
                 "native to use it)"
               : "precision bf16: matrix products by AVX-512 FMAs on the bf16 values (this CPU "
                 "has no AVX512_BF16; the same bits)";
  return str("precision bf16: ",
             gemm_detail::kHasAvx512Bf16 ? "ATTEND_GEMM chose a kernel without AVX512_BF16"
                                         : "this CPU has no AVX512_BF16",
             "; running the emulation (the same results; about f32's speed with AVX2, slower "
             "without: here bf16 saves only activation memory)");
}
float round_to_bf16(float x) { return gemm_detail::bf16_round(x); }

namespace {

__attribute__((target("avx2"))) void to_bf16_bits_avx2(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i r =
        gemm_detail::bf16_round_x8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    // the high halves of the eight words, in order (each shifted value < 2^16, so the
    // saturating pack keeps it)
    const __m256i h = _mm256_srli_epi32(r, 16);
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
  for (; i < n; ++i) out[i] = gemm_detail::bf16_bits(x[i]);
}

}  // namespace

// A conversion is a memory-bound pass beside a product many times its cost: in parallel only
// for a million elements or more, so small models do not pay a parallel region per saved
// tensor on a busy machine. cpu-char (bench_train 10 C, one CPU hog beside it, 2 threads):
// bf16 88-117 ms against f32 88-96 with this grain, 103-117 against 71-90 with the
// elementwise grain (noisy; numbers.md, 2026-12-04 night).
constexpr int64_t kConvertGrain = int64_t{1} << 20;

void to_bf16_bits(const float* x, uint16_t* out, int64_t n) {
  parallel_for(n, kConvertGrain, [&](int64_t b, int64_t e) {
    if (kHasAvx2) {
      to_bf16_bits_avx2(x + b, out + b, e - b);
    } else {
      for (int64_t i = b; i < e; ++i) out[i] = gemm_detail::bf16_bits(x[i]);
    }
  });
}

void from_bf16_bits(const uint16_t* x, float* out, int64_t n) {
  parallel_for(n, kConvertGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = gemm_detail::bf16_value(x[i]);
  });
}

const char* gemm_kernel_name(GemmKernel k) {
  switch (k) {
    case GemmKernel::avx512:
      return "AVX-512 (6x32 f32 tiles; f64 AVX2/FMA)";
    case GemmKernel::avx2:
      return "AVX2/FMA";
    case GemmKernel::portable:
      break;
  }
  return "portable";
}

}  // namespace attend::kernel

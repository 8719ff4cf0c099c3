#include "tensor/half.h"

#include <cstring>

namespace attend {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);  // inf, NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // normal: rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // zero
  } else {        // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    bits = sign | static_cast<uint32_t>(112 - e) << 23 | ((mant & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

uint16_t float_to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: infinity
  if (abs < 0x33000001u) return sign;             // below half the smallest subnormal
  const int32_t exp = static_cast<int32_t>(abs >> 23) - 127;
  uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // 24 bits with the hidden one
  // Bits to drop: 13 for a normal half; more below 2^-14 (subnormal).
  const int32_t shift = exp >= -14 ? 13 : 13 + (-14 - exp);
  const uint32_t half_bit = 1u << (shift - 1), rest = mant & ((half_bit << 1) - 1);
  mant >>= shift;
  if (rest > half_bit || (rest == half_bit && (mant & 1u))) ++mant;  // carries are fine
  const uint32_t e = exp >= -14 ? static_cast<uint32_t>(exp + 15) : 0u;
  return static_cast<uint16_t>(sign | ((e << 10) + (exp >= -14 ? (mant - 0x400u) : mant)));
}

}  // namespace attend

// Element types. Floating tensors (f32, f64) carry values and gradients; integer tensors
// (i32, i64) carry token ids and indices; bool tensors carry masks. bf16 tensors (bfloat16
// bits, uint16_t elements) hold frozen weights only (train --base_weights bf16): made by
// kernel::cast from f32 (rounded as the GEMM rounds, tensor/kernels/bf16_weight.h), read by
// the few ops that take a frozen weight (linear, linear_cross_entropy, embedding) and by
// cast back to f32; they never require grad, and every other op refuses them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/error.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

enum class DType : uint8_t { F32, F64, I32, I64, Bool, BF16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::Bool:
      return 1;
    case DType::BF16:
      return 2;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F64:
      return "f64";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::Bool:
      return "bool";
    case DType::BF16:
      return "bf16";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::F32 || t == DType::F64; }
constexpr bool is_integer(DType t) { return t == DType::I32 || t == DType::I64; }

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::F64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::I32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::I64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::Bool;
}
template <>
constexpr DType dtype_of<uint16_t>() {  // bf16 bits
  return DType::BF16;
}

// Calls f.template operator()<T>() with T the C++ type of a floating dtype; `op` names the
// caller in the error for other dtypes.
template <typename F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32:
      return f.template operator()<float>();
    case DType::F64:
      return f.template operator()<double>();
    default:
      throw Error(str(op, ": expected a floating dtype (f32 or f64), got ", dtype_name(t)));
  }
}

// The same over every dtype but bf16 (stored weights, read by name where they are taken).
template <typename F>
decltype(auto) dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::F32:
      return f.template operator()<float>();
    case DType::F64:
      return f.template operator()<double>();
    case DType::I32:
      return f.template operator()<int32_t>();
    case DType::I64:
      return f.template operator()<int64_t>();
    case DType::Bool:
      return f.template operator()<bool>();
    case DType::BF16:
      break;
  }
  throw Error(str("expected an f32, f64, i32, i64 or bool tensor, got ", dtype_name(t),
                  " (bf16 tensors are frozen weights: only linear, linear_cross_entropy, "
                  "embedding and cast take them)"));
}

}  // namespace attend
#pragma GCC visibility pop

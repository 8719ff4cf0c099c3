// Counter-based random numbers: Philox 4x32-10 (Salmon et al., "Parallel Random Numbers:
// As Easy as 1, 2, 3", SC'11).
//
// A Philox block is a pure function of a 128-bit counter and a 64-bit key, so the numbers
// at (seed, offset) are the same whatever the thread count, and a generator's whole state
// is two integers (seed, offset) that a checkpoint can save. There is no global generator:
// everything random takes a Generator explicitly.
//
// Stream layout: element e of a fill that starts at offset o uses block number o + e, with
// counter = (lo32(o+e), hi32(o+e), 0, 0) and key = (lo32(seed), hi32(seed)). A fill of n
// elements advances the offset by n. Keyed uses (dropout masks: seed, step, module,
// element) call philox4x32 directly with their own counter words.
#pragma once

#include <array>
#include <cstdint>

#include "tensor/tensor.h"

namespace attend {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Ten rounds of Philox 4x32.
PhiloxCounter philox4x32(PhiloxCounter ctr, PhiloxKey key);

// Uniform in [0, 1) from the top 24 (float) or 53 (double) bits.
inline float u32_to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * 0x1p-24f; }
inline double u64_to_unit_double(uint32_t hi, uint32_t lo) {
  uint64_t x = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(x >> 11) * 0x1p-53;
}

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // blocks consumed
  bool operator==(const GeneratorState&) const = default;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_{seed, 0} {}
  uint64_t seed() const { return state_.seed; }
  uint64_t offset() const { return state_.offset; }
  GeneratorState state() const { return state_; }
  void set_state(const GeneratorState& s) { state_ = s; }

  // Block number `i` of this stream (does not advance).
  PhiloxCounter block(uint64_t i) const;
  // Reserves n blocks and returns the offset of the first.
  uint64_t advance(uint64_t n) {
    uint64_t o = state_.offset;
    state_.offset += n;
    return o;
  }

 private:
  GeneratorState state_;
};

// Fresh tensors from the generator (each element one Philox block; see the stream layout).
Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::F32);   // U[0,1)
Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::F32);  // N(0,1)
Tensor uniform(const Shape& shape, double low, double high, Generator& gen,
               DType dtype = DType::F32);
Tensor normal(const Shape& shape, double mean, double std, Generator& gen,
              DType dtype = DType::F32);
// Random integers in [low, high), e.g. token ids for tests.
Tensor randint(const Shape& shape, int64_t low, int64_t high, Generator& gen,
               DType dtype = DType::I64);

// In place on a contiguous floating tensor (parameter initialisation).
void normal_(const Tensor& t, double mean, double std, Generator& gen);
void uniform_(const Tensor& t, double low, double high, Generator& gen);

}  // namespace attend

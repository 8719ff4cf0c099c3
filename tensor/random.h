// Counter-based random numbers: Philox 4x32-10 (Salmon et al., "Parallel Random Numbers:
// As Easy as 1, 2, 3", SC'11).
//
// A Philox block is a pure function of a 128-bit counter and a 64-bit key, so the numbers
// at (seed, offset) are the same whatever the thread count, and a generator's whole state
// is two integers (seed, offset) that a checkpoint can save. There is no global generator:
// everything random takes a Generator explicitly.
//
// Note [Random streams]
// Every random number in attend is one word of a Philox block at (key, counter), with
// key = philox_key(seed) of the run. The counter space is shared, so it is owned here:
// the top byte of counter word 3 names the consumer (a Stream), and each consumer lays out
// the other 120 bits as below. Two consumers can therefore never draw the same block,
// whatever their arguments (tests/tensor/test_random.cpp checks this on real draws).
//
//   stream     words 0..2 and the low 24 bits of word 3               used by
//   Generator  lo32(o), hi32(o), 0, 0 (o: the generator's offset)    init, tests, randint
//   Batch      row b, micro-step, lo32(step), hi24(step)             data::TokenDataset
//   Dropout    block, lo32(step), index<<16 | micro-step, hi24(step) nn::Dropout, fused attention
//   EvalTrain, EvalVal: as Batch, micro-step = evaluation batch k    the trainer's estimates
//   Sample     lo32(i), hi32(i), 0, 0 (i: the new token's number)     infer::sample
//
// (Before checkpoint format 2 the streams had no id and Batch collided with Dropout.)
#pragma once

#include <array>
#include <cstdint>

#include "tensor/tensor.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Ten rounds of Philox 4x32.
PhiloxCounter philox4x32(PhiloxCounter ctr, PhiloxKey key);
// Eight blocks at once, the same numbers as eight calls of philox4x32: the rounds run
// lane by lane over eight counters, which the compiler turns into vector multiplies
// (dropout masks draw through it).
void philox4x32_x8(const PhiloxCounter* in, PhiloxCounter* out, PhiloxKey key);

// See Note [Random streams].
enum class Stream : uint32_t {
  Generator = 0,
  Batch = 1,
  Dropout = 2,
  EvalTrain = 3,
  EvalVal = 4,
  Sample = 5
};
inline PhiloxKey philox_key(uint64_t seed) {
  return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
}
// The counter of `stream` with its own words w0..w2 and the low 24 bits of word 3 (w3 must
// be below 2^24; callers check their ranges where a user could exceed them).
inline PhiloxCounter stream_counter(Stream stream, uint32_t w0, uint32_t w1, uint32_t w2,
                                    uint32_t w3) {
  return {w0, w1, w2, (static_cast<uint32_t>(stream) << 24) | (w3 & 0xffffffu)};
}
// Batch-like layout (Batch, EvalTrain, EvalVal): row b of micro-step m at a step < 2^56.
inline PhiloxCounter batch_counter(Stream stream, uint32_t b, uint32_t m, uint64_t step) {
  return stream_counter(stream, b, m, static_cast<uint32_t>(step),
                        static_cast<uint32_t>(step >> 32));
}
inline PhiloxCounter generator_counter(uint64_t offset) {
  return stream_counter(Stream::Generator, static_cast<uint32_t>(offset),
                        static_cast<uint32_t>(offset >> 32), 0, 0);
}

// Dropout's layout: mask block blk (elements 4 blk .. 4 blk + 3) of dropout `index` at a
// training step and micro-step.
inline PhiloxCounter dropout_counter(uint64_t blk, uint64_t step, uint32_t index,
                                     uint32_t micro_step) {
  return stream_counter(Stream::Dropout, static_cast<uint32_t>(blk), static_cast<uint32_t>(step),
                        (index << 16) | (micro_step & 0xffff), static_cast<uint32_t>(step >> 32));
}

// One dropout's masks at one (step, micro-step): element e is 0 when word e % 4 of block
// dropout_counter(e / 4, ...) as a unit float is below p, else 1/(1-p). nn::Dropout draws
// a whole mask from it; fused kernels (attention) draw the elements they need, the same ones.
struct DropoutStream {
  double p = 0;  // 0: no dropout
  PhiloxKey key{};
  uint64_t step = 0;
  uint32_t index = 0, micro_step = 0;
};
// Checks the stream's ranges for a mask of n elements (throws naming them).
void check_dropout_range(const DropoutStream& d, int64_t n);
// out[i] = mask element first + i, for i < len (f32 or f64).
// (A function template instantiated in a .cpp file takes the visibility of its definition,
// not of the pragma below: the attribute exports the f32/f64 instances from a shared build.)
template <typename T>
__attribute__((visibility("default"))) void dropout_fill(const DropoutStream& d, uint64_t first,
                                                         int64_t len, T* out);

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
#pragma GCC visibility pop

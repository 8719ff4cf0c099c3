// Tensor basics: creation, storage, views without copies, element access, printing.
#include <sys/mman.h>
#include <unistd.h>

#include <optional>
#include <sstream>

#include "tensor/kernels.h"
#include "test_util.h"

using namespace attend;
namespace k = attend::kernel;

TEST_CASE("creation functions give the documented values") {
  CHECK(zeros({2, 3}).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(ones({4}, DType::F64).to_vector<double>() == std::vector<double>(4, 1.0));
  CHECK(full({2}, 2.5).to_vector<float>() == std::vector<float>{2.5f, 2.5f});
  CHECK(arange(0, 5).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
  CHECK(arange(1, 2, 0.25, DType::F64).to_vector<double>() ==
        std::vector<double>{1, 1.25, 1.5, 1.75});
  CHECK(arange(0, 3, 1, DType::I64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
  Tensor t = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.strides() == Strides{3, 1});
  CHECK(t.at({1, 2}) == 6);
  CHECK(t.at({-1, 0}) == 4);
  CHECK(scalar_tensor(7).dim() == 0);
  CHECK(scalar_tensor(7).item() == 7);
}

TEST_CASE("storage is 64-byte aligned and shared by views") {
  Tensor t = zeros({3, 5});
  CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
  Tensor v = k::transpose(t, 0, 1);
  v.set({4, 2}, 9.0);  // element (2, 4) of t
  CHECK(t.at({2, 4}) == 9.0);
  CHECK(v.impl()->storage == t.impl()->storage);
}

namespace {
// Pages of [p, p + bytes) resident in memory (mincore), p page-aligned.
size_t resident_pages(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  REQUIRE(mincore(const_cast<void*>(p), bytes, v.data()) == 0);
  size_t n = 0;
  for (const unsigned char c : v) n += c & 1;
  return n;
}
}  // namespace

TEST_CASE("zeros are zeros whether the buffer is fresh from the system or reused dirty") {
  // Buffers of 1 MB and more are mapped from the system: a fresh one is known to be zeros,
  // and within an UnwrittenZeros scope zeros() leaves its pages unwritten; a reused one
  // (the cache of freed buffers) held other values and must be cleared. Sizes below, at
  // and above the threshold, in and out of the scope.
  for (const bool unwritten : {false, true})
    for (const int64_t n : {int64_t{1000}, int64_t{1} << 18, (int64_t{1} << 20) + 3}) {
      CAPTURE(unwritten);
      CAPTURE(n);
      std::optional<UnwrittenZeros> scope;
      if (unwritten) scope.emplace();
      release_storage_cache();
      const Tensor fresh = zeros({n});
      CHECK(reinterpret_cast<uintptr_t>(fresh.raw_data()) % 64 == 0);
      CHECK(k::contiguous(fresh).to_vector<float>() ==
            std::vector<float>(static_cast<size_t>(n), 0.0f));
      {
        Tensor dirty = full({n}, 7.0);  // freed into the cache at the end of the scope
      }
      const Tensor reused = zeros({n});
      CHECK(reused.to_vector<float>() == std::vector<float>(static_cast<size_t>(n), 0.0f));
    }
}

TEST_CASE("zeros: a fresh mapping stays unwritten only within an UnwrittenZeros scope") {
  // Outside the scope every page is written (a buffer read before it is written would take
  // two faults a page); inside, none is (a model built for a load holds no memory for the
  // matrices a checkpoint replaces).
  const int64_t n = int64_t{4} << 20;  // 16 MB of f32
  const size_t bytes = static_cast<size_t>(n) * 4, pages = bytes / 4096;
  release_storage_cache();
  {
    const Tensor written = zeros({n});
    CHECK(resident_pages(written.raw_data(), bytes) == pages);
  }
  release_storage_cache();
  {
    const UnwrittenZeros scope;
    {
      const UnwrittenZeros inner;  // nested scopes end in order
    }
    const Tensor left = zeros({n});
    CHECK(resident_pages(left.raw_data(), bytes) == 0);
    CHECK(left.at({n - 1}) == 0.0);
  }
  release_storage_cache();
  const Tensor after = zeros({n});
  CHECK(resident_pages(after.raw_data(), bytes) == pages);
}

TEST_CASE("views: reshape, view, transpose, permute, narrow, expand, squeeze") {
  Tensor t = arange(0, 24).detach();
  Tensor a = k::view(t, {2, 3, 4});
  CHECK(a.strides() == Strides{12, 4, 1});
  CHECK(a.at({1, 2, 3}) == 23);
  CHECK(k::view(t, {4, -1}).shape() == Shape{4, 6});

  Tensor tr = k::transpose(a, 0, 2);  // (4, 3, 2)
  CHECK(tr.shape() == Shape{4, 3, 2});
  CHECK(!tr.is_contiguous());
  CHECK(tr.at({3, 2, 1}) == a.at({1, 2, 3}));

  Tensor p = k::permute(a, {1, 2, 0});  // (3, 4, 2)
  CHECK(p.at({2, 3, 1}) == a.at({1, 2, 3}));

  Tensor n = k::narrow(a, 1, 1, 2);  // (2, 2, 4)
  CHECK(n.shape() == Shape{2, 2, 4});
  CHECK(n.at({0, 0, 0}) == 4);
  CHECK(n.impl()->storage == t.impl()->storage);

  Tensor col = k::view(arange(0, 3), {3, 1});
  Tensor e = k::expand(col, {2, 3, 4});
  CHECK(e.strides() == Strides{0, 1, 0});
  CHECK(e.at({1, 2, 3}) == 2);

  CHECK(k::unsqueeze(a, 1).shape() == Shape{2, 1, 3, 4});
  CHECK(k::squeeze(k::unsqueeze(a, -1), -1).shape() == Shape{2, 3, 4});
  CHECK(k::select(a, 1, 2).to_vector<float>() == std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23});

  // A view of a transposed tensor where strides allow it, a copy where they do not.
  Tensor m = k::transpose(k::view(arange(0, 6), {2, 3}), 0, 1);  // (3, 2), strides (1, 3)
  CHECK(k::view(k::unsqueeze(m, 0), {3, 2}).impl()->storage == m.impl()->storage);
  Tensor flat = k::reshape(m, {6});
  CHECK(flat.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(flat.impl()->storage != m.impl()->storage);
}

TEST_CASE("contiguous, clone and cast") {
  Tensor m = k::transpose(k::view(arange(0, 6), {2, 3}), 0, 1);
  Tensor c = k::contiguous(m);
  CHECK(c.is_contiguous());
  CHECK(c.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  Tensor already = arange(0, 4);
  CHECK(k::contiguous(already).is_same(already));
  Tensor cl = k::clone(already);
  CHECK(cl.impl()->storage != already.impl()->storage);
  Tensor d = k::cast(tensor({1.5, -2.25}, {2}), DType::F64);
  CHECK(d.dtype() == DType::F64);
  CHECK(d.to_vector<double>() == std::vector<double>{1.5, -2.25});
  CHECK(k::cast(tensor({1.9, -2.9}, {2}), DType::I64).to_vector<int64_t>() ==
        std::vector<int64_t>{1, -2});
}

TEST_CASE("printing shows shape, dtype and values, abbreviated when large") {
  std::ostringstream os;
  os << tensor({1, 2, 3, 4}, {2, 2});
  CHECK(os.str().find("shape=(2,2)") != std::string::npos);
  CHECK(os.str().find("dtype=f32") != std::string::npos);
  CHECK(os.str().find("4") != std::string::npos);
  std::string big = arange(0, 100).to_string();
  CHECK(big.find("...") != std::string::npos);
  CHECK(big.find("99") != std::string::npos);
  CHECK(big.find(" 50") == std::string::npos);
}

// Helpers shared by the test suites.
#pragma once

#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tensor/error.h"
#include "tensor/kernels/gemm.h"
#include "tensor/tensor.h"

namespace attend::test {

// A test whose checker (a tool, a data file) is missing calls skip(reason) and returns.
// tests/main.cpp then exits with 77, which CTest's SKIP_RETURN_CODE reports as skipped,
// never as passed.
inline bool& skip_flag() {
  static bool skipped = false;
  return skipped;
}
inline void skip(const std::string& reason) {
  MESSAGE("skipped: " << reason);
  std::fprintf(stderr, "SKIPPED: %s\n", reason.c_str());
  skip_flag() = true;
}
// Skips and returns from the test case: nothing after it runs.
#define ATTEND_SKIP(why)           \
  do {                             \
    ::attend::test::skip(why);     \
    return;                        \
  } while (0)

// ../shared/data (or ATTEND_SHARED_DATA, which CTest sets) / `name` when it exists, else an
// empty path: the caller then reports the test skipped.
inline std::filesystem::path shared_data(const std::string& name) {
  const char* env = std::getenv("ATTEND_SHARED_DATA");
  const std::filesystem::path p =
      std::filesystem::path(env ? env : "../shared/data") / name;
  return std::filesystem::exists(p) ? p : std::filesystem::path();
}

// A fresh, empty folder under the system's temporary folder, unique to this process.
inline std::filesystem::path temp_dir(const std::string& name) {
  std::filesystem::path p = std::filesystem::temp_directory_path() /
                            ("attend_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

// Every element within atol + rtol * |expected| (same shape required).
inline void check_close(const Tensor& got, const Tensor& want, double atol, double rtol = 0) {
  REQUIRE(got.shape() == want.shape());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double excess = std::abs(g[i] - w[i]) - (atol + rtol * std::abs(w[i]));
    if (!(excess <= worst)) {
      worst = std::isnan(excess) ? INFINITY : excess;
      at = i;
    }
  }
  INFO("first worst element ", at, ": got ", (g.empty() ? 0.0 : g[at]), ", want ",
       (w.empty() ? 0.0 : w[at]));
  CHECK(worst <= 0);
}

// The GEMM's precision for a scope, restored after it even when a REQUIRE throws.
using PrecisionGuard = kernel::PrecisionScope;

// Bit-identical (same shape, same bytes of every element).
inline bool bit_identical(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &y[i], sizeof(double)) != 0) return false;
  return true;
}

// fn() throws attend::Error whose message contains `needle`.
template <typename F>
void check_error(F&& fn, const std::string& needle) {
  std::string what;
  try {
    fn();
  } catch (const Error& e) {
    what = e.what();
  }
  INFO("expected an attend::Error containing: ", needle);
  INFO("got: ", (what.empty() ? std::string("no error") : what));
  CHECK(what.find(needle) != std::string::npos);
}

}  // namespace attend::test

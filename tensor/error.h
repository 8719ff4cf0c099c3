// Errors users can cause throw attend::Error with a message naming the op, what was
// expected and what was got: `matmul: expected a.shape[-1] == b.shape[-2], got (2,3) @ (4,5)`.
// Internal invariants use assert (debug builds only).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace attend {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates its arguments with operator<<.
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace attend

#define ATTEND_CHECK(cond, ...)                                     \
  do {                                                              \
    if (!(cond)) throw ::attend::Error(::attend::str(__VA_ARGS__)); \
  } while (0)

// Errors users can cause throw attend::Error with a message naming the op, what was
// expected and what was got: `matmul: expected a.shape[-1] == b.shape[-2], got (2,3) @ (4,5)`.
// What only a bug of ours can break (an internal invariant) uses ATTEND_INTERNAL_CHECK:
// a std::logic_error, which the program reports as an internal error (exit 2), not as the
// user's (exit 1).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
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

#define ATTEND_INTERNAL_CHECK(cond, ...)                                                   \
  do {                                                                                     \
    if (!(cond))                                                                           \
      throw std::logic_error(::attend::str("internal invariant broken: ", __VA_ARGS__)); \
  } while (0)
#pragma GCC visibility pop

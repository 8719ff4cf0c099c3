// Flag checks whose messages name the user's own value in the flag's own terms (CLI11's
// NonNegativeNumber prints its range as doubles: "0.000000 to 1.797...e308").
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "tensor/util.h"

namespace attend::cli {

// An integer >= 0.
inline CLI::Validator non_negative_int() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          if (parse_int(s, "value") >= 0) return "";
        } catch (const std::exception&) {
        }
        return "expected an integer >= 0, got '" + s + "'";
      },
      "INT>=0");
}

}  // namespace attend::cli

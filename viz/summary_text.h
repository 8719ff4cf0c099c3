// The text layout of `attend summary`: a torchinfo-style module table, the parameter
// breakdown by component, memory for training, FLOPs per token and the key/value cache.
// The numbers come from nn::summarize; this file only lays them out.
#pragma once

#include <cstdint>
#include <string>

#include "nn/summary.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::viz {

std::string format_summary(const nn::ModelSummary& s);

// 1234567 -> "1,234,567"; bytes -> "1.23 GiB".
std::string with_commas(int64_t v);
std::string human_bytes(double bytes);

}  // namespace attend::viz
#pragma GCC visibility pop

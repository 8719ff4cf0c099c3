#include "convert/format.h"

#include <spdlog/fmt/fmt.h>

#include "tensor/error.h"
#include "tensor/util.h"

namespace attend::convert {

void check_import_memory(const std::string& source, const nn::GPTConfig& c) {
  const int64_t want = nn::count_parameters(c).total();
  const double need = 4.0 * static_cast<double>(want) * 4;  // weights, the tensors read, AdamW m, v
  const int64_t avail = available_memory_bytes();
  ATTEND_CHECK(avail < 0 || need <= static_cast<double>(avail), "import: ", source, " is a ", want,
               "-parameter model; importing it needs about ",
               fmt::format("{:.2f}", need / (1024.0 * 1024 * 1024)),
               " GiB (f32 weights, the tensors read and a fresh AdamW state), more than the ",
               fmt::format("{:.2f}", static_cast<double>(avail) / (1024.0 * 1024 * 1024)),
               " GiB this machine has available");
}

}  // namespace attend::convert

#include "infer/decoding.h"

#include <spdlog/spdlog.h>

#include "tensor/error.h"
#include "tensor/util.h"

namespace attend::infer {

using nn::Linear;

DecodingWeights::DecodingWeights(nn::Module& model, std::optional<WeightFormat> asked) {
  std::vector<std::pair<std::string, Linear*>> all;
  WeightFormat format = asked.value_or(StoredWeight::format_for_products());
  for (auto& [name, m] : model.named_modules())
    if (auto* l = dynamic_cast<Linear*>(m)) {
      all.emplace_back(name, l);
      ATTEND_CHECK(l->weight.dtype() == DType::F32 || format == WeightFormat::f32 || !asked,
                   "--weights ", weight_format_name(format), ": ", name, " is ",
                   dtype_name(l->weight.dtype()), ", not f32");
      if (l->weight.dtype() != DType::F32) format = WeightFormat::f32;
    }
  // Each layer's format: q8_0 needs rows a multiple of 32 long.
  std::vector<WeightFormat> each;
  std::string kept;
  int64_t bytes = 0;
  for (const auto& [name, l] : all) {
    WeightFormat f = format;
    if (f == WeightFormat::q8_0 && l->weight.size(1) % 32 != 0) {
      f = WeightFormat::f32;
      kept += " " + name;
    }
    each.push_back(f);
    bytes += StoredWeight::bytes_for(l->weight, f);
  }
  bytes_ = bytes;  // what a token reads, held or not
  const int64_t avail = available_memory_bytes();
  if (avail >= 0 && 2 * bytes > avail) {
    ATTEND_CHECK(format != WeightFormat::q8_0, "--weights q8_0: the model's weights in Q8_0 take ",
                 bytes, " bytes; the machine has ", avail, " available, less than twice that");
    return;
  }
  if (!kept.empty())
    spdlog::warn("--weights q8_0: rows not a multiple of 32 long stay f32:{}", kept);
  for (size_t i = 0; i < all.size(); ++i) {
    all[i].second->decoding = std::make_shared<const StoredWeight>(all[i].second->weight, each[i]);
    layers_.push_back(all[i].second);
  }
}

DecodingWeights::~DecodingWeights() {
  for (Linear* l : layers_) l->decoding.reset();
}

}  // namespace attend::infer

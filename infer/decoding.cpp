#include "infer/decoding.h"

#include "tensor/util.h"

namespace attend::infer {

using nn::Linear;

DecodingWeights::DecodingWeights(nn::Module& model) {
  std::vector<Linear*> all;
  WeightFormat format = StoredWeight::format_for_products();
  for (auto& [_, m] : model.named_modules())
    if (auto* l = dynamic_cast<Linear*>(m)) {
      all.push_back(l);
      if (l->weight.dtype() != DType::F32) format = WeightFormat::f32;
    }
  int64_t bytes = 0;
  for (const Linear* l : all) bytes += StoredWeight::bytes_for(l->weight, format);
  const int64_t avail = available_memory_bytes();
  if (avail >= 0 && 2 * bytes > avail) return;
  for (Linear* l : all) l->decoding = std::make_shared<const StoredWeight>(l->weight, format);
  layers_ = std::move(all);
}

DecodingWeights::~DecodingWeights() {
  for (Linear* l : layers_) l->decoding.reset();
}

}  // namespace attend::infer

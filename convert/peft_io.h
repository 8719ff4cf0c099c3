// LoRA adapters out to Hugging Face PEFT's layout: adapter_model.safetensors and
// adapter_config.json, loadable with PeftModel.from_pretrained on the base exported in
// Hugging Face's layout (`attend export` of the checkpoint the adapters were trained on).
//
// Keys: base_model.model.<Hugging Face module>.lora_A.weight (R, in) and .lora_B.weight
// (rows, R), PEFT's formula y += (lora_alpha / r) B A x, the same as nn/lora.h's.
//   Llama: q,k,v,o -> model.layers.N.self_attn.{q,k,v,o}_proj, gate,up,down ->
//     model.layers.N.mlp.{gate,up,down}_proj. q's and k's B rows are permuted as the
//     weights' are (Note [RoPE]): Hugging Face's q_proj is attend's rows in half-split order.
//   GPT-2: attn.c_attn (fused q|k|v), attn.c_proj (o), mlp.c_fc (fc), mlp.c_proj (proj), with
//     fan_in_fan_out true (Conv1D). Adapters on several of q, k, v become one adapter on
//     c_attn of rank n R: A the n A's stacked, B each B in its rows and its own R columns
//     (zero elsewhere), and alpha n alpha in alpha_pattern (so the scale stays alpha / R).
#pragma once

#include <filesystem>
#include <string>

#include <memory>

#include "convert/format.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::convert {

// Writes `out` (a folder, staged and swapped in whole); `base` is what adapter_config.json
// names as base_model_name_or_path. Throws when the model has no adapters.
ExportResult export_peft(const ExportSource& m, const std::filesystem::path& out,
                         const std::string& base);

// A PEFT LoRA adapter folder read onto `base` (a plain model): the model with adapters that
// compute the same update. Every module must be one this family's targets name, on every
// block alike, with one scale (lora_alpha / r) for all; a rank below the largest is padded
// with zeros to it (the same update). A and B shapes are checked against the base before
// anything is read. GPT-2's c_attn adapter (rank r' on all
// its rows) becomes q, k and v adapters of rank r' sharing its A, each with its rows of B.
// Refused, naming the file and the field: another peft_type, DoRA, rsLoRA, biases,
// modules_to_save, a key that is not base_model.model.<module>.lora_{A,B}.weight.
std::unique_ptr<nn::GPT> import_peft(const nn::GPT& base, const std::filesystem::path& dir);

}  // namespace attend::convert
#pragma GCC visibility pop

// Checkpoints: one HDF5 file holding everything needed to continue a run exactly.
//
//   /config      attributes: the model's GPTConfig fields and every training
//                hyperparameter, under their flag names
//   /model/<name>   every parameter under GPT-2's state_dict names, f32, PyTorch layout;
//                lm_head.weight is a hard link to transformer.wte.weight (stored once)
//   /optimizer   attributes name, step; /optimizer/<slot>/<param name> (AdamW: exp_avg
//                and exp_avg_sq, i.e. m and v; SGD: momentum_buffer)
//   /rng         attributes: the seeds of the counter-based generators (dropout masks and
//                batches are keyed by (seed, step), so the seed is the whole state)
//   /data        attributes: the prepared data folder, token counts and FNV-1a hashes of
//                train.bin and val.bin, the sampler
//   /tokenizer   attributes kind, name (pattern, ignore_merges when set); datasets token_bytes (u8), token_offsets (i64,
//                V+1) and merges (i32, (M, 2)): sampling needs only this file
//   /meta        attributes format_version, attend_version, step, tokens_seen,
//                best_val_loss, best_step, world_size (absent in older files: 1),
//                created (UTC, ISO 8601), content_hash
//
// Integrity: the latest HDF5 file format (checksummed metadata), every dataset chunked
// with the Fletcher32 filter; before anything is read, each attribute must hold one value,
// each dataset's element type, shape and byte size (overflow-checked, against what the
// file stores) are checked, and every object must be a hard link inside the file. A
// checkpoint is trusted only whole: content_hash (XXH64, FNV-1a 64 before format 5, over every group: /config,
// the tensors of /model and /optimizer, /rng, /data, /tokenizer, /meta) is verified on
// load, /meta must be consistent (step >= 0, best_step in [-1, step], the optimizer's
// step equal), the optimizer's slots exactly its parameters', tied tensors one tensor.
// Writing is atomic: a temporary file in the same folder, written by a child process
// (Note [HDF5 in a child process], io/child.cpp), fsync'ed, renamed over the final name,
// then the folder fsync'ed; a kill or a full disk at any moment leaves earlier
// checkpoints untouched.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "data/tokenizer.h"
#include "nn/module.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::io {

using ConfigValue = std::variant<int64_t, double, std::string>;
using ConfigValues = std::vector<std::pair<std::string, ConfigValue>>;

// 2: named random streams (Note [Random streams]): batches, dropout, evaluation and
// sampling draw other numbers than under 1, so a version-1 run cannot resume exactly.
// 3: /config records the architecture (arch, norm_eps, hidden_dim, multiple_of,
// rope_theta, tie_embeddings, sliding_window). Version 2 files load too: without those
// attributes they are what they always were, GPT-2 models (the defaults).
// 4: /tokenizer may hold attributes pattern (the pre-tokenizer's regex) and ignore_merges
// (Hugging Face tokenizers, data/hf_tokenizer.h); written only when not GPT-2's defaults.
// 5: content_hash is XXH64 (seed 0) over the same bytes, no longer FNV-1a 64: FNV-1a
// takes a byte per multiply's latency (0.75 GB/s on a 2-core Xeon, a fifth of starting
// `attend sample`); XXH64 runs four independent lanes of 8-byte words. Version 2-4 files
// load and are checked with FNV-1a 64 as they were written.
inline constexpr int64_t kCheckpointFormatVersion = 5;
inline constexpr int64_t kXxh64FormatVersion = 5;

// One struct per HDF5 group, so that save and load each walk the groups once.
struct OptimizerState {  // /optimizer
  std::string name;      // "adamw" or "sgd"
  int64_t step = 0;
  nn::NamedTensors tensors;  // "<slot>.<param name>"
};
struct DataInfo {  // /data
  std::string dir;
  int64_t train_tokens = 0, val_tokens = 0;
  uint64_t train_hash = 0, val_hash = 0;
};
struct Meta {  // /meta (format_version and attend_version are written by save)
  int64_t step = 0, tokens_seen = 0, best_step = -1;
  double best_val_loss = 0;  // meaningful when best_step >= 0
  int64_t world_size = 1;    // processes that trained it (a resume may use another number)
  std::string created;
  uint64_t content_hash = 0;  // filled by save and checked by load
  // The file's format version (read by load; save writes this attend's): it decides the
  // content hash's kind (kXxh64FormatVersion).
  int64_t format_version = kCheckpointFormatVersion;
  // Where an imported model came from (`attend import` writes it: the file or folder and,
  // for GGUF, the stored tensor types); empty for a trained one. Optional in the file.
  std::string source;
};

struct CheckpointData {
  ConfigValues config;     // /config
  nn::NamedTensors model;  // /model, state_dict order; a tensor already listed is a link
  OptimizerState optimizer;
  uint64_t seed = 0;  // /rng
  DataInfo data;
  data::TokenizerSpec tokenizer;  // /tokenizer
  Meta meta;
};


void save_checkpoint(const std::filesystem::path& path, CheckpointData& data);
inline constexpr int64_t kOldestCheckpointFormatVersion = 2;
// Throws naming the file and the reason for a missing, truncated, corrupt or foreign file.
CheckpointData load_checkpoint(const std::filesystem::path& path);
// The same checks, without returning /optimizer (the content hash still covers it): its
// tensors stay empty. Sampling, evaluation and the views need the model only.
CheckpointData load_checkpoint_without_optimizer(const std::filesystem::path& path);

// The FNV-1a 64 content hash of the model and optimizer tensors and the step.
uint64_t content_hash(const CheckpointData& data);

}  // namespace attend::io
#pragma GCC visibility pop

#include "train/trainer.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <fstream>
#include <map>
#include <optional>

#include <omp.h>

#include "data/dataset.h"
#include "data/instructions.h"
#include "data/prepare.h"
#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/threads.h"
#include "io/checkpoint.h"
#include "nn/summary.h"
#include "train/dist.h"
#include "nn/lora.h"
#include "train/dpo.h"
#include "train/model_io.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/step.h"

namespace attend::train {

namespace fs = std::filesystem;

namespace {

// The run folder and the config, with the checkpoint a resumed run continues from, or
// the one a finetuned run takes its weights and tokenizer from.
struct RunStart {
  TrainConfig config;
  fs::path run_dir;
  std::optional<LoadedCheckpoint> resumed, init;
};

// Finetuning: the model is the checkpoint's; a model flag may only crop block_size or
// change dropout (neither changes what the weights mean).
void take_init_model(const ResolvedConfig& req, const LoadedCheckpoint& ck, TrainConfig& c) {
  const nn::GPTConfig saved = from_values(ck.data.config).model;
  std::vector<std::string> refused;
  for (const ConfigField& f : config_fields()) {
    if (f.group != Group::Model || !f.train_flag || std::string(f.name) == "preset" ||
        !req.explicit_fields.count(f.name))
      continue;
    TrainConfig s;
    s.model = saved;
    const Value want = f.get(c), had = f.get(s);
    const std::string n = f.name;
    const bool crop = n == "block_size" && std::get<int64_t>(want) <= saved.block_size;
    // adapters on the checkpoint's weights, and the format its frozen base is kept in
    const bool lora = n.rfind("lora_", 0) == 0 || n == "base_weights";
    if (want != had && !crop && n != "dropout" && !lora)
      refused.push_back(
          str(n, " (checkpoint ", format_value(had), ", now ", format_value(want), ")"));
  }
  if (!refused.empty()) {
    std::string msg = str("--init_from ", ck.path.string(),
                          ": the model is the checkpoint's; these flags differ from it "
                          "(only --block_size may shrink and --dropout change):");
    for (const auto& r : refused) msg += "\n  " + r;
    throw Error(msg);
  }
  ATTEND_CHECK(!req.explicit_fields.count("tokenizer") || c.tokenizer == ck.data.tokenizer.name,
               "--tokenizer ", c.tokenizer, ": the --init_from checkpoint's tokenizer is ",
               ck.data.tokenizer.name, "; a finetuned model keeps its vocabulary");
  const int64_t block =
      req.explicit_fields.count("block_size") ? c.model.block_size : saved.block_size;
  const double dropout = req.explicit_fields.count("dropout") ? c.model.dropout : saved.dropout;
  for (const char* f : {"lora_alpha", "lora_dropout", "lora_targets"})
    ATTEND_CHECK(!req.explicit_fields.count(f) || req.explicit_fields.count("lora_rank"), "--", f,
                 ": LoRA's settings go with --lora_rank (the adapters they describe)");
  ATTEND_CHECK(saved.lora_rank == 0 || !req.explicit_fields.count("lora_rank"), "--init_from ",
               ck.path.string(), ": the checkpoint has LoRA adapters (rank ", saved.lora_rank,
               "); export it --merge first, then add new ones to the merged model");
  const nn::GPTConfig lora = c.model;
  c.model = saved;
  c.model.block_size = block;
  c.model.dropout = dropout;
  if (req.explicit_fields.count("lora_rank")) {
    c.model.lora_rank = lora.lora_rank, c.model.lora_alpha = lora.lora_alpha;
    c.model.lora_dropout = lora.lora_dropout, c.model.lora_targets = lora.lora_targets;
  }
  c.tokenizer = ck.data.tokenizer.name;
  c.init_from = fs::absolute(ck.path).lexically_normal().string();
  if (!c.ref.empty()) c.ref = fs::absolute(c.ref).lexically_normal().string();
}

RunStart start_run(const TrainRequest& req) {
  RunStart s;
  if (req.resume.empty()) {
    ATTEND_CHECK(!req.run_dir.empty(), "--out: required (the run folder), or --resume RUN_DIR");
    s.config = req.settings.config;
    s.run_dir = req.run_dir;
    ATTEND_CHECK(!s.config.dpo || !s.config.init_from.empty(),
                 "--dpo: give --init_from, the model to tune (usually one finetuned on "
                 "instructions); it is also the reference unless --ref names another");
    ATTEND_CHECK(s.config.dpo || !req.settings.explicit_fields.count("beta"), "--beta ",
                 s.config.beta, ": DPO's beta goes with --dpo");
    if (!s.config.init_from.empty()) {
      s.init = load_checkpoint_or_run(s.config.init_from, false);  // its weights only
      take_init_model(req.settings, *s.init, s.config);
    } else if (s.config.model.lora_rank > 0) {
      spdlog::warn("--lora_rank without --init_from: the adapters train on a random base that "
                   "stays frozen");
    }
  } else {
    s.resumed = load_checkpoint_or_run(req.resume);
    std::error_code ec;
    s.run_dir = fs::is_directory(req.resume, ec) ? fs::path(req.resume)
                                                 : fs::path(req.resume).parent_path();
    if (s.run_dir.empty()) s.run_dir = ".";
    // The checkpoint's settings; explicit flags may change what may change.
    s.config = merge_resume(req.settings, from_values(s.resumed->data.config));
  }
  s.config.validate();
  return s;
}

// The prepared data folder: the folder itself when it holds train.bin and val.bin, else
// RUN_DIR/data prepared from the text (or reused when an earlier run prepared it).
fs::path prepare_data(const TrainConfig& c, const fs::path& run_dir,
                      const data::TokenizerSpec* use = nullptr) {
  ATTEND_CHECK(!c.data.empty(),
               "--data: required (a prepared folder, or a text file or folder of text)");
  std::error_code ec;
  const fs::path src(c.data);
  ATTEND_CHECK(fs::exists(src, ec), "--data: ", c.data, ": no such file or folder");
  if (fs::is_directory(src, ec) && fs::exists(src / "train.bin", ec) &&
      fs::exists(src / "val.bin", ec)) {
    if (use) {  // a prepared folder must have been made with the checkpoint's tokenizer
      // The whole tokenizer (kind, tokens, merges, pattern), as eval compares it.
      const auto theirs = data::load_tokenizer(src);
      const uint64_t a = data::tokenizer_hash(theirs->spec()), b = data::tokenizer_hash(*use);
      int64_t added = 0;
      if (a != b && data::extends_with_specials(theirs->spec(), *use, &added)) {
        // A chat template's special tokens, added by prepare: the embedding grows to match.
        spdlog::info("--data {}: its tokenizer {} is the checkpoint's {} with {} special "
                     "token(s) added; the model's embedding grows to {} rows",
                     c.data, theirs->spec().name, use->name, added, theirs->vocab_size());
        return src;
      }
      ATTEND_CHECK(a == b, "--data ", c.data, ": prepared with tokenizer ", theirs->spec().name,
                   " (hash ", a, "), but the --init_from checkpoint's tokenizer is ", use->name,
                   " (hash ", b, ")",
                   theirs->spec().name == use->name ? ": the same name, another tokenizer" : "",
                   "; give the text to prepare it again");
    }
    return src;
  }
  const fs::path out = run_dir / "data";
  spdlog::info("preparing {} with tokenizer {} into {}", c.data, c.tokenizer, out.string());
  data::PrepareOptions po;
  po.data = src, po.tokenizer = c.tokenizer, po.out = out;
  po.use = use;
  data::PrepareResult r = data::prepare(po);
  spdlog::info("prepared {} bytes from {} file(s): {} train and {} val tokens, vocab_size {}",
               r.bytes, r.files, r.train_tokens, r.val_tokens, r.vocab_size);
  return out;
}

// The tokenizer and both splits; on resume their hashes must be the checkpoint's.
struct TrainData {
  fs::path dir;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<data::TokenDataset> train, val;
  uint64_t train_hash = 0, val_hash = 0;
};

TrainData open_data_root(const TrainRequest& req, const RunStart& s) {
  TrainData d;
  const TrainConfig& c = s.config;
  std::error_code ec;
  const bool data_flag = req.settings.explicit_fields.count("data") > 0;
  if (s.init) {
    d.dir = prepare_data(c, s.run_dir, &s.init->data.tokenizer);
  } else if (!s.resumed) {
    d.dir = prepare_data(c, s.run_dir);
  } else if (data_flag && fs::exists(fs::path(c.data) / "train.bin", ec)) {
    d.dir = c.data;  // a prepared folder given again (moved, say): checked by hashes below
  } else {
    ATTEND_CHECK(!data_flag, "--data: on resume, give a prepared folder (train.bin, val.bin); ",
                 c.data, " is not one");
    d.dir = s.resumed->data.data.dir;
  }
  d.tokenizer =
      s.resumed ? data::make_tokenizer(s.resumed->data.tokenizer) : data::load_tokenizer(d.dir);
  d.train = std::make_unique<data::TokenDataset>(d.dir / "train.bin", c.model.block_size);
  d.val = std::make_unique<data::TokenDataset>(d.dir / "val.bin", c.model.block_size);
  d.train_hash = d.train->content_hash();
  d.val_hash = d.val->content_hash();
  if (s.resumed)
    ATTEND_CHECK(d.train_hash == s.resumed->data.data.train_hash &&
                     d.val_hash == s.resumed->data.data.val_hash,
                 d.dir.string(),
                 ": train.bin or val.bin differs from the data the checkpoint was trained on");
  check_made_by(d.train->file(), d.tokenizer->spec());
  check_made_by(d.val->file(), d.tokenizer->spec());
  for (const auto* ds : {d.train.get(), d.val.get()})
    if (ds->dropped_examples() > 0)
      spdlog::warn("{}: {} examples have a prompt longer than block_size {} and are left out",
                   ds->file().path().string(), ds->dropped_examples(), c.model.block_size);
  ATTEND_CHECK(d.train->file().vocab_size() == d.tokenizer->vocab_size(), d.dir.string(),
               ": train.bin has vocab_size ", d.train->file().vocab_size(),
               " but the tokenizer has ", d.tokenizer->vocab_size());
  return d;
}

// The data of a rank other than 0: rank 0's folder, path and hashes.
TrainData open_data_copy(const TrainConfig& c, Dist& dist) {
  TrainData d;
  std::string dir;
  dist.broadcast(dir);
  uint64_t hashes[3] = {};
  dist.broadcast(hashes, sizeof hashes);
  d.dir = dir;
  d.tokenizer = data::load_tokenizer(d.dir);
  d.train = std::make_unique<data::TokenDataset>(d.dir / "train.bin", c.model.block_size);
  d.val = std::make_unique<data::TokenDataset>(d.dir / "val.bin", c.model.block_size);
  d.train_hash = d.train->content_hash();
  d.val_hash = d.val->content_hash();
  ATTEND_CHECK(d.train_hash == hashes[0] && d.val_hash == hashes[1] &&
                   data::tokenizer_hash(d.tokenizer->spec()) == hashes[2],
               "rank ", dist.rank(), ": ", dir,
               ": this machine's train.bin, val.bin or tokenizer differs from rank 0's (copy "
               "the prepared folder to the same path on every machine)");
  return d;
}

// Rank 0 finds (or prepares) the data; the other ranks open the same folder on their own
// disks and must find the same bytes.
TrainData open_data(const TrainRequest& req, const RunStart& s, Dist& dist) {
  if (!dist.root()) return open_data_copy(s.config, dist);
  TrainData d = open_data_root(req, s);
  // As given: a relative path is found from each rank's working directory (mpirun -wdir).
  std::string dir = d.dir.string();
  dist.broadcast(dir);
  uint64_t hashes[3] = {d.train_hash, d.val_hash, data::tokenizer_hash(d.tokenizer->spec())};
  dist.broadcast(hashes, sizeof hashes);
  return d;
}

// DPO's frozen reference: null for a LoRA policy without --ref (its base, adapters off), else
// a model of its own: --ref's checkpoint or --init_from's, read on rank 0 and sent to the
// others. A fresh run records its hash; a resumed run must find the same weights.
std::unique_ptr<nn::GPT> load_reference(TrainConfig& c, const TrainData& d, bool resumed,
                                        Dist& dist) {
  if (!c.dpo || (c.model.lora_rank > 0 && c.ref.empty())) return nullptr;
  nn::GPTConfig want = c.model;
  want.vocab_size = d.tokenizer->vocab_size();
  want.lora_rank = 0, want.lora_new_tokens = 0, want.dropout = 0;
  std::unique_ptr<nn::GPT> ref;
  std::string hash;
  if (dist.root()) {
    const std::string path = c.ref.empty() ? c.init_from : c.ref;
    LoadedModel m = load_model(path);
    nn::GPTConfig have = m.model->config;
    have.dropout = 0, have.block_size = want.block_size;
    // Data made with a chat template's special tokens: the reference grows as the policy
    // did at its start (the same mean rows), so step 0's policy is the reference exactly.
    const bool grows = have.vocab_size < want.vocab_size &&
                       data::extends_with_specials(d.tokenizer->spec(), m.tokenizer->spec());
    if (grows) have.vocab_size = want.vocab_size;
    ATTEND_CHECK(have.lora_rank == 0, "--ref ", path, ": the reference has LoRA adapters (rank ",
                 have.lora_rank, "); export it --merge first");
    ATTEND_CHECK(have == want, "--ref ", path, ": the reference is a ", describe(m.model->config),
                 " of another shape than the model being tuned (n_layer ", have.n_layer,
                 " vs ", want.n_layer, ", C ", have.n_embd, " vs ", want.n_embd, ", V ",
                 have.vocab_size, " vs ", want.vocab_size, ")");
    ATTEND_CHECK(grows || data::tokenizer_hash(m.tokenizer->spec()) ==
                              data::tokenizer_hash(d.tokenizer->spec()),
                 "--ref ", path, ": the reference's tokenizer ", m.tokenizer->spec().name,
                 " is not the data's ", d.tokenizer->spec().name);
    // The tuned model's shape (a cropped block_size crops the position table too).
    std::map<std::string, Tensor> state;
    for (const auto& [name, t] : m.model->state_dict()) state[name] = t;
    auto wpe = state.find("transformer.wpe.weight");
    if (wpe != state.end()) wpe->second = kernel::narrow(wpe->second, 0, 0, want.block_size);
    if (grows) grow_embedding_rows(state, want.vocab_size);
    ref = std::make_unique<nn::GPT>(want, 0, false);
    ref->load_state_dict(state);
    m.model.reset();
    hash = weights_hash(*ref);
    if (resumed)
      ATTEND_CHECK(hash == c.ref_hash, "--ref ", path, ": the reference's weights (hash ", hash,
                   ") are not those the run was tuned against (hash ", c.ref_hash,
                   "); DPO resumes only against the same reference");
    c.ref_hash = hash;
    spdlog::info("DPO reference: {} (weights hash {}), beta {}", path, hash, c.beta);
  } else {
    ref = std::make_unique<nn::GPT>(want, 0, false);
  }
  if (dist.size() > 1)
    for (const Tensor& p : ref->parameters())
      dist.broadcast(p.raw_data(), static_cast<size_t>(p.numel()) * dtype_size(p.dtype()));
  ref->eval();
  return ref;
}

// Everything that changes as the run goes: the model, the optimizer, the counters, the
// metrics. It writes the checkpoints and the metrics files.
class Run {
 public:
  // Finetuning (s.init) takes the checkpoint's weights out of s.init as it loads them.
  Run(RunStart& s, TrainData& d, Dist& dist, const nn::GPT* reference)
      : dist_(dist),
        reference_(reference),
        c_(s.config),
        dir_(s.run_dir),
        data_(d),
        // A model a checkpoint's weights replace next keeps its matrices unwritten: only
        // the checkpoint's copy is ever resident (nn::GPT::Init::for_load).
        model_(model_config(s.config, d), s.config.seed,
               s.init ? nn::GPT::Init::for_load : nn::GPT::Init::all),
        opt_(make_optimizer(c_, model_)),
        schedule_(make_schedule(c_)) {
    model_.train();
    if (s.resumed) restore(*s.resumed);
    if (s.init) take_weights(s.init->data);
    if (c_.base_weights == "bf16") {
      // What take_weights did not convert: a resumed run's base, the other ranks' (whose
      // values rank 0's bf16 bits replace next: every rank's tensors have the same dtypes
      // before they are shared)
      nn::store_frozen_as_bf16(model_);
      int64_t bf16 = 0;
      for (const Tensor& p : model_.parameters())
        if (p.dtype() == DType::BF16) bf16 += p.numel() * 2;
      spdlog::info("frozen base kept as bf16: {:.1f} MB of weights (half their f32 size)",
                   bf16 / 1e6);
    }
    if (dist_.size() > 1) share_state();
    if (c_.model.lora_rank > 0 && dist_.root()) check_base(s.resumed ? &s.resumed->path : nullptr);
  }

  // LoRA: the frozen base's hash, recorded by a fresh run (or a checkpoint made before it
  // was recorded) and checked by a resumed one.
  void check_base(const fs::path* resumed_from) {
    base_hash_ = weights_hash(model_, true);
    if (resumed_from && !c_.base_hash.empty())
      ATTEND_CHECK(base_hash_ == c_.base_hash, resumed_from->string(),
                   ": the frozen base's weights (hash ", base_hash_,
                   ") are not those the adapters were trained on (hash ", c_.base_hash,
                   "); the checkpoint was changed after it was written");
    spdlog::debug("LoRA base weights hash {}", base_hash_);
  }

  // Rank 0's model, optimizer state and counters to every rank (only rank 0 reads the run
  // folder), in place: the tensors are contiguous and the same shapes on every rank.
  void share_state() {
    for (const Tensor& p : model_.parameters()) broadcast_tensor(p);
    for (const auto& [name, t] : opt_->state()) broadcast_tensor(t);
    int64_t counters[4] = {opt_->steps(), step, tokens_seen_, best_step_};
    double reals[2] = {best_val_, elapsed_before_};
    dist_.broadcast(counters, sizeof counters);
    dist_.broadcast(reals, sizeof reals);
    opt_->set_steps(counters[0]);
    step = counters[1], tokens_seen_ = counters[2], best_step_ = counters[3];
    best_val_ = reals[0], elapsed_before_ = reals[1];
  }

  // Finetuning: the checkpoint's weights, the position table cropped to block_size. They
  // leave d as they go into the model (each tensor's memory freed once it is in), and a
  // frozen base to be kept as bf16 is converted on the way.
  void take_weights(io::CheckpointData& d) {
    std::map<std::string, Tensor> state(d.model.begin(), d.model.end());
    d.model.clear();
    auto wpe = state.find("transformer.wpe.weight");  // gpt2 only
    if (wpe != state.end()) wpe->second = kernel::narrow(wpe->second, 0, 0, c_.model.block_size);
    grow_vocabulary(state);
    // New LoRA adapters are the model's own (A drawn, B zero); the rest is the checkpoint's.
    for (const auto& [name, t] : model_.named_parameters())
      if (name.find(".lora_") != std::string::npos && !state.count(name)) state[name] = t;
    model_.take_state_dict(std::move(state), c_.base_weights == "bf16");
    spdlog::info("finetuning from {} (weights only: a fresh optimizer at step 0)", c_.init_from);
    if (c_.model.lora_rank > 0) {
      int64_t trained = 0;
      for (const auto& [_, t] : model_.named_trainable_parameters()) trained += t.numel();
      spdlog::info("LoRA rank {} on {}: {} of {} parameters train, the rest frozen",
                   c_.model.lora_rank, c_.model.lora_targets, trained, model_.num_parameters());
    }
  }

  void grow_vocabulary(std::map<std::string, Tensor>& state) {
    const bool grew = grow_embedding_rows(state, model_.config.vocab_size);
    if (c_.model.lora_rank > 0 && grew)
      spdlog::info("LoRA: the embedding is frozen but the {} new tokens' rows train, as a delta "
                   "on their starting value (the mean row){}",
                   c_.model.lora_new_tokens, c_.model.tied_head() ? "" : ", in the head too");
  }

  void restore(const LoadedCheckpoint& ck) {
    const io::CheckpointData& r = ck.data;
    model_.load_state_dict(std::map<std::string, Tensor>(r.model.begin(), r.model.end()));
    ATTEND_CHECK(r.optimizer.name == c_.optimizer, ck.path.string(), ": optimizer ",
                 r.optimizer.name, " in the checkpoint, ", c_.optimizer, " requested");
    opt_->load_state({r.optimizer.tensors.begin(), r.optimizer.tensors.end()}, r.optimizer.step);
    step = r.meta.step, tokens_seen_ = r.meta.tokens_seen, best_step_ = r.meta.best_step;
    best_val_ = r.meta.best_val_loss;
    for (const MetricsRow& m : read_metrics(dir_ / "metrics.csv"))
      if (m.step <= step) metrics_.push_back(m);
    if (!metrics_.empty() && !std::isnan(metrics_.back().elapsed_s))
      elapsed_before_ = metrics_.back().elapsed_s;
    spdlog::info("resumed from {} at step {}", ck.path.string(), step);
  }

  static nn::GPTConfig model_config(TrainConfig c, const TrainData& d) {
    c.model.vocab_size = d.tokenizer->vocab_size();
    return c.model;
  }

  StepResult train_one() {
    const double lr = schedule_.at(step);
    StepResult r = train_step(model_, *opt_, *data_.train, c_, step, lr, dist_, reference_);
    ++step;
    // A count near 2^63 can only come from a crafted checkpoint: refuse before it wraps.
    int64_t seen = 0;
    ATTEND_CHECK(!__builtin_add_overflow(tokens_seen_, tokens_per_step(), &seen), "tokens_seen ",
                 tokens_seen_, " (from the checkpoint's /meta) + ", tokens_per_step(),
                 " overflows a 64-bit count; the checkpoint is not a real run's");
    tokens_seen_ = seen;
    return r;
  }

  void record_step(const StepResult& r, double tok_s) {
    MetricsRow row;  // the evaluation's columns stay NaN (not measured at this step)
    row.step = step, row.train_loss = r.loss, row.lr = r.lr, row.grad_norm = r.grad_norm;
    row.tokens_per_s = tok_s, row.elapsed_s = elapsed();
    row.reward_margin = r.reward_margin, row.reward_accuracy = r.reward_accuracy;
    metrics_.push_back(row);
  }

  // Returns whether `at` is a new best val loss; the untrained model is no candidate.
  bool evaluate(int64_t at, TrainOutcome& out) {
    const auto seed = static_cast<uint64_t>(c_.seed);
    double tl = 0, vl = 0, margin = NAN, accuracy = NAN;
    if (c_.dpo) {
      const DpoStats t = estimate_dpo(model_, reference_, *data_.train, c_.beta, seed, at,
                                      c_.eval_iters, c_.batch_size, Stream::EvalTrain, dist_);
      const DpoStats v = estimate_dpo(model_, reference_, *data_.val, c_.beta, seed, at,
                                      c_.eval_iters, c_.batch_size, Stream::EvalVal, dist_);
      const double n = static_cast<double>(v.pairs);
      tl = t.loss / static_cast<double>(t.pairs), vl = v.loss / n;
      margin = v.margin / n, accuracy = v.correct / n;
      spdlog::info("step {}: DPO train loss {:.4f}, val loss {:.4f}; val reward margin {:.4f}, "
                   "accuracy {:.3f}",
                   at, tl, vl, margin, accuracy);
    } else {
      tl = estimate_loss(model_, *data_.train, seed, at, c_.eval_iters, c_.batch_size,
                         Stream::EvalTrain, dist_);
      vl = estimate_loss(model_, *data_.val, seed, at, c_.eval_iters, c_.batch_size,
                         Stream::EvalVal, dist_);
      spdlog::info("step {}: train loss {:.4f}, val loss {:.4f}", at, tl, vl);
    }
    out.evaluated = true, out.final_train_loss = tl, out.final_val_loss = vl;
    // A non-finite val loss is never "best" (NaN compares false, but a first one would win).
    const bool improved = at > 0 && std::isfinite(vl) && (best_step_ < 0 || vl < best_val_);
    if (improved) best_step_ = at, best_val_ = vl;
    if (metrics_.empty() || metrics_.back().step != at) {
      MetricsRow row;  // an evaluation without a logged step: only these are known
      row.step = at, row.lr = schedule_.at(at), row.elapsed_s = elapsed();
      metrics_.push_back(row);
    }
    metrics_.back().val_loss = vl;
    metrics_.back().eval_train_loss = tl;
    metrics_.back().val_reward_margin = margin, metrics_.back().val_reward_accuracy = accuracy;
    write_files();
    return improved;
  }

  void broadcast_tensor(const Tensor& t) {
    ATTEND_CHECK(t.is_contiguous(), "share_state: a non-contiguous state tensor");
    dist_.broadcast(t.raw_data(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype()));
  }

  // Rank 0 writes the checkpoint; the others return an empty path.
  fs::path save() {
    if (!dist_.root()) return {};
    io::CheckpointData d;
    d.config = to_values(c_with_vocab());
    d.model = model_.state_dict();
    if (c_.model.lora_rank > 0 && !c_.save_base) {  // the adapters; the base is init_from's
      std::erase_if(d.model, [](const auto& e) { return e.first.find(".lora_") == std::string::npos; });
      ATTEND_CHECK(!d.model.empty(), "save: a LoRA model without adapters");
    }
    d.optimizer = {c_.optimizer, opt_->steps(), opt_->state()};
    d.seed = static_cast<uint64_t>(c_.seed);
    d.data = {fs::absolute(data_.dir).lexically_normal().string(), data_.train->file().size(),
              data_.val->file().size(), data_.train_hash, data_.val_hash};
    d.tokenizer = data_.tokenizer->spec();
    d.meta.step = step;
    d.meta.tokens_seen = tokens_seen_;
    d.meta.best_step = best_step_;
    d.meta.best_val_loss = best_val_;
    d.meta.world_size = dist_.size();
    const fs::path path = dir_ / checkpoint_name(step);
    io::save_checkpoint(path, d);
    // Keep the newest keep_checkpoints and the best-val one; the new file is in place.
    prune_checkpoints(dir_, c_.keep_checkpoints,
                      best_step_ >= 0 ? checkpoint_name(best_step_) : "");
    spdlog::info("checkpoint {}", path.string());
    return path;
  }

  void write_files() {
    if (!dist_.root()) return;
    try {
      write_metrics(dir_, metrics_);
      write_loss_plot(dir_, metrics_, false);
    } catch (const Error& e) {
      spdlog::warn("{} (training goes on)", e.what());
    }
  }

  void describe() const {
    const nn::GPTConfig& m = model_.config;
    if (dist_.size() > 1)
      spdlog::info("{} processes, each running {} of the {} micro-steps of a step", dist_.size(),
                   c_.gradient_accumulation_steps / dist_.size(), c_.gradient_accumulation_steps);
    spdlog::info(
        "model: {} parameters ({} layers, {} heads, {} kv heads, C {}, T {}, V {}); {} tokens "
        "per step",
        model_.num_parameters(), m.n_layer, m.n_head, m.n_kv_head, m.n_embd, m.block_size,
        m.vocab_size, tokens_per_step());
  }

  int64_t tokens_per_step() const {
    return c_.batch_size * c_.model.block_size * c_.gradient_accumulation_steps;
  }
  double elapsed() const { return elapsed_before_ + clock_.seconds(); }

  int64_t step = 0;

 private:
  TrainConfig c_with_vocab() const {
    TrainConfig c = c_;
    c.model = model_.config;
    if (!base_hash_.empty()) c.base_hash = base_hash_;
    return c;
  }

  Dist& dist_;
  const nn::GPT* reference_;  // DPO's, when not the LoRA base
  const TrainConfig c_;
  const fs::path dir_;
  TrainData& data_;
  nn::GPT model_;
  std::unique_ptr<Optimizer> opt_;
  const LrSchedule schedule_;
  int64_t tokens_seen_ = 0, best_step_ = -1;
  double best_val_ = 0, elapsed_before_ = 0;
  std::string base_hash_;  // LoRA: the frozen base's
  std::vector<MetricsRow> metrics_;
  Stopwatch clock_;
};

// The settings rank 0 resolved, to every rank (they cannot read a resumed run's folder).
void share_config(Dist& dist, RunStart& s) {
  if (dist.size() == 1) return;
  std::string text = dist.root() ? config_to_wire(s.config) : "";
  dist.broadcast(text);
  if (dist.root()) return;
  s.config = config_from_wire(text);
  s.config.validate();
}

// Refuses a training run whose memory estimate (weights, gradients, optimizer state and
// activations, from nn::summarize) exceeds what the machine has available, naming the
// estimate and the flags that drive it. Does nothing where MemAvailable is unknown.
void check_training_memory(const nn::GPTConfig& c, int64_t batch_size) {
  const nn::ModelSummary s = nn::summarize(c, batch_size, c.block_size);
  const double state = static_cast<double>(s.weight_bytes + s.grad_bytes + s.adamw_bytes);
  const double act = static_cast<double>(s.activation_bytes), total = state + act;
  const int64_t avail = available_memory_bytes();
  if (avail < 0 || total <= static_cast<double>(avail)) return;
  constexpr double GiB = 1024.0 * 1024 * 1024;
  throw Error(fmt::format(
      "training needs an estimated {:.2f} GiB ({:.2f} GiB of weights, gradients and optimizer "
      "state; {:.2f} GiB of activations at --batch_size {} and --block_size {}), more than the "
      "{:.2f} GiB this machine has available; lower {}",
      total / GiB, state / GiB, act / GiB, batch_size, c.block_size,
      static_cast<double>(avail) / GiB,
      act > state ? "--batch_size or --block_size, or the model (--n_layer, --n_embd)"
                  : "the model (--n_layer, --n_embd, the vocabulary)"));
}


// Rank 0's hold on the run folder: the lock, and the checks before a run may write there.
void claim_run_dir(const RunStart& s, const Dist& dist, std::optional<RunLock>& lock) {
  if (!dist.root()) return;
  std::error_code ec;
  fs::create_directories(s.run_dir, ec);
  ATTEND_CHECK(!ec, s.run_dir.string(), ": cannot create the run folder: ", ec.message());
  lock.emplace(s.run_dir);
  remove_stale_temporaries(s.run_dir);
  if (s.resumed) set_aside_later_checkpoints(s.run_dir, s.resumed->data.meta.step);
  if (!s.resumed && !list_checkpoints(s.run_dir).empty())
    throw Error(str(s.run_dir.string(), ": already holds checkpoints; use --resume ",
                    s.run_dir.string(), " to continue, or choose another --out"));
}

// What the run adapted or measured that the per-step lines do not show.
void log_run_facts(const ThreadTuner* tuner, const Dist& dist, int64_t steps) {
  if (tuner && tuner->switches() > 0)
    spdlog::info("threads: {} at the end ({} changes of the count to suit the machine's load)",
                 tuner->current(), tuner->switches());
  if (dist.size() > 1 && steps > 0)
    spdlog::info(
        "gradient exchange between {} processes: {:.2f} ms per step (rank 0, waiting "
        "included)",
        dist.size(), 1000.0 * dist.exchange_seconds / static_cast<double>(steps));
}

}  // namespace

TrainOutcome run_training(const TrainRequest& req) {
  Dist& dist = Dist::world();
  RunStart s = dist.root() ? start_run(req) : RunStart{};
  share_config(dist, s);
  const TrainConfig& c = s.config;
  const kernel::PrecisionScope precision(kernel::parse_gemm_precision(c.precision, "--precision"));
  if (dist.root() && req.on_start) req.on_start(c);
  check_world_size(dist.size(), c.gradient_accumulation_steps);
  std::optional<RunLock> lock;
  claim_run_dir(s, dist, lock);
  TrainData data = open_data(req, s, dist);
  check_training_memory(Run::model_config(c, data), c.batch_size);
  const bool resumed_run = s.resumed.has_value();
  if (s.resumed) check_config_matches_model(*s.resumed, Run::model_config(c, data));
  if (s.init) {
    TrainConfig full = c;
    const nn::GPTConfig saved = from_values(s.init->data.config).model;
    full.model.block_size = saved.block_size;
    // New adapters are not in the checkpoint (a LoRA checkpoint's own are)
    full.model.lora_rank = saved.lora_rank, full.model.lora_targets = saved.lora_targets;
    full.model.lora_new_tokens = saved.lora_new_tokens;
    nn::GPTConfig as_saved = Run::model_config(full, data);
    as_saved.vocab_size = saved.vocab_size;  // the data's tokenizer may add special tokens
    check_config_matches_model(*s.init, as_saved);
  }
  // LoRA on data whose tokenizer adds tokens (a chat template's) to the --init_from model's:
  // those rows train too (nn/lora.h TokenRows), recorded in the config for resume and export
  if (!resumed_run && c.model.lora_rank > 0 && !c.init_from.empty()) {
    int64_t added = 0;
    if (s.init)
      added = data.tokenizer->vocab_size() - from_values(s.init->data.config).model.vocab_size;
    dist.broadcast(&added, sizeof added);
    s.config.model.lora_new_tokens = std::max<int64_t>(added, 0);
    s.config.validate();
  }
  const std::unique_ptr<nn::GPT> reference = load_reference(s.config, data, resumed_run, dist);
  Run run(s, data, dist, reference.get());
  // The checkpoint read (--init_from's or --resume's, optimizer state and all) is in the
  // model and optimizer now: let it go rather than hold it for the whole run (GPT-2 124M:
  // 1.5 GB).
  const bool resumed = s.resumed.has_value();
  s.init.reset();
  s.resumed.reset();
  // and the freed buffers back to the system (with --base_weights bf16 the f32 base too)
  const size_t released = release_storage_cache();
  if (released > 0) spdlog::debug("{:.1f} MB of freed buffers released", released / 1e6);
  run.describe();

  TrainOutcome out;
  out.first_step = run.step;
  Progress progress(c.max_iters, run.tokens_per_step(), dist.root());
  // The thread count adapts to the machine's load unless the user fixed it.
  std::optional<ThreadTuner> tuner = command_tuner(16);
  StopOnSignal stop;
  if (run.step == 0 && !resumed) run.evaluate(0, out);
  if (run.step >= c.max_iters)
    spdlog::info(
        "the run is at step {} and max_iters is {}: nothing to train (raise "
        "--max_iters to continue)",
        run.step, c.max_iters);
  while (run.step < c.max_iters) {
    Stopwatch t;
    dist.where = str("step ", run.step + 1);
    StepResult r;
    try {
      if (tuner) tuner->begin_step();
      r = run.train_one();
      if (tuner) tuner->end_step(t.seconds());
    } catch (const Error& e) {
      progress.close_bar();
      throw Error(str(e.what(), "; no checkpoint written",
                      out.last_checkpoint.empty() ? "" : "; the last good one is ",
                      out.last_checkpoint.string()));
    }
    out.losses.push_back(r.loss);
    const int64_t at = run.step;
    const bool last = at == c.max_iters, log = at % c.log_interval == 0 || last;
    // Every rank stops after the same step, whichever got the signal. The checkpoint comes
    // before any output: after a SIGTERM, mpirun stops forwarding output, and a write to a
    // full stdout pipe would block until mpirun's SIGKILL a second later.
    if (dist.max(stop.signal()) != 0) {
      if (log) run.record_step(r, static_cast<double>(run.tokens_per_step()) / t.seconds());
      out.last_checkpoint = run.save();
      run.write_files();
      progress.close_bar();
      spdlog::info(
          "stopped by {} after step {}; checkpoint {}; continue with: attend train "
          "--resume {}",
          stop.signal() ? stop.name() : "a signal to another rank", at,
          out.last_checkpoint.string(), s.run_dir.string());
      out.interrupted = true;
      break;
    }
    const double tok_s = progress.step_done(at, r.loss, r.lr, r.grad_norm, t.seconds(), log);
    if (log) run.record_step(r, tok_s);
    bool improved = false;
    if (at % c.eval_interval == 0 || last) progress.close_bar(), improved = run.evaluate(at, out);
    if (at % c.checkpoint_interval == 0 || last || improved)
      progress.close_bar(), out.last_checkpoint = run.save();
  }
  progress.close_bar();
  log_run_facts(tuner ? &*tuner : nullptr, dist, run.step - out.first_step);
  if (out.last_checkpoint.empty() && !resumed) out.last_checkpoint = run.save();
  run.write_files();
  out.last_step = run.step;
  return out;
}

}  // namespace attend::train

#include "train/trainer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "data/dataset.h"
#include "data/prepare.h"
#include "tensor/kernels.h"
#include "train/checkpoint.h"
#include "train/optim.h"
#include "train/plot.h"
#include "train/run_files.h"

namespace attend::train {

namespace fs = std::filesystem;

namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

std::string fmt_duration(double s) {
  char b[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  const int64_t t = static_cast<int64_t>(s);
  if (t >= 3600)
    std::snprintf(b, sizeof b, "%lldh%02lldm", static_cast<long long>(t / 3600),
                  static_cast<long long>(t % 3600 / 60));
  else
    std::snprintf(b, sizeof b, "%lldm%02llds", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  return b;
}

// The prepared data folder: the folder itself when it holds train.bin and val.bin, else
// RUN_DIR/data prepared from the text (or reused when an earlier run prepared it).
fs::path resolve_data(const TrainConfig& c, const fs::path& run_dir) {
  ATTEND_CHECK(!c.data.empty(),
               "--data: required (a prepared folder, or a text file or folder of text)");
  std::error_code ec;
  const fs::path src(c.data);
  ATTEND_CHECK(fs::exists(src, ec), "--data: ", c.data, ": no such file or folder");
  if (fs::is_directory(src, ec) && fs::exists(src / "train.bin", ec) &&
      fs::exists(src / "val.bin", ec))
    return src;
  const fs::path out = run_dir / "data";
  spdlog::info("preparing {} with tokenizer {} into {}", c.data, c.tokenizer, out.string());
  data::PrepareOptions o;
  o.data = src;
  o.tokenizer = c.tokenizer;
  o.out = out;
  data::PrepareResult r = data::prepare(o);
  spdlog::info("prepared {} bytes from {} file(s): {} train and {} val tokens, vocab_size {}",
               r.bytes, r.files, r.train_tokens, r.val_tokens, r.vocab_size);
  return out;
}

void zero_grads(const std::vector<Tensor>& params) {
  for (const Tensor& p : params) p.zero_grad();
}

double estimate_loss(nn::GPT& model, const data::TokenDataset& ds, uint64_t seed, int64_t step,
                     int64_t iters, int64_t batch_size) {
  NoGradGuard no_grad;
  model.eval();
  double total = 0;
  for (int64_t k = 0; k < iters; ++k) {
    data::Batch b =
        ds.random_batch(seed, static_cast<uint64_t>(step), static_cast<uint32_t>(k), batch_size);
    total += model.forward(b.x, b.y).loss.item();
  }
  model.train();
  return total / static_cast<double>(iters);
}

std::string checkpoint_name(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "ckpt_%08lld.h5", static_cast<long long>(step));
  return b;
}

}  // namespace

std::vector<fs::path> list_checkpoints(const fs::path& run_dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("ckpt_", 0) == 0 && n.size() > 8 && n.substr(n.size() - 3) == ".h5")
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

fs::path newest_valid_checkpoint(const fs::path& run_dir) {
  std::error_code ec;
  ATTEND_CHECK(fs::is_directory(run_dir, ec), run_dir.string(), ": no such run folder");
  auto all = list_checkpoints(run_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      load_checkpoint(*it);
      return *it;
    } catch (const Error& e) {
      spdlog::warn("skipping {}: {}", it->string(), e.what());
    }
  }
  throw Error(str(run_dir.string(), ": no loadable checkpoint (ckpt_*.h5) in this folder"));
}

fs::path resolve_checkpoint(const std::string& arg) {
  std::error_code ec;
  return fs::is_directory(arg, ec) ? newest_valid_checkpoint(arg) : fs::path(arg);
}

LoadedModel load_model(const fs::path& path) {
  CheckpointData d = load_checkpoint(path);
  LoadedModel m;
  m.config = from_values(d.config);
  m.tokenizer = data::make_tokenizer(d.tokenizer);
  m.model = std::make_unique<nn::GPT>(m.config.model(m.tokenizer->vocab_size()), 0);
  std::map<std::string, Tensor> state(d.model.begin(), d.model.end());
  m.model->load_state_dict(state);
  m.model->eval();
  m.step = d.step;
  return m;
}

double evaluate_windows(const nn::GPT& model, const fs::path& token_file, int64_t batch_size) {
  data::TokenDataset ds(token_file, model.config.block_size);
  NoGradGuard no_grad;
  const int64_t n = ds.num_windows();
  double total = 0;
  for (int64_t first = 0; first < n; first += batch_size) {
    const int64_t count = std::min(batch_size, n - first);
    data::Batch b = ds.windows(first, count);
    // Every window has T targets, so the mean over all targets is the count-weighted
    // mean of the batch means.
    total += model.forward(b.x, b.y).loss.item() * static_cast<double>(count);
  }
  return total / static_cast<double>(n);
}

TrainSummary run_training(const TrainRequest& req) {
  TrainConfig c = req.config;
  fs::path run_dir, resume_file;
  std::optional<CheckpointData> resumed;
  if (!req.resume.empty()) {
    const fs::path r(req.resume);
    std::error_code ec;
    resume_file = fs::is_directory(r, ec) ? newest_valid_checkpoint(r) : r;
    run_dir = fs::is_directory(r, ec) ? r : r.parent_path();
    if (run_dir.empty()) run_dir = ".";
    resumed = load_checkpoint(resume_file);
    // Start from the checkpoint's settings; explicit flags may change what may change.
    TrainConfig saved = from_values(resumed->config);
    std::vector<std::string> refused;
    for (const ConfigField& f : config_fields()) {
      const std::string want = get_field(c, f), had = get_field(saved, f);
      if (!req.explicit_fields.count(f.name) || want == had) {
        set_field(c, f, had, "checkpoint");
        continue;
      }
      if (f.on_resume == OnResume::Refuse) {
        refused.push_back(str(f.name, " (checkpoint ", had, ", now ", want, ")"));
      } else if (f.on_resume == OnResume::Warn) {
        spdlog::warn(
            "resume: {} changes from {} to {}; the run will not match an uninterrupted one", f.name,
            had, want);
      } else {
        spdlog::info("resume: {} changes from {} to {}", f.name, had, want);
      }
    }
    if (!refused.empty()) {
      std::string msg = "resume: these settings differ from the checkpoint's and cannot change:";
      for (const auto& r2 : refused) msg += "\n  " + r2;
      throw Error(msg);
    }
  } else {
    ATTEND_CHECK(!req.run_dir.empty(), "--out: required (the run folder), or --resume RUN_DIR");
    run_dir = req.run_dir;
  }
  c.validate();

  std::error_code ec;
  fs::create_directories(run_dir, ec);
  ATTEND_CHECK(!ec, run_dir.string(), ": cannot create the run folder: ", ec.message());
  RunLock lock(run_dir);
  if (!resumed && !list_checkpoints(run_dir).empty())
    throw Error(str(run_dir.string(), ": already holds checkpoints; use --resume ",
                    run_dir.string(), " to continue, or choose another --out"));

  // On resume the data is the checkpoint's prepared folder, or a prepared folder given
  // with --data (moved, say); either way its hashes must match the checkpoint's.
  fs::path data_dir;
  if (!resumed) {
    data_dir = resolve_data(c, run_dir);
  } else if (req.explicit_fields.count("data") &&
             fs::exists(fs::path(req.config.data) / "train.bin", ec)) {
    data_dir = req.config.data;
  } else {
    ATTEND_CHECK(!req.explicit_fields.count("data"),
                 "--data: on resume, give a prepared folder (train.bin, val.bin); ",
                 req.config.data, " is not one");
    data_dir = resumed->data_dir;
  }
  auto tokenizer =
      resumed ? data::make_tokenizer(resumed->tokenizer) : data::load_tokenizer(data_dir);
  data::TokenDataset train_ds(data_dir / "train.bin", c.block_size),
      val_ds(data_dir / "val.bin", c.block_size);
  const uint64_t train_hash = train_ds.file().content_hash(),
                 val_hash = val_ds.file().content_hash();
  if (resumed) {
    ATTEND_CHECK(train_hash == resumed->train_hash && val_hash == resumed->val_hash,
                 data_dir.string(),
                 ": train.bin or val.bin differs from the data the checkpoint was trained on");
  }
  ATTEND_CHECK(train_ds.file().vocab_size() == tokenizer->vocab_size(), data_dir.string(),
               ": train.bin has vocab_size ", train_ds.file().vocab_size(),
               " but the tokenizer has ", tokenizer->vocab_size());

  const nn::GPTConfig mc = c.model(tokenizer->vocab_size());
  nn::GPT model(mc, static_cast<uint64_t>(c.seed));
  model.train();
  const nn::NamedTensors named = model.named_parameters();
  std::vector<Tensor> params;
  for (auto& [_, p] : named) params.push_back(p);
  std::unique_ptr<Optimizer> opt;
  if (c.optimizer == "sgd") {
    opt = std::make_unique<SGD>(named, c.momentum, c.weight_decay);
  } else {
    opt = std::make_unique<AdamW>(named, AdamWOptions{c.beta1, c.beta2, 1e-8, c.weight_decay});
  }
  const LrSchedule schedule{c.learning_rate, c.min_lr, c.warmup_iters, c.lr_decay_iters,
                            c.decay_lr};

  int64_t step = 0, tokens_seen = 0, best_step = -1;
  double best_val = 0;
  std::vector<MetricsRow> metrics;
  if (resumed) {
    std::map<std::string, Tensor> state(resumed->model.begin(), resumed->model.end());
    model.load_state_dict(state);
    std::map<std::string, Tensor> ostate(resumed->optimizer_state.begin(),
                                         resumed->optimizer_state.end());
    ATTEND_CHECK(resumed->optimizer == c.optimizer, resume_file.string(), ": optimizer ",
                 resumed->optimizer, " in the checkpoint, ", c.optimizer, " requested");
    opt->load_state(ostate, resumed->optimizer_step);
    step = resumed->step;
    tokens_seen = resumed->tokens_seen;
    best_step = resumed->best_step;
    best_val = resumed->best_val_loss;
    for (const MetricsRow& r : read_metrics(run_dir / "metrics.csv"))
      if (r.step <= step) metrics.push_back(r);
    spdlog::info("resumed from {} at step {}", resume_file.string(), step);
  }

  const int64_t tokens_per_step = c.batch_size * c.block_size * c.gradient_accumulation_steps;
  spdlog::info(
      "model: {} parameters ({} layers, {} heads, {} kv heads, C {}, T {}, V {}); {} tokens per "
      "step",
      model.num_parameters(), mc.n_layer, mc.n_head, mc.n_kv_head, mc.n_embd, mc.block_size,
      mc.vocab_size, tokens_per_step);

  auto save = [&](int64_t at) {
    CheckpointData d;
    d.config = to_values(c, tokenizer->vocab_size());
    d.model = model.state_dict();
    d.optimizer = c.optimizer;
    d.optimizer_step = opt->steps();
    d.optimizer_state = opt->state();
    d.seed = static_cast<uint64_t>(c.seed);
    d.data_dir = fs::absolute(data_dir).lexically_normal().string();
    d.train_tokens = train_ds.file().size();
    d.val_tokens = val_ds.file().size();
    d.train_hash = train_hash;
    d.val_hash = val_hash;
    d.tokenizer = tokenizer->spec();
    d.step = at;
    d.tokens_seen = tokens_seen;
    d.best_step = best_step;
    d.best_val_loss = best_val;
    const fs::path path = run_dir / checkpoint_name(at);
    save_checkpoint(path, d);
    // Keep the newest keep_checkpoints and the best-val one; the new file is in place.
    auto all = list_checkpoints(run_dir);
    const std::string best_name = best_step >= 0 ? checkpoint_name(best_step) : "";
    const int64_t n = static_cast<int64_t>(all.size());
    for (int64_t i = 0; i < n - c.keep_checkpoints; ++i)
      if (all[i].filename() != best_name) fs::remove(all[i], ec);
    spdlog::info("checkpoint {}", path.string());
    return path;
  };

  const bool tty = ::isatty(STDOUT_FILENO);
  bool bar_open = false;  // a progress bar line is on screen without its newline
  auto close_bar = [&] {
    if (bar_open) std::printf("\n");
    bar_open = false;
  };
  g_stop_signal = 0;
  auto old_int = std::signal(SIGINT, on_stop_signal);
  auto old_term = std::signal(SIGTERM, on_stop_signal);
  struct Restore {
    decltype(old_int) a, b;
    ~Restore() {
      std::signal(SIGINT, a);
      std::signal(SIGTERM, b);
    }
  } restore{old_int, old_term};

  TrainSummary sum;
  sum.first_step = step;
  const auto t_start = std::chrono::steady_clock::now();
  const double elapsed_before =
      metrics.empty() ? 0.0
                      : (std::isnan(metrics.back().elapsed_s) ? 0.0 : metrics.back().elapsed_s);
  auto elapsed = [&] {
    return elapsed_before +
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  };
  auto evaluate = [&](int64_t at) {
    const uint64_t s = static_cast<uint64_t>(c.seed);
    const double tl =
        estimate_loss(model, train_ds, s ^ 0x7472616Eull, at, c.eval_iters, c.batch_size);
    const double vl = estimate_loss(model, val_ds, s ^ 0x76616Cull, at, c.eval_iters, c.batch_size);
    close_bar();
    spdlog::info("step {}: train loss {:.4f}, val loss {:.4f}", at, tl, vl);
    sum.evaluated = true;
    sum.final_train_loss = tl;
    sum.final_val_loss = vl;
    // The untrained model at step 0 is no candidate for "best".
    const bool improved = at > 0 && (best_step < 0 || vl < best_val);
    if (improved) best_step = at, best_val = vl;
    if (!metrics.empty() && metrics.back().step == at) {
      metrics.back().val_loss = vl;
    } else {
      metrics.push_back({at, NAN, vl, schedule.at(at), NAN, NAN, elapsed()});
    }
    write_metrics(run_dir, metrics);
    write_loss_plot(run_dir, metrics, false);
    return improved;
  };

  if (step == 0 && !resumed) evaluate(0);
  if (step >= c.max_iters) {
    spdlog::info(
        "the run is at step {} and max_iters is {}: nothing to train (raise --max_iters to "
        "continue)",
        step, c.max_iters);
  }
  double window_time = 0;
  int64_t window_steps = 0;
  while (step < c.max_iters) {
    const auto t0 = std::chrono::steady_clock::now();
    const double lr = schedule.at(step);
    zero_grads(params);
    double loss_sum = 0;
    for (int64_t m = 0; m < c.gradient_accumulation_steps; ++m) {
      model.dropout_context->step = static_cast<uint64_t>(step);
      model.dropout_context->micro_step = static_cast<uint32_t>(m);
      data::Batch b =
          train_ds.random_batch(static_cast<uint64_t>(c.seed), static_cast<uint64_t>(step),
                                static_cast<uint32_t>(m), c.batch_size);
      Tensor loss = model.forward(b.x, b.y).loss;
      const double lv = loss.item();
      ATTEND_CHECK(std::isfinite(lv), "step ", step, ": the loss is ", lv, " (micro-step ", m,
                   "); stopping before the update, no checkpoint written",
                   sum.last_checkpoint.empty()
                       ? std::string()
                       : "; the last good one is " + sum.last_checkpoint.string());
      loss_sum += lv;
      mul(loss, 1.0 / static_cast<double>(c.gradient_accumulation_steps)).backward();
    }
    const double loss_mean = loss_sum / static_cast<double>(c.gradient_accumulation_steps);
    const double norm = clip_grad_norm(params, c.grad_clip);
    ATTEND_CHECK(std::isfinite(norm), "step ", step, ": the gradient norm is ", norm,
                 "; stopping before the update, no checkpoint written");
    {
      NoGradGuard no_grad;
      opt->step(lr);
    }
    ++step;
    tokens_seen += tokens_per_step;
    sum.losses.push_back(loss_mean);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    window_time += dt;
    ++window_steps;
    const double tok_s = static_cast<double>(tokens_per_step) * window_steps / window_time;

    if (step % c.log_interval == 0 || step == c.max_iters) {
      metrics.push_back({step, loss_mean, NAN, lr, norm, tok_s, elapsed()});
      if (!tty) {
        std::printf("step %lld/%lld loss %.4f lr %.3e grad_norm %.3f %.0f tok/s %.1f ms/step\n",
                    static_cast<long long>(step), static_cast<long long>(c.max_iters), loss_mean,
                    lr, norm, tok_s, 1000.0 * window_time / window_steps);
        std::fflush(stdout);
      }
      window_time = 0;
      window_steps = 0;
    }
    if (tty) {
      const int width = 24;
      const int filled =
          static_cast<int>(width * static_cast<double>(step) / std::max<int64_t>(1, c.max_iters));
      const double eta = (c.max_iters - step) * dt;
      std::printf("\r%lld/%lld [%s%s] loss %.4f lr %.2e %.0f tok/s ETA %s   ",
                  static_cast<long long>(step), static_cast<long long>(c.max_iters),
                  std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                  loss_mean, lr, tok_s, fmt_duration(eta).c_str());
      std::fflush(stdout);
      bar_open = true;
    }
    bool improved = false;
    if (step % c.eval_interval == 0 || step == c.max_iters) improved = evaluate(step);
    const bool stop = g_stop_signal != 0;
    if (step % c.checkpoint_interval == 0 || step == c.max_iters || improved || stop) {
      close_bar();
      sum.last_checkpoint = save(step);
    }
    if (stop) {
      close_bar();
      spdlog::info(
          "stopped by {} after step {}; checkpoint {}; continue with: attend train --resume {}",
          g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM", step, sum.last_checkpoint.string(),
          run_dir.string());
      sum.interrupted = true;
      break;
    }
  }
  close_bar();
  if (sum.last_checkpoint.empty() && !resumed) sum.last_checkpoint = save(step);
  write_metrics(run_dir, metrics);
  write_loss_plot(run_dir, metrics, false);
  sum.last_step = step;
  return sum;
}

}  // namespace attend::train

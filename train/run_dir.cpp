#include "train/run_dir.h"

#include "train/model_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "data/tokenizer.h"
#include "tensor/error.h"
#include "tensor/util.h"
#include "viz/plot.h"

namespace attend::train {

namespace fs = std::filesystem;

RunLock::RunLock(const fs::path& dir) {
  const fs::path p = dir / "lock";
  fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ATTEND_CHECK(fd_ >= 0, p.string(), ": cannot create the lock file: ", std::strerror(errno),
               " (is the run folder writable?)");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {0};
    ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    ::close(fd_);
    fd_ = -1;
    throw Error(str(dir.string(), ": another trainer is using this run folder (pid ",
                    n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("unknown"),
                    ")"));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    spdlog::warn("{}: cannot write the pid into the lock file", p.string());
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);
}

std::string checkpoint_name(int64_t step) { return fmt::format("ckpt_{:08d}.h5", step); }

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

void prune_checkpoints(const fs::path& run_dir, int64_t keep, const std::string& also_keep) {
  const auto all = list_checkpoints(run_dir);
  const int64_t n = static_cast<int64_t>(all.size());
  std::error_code ec;
  for (int64_t i = 0; i < n - keep; ++i)
    if (all[i].filename() != also_keep) fs::remove(all[i], ec);
}

namespace {
const std::string kReadPin = ".attend-read.";  // + pid + "." + the checkpoint's name
}  // namespace

LoadedCheckpoint newest_valid_checkpoint(
    const fs::path& run_dir, const std::function<io::CheckpointData(const fs::path&)>& load) {
  std::error_code ec;
  ATTEND_CHECK(fs::is_directory(run_dir, ec), run_dir.string(), ": no such run folder");
  // A trainer may prune while we read (Note [Readers and pruning]): the file is read
  // through a link of our own, so a file pruned once linked stays readable until we are
  // done; one that vanished before (or, where no link can be made, while we read) is no
  // corruption: list again (a newer checkpoint replaced it).
  for (int attempt = 0; attempt < 50; ++attempt) {
    bool vanished = false;
    auto all = list_checkpoints(run_dir);
    for (auto it = all.rbegin(); it != all.rend() && !vanished; ++it) {
      const fs::path pin = run_dir / (kReadPin + std::to_string(::getpid()) + "." +
                                      it->filename().string());
      ::unlink(pin.c_str());
      bool pinned = ::link(it->c_str(), pin.c_str()) == 0;
      if (!pinned && errno == ENOENT) {
        vanished = true;
        continue;
      }
      struct Unpin {
        const fs::path& p;
        bool on;
        ~Unpin() {
          if (on) ::unlink(p.c_str());
        }
      } unpin{pin, pinned};
      const fs::path read = pinned ? pin : *it;  // no link (a read-only folder): the file
      try {
        return {*it, load(read)};
      } catch (const Error& e) {
        if (!pinned && !fs::exists(*it, ec)) {
          vanished = true;
          continue;
        }
        // Messages name the file, not our link.
        std::string msg = e.what();
        const std::string from = read.string();
        for (size_t at = msg.find(from); pinned && at != std::string::npos; at = msg.find(from))
          msg.replace(at, from.size(), it->string());
        spdlog::warn("skipping {}: {}", it->string(), msg);
      }
    }
    if (!vanished) break;
  }
  throw Error(str(run_dir.string(), ": no loadable checkpoint (ckpt_*.h5) in this folder"));
}

void remove_stale_temporaries(const fs::path& run_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("ckpt_", 0) == 0 && n.find(".h5.tmp") != std::string::npos) {
      spdlog::info("removing {}, left by an interrupted checkpoint write", e.path().string());
      fs::remove(e.path(), ec);
    }
    // A reader's link (Note [Readers and pruning]) whose process is gone.
    if (n.rfind(kReadPin, 0) == 0) {
      const long pid = std::strtol(n.c_str() + kReadPin.size(), nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        fs::remove(e.path(), ec);
    }
  }
}

std::vector<fs::path> set_aside_later_checkpoints(const fs::path& run_dir, int64_t step) {
  std::vector<fs::path> later;
  for (const fs::path& p : list_checkpoints(run_dir))
    if (p.filename().string() > checkpoint_name(step)) later.push_back(p);
  if (later.empty()) return later;
  const fs::path aside = run_dir / fmt::format("abandoned_after_{:08d}", step);
  std::error_code ec;
  fs::create_directories(aside, ec);
  ATTEND_CHECK(!ec, aside.string(), ": cannot create: ", ec.message());
  for (const fs::path& p : later) {
    fs::rename(p, aside / p.filename(), ec);
    ATTEND_CHECK(!ec, p.string(), ": cannot move into ", aside.string(), ": ", ec.message());
  }
  spdlog::warn("resuming from step {}: moved {} later checkpoint(s) of the abandoned run into {}",
               step, later.size(), aside.string());
  return later;
}

namespace {

// The stored tokenizer is checked as it is read, so that every command refuses the same
// file with the same message, naming the file and the field: its pattern compiles, and the
// whole spec makes a tokenizer (a kind that fits its tokens, merges inside the vocabulary).
void check_stored_tokenizer(const LoadedCheckpoint& ck) {
  const data::TokenizerSpec& t = ck.data.tokenizer;
  if (!t.pattern.empty()) {
    try {
      data::check_pattern(t.pattern);
    } catch (const Error& e) {
      throw Error(str(ck.path.string(), ": /tokenizer@pattern: ", e.what()));
    }
  }
  try {
    (void)data::make_tokenizer(t);
  } catch (const Error& e) {
    throw Error(str(ck.path.string(), ": /tokenizer: ", e.what()));
  }
}

}  // namespace

LoadedCheckpoint load_checkpoint_or_run(const std::string& arg, bool with_optimizer) {
  std::error_code ec;
  auto load = [with_optimizer](const fs::path& p) {
    return with_optimizer ? io::load_checkpoint(p) : io::load_checkpoint_without_optimizer(p);
  };
  LoadedCheckpoint ck = fs::is_directory(arg, ec)
                            ? newest_valid_checkpoint(arg, load)
                            : LoadedCheckpoint{fs::path(arg), load(arg)};
  check_stored_tokenizer(ck);
  complete_lora_base(ck);  // an adapter-only LoRA checkpoint gets its base (model_io.h)
  return ck;
}

namespace {

const char* kMetricsHeader =
    "step,train_loss,val_loss,lr,grad_norm,tokens_per_s,elapsed_s,eval_train_loss,"
    "reward_margin,reward_accuracy,val_reward_margin,val_reward_accuracy";

std::string csv_number(double v) { return std::isnan(v) ? "" : fmt::format("{:.17g}", v); }

}  // namespace

std::vector<MetricsRow> read_metrics(const fs::path& p) {
  std::vector<MetricsRow> rows;
  std::error_code ec;
  if (!fs::exists(p, ec)) return rows;
  std::istringstream in(read_file(p));
  std::string line;
  if (!std::getline(in, line)) return rows;
  ATTEND_CHECK(line.rfind("step,train_loss,val_loss", 0) == 0, p.string(), ": unexpected header '",
               line, "' (expected ", kMetricsHeader, ")");
  for (int64_t row = 2; std::getline(in, line); ++row) {
    std::vector<double> v;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ','))
      v.push_back(cell.empty() ? NAN
                               : parse_double(cell, str(p.string(), ": line ", row, " column ",
                                                        v.size() + 1)));
    // (Files written before eval_train_loss have 7 columns, before the DPO columns 8; they
    // read with the later ones empty.)
    ATTEND_CHECK(!v.empty() && !std::isnan(v[0]) && v.size() <= 12, p.string(), ": line ", row,
                 " has ", v.size(), " fields (expected a step and up to 11 more)");
    v.resize(12, NAN);
    rows.push_back({static_cast<int64_t>(v[0]), v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8],
                    v[9], v[10], v[11]});
  }
  return rows;
}

void write_metrics(const fs::path& dir, const std::vector<MetricsRow>& rows) {
  std::string text = std::string(kMetricsHeader) + "\n";
  for (const MetricsRow& r : rows)
    text += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}\n", r.step, csv_number(r.train_loss),
                        csv_number(r.val_loss), csv_number(r.lr), csv_number(r.grad_norm),
                        csv_number(r.tokens_per_s), csv_number(r.elapsed_s),
                        csv_number(r.eval_train_loss), csv_number(r.reward_margin),
                        csv_number(r.reward_accuracy), csv_number(r.val_reward_margin),
                        csv_number(r.val_reward_accuracy));
  write_file_atomic(dir / "metrics.csv", text);
}

void write_loss_plot(const fs::path& dir, const std::vector<MetricsRow>& rows, bool log_y) {
  auto series = [&](const char* name, const char* color, double MetricsRow::*field, bool line,
                    bool points) {
    viz::Series s{name, color, {}, {}, points, line};
    for (const MetricsRow& r : rows)
      if (!std::isnan(r.*field))
        s.x.push_back(static_cast<double>(r.step)), s.y.push_back(r.*field);
    return s;
  };
  const std::vector<viz::Series> loss = {
      series("train loss (each step)", "#9ecae1", &MetricsRow::train_loss, true, false),
      series("train loss (evaluation)", "#1f77b4", &MetricsRow::eval_train_loss, true, true),
      series("val loss (evaluation)", "#d62728", &MetricsRow::val_loss, true, true)};
  const std::vector<viz::Series> lr = {
      series("learning rate", "#2ca02c", &MetricsRow::lr, true, false)};
  const std::vector<viz::Series> norm = {
      series("gradient norm (before clipping)", "#9467bd", &MetricsRow::grad_norm, true, false)};
  viz::PlotOptions lo{"attend: loss", "step", "cross-entropy loss (nats)", log_y};
  viz::PlotOptions ro{"learning rate", "step", "lr", false, 720, 240};
  viz::PlotOptions no{"gradient norm", "step", "global L2 norm", false, 720, 240};
  write_file_atomic(dir / "loss.svg",
                    viz::stacked_svg({viz::line_plot_svg(loss, lo), viz::line_plot_svg(lr, ro),
                                      viz::line_plot_svg(norm, no)},
                                     {lo.height, ro.height, no.height}, 720));
}

}  // namespace attend::train

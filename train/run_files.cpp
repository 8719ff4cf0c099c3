#include "train/run_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "tensor/error.h"
#include "train/plot.h"

namespace attend::train {

namespace fs = std::filesystem;

RunLock::RunLock(const fs::path& dir) {
  const fs::path p = dir / "lock";
  fd_ = ::open(p.c_str(), O_RDWR | O_CREAT, 0644);
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

namespace {

std::string csv_number(double v) {
  if (std::isnan(v)) return "";
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

const char* kMetricsHeader = "step,train_loss,val_loss,lr,grad_norm,tokens_per_s,elapsed_s";

}  // namespace

std::vector<MetricsRow> read_metrics(const fs::path& p) {
  std::vector<MetricsRow> rows;
  std::ifstream in(p);
  std::string line;
  if (!std::getline(in, line)) return rows;
  while (std::getline(in, line)) {
    std::vector<double> v;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) v.push_back(cell.empty() ? NAN : std::stod(cell));
    while (v.size() < 7) v.push_back(NAN);
    rows.push_back({static_cast<int64_t>(v[0]), v[1], v[2], v[3], v[4], v[5], v[6]});
  }
  return rows;
}

void write_metrics(const fs::path& dir, const std::vector<MetricsRow>& rows) {
  std::string text = std::string(kMetricsHeader) + "\n";
  for (const MetricsRow& r : rows) {
    text += std::to_string(r.step) + "," + csv_number(r.train_loss) + "," + csv_number(r.val_loss) +
            "," + csv_number(r.lr) + "," + csv_number(r.grad_norm) + "," +
            csv_number(r.tokens_per_s) + "," + csv_number(r.elapsed_s) + "\n";
  }
  std::ofstream out(dir / "metrics.csv.tmp", std::ios::trunc);
  out << text;
  out.close();
  if (!out.good()) {
    spdlog::warn("{}: cannot write metrics.csv", dir.string());
    return;
  }
  fs::rename(dir / "metrics.csv.tmp", dir / "metrics.csv");
}

void write_loss_plot(const fs::path& dir, const std::vector<MetricsRow>& rows, bool log_y) {
  Series train{"train loss (per step)", "#1f77b4", {}, {}, false};
  Series val{"val loss (evaluation)", "#d62728", {}, {}, true};
  for (const MetricsRow& r : rows) {
    if (!std::isnan(r.train_loss))
      train.x.push_back(static_cast<double>(r.step)), train.y.push_back(r.train_loss);
    if (!std::isnan(r.val_loss))
      val.x.push_back(static_cast<double>(r.step)), val.y.push_back(r.val_loss);
  }
  PlotOptions o{"attend: loss", "step", "cross-entropy loss (nats)", log_y};
  std::ofstream(dir / "loss.svg", std::ios::trunc) << line_plot_svg({train, val}, o);
}

}  // namespace attend::train

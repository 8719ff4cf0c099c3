#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <set>

#include "tensor/kernels.h"
#include "tensor/util.h"
#include "train/hdf5_file.h"
#include "train/version.h"

namespace attend::train {

namespace fs = std::filesystem;

namespace {

struct Fnv {
  uint64_t h = kFnvOffset;
  void add(const void* p, size_t n) { h = fnv1a64(p, n, h); }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }
  void add(const Tensor& t) {
    Tensor c = kernel::contiguous(t);
    add(c.raw_data(), static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
  }
};

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "exp_avg.transformer.wte.weight" -> ("exp_avg", "transformer.wte.weight")
std::pair<std::string, std::string> split_slot(const std::string& name) {
  size_t dot = name.find('.');
  ATTEND_CHECK(dot != std::string::npos, "checkpoint: optimizer state name '", name,
               "' has no slot");
  return {name.substr(0, dot), name.substr(dot + 1)};
}

}  // namespace

uint64_t content_hash(const CheckpointData& d) {
  // By name order, so that the order a file lists its objects in does not matter; a
  // tied tensor counts once, under its first name.
  auto sorted = [](nn::NamedTensors v) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return v;
  };
  Fnv f;
  std::set<const TensorImpl*> seen;
  for (const auto& [name, t] : sorted(d.model)) {
    if (!seen.insert(t.impl()).second) continue;
    f.add(name);
    f.add(t);
  }
  for (const auto& [name, t] : sorted(d.optimizer_state)) {
    f.add(name);
    f.add(t);
  }
  f.add(&d.step, sizeof d.step);
  f.add(&d.optimizer_step, sizeof d.optimizer_step);
  return f.h;
}

void save_checkpoint(const fs::path& path, CheckpointData& d) {
  d.content_hash = content_hash(d);
  if (d.created.empty()) d.created = utc_now();
  fs::path tmp = path;
  tmp += ".tmp";
  {
    h5::File f = h5::File::create(tmp.string());
    for (const char* g :
         {"/config", "/model", "/optimizer", "/rng", "/data", "/tokenizer", "/meta"})
      f.create_group(g);
    for (const auto& [name, v] : d.config) {
      std::visit([&](const auto& x) { f.set_attr("/config", name, x); }, v);
    }
    std::map<const TensorImpl*, std::string> written;
    for (const auto& [name, t] : d.model) {
      auto it = written.find(t.impl());
      if (it != written.end()) {
        f.hard_link("/model/" + it->second, "/model/" + name);
      } else {
        f.write_tensor("/model/" + name, t);
        written[t.impl()] = name;
      }
    }
    f.set_attr("/optimizer", "name", d.optimizer);
    f.set_attr("/optimizer", "step", d.optimizer_step);
    std::set<std::string> slots;
    for (const auto& [name, t] : d.optimizer_state) {
      auto [slot, param] = split_slot(name);
      if (slots.insert(slot).second) f.create_group("/optimizer/" + slot);
      f.write_tensor("/optimizer/" + slot + "/" + param, t);
    }
    f.set_attr("/rng", "seed", d.seed);
    f.set_attr("/rng", "scheme",
               std::string("philox4x32-10 keyed by (seed, step, micro_step, ...)"));
    f.set_attr("/data", "data_dir", d.data_dir);
    f.set_attr("/data", "train_tokens", d.train_tokens);
    f.set_attr("/data", "val_tokens", d.val_tokens);
    f.set_attr("/data", "train_hash", d.train_hash);
    f.set_attr("/data", "val_hash", d.val_hash);
    f.set_attr("/data", "sampler", std::string("random windows keyed by (seed, step, micro_step)"));
    f.set_attr("/data", "next_step", d.step);
    f.set_attr("/tokenizer", "kind", d.tokenizer.kind);
    f.set_attr("/tokenizer", "name", d.tokenizer.name);
    {
      std::string bytes;
      std::vector<double> offsets{0};
      for (const auto& t : d.tokenizer.tokens) {
        bytes += t;
        offsets.push_back(static_cast<double>(bytes.size()));
      }
      Tensor b = empty({static_cast<int64_t>(bytes.size())}, DType::Bool);
      std::memcpy(b.raw_data(), bytes.data(), bytes.size());
      f.write_tensor("/tokenizer/token_bytes", b);
      f.write_tensor("/tokenizer/token_offsets",
                     tensor(offsets, {static_cast<int64_t>(offsets.size())}, DType::I64));
      if (!d.tokenizer.merges.empty()) {
        std::vector<double> m;
        for (auto [a, c] : d.tokenizer.merges) m.push_back(a), m.push_back(c);
        f.write_tensor("/tokenizer/merges",
                       tensor(m, {static_cast<int64_t>(d.tokenizer.merges.size()), 2}, DType::I32));
      }
    }
    f.set_attr("/meta", "format_version", kCheckpointFormatVersion);
    f.set_attr("/meta", "attend_version", std::string(version()));
    f.set_attr("/meta", "step", d.step);
    f.set_attr("/meta", "tokens_seen", d.tokens_seen);
    f.set_attr("/meta", "best_val_loss", d.best_val_loss);
    f.set_attr("/meta", "best_step", d.best_step);
    f.set_attr("/meta", "created", d.created);
    f.set_attr("/meta", "content_hash", d.content_hash);
    f.close();
  }
  fsync_path(tmp, false);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  ATTEND_CHECK(!ec, path.string(), ": cannot rename the new checkpoint into place: ", ec.message());
  fsync_path(path.parent_path().empty() ? fs::path(".") : path.parent_path(), true);
}

CheckpointData load_checkpoint(const fs::path& path) {
  std::error_code ec;
  ATTEND_CHECK(fs::exists(path, ec), path.string(), ": no such checkpoint file");
  h5::File f = h5::File::open(path.string());
  for (const char* g : {"/config", "/model", "/optimizer", "/rng", "/data", "/tokenizer", "/meta"})
    ATTEND_CHECK(f.exists(g), path.string(), ": not an attend checkpoint (no ", g, " group)");
  CheckpointData d;
  const int64_t version = f.attr_int("/meta", "format_version");
  ATTEND_CHECK(version == kCheckpointFormatVersion, path.string(), ": checkpoint format version ",
               version, " is not supported: this attend reads version ", kCheckpointFormatVersion,
               version < kCheckpointFormatVersion
                   ? " (version 2 changed the random streams; retrain, or use the attend that "
                     "wrote it)"
                   : " (written by a newer attend)");
  for (const std::string& name : f.attr_names("/config")) {
    switch (f.attr_kind("/config", name)) {
      case 'i':
        d.config.emplace_back(name, f.attr_int("/config", name));
        break;
      case 'f':
        d.config.emplace_back(name, f.attr_double("/config", name));
        break;
      default:
        d.config.emplace_back(name, f.attr_string("/config", name));
        break;
    }
  }
  // Model: every name; hard links come back as the same tensor.
  std::map<uint64_t, Tensor> by_object;
  for (const std::string& name : f.list("/model")) {
    const std::string full = "/model/" + name;
    const uint64_t key = f.object_address(full);
    auto it = by_object.find(key);
    Tensor t = it != by_object.end() ? it->second : f.read_tensor(full, DType::F32);
    by_object[key] = t;
    d.model.emplace_back(name, t);
  }
  d.optimizer = f.attr_string("/optimizer", "name");
  d.optimizer_step = f.attr_int("/optimizer", "step");
  for (const std::string& slot : f.list("/optimizer"))
    for (const std::string& name : f.list("/optimizer/" + slot))
      d.optimizer_state.emplace_back(slot + "." + name,
                                     f.read_tensor("/optimizer/" + slot + "/" + name, DType::F32));
  d.seed = f.attr_uint("/rng", "seed");
  d.data_dir = f.attr_string("/data", "data_dir");
  d.train_tokens = f.attr_int("/data", "train_tokens");
  d.val_tokens = f.attr_int("/data", "val_tokens");
  d.train_hash = f.attr_uint("/data", "train_hash");
  d.val_hash = f.attr_uint("/data", "val_hash");
  d.tokenizer.kind = f.attr_string("/tokenizer", "kind");
  d.tokenizer.name = f.attr_string("/tokenizer", "name");
  {
    Tensor bytes = f.read_tensor("/tokenizer/token_bytes", DType::Bool);
    std::vector<int64_t> off =
        f.read_tensor("/tokenizer/token_offsets", DType::I64).to_vector<int64_t>();
    const char* b = static_cast<const char*>(bytes.raw_data());
    for (size_t i = 0; i + 1 < off.size(); ++i) {
      ATTEND_CHECK(off[i] <= off[i + 1] && off[i + 1] <= bytes.numel(), path.string(),
                   ": /tokenizer/token_offsets is inconsistent");
      d.tokenizer.tokens.emplace_back(b + off[i], b + off[i + 1]);
    }
    if (f.exists("/tokenizer/merges")) {
      std::vector<int32_t> m = f.read_tensor("/tokenizer/merges", DType::I32).to_vector<int32_t>();
      for (size_t i = 0; i + 1 < m.size(); i += 2) d.tokenizer.merges.emplace_back(m[i], m[i + 1]);
    }
  }
  d.step = f.attr_int("/meta", "step");
  d.tokens_seen = f.attr_int("/meta", "tokens_seen");
  d.best_val_loss = f.attr_double("/meta", "best_val_loss");
  d.best_step = f.attr_int("/meta", "best_step");
  d.created = f.attr_string("/meta", "created");
  d.content_hash = f.attr_uint("/meta", "content_hash");
  const uint64_t h = content_hash(d);
  ATTEND_CHECK(h == d.content_hash, path.string(), ": content hash mismatch (stored ",
               d.content_hash, ", computed ", h, "): the file is corrupt");
  return d;
}

}  // namespace attend::train

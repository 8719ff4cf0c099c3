#include "io/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <functional>
#include <set>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/util.h"
#include "io/child.h"
#include "io/hdf5_file.h"
#include "io/version.h"

namespace attend::io {

namespace fs = std::filesystem;

namespace {

// The content hash's byte stream into the file's hash: FNV-1a 64 (format versions 2-4) or
// XXH64 (5 on), by the format version (Meta::format_version).
struct Hasher {
  explicit Hasher(int64_t format_version) : xxh(format_version >= kXxh64FormatVersion) {}
  bool xxh;
  uint64_t h = kFnvOffset;
  Xxh64 x;
  void add(const void* p, size_t n) {
    if (xxh)
      x.add(p, n);
    else
      h = fnv1a64(p, n, h);
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }
  void add(const Tensor& t) {
    if (t.dtype() == DType::BF16) {
      // bf16 (a frozen base) as the f32 values the file holds (hdf5_file.cpp), widened a
      // block at a time: the hash runs bytes in order, so it is that of the whole widened
      // tensor, never made (GPT-2's embedding would be 154 MB beside the model)
      kernel::for_each_f32_block(t, 1 << 16, [&](const float* v, int64_t, int64_t n) {
        add(v, static_cast<size_t>(n) * sizeof(float));
      });
      return;
    }
    const Tensor c = kernel::contiguous(t);
    add(c.raw_data(), static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
  }
  uint64_t value() const { return xxh ? x.digest() : h; }
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

namespace {

// The content hash in parts: `model` and `optimizer` add their tensors by name order (a
// tied tensor once, under its first name), from memory (content_hash) or from a file one
// tensor at a time (verify_file); everything else comes from `d`.
uint64_t hash_parts(const CheckpointData& d, const std::function<void(Hasher&)>& model,
                    const std::function<void(Hasher&)>& optimizer) {
  Hasher f(d.meta.format_version);
  model(f);
  f.add(d.optimizer.name);
  optimizer(f);
  f.add(&d.optimizer.step, sizeof d.optimizer.step);
  // Every other group that changes behaviour: a checkpoint is trusted only whole.
  ConfigValues config = d.config;
  std::sort(config.begin(), config.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [name, v] : config) {
    f.add(name);
    const auto tag = static_cast<uint8_t>(v.index());
    f.add(&tag, 1);
    std::visit(
        [&](const auto& x) {
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>)
            f.add(x);
          else
            f.add(&x, sizeof x);
        },
        v);
  }
  f.add(&d.seed, sizeof d.seed);
  f.add(d.data.dir);
  for (const int64_t x : {d.data.train_tokens, d.data.val_tokens}) f.add(&x, sizeof x);
  for (const uint64_t x : {d.data.train_hash, d.data.val_hash}) f.add(&x, sizeof x);
  f.add(d.tokenizer.kind);
  f.add(d.tokenizer.name);
  for (const std::string& t : d.tokenizer.tokens) {
    const uint64_t n = t.size();
    f.add(&n, sizeof n);
    f.add(t.data(), t.size());
  }
  for (const auto& [x, y] : d.tokenizer.merges) f.add(&x, sizeof x), f.add(&y, sizeof y);
  if (!d.tokenizer.pattern.empty() || d.tokenizer.ignore_merges) {  // (older files' hashes hold)
    f.add(d.tokenizer.pattern);
    const uint8_t im = d.tokenizer.ignore_merges ? 1 : 0;
    f.add(&im, 1);
  }
  for (const int64_t x : {d.meta.step, d.meta.tokens_seen, d.meta.best_step}) f.add(&x, sizeof x);
  f.add(&d.meta.best_val_loss, sizeof d.meta.best_val_loss);
  return f.value();  // not /meta created: when a file was written changes nothing it does
}

}  // namespace

uint64_t content_hash(const CheckpointData& d) {
  // By name order, so that the order a file lists its objects in does not matter.
  auto sorted = [](nn::NamedTensors v) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return v;
  };
  return hash_parts(
      d,
      [&](Hasher& f) {
        std::set<const TensorImpl*> seen;
        for (const auto& [name, t] : sorted(d.model)) {
          if (!seen.insert(t.impl()).second) continue;
          f.add(name);
          f.add(t);
        }
      },
      [&](Hasher& f) {
        for (const auto& [name, t] : sorted(d.optimizer.tensors)) {
          f.add(name);
          f.add(t);
        }
      });
}

namespace {

const char* kGroups[] = {"/config", "/model", "/optimizer", "/rng", "/data", "/tokenizer", "/meta"};

void write_config(h5::File& f, const ConfigValues& config) {
  for (const auto& [name, v] : config)
    std::visit([&](const auto& x) { f.set_attr("/config", name, x); }, v);
}

ConfigValues read_config(const h5::File& f) {
  ConfigValues config;
  for (const std::string& name : f.attr_names("/config")) {
    switch (f.attr_kind("/config", name)) {
      case 'i':
        config.emplace_back(name, f.attr_int("/config", name));
        break;
      case 'f':
        config.emplace_back(name, f.attr_double("/config", name));
        break;
      default:
        config.emplace_back(name, f.attr_string("/config", name));
        break;
    }
  }
  return config;
}

// A tensor already written under another name (a tied weight) becomes a hard link.
void write_model(h5::File& f, const nn::NamedTensors& model) {
  std::map<const TensorImpl*, std::string> written;
  for (const auto& [name, t] : model) {
    auto it = written.find(t.impl());
    if (it != written.end()) {
      f.hard_link("/model/" + it->second, "/model/" + name);
    } else {
      f.write_tensor("/model/" + name, t);
      written[t.impl()] = name;
    }
  }
}

// Every name; hard links come back as the same tensor.
nn::NamedTensors read_model(const h5::File& f) {
  nn::NamedTensors model;
  std::map<uint64_t, Tensor> by_object;
  for (const std::string& name : f.list("/model")) {
    const std::string full = "/model/" + name;
    const uint64_t key = f.object_address(full);
    auto it = by_object.find(key);
    Tensor t = it != by_object.end() ? it->second : f.read_tensor(full, DType::F32);
    by_object[key] = t;
    model.emplace_back(name, t);
  }
  return model;
}

void write_optimizer(h5::File& f, const OptimizerState& o) {
  f.set_attr("/optimizer", "name", o.name);
  f.set_attr("/optimizer", "step", o.step);
  std::set<std::string> slots;
  for (const auto& [name, t] : o.tensors) {
    auto [slot, param] = split_slot(name);
    if (slots.insert(slot).second) f.create_group("/optimizer/" + slot);
    f.write_tensor("/optimizer/" + slot + "/" + param, t);
  }
}

OptimizerState read_optimizer(const h5::File& f) {
  OptimizerState o{f.attr_string("/optimizer", "name"), f.attr_int("/optimizer", "step"), {}};
  for (const std::string& slot : f.list("/optimizer"))
    for (const std::string& name : f.list("/optimizer/" + slot))
      o.tensors.emplace_back(slot + "." + name,
                             f.read_tensor("/optimizer/" + slot + "/" + name, DType::F32));
  return o;
}

void write_data(h5::File& f, const DataInfo& d) {
  f.set_attr("/data", "data_dir", d.dir);
  f.set_attr("/data", "train_tokens", d.train_tokens);
  f.set_attr("/data", "val_tokens", d.val_tokens);
  f.set_attr("/data", "train_hash", d.train_hash);
  f.set_attr("/data", "val_hash", d.val_hash);
  f.set_attr("/data", "sampler", std::string("random windows keyed by (seed, step, micro_step)"));
}

DataInfo read_data(const h5::File& f) {
  return {f.attr_string("/data", "data_dir"), f.attr_int("/data", "train_tokens"),
          f.attr_int("/data", "val_tokens"), f.attr_uint("/data", "train_hash"),
          f.attr_uint("/data", "val_hash")};
}

void write_tokenizer(h5::File& f, const data::TokenizerSpec& spec) {
  f.set_attr("/tokenizer", "kind", spec.kind);
  f.set_attr("/tokenizer", "name", spec.name);
  if (!spec.pattern.empty()) f.set_attr("/tokenizer", "pattern", spec.pattern);
  if (spec.ignore_merges) f.set_attr("/tokenizer", "ignore_merges", int64_t{1});
  const data::TokenizerArrays a = data::to_arrays(spec);
  Tensor b = empty({static_cast<int64_t>(a.bytes.size())}, DType::Bool);  // u8 on disk
  std::memcpy(b.raw_data(), a.bytes.data(), a.bytes.size());
  f.write_tensor("/tokenizer/token_bytes", b);
  Tensor off = empty({static_cast<int64_t>(a.offsets.size())}, DType::I64);
  std::memcpy(off.raw_data(), a.offsets.data(), a.offsets.size() * sizeof(int64_t));
  f.write_tensor("/tokenizer/token_offsets", off);
  if (!a.merges.empty()) {
    Tensor m = empty({static_cast<int64_t>(a.merges.size() / 2), 2}, DType::I32);
    std::memcpy(m.raw_data(), a.merges.data(), a.merges.size() * sizeof(int32_t));
    f.write_tensor("/tokenizer/merges", m);
  }
}

data::TokenizerSpec read_tokenizer(const h5::File& f) {
  data::TokenizerArrays a;
  const Tensor b = f.read_tensor("/tokenizer/token_bytes", DType::Bool);
  a.bytes.assign(static_cast<const char*>(b.raw_data()), static_cast<size_t>(b.numel()));
  a.offsets = f.read_tensor("/tokenizer/token_offsets", DType::I64).to_vector<int64_t>();
  if (f.exists("/tokenizer/merges"))
    a.merges = f.read_tensor("/tokenizer/merges", DType::I32).to_vector<int32_t>();
  data::TokenizerSpec s = data::from_arrays(f.attr_string("/tokenizer", "kind"),
                                            f.attr_string("/tokenizer", "name"), a,
                                            f.path() + ": /tokenizer");
  // Format 4: a pre-tokenizer pattern and ignore_merges, present only when not GPT-2's.
  const std::vector<std::string> names = f.attr_names("/tokenizer");
  auto has = [&](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  if (has("pattern")) s.pattern = f.attr_string("/tokenizer", "pattern");
  if (has("ignore_merges")) {
    const int64_t im = f.attr_int("/tokenizer", "ignore_merges");
    ATTEND_CHECK(im == 0 || im == 1, f.path(), ": /tokenizer ignore_merges must be 0 or 1, got ", im);
    s.ignore_merges = im == 1;
  }
  ATTEND_CHECK(s.kind == "bpe" || (s.pattern.empty() && !s.ignore_merges), f.path(),
               ": /tokenizer: a char tokenizer has no pattern or ignore_merges");
  return s;
}

void write_meta(h5::File& f, const Meta& m) {
  f.set_attr("/meta", "format_version", kCheckpointFormatVersion);
  f.set_attr("/meta", "attend_version", std::string(version()));
  f.set_attr("/meta", "step", m.step);
  f.set_attr("/meta", "tokens_seen", m.tokens_seen);
  f.set_attr("/meta", "best_val_loss", m.best_val_loss);
  f.set_attr("/meta", "best_step", m.best_step);
  f.set_attr("/meta", "world_size", m.world_size);
  f.set_attr("/meta", "created", m.created);
  f.set_attr("/meta", "content_hash", m.content_hash);
  if (!m.source.empty()) f.set_attr("/meta", "source", m.source);
}

Meta read_meta(const h5::File& f) {
  const int64_t version = f.attr_int("/meta", "format_version");
  ATTEND_CHECK(version >= kOldestCheckpointFormatVersion && version <= kCheckpointFormatVersion,
               f.path(), ": checkpoint format version ", version,
               " is not supported: this attend reads versions ", kOldestCheckpointFormatVersion,
               " to ", kCheckpointFormatVersion,
               version < kOldestCheckpointFormatVersion
                   ? " (version 2 changed the random streams; retrain, or use the attend that "
                     "wrote it)"
                   : " (written by a newer attend)");
  Meta m;
  m.format_version = version;  // it decides the content hash's kind
  m.step = f.attr_int("/meta", "step");
  m.tokens_seen = f.attr_int("/meta", "tokens_seen");
  m.best_step = f.attr_int("/meta", "best_step");
  m.best_val_loss = f.attr_double("/meta", "best_val_loss");
  const std::vector<std::string> names = f.attr_names("/meta");
  if (std::find(names.begin(), names.end(), "world_size") != names.end()) {
    m.world_size = f.attr_int("/meta", "world_size");
    ATTEND_CHECK(m.world_size >= 1, f.path(), ": /meta world_size must be >= 1, got ",
                 m.world_size);
  }
  m.created = f.attr_string("/meta", "created");
  if (std::find(names.begin(), names.end(), "source") != names.end())
    m.source = f.attr_string("/meta", "source");
  m.content_hash = f.attr_uint("/meta", "content_hash");
  ATTEND_CHECK(m.step >= 0 && m.tokens_seen >= 0 && m.best_step >= -1 && m.best_step <= m.step,
               f.path(), ": /meta is inconsistent: step ", m.step, ", tokens_seen ", m.tokens_seen,
               ", best_step ", m.best_step);
  return m;
}

}  // namespace

namespace {

void write_file(const fs::path& file, const CheckpointData& d) {
  h5::File f = h5::File::create(file.string());
  for (const char* g : kGroups) f.create_group(g);
  write_config(f, d.config);
  write_model(f, d.model);
  write_optimizer(f, d.optimizer);
  f.set_attr("/rng", "seed", d.seed);
  f.set_attr("/rng", "scheme", std::string("philox4x32-10, Note [Random streams]"));
  write_data(f, d.data);
  write_tokenizer(f, d.tokenizer);
  write_meta(f, d.meta);
  f.close();
}

}  // namespace

void save_checkpoint(const fs::path& path, CheckpointData& d) {
  if (d.meta.created.empty()) d.meta.created = utc_now();
  d.meta.format_version = kCheckpointFormatVersion;  // what write_meta writes
  d.meta.content_hash = content_hash(d);  // last: it covers every other field
  fs::path tmp = path;
  tmp += ".tmp";
  const std::string failed = run_in_child([&] { write_file(tmp, d); }, 3600);
  std::error_code ec;
  if (!failed.empty()) {
    fs::remove(tmp, ec);  // a partial file would keep a full disk full
    throw Error(failed);
  }
  try {
    fsync_path(tmp, false);
  } catch (const Error&) {
    fs::remove(tmp, ec);
    throw;
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    throw Error(str(path.string(), ": cannot rename the new checkpoint into place: ", why));
  }
  fsync_path(path.parent_path().empty() ? fs::path(".") : path.parent_path(), true);
}

namespace {

// `open` is the name HDF5 opens, `path` the one errors name. verify false: the caller
// checks the content hash itself, or knows these bytes were checked.
CheckpointData read_checkpoint(const std::string& open, const fs::path& path, bool verify,
                               bool with_optimizer = true) {
  h5::File f = h5::File::open(open);
  if (!verify) f.skip_checksums();  // checked: the content hash covers every byte read
  for (const char* g : kGroups)
    ATTEND_CHECK(f.exists(g), path.string(), ": not an attend checkpoint (no ", g, " group)");
  CheckpointData d;
  d.meta = read_meta(f);  // first: the format version decides how to read the rest
  d.config = read_config(f);
  d.model = read_model(f);
  if (with_optimizer || verify)
    d.optimizer = read_optimizer(f);
  else
    d.optimizer.step = d.meta.step;  // not read: the caller uses the model only
  d.seed = f.attr_uint("/rng", "seed");
  d.data = read_data(f);
  d.tokenizer = read_tokenizer(f);
  ATTEND_CHECK(d.optimizer.step == d.meta.step, path.string(), ": /optimizer step ",
               d.optimizer.step, " differs from /meta step ", d.meta.step);
  if (verify) {
    const uint64_t h = content_hash(d);
    ATTEND_CHECK(h == d.meta.content_hash, path.string(), ": content hash mismatch (stored ",
                 d.meta.content_hash, ", computed ", h, "): the file is corrupt");
  }
  return d;
}

// The child's check (see load): every group parsed and checked as read_checkpoint does,
// and the content hash computed reading one tensor at a time, each handed back to the
// system before the next, so that it never holds the file (GPT-2 124M saved by train:
// weights and two AdamW moments, 1.5 GB) but at most its largest tensor.
void verify_file(const std::string& open, const fs::path& path) {
  h5::File f = h5::File::open(open);
  for (const char* g : kGroups)
    ATTEND_CHECK(f.exists(g), path.string(), ": not an attend checkpoint (no ", g, " group)");
  CheckpointData d;  // everything but the tensors
  d.meta = read_meta(f);
  d.config = read_config(f);
  d.optimizer.name = f.attr_string("/optimizer", "name");
  d.optimizer.step = f.attr_int("/optimizer", "step");
  d.seed = f.attr_uint("/rng", "seed");
  d.data = read_data(f);
  d.tokenizer = read_tokenizer(f);
  ATTEND_CHECK(d.optimizer.step == d.meta.step, path.string(), ": /optimizer step ",
               d.optimizer.step, " differs from /meta step ", d.meta.step);
  auto add = [&](Hasher& fnv, const std::string& name, const std::string& dataset) {
    fnv.add(name);
    fnv.add(f.read_tensor(dataset, DType::F32));
    release_storage_cache();
  };
  std::vector<std::string> model = f.list("/model");
  std::sort(model.begin(), model.end());
  std::vector<std::string> optimizer;
  for (const std::string& slot : f.list("/optimizer"))
    for (const std::string& name : f.list("/optimizer/" + slot))
      optimizer.push_back(slot + "." + name);
  std::sort(optimizer.begin(), optimizer.end());
  const uint64_t h = hash_parts(
      d,
      [&](Hasher& fnv) {
        std::set<uint64_t> seen;  // hard links: one object
        for (const std::string& name : model)
          if (seen.insert(f.object_address("/model/" + name)).second)
            add(fnv, name, "/model/" + name);
      },
      [&](Hasher& fnv) {
        for (const std::string& name : optimizer) {
          auto [slot, param] = split_slot(name);
          add(fnv, name, "/optimizer/" + slot + "/" + param);
        }
      });
  ATTEND_CHECK(h == d.meta.content_hash, path.string(), ": content hash mismatch (stored ",
               d.meta.content_hash, ", computed ", h, "): the file is corrupt");
}

// What identifies a file's bytes without reading them: device, inode, size, modification
// time. Equal before one read and after another: the same bytes (files are replaced by
// rename, never rewritten in place: save_checkpoint writes a new file and renames it).
struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = -1;
  int64_t mtime_ns = -1;
  static FileStamp of(const fs::path& p) {
    struct stat st {};
    FileStamp f;
    if (::stat(p.c_str(), &st) != 0) return f;
    f.dev = st.st_dev, f.ino = st.st_ino, f.size = st.st_size;
    f.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    return f;
  }
  bool known() const { return size >= 0; }
  bool operator==(const FileStamp&) const = default;
};

}  // namespace

namespace {

CheckpointData load(const fs::path& path, bool with_optimizer) {
  std::error_code ec;
  ATTEND_CHECK(fs::exists(path, ec), path.string(), ": no such checkpoint file");
  // See Note [HDF5 in a child process]: a file that crashes or hangs HDF5 does so there.
  // The child reads the file a tensor at a time and checks its content hash (verify_file).
  // This process then reads it again and checks the hash again only if the file may have
  // changed in between (another inode, size or modification time): computing it was half
  // of loading GPT-2 124M's 1.6 GB checkpoint (`attend sample` took 10 s to start on a
  // 2-core Xeon).
  const FileStamp before = FileStamp::of(path);
  const auto mb = static_cast<unsigned>(fs::file_size(path, ec) >> 20);
  const std::string failed =
      run_in_child([&] { verify_file(path.string(), path); }, 60 + mb / 20);
  if (!failed.empty()) {
    if (failed.rfind(path.string(), 0) == 0) throw Error(failed);  // our own check, named
    throw Error(str(path.string(), ": cannot be read: ", failed,
                    " (the file is corrupt or not a checkpoint)"));
  }
  CheckpointData d = read_checkpoint(path.string(), path, false, with_optimizer);
  const FileStamp after = FileStamp::of(path);
  if (!before.known() || !(before == after))  // changed meanwhile: read it whole and check
    return read_checkpoint(path.string(), path, true);
  return d;
}

}  // namespace

CheckpointData load_checkpoint(const fs::path& path) { return load(path, true); }

CheckpointData load_checkpoint_without_optimizer(const fs::path& path) { return load(path, false); }

}  // namespace attend::io

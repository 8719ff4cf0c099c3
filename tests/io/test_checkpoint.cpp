// Checkpoints: every group round-trips; corrupt, truncated and foreign files are refused.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "nn/gpt.h"
#include "tensor/kernels.h"
#include "test_util.h"
#include "io/checkpoint.h"
#include "data/tokenizer.h"
#include "io/hdf5_file.h"
#include "train/config.h"
#include "train/optim.h"

using namespace attend;
using namespace attend::io;
using namespace attend::train;
using attend::test::check_error;
namespace fs = std::filesystem;
using attend::test::temp_dir;

namespace {

io::CheckpointData make(nn::GPT& m, AdamW& opt) {
  io::CheckpointData d;
  d.config = {
      {"vocab_size", int64_t{11}}, {"learning_rate", 1e-3}, {"optimizer", std::string("adamw")}};
  d.model = m.state_dict();
  d.optimizer.name = "adamw";
  d.optimizer.step = 7;  // a checkpoint's optimizer has taken one update per step
  d.optimizer.tensors = opt.state();
  d.seed = 1337;
  d.data.dir = "/data/prepared";
  d.data.train_tokens = 1000, d.data.val_tokens = 100, d.data.train_hash = 0xfeedbeefcafe1234ull,
  d.data.val_hash = 42;
  d.tokenizer = {.kind = "bpe", .name = "bpe:258", .merges = {{'a', 'b'}, {256, 'c'}}};
  for (int b = 0; b < 256; ++b) d.tokenizer.tokens.emplace_back(1, static_cast<char>(b));
  d.tokenizer.tokens.push_back("ab");
  d.tokenizer.tokens.push_back("abc");
  d.meta.step = 7, d.meta.tokens_seen = 7 * 768, d.meta.best_step = 5, d.meta.best_val_loss = 2.25;
  return d;
}

// The model most cases save (V 11, 2 layers, C 8, GQA 2 on 1), its AdamW, and the
// checkpoint data around them (make).
struct Saved {
  nn::GPT m{nn::GPTConfig{.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2,
                          .n_kv_head = 1, .n_embd = 8, .dropout = 0.0, .bias = true},
            3};
  AdamW opt{m.named_parameters(), {}};
  io::CheckpointData d = make(m, opt);
};

void flip_byte(const fs::path& p, size_t at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x5A));
}

}  // namespace

TEST_CASE("a checkpoint round-trips every group") {
  fs::path dir = temp_dir("ckpt");
  nn::GPT m(nn::GPTConfig{.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_kv_head = 1, .n_embd = 8, .dropout = 0.0, .bias = true}, 3);
  AdamW opt(m.named_parameters(), {});
  for (auto& p : m.parameters())
    p.set_grad(kernel::unary(kernel::Unary::Affine, kernel::clone(p), 0.5, 0.1));
  opt.step(1e-3);
  io::CheckpointData d = make(m, opt);
  io::save_checkpoint(dir / "c.h5", d);
  CHECK(!fs::exists(dir / "c.h5.tmp"));
  io::CheckpointData r = io::load_checkpoint(dir / "c.h5");
  REQUIRE(r.model.size() == d.model.size());
  std::map<std::string, Tensor> got(r.model.begin(), r.model.end());
  for (auto& [n, t] : d.model) {
    INFO(n);
    CHECK(test::bit_identical(got.at(n), t));
  }
  // lm_head.weight is stored once, as a hard link, and comes back as the same tensor.
  CHECK(got.at("lm_head.weight").is_same(got.at("transformer.wte.weight")));
  std::map<std::string, Tensor> ost(r.optimizer.tensors.begin(), r.optimizer.tensors.end());
  for (auto& [n, t] : d.optimizer.tensors) CHECK(test::bit_identical(ost.at(n), t));
  CHECK(r.optimizer.name == "adamw");
  CHECK(r.optimizer.step == 7);
  CHECK(r.seed == 1337);
  CHECK(r.data.dir == "/data/prepared");
  CHECK(r.data.train_hash == 0xfeedbeefcafe1234ull);
  CHECK(r.tokenizer.tokens == d.tokenizer.tokens);
  CHECK(r.tokenizer.merges == d.tokenizer.merges);
  CHECK(r.tokenizer.name == "bpe:258");
  CHECK(r.meta.step == 7);
  CHECK(r.meta.best_step == 5);
  CHECK(r.meta.best_val_loss == 2.25);
  std::map<std::string, io::ConfigValue> cfg(r.config.begin(), r.config.end());
  CHECK(std::get<double>(cfg.at("learning_rate")) == 1e-3);
  CHECK(std::get<int64_t>(cfg.at("vocab_size")) == 11);
  CHECK(std::get<std::string>(cfg.at("optimizer")) == "adamw");
  CHECK(!r.meta.created.empty());
  CHECK(r.meta.content_hash == d.meta.content_hash);
  // The file's own layout, as h5py would see it.
  h5::File f = h5::File::open((dir / "c.h5").string());
  CHECK(f.attr_int("/config", "vocab_size") == 11);
  CHECK(f.exists("/optimizer/exp_avg/transformer.wte.weight"));
  CHECK(f.exists("/optimizer/exp_avg_sq/transformer.h.1.mlp.c_fc.bias"));
  CHECK(f.attr_string("/meta", "attend_version").size() > 0);
  fs::remove_all(dir);
}

TEST_CASE(
    "h5py reads our checkpoint: groups, names, shapes, f32, Fletcher32, the hard link, the "
    "values") {
  if (std::system("/usr/bin/python3 -c 'import h5py' > /dev/null 2>&1") != 0) {
    ATTEND_SKIP(
        "python3 with h5py not found (apt-get install python3-h5py; scripts/test.sh installs "
        "it)");
  }
  fs::path dir = temp_dir("h5py");
  Saved saved;
  nn::GPT& m = saved.m;
  io::CheckpointData& d = saved.d;
  io::save_checkpoint(dir / "c.h5", d);
  // The sum of every parameter as we hold it, for h5py to reproduce.
  double total = 0;
  for (auto& [n, t] : m.named_parameters())
    for (float v : t.to_vector<float>()) total += v;
  std::ofstream(dir / "check.py") << R"PY(
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], 'r')
assert sorted(f.keys()) == ['config', 'data', 'meta', 'model', 'optimizer', 'rng', 'tokenizer'], list(f.keys())
w, l = f['model/transformer.wte.weight'], f['model/lm_head.weight']
assert w.id == l.id, 'lm_head.weight is not a hard link to transformer.wte.weight'
assert w.shape == (11, 8) and f['model/transformer.h.1.attn.c_attn.weight'].shape == (16, 8)
names = list(f['model'].keys())  # every link (visit() would list a hard-linked object once)
for n in names:
    d = f['model/' + n]
    assert d.dtype == np.float32 and d.fletcher32 and d.chunks is not None, n
total = sum(float(np.sum(f['model/' + n][()], dtype=np.float64)) for n in names if n != 'lm_head.weight')
assert abs(total - float(sys.argv[2])) < 1e-6 * max(1.0, abs(total)), (total, sys.argv[2])
assert f['meta'].attrs['step'] == 7 and f['optimizer'].attrs['step'] == 7
assert f['optimizer/exp_avg/transformer.wte.weight'].shape == (11, 8)
print('h5py ok')
)PY";
  char total_s[64];
  std::snprintf(total_s, sizeof total_s, "%.17g", total);
  const std::string cmd = "/usr/bin/python3 " + (dir / "check.py").string() + " " +
                          (dir / "c.h5").string() + " " + total_s + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::string out;
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = ::pclose(p);
  CAPTURE(out);
  CHECK(rc == 0);
  CHECK(out.find("h5py ok") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("corrupt, truncated and foreign checkpoints are refused naming the file") {
  fs::path dir = temp_dir("corrupt");
  nn::GPT m(nn::GPTConfig{.vocab_size = 101, .block_size = 16, .n_layer = 2, .n_head = 2, .n_kv_head = 2, .n_embd = 32, .dropout = 0.0, .bias = true}, 3);
  AdamW opt(m.named_parameters(), {});
  io::CheckpointData d = make(m, opt);
  io::save_checkpoint(dir / "good.h5", d);
  const size_t size = fs::file_size(dir / "good.h5");
  auto variant = [&](const std::string& name) {
    fs::copy_file(dir / "good.h5", dir / name, fs::copy_options::overwrite_existing);
    return dir / name;
  };
  // A flipped byte in the superblock (metadata, checksummed in the latest format).
  fs::path meta = variant("meta.h5");
  flip_byte(meta, 20);
  check_error([&] { io::load_checkpoint(meta); }, "meta.h5: ");
  // Flipped bytes in the body, where the datasets are.
  for (double at : {0.3, 0.5, 0.7}) {
    fs::path body = variant("body.h5");
    flip_byte(body, static_cast<size_t>(at * size));
    CAPTURE(at);
    check_error([&] { io::load_checkpoint(body); }, "body.h5: ");
  }
  fs::path cut = variant("cut.h5");
  fs::resize_file(cut, size / 2);
  check_error([&] { io::load_checkpoint(cut); },
              "cut.h5: cannot open as HDF5: the file is missing, truncated or corrupt");
  std::ofstream(dir / "text.h5") << "not hdf5";
  check_error([&] { io::load_checkpoint(dir / "text.h5"); }, "text.h5: cannot open as HDF5");
  check_error([&] { io::load_checkpoint(dir / "none.h5"); }, "none.h5: no such checkpoint file");
  // The good one still loads.
  CHECK(io::load_checkpoint(dir / "good.h5").meta.step == 7);
  fs::remove_all(dir);
}

namespace {

// Replaces object@name with an array attribute of n int64 (or fixed strings).
void set_array_attr(const fs::path& file, const char* object, const char* name, hsize_t n,
                    bool strings) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t o = H5Oopen(f, object, H5P_DEFAULT);
  H5Adelete(o, name);
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t type = strings ? H5Tcopy(H5T_C_S1) : H5Tcopy(H5T_STD_I64LE);
  if (strings) H5Tset_size(type, 64);
  std::vector<char> data(n * 64, 'x');
  hid_t a = H5Acreate2(o, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(a >= 0);
  REQUIRE(H5Awrite(a, type, data.data()) >= 0);
  H5Aclose(a), H5Tclose(type), H5Sclose(space), H5Oclose(o), H5Fclose(f);
}

// Replaces a dataset with a chunked f32 one of `dims` with nothing written (HDF5 keeps
// no storage for it): the file stays small however large the declared shape.
void set_declared_dataset(const fs::path& file, const char* name, std::vector<hsize_t> dims) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  H5Ldelete(f, name, H5P_DEFAULT);
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  std::vector<hsize_t> chunk(dims.size(), 1);
  H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
  hid_t d = H5Dcreate2(f, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  REQUIRE(d >= 0);
  H5Dclose(d), H5Pclose(dcpl), H5Sclose(space), H5Fclose(f);
}

}  // namespace

TEST_CASE("crafted HDF5: array attributes and over-declared datasets are refused before reading") {
  // Regressions (adversarial H1, H2): an array attribute was read into a scalar (stack or
  // heap overflow); a dataset whose byte size overflows int64 got a 0-byte buffer that
  // H5Dread then filled.
  fs::path dir = temp_dir("crafted");
  Saved saved;
  io::CheckpointData& d = saved.d;
  io::save_checkpoint(dir / "good.h5", d);
  auto fresh = [&](const char* name) {
    fs::copy_file(dir / "good.h5", dir / name, fs::copy_options::overwrite_existing);
    return dir / name;
  };
  set_array_attr(fresh("a.h5"), "/config", "learning_rate", 1000, false);
  check_error([&] { io::load_checkpoint(dir / "a.h5"); },
              "a.h5: attribute /config@learning_rate holds 1000 values; expected a single value");
  set_array_attr(fresh("b.h5"), "/meta", "step", 2, false);
  check_error([&] { io::load_checkpoint(dir / "b.h5"); }, "attribute /meta@step holds 2 values");
  set_array_attr(fresh("c.h5"), "/meta", "created", 100, true);
  check_error([&] { io::load_checkpoint(dir / "c.h5"); }, "attribute /meta@created holds 100 values");
  set_declared_dataset(fresh("d.h5"), "/model/transformer.wpe.weight",
                       {hsize_t{1} << 32, hsize_t{1} << 30});
  check_error([&] { io::load_checkpoint(dir / "d.h5"); },
              "dataset /model/transformer.wpe.weight declares shape (4294967296,1073741824): its "
              "size overflows");
  set_declared_dataset(fresh("e.h5"), "/model/transformer.wpe.weight", {hsize_t{1} << 19, 1024});
  check_error([&] { io::load_checkpoint(dir / "e.h5"); },
              "dataset /model/transformer.wpe.weight declares 2147483648 bytes (shape "
              "(524288,1024)) but stores 0");
  CHECK(fs::file_size(dir / "e.h5") < 1024 * 1024);
  fs::remove_all(dir);
}

namespace {

// Overwrites an existing one-value attribute, in HDF5's native `type` (v points to it).
void write_attr(const fs::path& file, const char* object, const char* name, hid_t type,
                const void* v) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t o = H5Oopen(f, object, H5P_DEFAULT);
  hid_t a = H5Aopen(o, name, H5P_DEFAULT);
  REQUIRE(H5Awrite(a, type, v) >= 0);
  H5Aclose(a), H5Oclose(o), H5Fclose(f);
}
void set_int_attr(const fs::path& file, const char* object, const char* name, int64_t v) {
  write_attr(file, object, name, H5T_NATIVE_INT64, &v);
}

void set_uint_attr(const fs::path& file, const char* object, const char* name, uint64_t v) {
  write_attr(file, object, name, H5T_NATIVE_UINT64, &v);
}

// Relabels a saved file as format `version`, with the content hash that version computes
// (FNV-1a 64 before 5): what an older attend wrote, as far as these fields go.
void relabel(const fs::path& file, io::CheckpointData d, int64_t version) {
  d.meta.format_version = version;
  set_int_attr(file, "/meta", "format_version", version);
  set_uint_attr(file, "/meta", "content_hash", io::content_hash(d));
}

// Adds 1 to the first value of a float dataset, rewritten through HDF5 (its checksum valid).
void bump_first_value(const fs::path& file, const char* dataset) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
  REQUIRE(d >= 0);
  hid_t space = H5Dget_space(d);
  std::vector<float> v(static_cast<size_t>(H5Sget_simple_extent_npoints(space)));
  REQUIRE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
  v[0] += 1.0f;
  REQUIRE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
  H5Sclose(space), H5Dclose(d), H5Fclose(f);
}

}  // namespace

TEST_CASE("a checkpoint is trusted only whole: every group hashed, links, slots, ties and meta") {
  // Regressions (adversarial L9, M4): /config was not hashed (n_layer = 10^6 built a huge
  // model before any check); a tied tensor stored twice, a negative step, an extra
  // optimizer slot and external links were accepted.
  fs::path dir = temp_dir("whole");
  Saved saved;
  nn::GPT& m = saved.m;
  io::CheckpointData& d = saved.d;
  io::save_checkpoint(dir / "good.h5", d);
  auto fresh = [&](const char* name) {
    fs::copy_file(dir / "good.h5", dir / name, fs::copy_options::overwrite_existing);
    return dir / name;
  };
  set_int_attr(fresh("config.h5"), "/config", "vocab_size", 1000000);
  check_error([&] { io::load_checkpoint(dir / "config.h5"); }, "config.h5: content hash mismatch");
  set_int_attr(fresh("rng.h5"), "/rng", "seed", 7);
  check_error([&] { io::load_checkpoint(dir / "rng.h5"); }, "rng.h5: content hash mismatch");
  // A tensor's values, rewritten with a valid checksum: the model's, the tied head's
  // (one object with the embedding), an optimizer moment's. The check reads the file a
  // tensor at a time; load and load without the optimizer refuse alike.
  for (const char* dataset : {"/model/transformer.h.1.attn.c_attn.weight", "/model/lm_head.weight",
                              "/optimizer/exp_avg_sq/transformer.wte.weight"}) {
    CAPTURE(dataset);
    bump_first_value(fresh("values.h5"), dataset);
    check_error([&] { io::load_checkpoint(dir / "values.h5"); }, "values.h5: content hash mismatch");
    check_error([&] { io::load_checkpoint_without_optimizer(dir / "values.h5"); },
                "values.h5: content hash mismatch");
  }
  CHECK(io::load_checkpoint_without_optimizer(fresh("values.h5")).meta.content_hash ==
        d.meta.content_hash);
  // Inconsistent /meta, hashed anew so that only the consistency check can refuse it.
  io::CheckpointData neg = d;
  neg.meta.step = -10, neg.optimizer.step = -10;
  io::save_checkpoint(dir / "neg.h5", neg);
  check_error([&] { io::load_checkpoint(dir / "neg.h5"); }, "neg.h5: /meta is inconsistent: step -10");
  io::CheckpointData lag = d;
  lag.optimizer.step = 3;
  io::save_checkpoint(dir / "lag.h5", lag);
  check_error([&] { io::load_checkpoint(dir / "lag.h5"); },
              "/optimizer step 3 differs from /meta step 7");
  // An extra optimizer slot.
  io::CheckpointData extra = d;
  extra.optimizer.tensors.emplace_back("exp_avg.ghost", zeros({2}));
  io::save_checkpoint(dir / "extra.h5", extra);
  const io::CheckpointData back = io::load_checkpoint(dir / "extra.h5");
  AdamW fresh_opt(m.named_parameters(), {});
  check_error(
      [&] {
        fresh_opt.load_state({back.optimizer.tensors.begin(), back.optimizer.tensors.end()}, 7);
      },
      "optimizer state: expected 56 tensors (exp_avg and exp_avg_sq of each parameter), got 57");
  // lm_head stored as its own tensor with other values: refused, not silently dropped.
  io::CheckpointData untied = d;
  for (auto& [name, t] : untied.model)
    if (name == "lm_head.weight") t = kernel::clone(t), t.data<float>()[0] += 1;
  nn::GPT m2(nn::GPTConfig{.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_kv_head = 1, .n_embd = 8, .dropout = 0.0, .bias = true}, 4);
  check_error(
      [&] {
        m2.load_state_dict({untied.model.begin(), untied.model.end()});
      },
      "lm_head.weight (tied to transformer.wte.weight, but its values differ)");
  // An external link in /model.
  {
    hid_t f = H5Fopen(fresh("ext.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(f >= 0);
    REQUIRE(H5Lcreate_external("other.h5", "/x", f, "/model/zz.external", H5P_DEFAULT,
                               H5P_DEFAULT) >= 0);
    H5Fclose(f);
  }
  check_error([&] { io::load_checkpoint(dir / "ext.h5"); },
              "/model/zz.external is a soft or external link");
  fs::remove_all(dir);
}

TEST_CASE("crafted HDF5: data outside the file (external storage, external and soft links) is refused") {
  const fs::path dir = test::temp_dir("h5_external");
  const std::string raw = (dir / "raw.bin").string(), file = (dir / "x.h5").string();
  { std::ofstream(raw, std::ios::binary) << std::string(64, '\0'); }
  {
    const hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(f >= 0);
    const hsize_t dims[1] = {4};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    // Raw data kept in another file (H5Pset_external), e.g. /dev/zero with any size.
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    REQUIRE(H5Pset_external(dcpl, raw.c_str(), 0, 16) >= 0);
    const hid_t d = H5Dcreate2(f, "/ext", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    REQUIRE(d >= 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    // A plain dataset, reached once directly and once through an external and a soft link.
    const hid_t p = H5Dcreate2(f, "/plain", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
    const float zeros[4] = {0, 0, 0, 0};
    REQUIRE(H5Dwrite(p, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros) >= 0);
    H5Dclose(p);
    REQUIRE(H5Lcreate_external(file.c_str(), "/plain", f, "/elink", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    REQUIRE(H5Lcreate_soft("/plain", f, "/slink", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Sclose(space);
    H5Fclose(f);
  }
  const io::h5::File f = io::h5::File::open(file);
  CHECK(f.read_tensor("/plain", DType::F32).numel() == 4);  // the control: stored inside
  auto refused = [&](const std::string& name, const std::string& why) {
    try {
      (void)f.read_tensor(name, DType::F32);
      FAIL("read ", name);
    } catch (const Error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(why) != std::string::npos, e.what());
    }
  };
  refused("/ext", "keeps its data in external files");
  refused("/elink", "is a soft or external link");
  refused("/slink", "is a soft or external link");
  fs::remove_all(dir);
}

TEST_CASE("format 2 files (no architecture in /config) load as the GPT-2 models they are") {
  // Version 3 records arch, norm_eps, hidden_dim, multiple_of, rope_theta, tie_embeddings
  // and sliding_window; a version-2 file has none of them and is a GPT-2.
  fs::path dir = temp_dir("format2");
  Saved saved;
  io::CheckpointData& d = saved.d;
  io::save_checkpoint(dir / "v2.h5", d);
  relabel(dir / "v2.h5", d, 2);
  const io::CheckpointData back = io::load_checkpoint(dir / "v2.h5");
  const TrainConfig c = from_values(back.config);
  CHECK(c.model.arch == "gpt2");
  CHECK(c.model.tie_embeddings);
  CHECK(c.model.sliding_window == 0);
  CHECK(c.model.hidden_dim == 0);
  for (int64_t v : {1, 6}) {
    set_int_attr(dir / "v2.h5", "/meta", "format_version", v);
    check_error([&] { io::load_checkpoint(dir / "v2.h5"); },
                "checkpoint format version " + std::to_string(v) +
                    " is not supported: this attend reads versions 2 to 5");
  }
  fs::remove_all(dir);
}

TEST_CASE("the content hash is XXH64 from format 5 and FNV-1a 64 before: older files load") {
  fs::path dir = temp_dir("hashkind");
  Saved saved;
  io::CheckpointData& d = saved.d;
  io::save_checkpoint(dir / "new.h5", d);
  CHECK(io::load_checkpoint(dir / "new.h5").meta.format_version == 5);
  // The two kinds differ on the same data, so a file's version picks one.
  io::CheckpointData old = d;
  old.meta.format_version = 4;
  CHECK(io::content_hash(old) != io::content_hash(d));
  // A version-4 file holds FNV-1a 64: it loads (both ways), and a changed value is caught.
  io::save_checkpoint(dir / "v4.h5", d);
  relabel(dir / "v4.h5", d, 4);
  CHECK(io::load_checkpoint(dir / "v4.h5").meta.format_version == 4);
  CHECK(io::load_checkpoint_without_optimizer(dir / "v4.h5").meta.step == d.meta.step);
  bump_first_value(dir / "v4.h5", "/model/transformer.h.1.attn.c_attn.weight");
  check_error([&] { io::load_checkpoint(dir / "v4.h5"); }, "v4.h5: content hash mismatch");
  // A version-5 file whose hash is FNV-1a's (or a version-4 file holding XXH64) is refused.
  io::save_checkpoint(dir / "mixed.h5", d);
  set_uint_attr(dir / "mixed.h5", "/meta", "content_hash", io::content_hash(old));
  check_error([&] { io::load_checkpoint(dir / "mixed.h5"); }, "mixed.h5: content hash mismatch");
  io::save_checkpoint(dir / "mixed4.h5", d);
  set_int_attr(dir / "mixed4.h5", "/meta", "format_version", 4);
  check_error([&] { io::load_checkpoint(dir / "mixed4.h5"); }, "mixed4.h5: content hash mismatch");
  // Resaving a loaded version-4 checkpoint writes format 5 with its XXH64.
  io::CheckpointData back = io::load_checkpoint(dir / "new.h5");
  back.meta.format_version = 4;
  io::save_checkpoint(dir / "again.h5", back);
  CHECK(io::load_checkpoint(dir / "again.h5").meta.format_version == 5);
  fs::remove_all(dir);
}

TEST_CASE("a Llama checkpoint records its architecture and stores an untied head on its own") {
  fs::path dir = temp_dir("llamack");
  TrainConfig tc;
  apply_preset(tc, "llama-char");
  tc.model.vocab_size = 11, tc.model.block_size = 8, tc.model.n_layer = 2, tc.model.n_head = 2;
  tc.model.n_kv_head = 1, tc.model.n_embd = 8, tc.model.hidden_dim = 12;
  tc.model.tie_embeddings = false, tc.model.sliding_window = 3, tc.model.rope_theta = 500000.0;
  nn::GPT m(tc.model, 3);
  AdamW opt(m.named_parameters(), {});
  io::CheckpointData d = make(m, opt);
  d.config = to_values(tc);
  io::save_checkpoint(dir / "l.h5", d);
  const io::CheckpointData back = io::load_checkpoint(dir / "l.h5");
  CHECK(from_values(back.config).model == tc.model);
  std::map<std::string, Tensor> state(back.model.begin(), back.model.end());
  REQUIRE(state.count("lm_head.weight") == 1);
  CHECK(state.at("lm_head.weight").impl() != state.at("transformer.wte.weight").impl());
  CHECK(test::bit_identical(state.at("lm_head.weight"), m.lm_head->weight));
  nn::GPT again(tc.model, 9);
  again.load_state_dict(state);
  CHECK(test::bit_identical(again.lm_head->weight, m.lm_head->weight));
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint keeps a tokenizer's pattern and ignore_merges, under its content hash") {
  fs::path dir = temp_dir("ckpt_pattern");
  Saved saved;
  io::CheckpointData& d = saved.d;
  d.tokenizer.pattern = R"(\p{N}{1,3}|\p{L}+|\s+|.)";
  d.tokenizer.ignore_merges = true;
  io::save_checkpoint(dir / "p.h5", d);
  const io::CheckpointData back = io::load_checkpoint(dir / "p.h5");
  CHECK(back.tokenizer.pattern == d.tokenizer.pattern);
  CHECK(back.tokenizer.ignore_merges);
  CHECK(data::tokenizer_hash(back.tokenizer) == data::tokenizer_hash(d.tokenizer));
  set_int_attr(dir / "p.h5", "/tokenizer", "ignore_merges", 0);
  check_error([&] { io::load_checkpoint(dir / "p.h5"); }, "p.h5: content hash mismatch");
  // Without them the file has neither attribute (what older readers and hashes expect).
  Saved plain;
  io::save_checkpoint(dir / "q.h5", plain.d);
  const io::CheckpointData q = io::load_checkpoint(dir / "q.h5");
  CHECK(q.tokenizer.pattern.empty());
  CHECK(!q.tokenizer.ignore_merges);
  hid_t f = H5Fopen((dir / "q.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  CHECK(H5Aexists_by_name(f, "/tokenizer", "pattern", H5P_DEFAULT) == 0);
  CHECK(H5Aexists_by_name(f, "/tokenizer", "ignore_merges", H5P_DEFAULT) == 0);
  H5Fclose(f);
  fs::remove_all(dir);
}

TEST_CASE("loading without the optimizer: the model alone, and still refused when any part is damaged") {
  fs::path dir = temp_dir("no_optimizer");
  Saved s;
  io::save_checkpoint(dir / "c.h5", s.d);
  const io::CheckpointData full = io::load_checkpoint(dir / "c.h5");
  const io::CheckpointData lean = io::load_checkpoint_without_optimizer(dir / "c.h5");
  REQUIRE(!full.optimizer.tensors.empty());
  CHECK(lean.optimizer.tensors.empty());
  CHECK(lean.optimizer.step == 7);
  REQUIRE(lean.model.size() == full.model.size());
  for (size_t i = 0; i < lean.model.size(); ++i) {
    INFO(lean.model[i].first);
    CHECK(lean.model[i].first == full.model[i].first);
    CHECK(test::bit_identical(lean.model[i].second, full.model[i].second));
  }
  // Damage anywhere (two thirds of the file is AdamW's moments, which are not returned) is
  // refused all the same: the content hash covers every group.
  nn::GPT big(nn::GPTConfig{.vocab_size = 101, .block_size = 16, .n_layer = 2, .n_head = 2,
                            .n_kv_head = 2, .n_embd = 32, .dropout = 0.0, .bias = true},
              3);
  AdamW opt(big.named_parameters(), {});
  io::CheckpointData d = make(big, opt);
  io::save_checkpoint(dir / "good.h5", d);
  const size_t size = fs::file_size(dir / "good.h5");
  for (double at : {0.3, 0.5, 0.7, 0.9}) {
    CAPTURE(at);
    fs::copy_file(dir / "good.h5", dir / "bad.h5", fs::copy_options::overwrite_existing);
    flip_byte(dir / "bad.h5", static_cast<size_t>(at * static_cast<double>(size)));
    check_error([&] { io::load_checkpoint_without_optimizer(dir / "bad.h5"); }, "bad.h5: ");
  }
  fs::remove_all(dir);
}

TEST_CASE("a bf16 tensor is written as its f32 values a chunk of rows at a time, and hashes as them") {
  // A frozen bf16 base (train --base_weights bf16) goes to the file as f32, widened 1 MiB
  // of rows at a time (here 700 rows of 1000: three chunks, the last one short); the
  // content hash, widened a block at a time too, must equal that of the f32 values.
  fs::path dir = temp_dir("bf16_chunks");
  Generator g(4);
  const Tensor values = kernel::cast(kernel::cast(normal({700, 1000}, 0.0, 1.0, g), DType::BF16),
                                     DType::F32);  // exactly representable in bf16
  const Tensor bits = kernel::cast(values, DType::BF16);
  REQUIRE(bits.dtype() == DType::BF16);
  {
    io::h5::File f = io::h5::File::create((dir / "t.h5").string());
    f.write_tensor("/w", bits);
    f.close();
  }
  const io::h5::File f = io::h5::File::open((dir / "t.h5").string());
  CHECK(test::bit_identical(f.read_tensor("/w", DType::F32), values));
  Saved a, b;
  a.d.model = {{"w", values}};
  b.d.model = {{"w", bits}};
  CHECK(io::content_hash(a.d) == io::content_hash(b.d));
  const Tensor doubled = kernel::binary(kernel::Binary::Mul, values, scalar_tensor(2.0));
  b.d.model = {{"w", kernel::cast(doubled, DType::BF16)}};
  CHECK(io::content_hash(a.d) != io::content_hash(b.d));
  fs::remove_all(dir);
}

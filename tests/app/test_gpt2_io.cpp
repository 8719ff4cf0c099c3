// GPT-2 import and export (train/gpt2_io.h) from the command line: export -> import is
// bit-identical, an independent reader (python3 + numpy, no attend code) loads the export
// and its own GPT-2 forward matches attend's logits, and what GPT-2's layout cannot hold
// is refused.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "run_cmd.h"
#include "test_util.h"
#include "io/checkpoint.h"
#include "train/model_io.h"
#include "train/run_dir.h"

using namespace attend;
namespace fs = std::filesystem;

namespace {

using test::Run;
Run cli(const std::string& args) { return test::attend_cmd(args); }
Run run(const std::string& cmd) { return test::shell(cmd); }

using test::trained_run;

}  // namespace

TEST_CASE("export then import is bit-identical, and sample agrees") {
  const fs::path dir = test::temp_dir("gpt2_io");
  const fs::path r = trained_run(dir, "");
  Run e = cli("export --checkpoint " + r.string() + " --out " + (dir / "hf").string());
  REQUIRE_MESSAGE(e.code == 0, e.out);
  CHECK(fs::exists(dir / "hf" / "model.safetensors"));
  CHECK(fs::exists(dir / "hf" / "config.json"));
  Run i = cli("import --from " + (dir / "hf").string() + " --out " + (dir / "back").string());
  REQUIRE_MESSAGE(i.code == 0, i.out);
  const io::CheckpointData a = train::newest_valid_checkpoint(r).data;
  const io::CheckpointData b = train::newest_valid_checkpoint(dir / "back").data;
  REQUIRE(a.model.size() == b.model.size());
  for (size_t k = 0; k < a.model.size(); ++k) {
    INFO(a.model[k].first);
    CHECK(a.model[k].first == b.model[k].first);
    CHECK(test::bit_identical(a.model[k].second, b.model[k].second));
  }
  CHECK(a.tokenizer.tokens == b.tokenizer.tokens);
  const std::string s = " --prompt So --max_new_tokens 30 --seed 4";
  CHECK(cli("sample --checkpoint " + r.string() + s).out ==
        cli("sample --checkpoint " + (dir / "back").string() + s).out);
  // The imported run can be trained on (its AdamW state starts fresh at step 0).
  CHECK(train::newest_valid_checkpoint(dir / "back").data.meta.step == 0);
  fs::remove_all(dir);
}

TEST_CASE("an independent NumPy GPT-2 reads the export and matches attend's logits") {
  if (run("/usr/bin/python3 -c 'import numpy'").code != 0) {
    ATTEND_SKIP("python3 with numpy not found (apt-get install python3-numpy)");
  }
  const fs::path dir = test::temp_dir("gpt2_numpy");
  const fs::path r = trained_run(dir, "");
  REQUIRE(cli("export --checkpoint " + r.string() + " --out " + (dir / "hf").string()).code == 0);
  // attend's logits for a fixed sequence, as raw f32.
  train::LoadedModel m = train::load_model(r.string());
  const std::vector<double> ids = {3, 7, 1, 0, 12, 5, 9, 2, 11, 4};
  Tensor logits = m.model->forward(tensor(ids, {1, 10}, DType::I64)).logits;  // (1, 10, V)
  std::vector<float> v = logits.to_vector<float>();
  std::ofstream(dir / "logits.f32", std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  std::ofstream(dir / "gpt2.py") << R"PY(
import json, struct, sys, numpy as np
d = sys.argv[1]
raw = open(d + '/model.safetensors', 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
W = {}
for name, e in header.items():
    if name == '__metadata__': continue
    assert e['dtype'] == 'F32', e
    b, end = e['data_offsets']
    W[name.replace('transformer.', '')] = np.frombuffer(data[b:end], dtype='<f4').reshape(e['shape']).astype(np.float64)
cfg = json.load(open(d + '/config.json'))
C, H, L = cfg['n_embd'], cfg['n_head'], cfg['n_layer']
def ln(x, w, b):
    m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + cfg['layer_norm_epsilon']) * w + b
def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
ids = [int(t) for t in sys.argv[2].split(',')]
T = len(ids)
x = W['wte.weight'][ids] + W['wpe.weight'][:T]
for l in range(L):
    p = 'h.%d.' % l
    a = ln(x, W[p + 'ln_1.weight'], W[p + 'ln_1.bias'])
    qkv = a @ W[p + 'attn.c_attn.weight'] + W[p + 'attn.c_attn.bias']   # Conv1D: (in, out)
    q, k, v = np.split(qkv, 3, axis=-1)
    hs = C // H
    q, k, v = [t.reshape(T, H, hs).transpose(1, 0, 2) for t in (q, k, v)]
    s = q @ k.transpose(0, 2, 1) / np.sqrt(hs)
    s = np.where(np.tril(np.ones((T, T))) == 1, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True)); w /= w.sum(-1, keepdims=True)
    y = (w @ v).transpose(1, 0, 2).reshape(T, C)
    x = x + y @ W[p + 'attn.c_proj.weight'] + W[p + 'attn.c_proj.bias']
    m = ln(x, W[p + 'ln_2.weight'], W[p + 'ln_2.bias'])
    x = x + gelu(m @ W[p + 'mlp.c_fc.weight'] + W[p + 'mlp.c_fc.bias']) @ W[p + 'mlp.c_proj.weight'] + W[p + 'mlp.c_proj.bias']
x = ln(x, W['ln_f.weight'], W['ln_f.bias'])
logits = x @ W['wte.weight'].T
ours = np.fromfile(sys.argv[3], dtype='<f4').reshape(logits.shape)
err = np.abs(logits - ours).max()
print('max abs difference %.3g' % err)
assert err < 1e-4, err
print('numpy ok')
)PY";
  Run py = run("/usr/bin/python3 " + (dir / "gpt2.py").string() + " " + (dir / "hf").string() +
               " 3,7,1,0,12,5,9,2,11,4 " + (dir / "logits.f32").string());
  CAPTURE(py.out);
  CHECK(py.code == 0);
  CHECK(py.out.find("numpy ok") != std::string::npos);
  MESSAGE(py.out);
  fs::remove_all(dir);
}

TEST_CASE("a PyTorch GPT-2 built from torch.nn loads the export and matches attend") {
  if (run("/usr/bin/python3 -c 'import torch, numpy'").code != 0) {
    ATTEND_SKIP("python3 with torch not found (apt-get install python3-torch)");
  }
  const fs::path dir = test::temp_dir("gpt2_torch");
  const fs::path r = trained_run(dir, "");
  REQUIRE(cli("export --checkpoint " + r.string() + " --out " + (dir / "hf").string()).code == 0);
  train::LoadedModel m = train::load_model(r.string());
  m.model->keep_logits = true;
  const std::vector<double> ids = {3, 7, 1, 0, 12, 5, 9, 2, 11, 4};
  const std::vector<double> next = {7, 1, 0, 12, 5, 9, 2, 11, 4, 6};
  nn::GPTOutput out =
      m.model->forward(tensor(ids, {1, 10}, DType::I64), tensor(next, {1, 10}, DType::I64));
  std::vector<float> v = out.logits.to_vector<float>();
  std::ofstream(dir / "logits.f32", std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  // A model of torch.nn modules (Linear, LayerNorm, Embedding, GELU(tanh)); the weights are
  // loaded into it from the safetensors bytes by name, with GPT-2's Conv1D layout
  // transposed for nn.Linear, and strict=True so a missing or extra name fails.
  std::ofstream(dir / "gpt2_torch.py") << R"PY(
import json, struct, sys, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.set_default_dtype(torch.float64)
d = sys.argv[1]
raw = open(d + '/model.safetensors', 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n]); data = raw[8 + n:]
cfg = json.load(open(d + '/config.json'))
C, H, L, V, P = cfg['n_embd'], cfg['n_head'], cfg['n_layer'], cfg['vocab_size'], cfg['n_positions']
eps = cfg['layer_norm_epsilon']
class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln_1, s.ln_2 = nn.LayerNorm(C, eps=eps), nn.LayerNorm(C, eps=eps)
        s.c_attn, s.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.c_fc, s.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        s.gelu = nn.GELU(approximate='tanh')
    def forward(s, x):
        B, T, _ = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(C, dim=2)
        q, k, v = [t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / (C // H) ** 0.5
        att = att.masked_fill(torch.ones(T, T).tril() == 0, float('-inf')).softmax(-1)
        x = x + s.attn_proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + s.mlp_proj(s.gelu(s.c_fc(s.ln_2(x))))
class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(P, C)
        s.h = nn.ModuleList([Block() for _ in range(L)])
        s.ln_f = nn.LayerNorm(C, eps=eps)
    def forward(s, idx):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1]))
        for b in s.h: x = b(x)
        return s.ln_f(x) @ s.wte.weight.T
rename = {'attn.c_attn': 'c_attn', 'attn.c_proj': 'attn_proj', 'mlp.c_fc': 'c_fc', 'mlp.c_proj': 'mlp_proj'}
state = {}
for name, e in header.items():
    if name == '__metadata__': continue
    assert e['dtype'] == 'F32', e
    b, end = e['data_offsets']
    t = torch.from_numpy(np.frombuffer(data[b:end], dtype='<f4').reshape(e['shape']).astype(np.float64))
    name = name.replace('transformer.', '')
    for a, z in rename.items():
        if a in name:
            name = name.replace(a, z)
            if name.endswith('.weight'): t = t.T.contiguous()   # Conv1D (in, out) -> Linear (out, in)
    state[name] = t
model = GPT(); model.load_state_dict(state, strict=True)
ids = torch.tensor([[int(t) for t in sys.argv[2].split(',')]])
nxt = torch.tensor([int(t) for t in sys.argv[3].split(',')])
with torch.no_grad():
    logits = model(ids)
ours = torch.from_numpy(np.fromfile(sys.argv[4], dtype='<f4').astype(np.float64)).view(logits.shape)
err = (logits - ours).abs().max().item()
loss = F.cross_entropy(logits[0], nxt).item()
print('torch %s: max abs logit difference %.3g, loss %.9f vs attend %s' % (torch.__version__, err, loss, sys.argv[5]))
assert err < 1e-4, err
assert abs(loss - float(sys.argv[5])) < 1e-5
print('torch ok')
)PY";
  std::ostringstream loss_text;
  loss_text.precision(9);
  loss_text << out.loss.item();
  const std::string loss = loss_text.str();
  Run py = run("/usr/bin/python3 " + (dir / "gpt2_torch.py").string() + " " +
               (dir / "hf").string() + " 3,7,1,0,12,5,9,2,11,4 7,1,0,12,5,9,2,11,4,6 " +
               (dir / "logits.f32").string() + " " + loss);
  CAPTURE(py.out);
  CHECK(py.code == 0);
  CHECK(py.out.find("torch ok") != std::string::npos);
  MESSAGE(py.out);
  fs::remove_all(dir);
}

TEST_CASE("what GPT-2's layout cannot hold is refused, and bad weight files are named") {
  const fs::path dir = test::temp_dir("gpt2_refuse");
  const fs::path gqa = trained_run(dir, " --n_kv_head 1");
  Run e = cli("export --checkpoint " + gqa.string() + " --out " + (dir / "hf").string());
  CHECK(e.code == 1);
  CHECK(e.out.find("(GQA/MQA); GPT-2's layout has one key/value head per query head") !=
        std::string::npos);
  fs::create_directories(dir / "bad");
  std::ofstream(dir / "bad" / "config.json")
      << R"({"n_layer": 1, "n_head": 2, "n_embd": 8, "n_positions": 4, "vocab_size": 5})";
  std::ofstream(dir / "bad" / "model.safetensors") << std::string("\xff\xff\xff\xff\0\0\0\0", 8);
  Run b = cli("import --from " + (dir / "bad").string() + " --out " + (dir / "x").string());
  CHECK(b.code == 1);
  CHECK(b.out.find("model.safetensors: header length") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE(
    "finetune: --init_from an exported and re-imported model lowers the loss on a new corpus") {
  const fs::path dir = test::temp_dir("finetune");
  const fs::path r = trained_run(dir, "");
  REQUIRE(cli("export --checkpoint " + r.string() + " --out " + (dir / "hf").string()).code == 0);
  REQUIRE(cli("import --from " + (dir / "hf").string() + " --out " + (dir / "imp").string()).code ==
          0);
  // A new corpus in the same alphabet.
  std::string text;
  for (int i = 0; i < 200; ++i) text += "we are so wan, so shaken with care.\n";
  std::ofstream(dir / "new.txt") << text;
  Run f = cli("train --init_from " + (dir / "imp").string() + " --data " +
              (dir / "new.txt").string() + " --out " + (dir / "ft").string() +
              " --block_size 8 --batch_size 4 --eval_iters 4 --max_iters 40 --eval_interval 40"
              " --learning_rate 3e-3 --warmup_iters 0");
  REQUIRE_MESSAGE(f.code == 0, f.out);
  CHECK(f.out.find("finetuning from") != std::string::npos);
  const io::CheckpointData d = train::newest_valid_checkpoint(dir / "ft").data;
  CHECK(d.meta.step == 40);
  std::map<std::string, io::ConfigValue> cfg(d.config.begin(), d.config.end());
  CHECK(std::get<std::string>(cfg.at("init_from")).find("imp") != std::string::npos);
  CHECK(std::get<int64_t>(cfg.at("block_size")) == 8);  // the position table cropped
  // The loss at step 0 (the imported weights) and after 40 steps, from metrics.csv.
  const auto rows = train::read_metrics(dir / "ft" / "metrics.csv");
  REQUIRE(rows.size() >= 2);
  CHECK(rows.back().val_loss < rows.front().val_loss - 0.2);
  MESSAGE("val loss ", rows.front().val_loss, " -> ", rows.back().val_loss);
  // What would change the model's meaning is refused, naming both values.
  Run layers = cli("train --init_from " + (dir / "imp").string() + " --data " +
                   (dir / "new.txt").string() + " --out " + (dir / "x").string() + " --n_layer 3");
  CHECK(layers.code == 1);
  CHECK(layers.out.find("n_layer (checkpoint 2, now 3)") != std::string::npos);
  Run tok =
      cli("train --init_from " + (dir / "imp").string() + " --data " + (dir / "new.txt").string() +
          " --out " + (dir / "y").string() + " --tokenizer bpe:300");
  CHECK(tok.code == 1);
  CHECK(tok.out.find("--tokenizer bpe:300: the --init_from checkpoint's tokenizer is char") !=
        std::string::npos);
  REQUIRE(cli("prepare --data " + (dir / "new.txt").string() + " --out " + (dir / "bpe").string() +
              " --tokenizer bpe:260")
              .code == 0);
  Run prep = cli("train --init_from " + (dir / "imp").string() + " --data " +
                 (dir / "bpe").string() + " --out " + (dir / "z").string());
  CHECK(prep.code == 1);
  CHECK(prep.out.find("prepared with tokenizer bpe:") != std::string::npos);
  fs::remove_all(dir);
}

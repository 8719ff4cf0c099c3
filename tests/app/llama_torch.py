#!/usr/bin/python3
"""A Llama/Mistral in PyTorch, written here from torch.nn modules and Hugging Face's
published formulas (modeling_llama / modeling_mistral): RMSNorm, rotate_half RoPE,
repeat_kv for GQA, SwiGLU, a causal mask with Mistral's sliding window (a query at i sees
keys j with i - W < j <= i). Its parameter names are Hugging Face's, so a folder loads
with load_state_dict(strict=True): a missing, extra or misshapen tensor fails. No attend
code is used; safetensors is read and written from its published layout (8-byte header
length, JSON header, raw little-endian bytes).

    llama_torch.py check DIR IDS NEXT_IDS ATTEND_LOGITS.f32 ATTEND_LOSS
        DIR (single file or shards with model.safetensors.index.json; F32, BF16 or F16)
        must give attend's logits (to 1e-4) and loss (to 1e-5).
    llama_torch.py write DIR VOCAB [WINDOW]
        writes a random GQA Llama (a Mistral with WINDOW) (Llama 3's rope_theta, an intermediate_size off Llama's
        rule, untied head) in BF16 as two shards with an index, as PyTorch models are
        published; `check` then scores attend's import of it.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x, groups):  # (B, KV, T, HS) -> (B, KV * groups, T, HS)
    B, KV, T, HS = x.shape
    return x[:, :, None].expand(B, KV, groups, T, HS).reshape(B, KV * groups, T, HS)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, self.H = cfg["hidden_size"], cfg["num_attention_heads"]
        self.KV = cfg.get("num_key_value_heads") or self.H
        self.HS = C // self.H
        self.q_proj = nn.Linear(C, self.H * self.HS, bias=False)
        self.k_proj = nn.Linear(C, self.KV * self.HS, bias=False)
        self.v_proj = nn.Linear(C, self.KV * self.HS, bias=False)
        self.o_proj = nn.Linear(self.H * self.HS, C, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.HS).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.KV, self.HS).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.HS).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, self.H // self.KV), repeat_kv(v, self.H // self.KV)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.HS)
        y = F.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.H * self.HS))


class MLP(nn.Module):
    def __init__(self, C, I):
        super().__init__()
        self.gate_proj = nn.Linear(C, I, bias=False)
        self.up_proj = nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(C, eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.mlp = MLP(C, cfg["intermediate_size"])

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Body(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, idx):
        cfg, T = self.cfg, idx.shape[1]
        HS = cfg["hidden_size"] // cfg["num_attention_heads"]
        inv_freq = 1.0 / cfg["rope_theta"] ** (torch.arange(0, HS, 2) / HS)
        freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        mask = j <= i
        if cfg.get("sliding_window"):
            mask &= j > i - cfg["sliding_window"]
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x, emb.cos(), emb.sin(), mask)
        return self.lm_head(self.model.norm(x))


DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2)}


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data, out = json.loads(raw[8:8 + n]), raw[8 + n:], {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        a = np.frombuffer(data[b:end], dtype=DTYPES[e["dtype"]][0])
        if e["dtype"] == "BF16":  # the high half of an f32
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(a.astype(np.float64).reshape(e["shape"]))
    return out


def read_folder(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    state = {}
    for f in sorted(set(json.load(open(index))["weight_map"].values())):
        state.update(read_safetensors(os.path.join(d, f)))
    return state


def write_safetensors(path, tensors):  # name -> bf16 torch tensor
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = t.contiguous().view(torch.int16).numpy().astype("<i2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def check(d, ids, nxt, logits_file, attend_loss):
    cfg = json.load(open(os.path.join(d, "config.json")))
    assert cfg["hidden_act"] == "silu" and cfg["model_type"] in ("llama", "mistral"), cfg
    model = LlamaForCausalLM(cfg)
    state = read_folder(d)
    if cfg.get("tie_word_embeddings", False):
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    model.load_state_dict(state, strict=True)
    ids = torch.tensor([[int(t) for t in ids.split(",")]])
    nxt = torch.tensor([int(t) for t in nxt.split(",")])
    with torch.no_grad():
        logits = model(ids)
    ours = torch.from_numpy(np.fromfile(logits_file, dtype="<f4").astype(np.float64))
    err = (logits - ours.view(logits.shape)).abs().max().item()
    scale = max(1.0, logits.abs().max().item())
    loss = F.cross_entropy(logits[0], nxt).item()
    print("torch %s, %s KV %d/%d window %s: max abs logit difference %.3g (largest logit %.3g), "
          "loss %.9f vs attend %s"
          % (torch.__version__, cfg["model_type"], cfg["num_key_value_heads"],
             cfg["num_attention_heads"], cfg.get("sliding_window"), err, scale, loss, attend_loss))
    # attend computes in f32, this model in f64: f32 rounding through two layers of random
    # weights is ~1e-6 of the largest logit (measured 1e-8..1.3e-6); a wrong RoPE pair
    # order, a missing RoPE or a window one key off moves them by 1e-3 or more.
    assert err < 1e-5 * scale, err
    assert abs(loss - float(attend_loss)) < 1e-5 * max(1.0, loss)
    print("torch ok")


def write(d, vocab, window):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "vocab_size": vocab, "hidden_size": 32, "intermediate_size": 72,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    if window:
        cfg.update({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                    "sliding_window": window})
    torch.manual_seed(7)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.2 * torch.randn_like(p))
    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    names = list(state)
    shards = [names[:len(names) // 2], names[len(names) // 2:]]
    os.makedirs(d, exist_ok=True)
    weight_map = {}
    for s, part in enumerate(shards):
        f = "model-%05d-of-%05d.safetensors" % (s + 1, len(shards))
        write_safetensors(os.path.join(d, f), {k: state[k] for k in part})
        weight_map.update({k: f for k in part})
    total = sum(t.numel() * 2 for t in state.values())
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=2)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    print("wrote %d bf16 tensors in %d shards" % (len(state), len(shards)))


if __name__ == "__main__":
    if sys.argv[1] == "check":
        check(*sys.argv[2:7])
    else:
        write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 0)

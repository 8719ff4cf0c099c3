#!/usr/bin/python3
"""PyTorch twin of attend's models for speed comparisons (not a test, not in CI).

The same models as nn::GPT: GPT-2's block (configs A, B, C: pre-LayerNorm, causal
self-attention, GELU(tanh) MLP, tied LM head, biases) and a Llama (configs D, E: RMSNorm,
RoPE on q and k, SwiGLU MLP, no biases, tied head), written from torch.nn modules, and the
same training step as train::train_step: forward, cross-entropy, backward, global-norm
clipping at 1.0, AdamW (weight decay 0.1 on matrices and embeddings). Same configs as
bench_train. Prints ms/step (median of STEPS after two warm-up steps) and tokens/s.

    bench/torch_twin.py [STEPS] [A|B|B256|C|D|E]... [--threads N] [--lora R]

--lora R: the twin of `attend train --init_from X --lora_rank R` (q and v, alpha 16): every
weight frozen, adapters y += (16 / R) (x A^T) B^T on the query and value rows (GPT-2's fused
c_attn: the two deltas in their rows; a Llama's q and v), AdamW and clipping over the
adapters only. B256 is GPT-2 124M at T 256, B 4: bench/bench_lora.sh's shape.
"""
import math
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    if __name__ != "__main__":
        raise
    print("torch_twin: python3-torch not installed (apt-get install python3-torch); skipped")
    sys.exit(77)

CONFIGS = {  # vocab, block (T), layers, heads, channels, dropout, batch
    "C": (65, 64, 2, 4, 128, 0.0, 16),
    "A": (65, 256, 6, 6, 384, 0.2, 8),
    "B": (50304, 64, 12, 12, 768, 0.0, 4),
    "B256": (50257, 256, 12, 12, 768, 0.0, 4),
}
LLAMAS = {  # vocab, block (T), layers, heads, channels, MLP hidden, batch
    "D": (65, 64, 4, 4, 128, 352, 12),  # llama-char
    "E": (4096, 256, 6, 6, 288, 768, 4),  # stories15m with a 4096-token BPE
}


class Block(nn.Module):
    def __init__(self, C, H, p, eps=1e-5):
        super().__init__()
        self.H, self.p = H, p
        self.ln_1, self.ln_2 = nn.LayerNorm(C, eps=eps), nn.LayerNorm(C, eps=eps)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.drop = nn.Dropout(p)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = [t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        att = self.drop(att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.drop(self.attn_proj(y))
        return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))


class GPT(nn.Module):
    """GPT-2 with nanoGPT's layout; tests/app/gpt2_torch.py loads attend's export into it
    (state_dict names: wte, wpe, h.{i}.{ln_1, c_attn, attn_proj, ln_2, c_fc, mlp_proj},
    ln_f; the LM head is wte)."""

    def __init__(self, V, T, L, H, C, p, eps=1e-5):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.drop = nn.Dropout(p)
        self.h = nn.ModuleList([Block(C, H, p, eps) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=eps)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)), persistent=False)

    def logits(self, idx):
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1])))
        for b in self.h:
            x = b(x, self.mask)
        return self.ln_f(x) @ self.wte.weight.T

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):  # x (B, H, T, HS), pairs (2i, 2i+1) as attend turns them
    xe, xo = x[..., 0::2], x[..., 1::2]
    return torch.stack((xe * cos - xo * sin, xe * sin + xo * cos), -1).flatten(-2)


class LlamaBlock(nn.Module):
    def __init__(self, C, H, hidden):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = RMSNorm(C), RMSNorm(C)
        self.q, self.k, self.v = (nn.Linear(C, C, bias=False) for _ in range(3))
        self.o = nn.Linear(C, C, bias=False)
        self.gate, self.up = nn.Linear(C, hidden, bias=False), nn.Linear(C, hidden, bias=False)
        self.down = nn.Linear(hidden, C, bias=False)

    def forward(self, x, mask, cos, sin):
        B, T, C = x.shape
        h = self.ln_1(x)
        q, k, v = [t(h).view(B, T, self.H, C // self.H).transpose(1, 2) for t in (self.q, self.k, self.v)]
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(-1)
        x = x + self.o((att @ v).transpose(1, 2).contiguous().view(B, T, C))
        h = self.ln_2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, V, T, L, H, C, hidden, theta=10000.0):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.h = nn.ModuleList([LlamaBlock(C, H, hidden) for _ in range(L)])
        self.ln_f = RMSNorm(C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)), persistent=False)
        HS = C // H
        freq = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
        self.register_buffer("cos", ang.cos().float())
        self.register_buffer("sin", ang.sin().float())

    def forward(self, idx, targets):
        x = self.wte(idx)
        T = idx.shape[1]
        for b in self.h:
            x = b(x, self.mask, self.cos[:T], self.sin[:T])
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class LoraRows(nn.Module):
    """A frozen Linear with LoRA adapters on row ranges of its output (PEFT's formula)."""

    def __init__(self, base, ranges, R, alpha=16.0):
        super().__init__()
        self.base, self.ranges, self.scale = base, ranges, alpha / R
        inn = base.in_features
        self.A = nn.ParameterList(
            [nn.Parameter(torch.empty(R, inn).uniform_(-1 / math.sqrt(inn), 1 / math.sqrt(inn)))
             for _ in ranges])
        self.B = nn.ParameterList([nn.Parameter(torch.zeros(hi - lo, R)) for lo, hi in ranges])

    def forward(self, x):
        y = self.base(x)
        parts, at = [], 0
        for (lo, hi), A, B in zip(self.ranges, self.A, self.B):
            if lo > at:
                parts.append(y[..., at:lo])
            parts.append(y[..., lo:hi] + self.scale * ((x @ A.t()) @ B.t()))
            at = hi
        if at < y.shape[-1]:
            parts.append(y[..., at:])
        return torch.cat(parts, -1)


def add_lora(model, R):
    for p in model.parameters():
        p.requires_grad_(False)
    for b in model.h:
        if isinstance(b, LlamaBlock):
            b.q = LoraRows(b.q, [(0, b.q.out_features)], R)
            b.v = LoraRows(b.v, [(0, b.v.out_features)], R)
        else:
            C = b.c_attn.in_features
            b.c_attn = LoraRows(b.c_attn, [(0, C), (2 * C, 3 * C)], R)


def bench(name, steps):
    torch.manual_seed(1)
    if name in LLAMAS:
        V, T, L, H, C, hidden, B = LLAMAS[name]
        model = Llama(V, T, L, H, C, hidden)
    else:
        V, T, L, H, C, p, B = CONFIGS[name]
        model = GPT(V, T, L, H, C, p)
    model.train()
    if LORA:
        add_lora(model, LORA)
    trained = [q for q in model.parameters() if q.requires_grad]
    decay = [q for q in trained if q.dim() >= 2]
    rest = [q for q in trained if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.95))
    data = torch.randint(0, V, (100000,))
    times = []
    for s in range(steps + 2):
        t0 = time.perf_counter()
        ix = torch.randint(0, len(data) - T - 1, (B,))
        x = torch.stack([data[i:i + T] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + T] for i in ix])
        if BF16:  # PyTorch's mixed precision on CPUs: matmuls in bf16 (oneDNN), master weights f32
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(x, y)
        else:
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if s >= 2:
            times.append(dt * 1000)
    times.sort()
    med = times[len(times) // 2]
    params = sum(q.numel() for q in model.parameters())
    print("%-4s %12d %4d %5d %10.1f %12.0f" % (name, params, B, T, med, B * T / (med / 1000)))
    sys.stdout.flush()


BF16 = False
LORA = 0


def main():
    global BF16, LORA
    args = [a for a in sys.argv[1:]]
    if "--lora" in args:
        i = args.index("--lora")
        LORA = int(args[i + 1])
        del args[i:i + 2]
    if "--bf16" in args:
        BF16 = True
        args.remove("--bf16")
    threads = 2
    if "--threads" in args:
        i = args.index("--threads")
        threads = int(args[i + 1])
        del args[i:i + 2]
    steps = int(args[0]) if args else 10
    names = args[1:] or ["C", "A", "B"]
    torch.set_num_threads(threads)
    print("torch %s twin: threads %d, %d timed steps after 2 warm-up, median%s" %
          (torch.__version__, torch.get_num_threads(), steps,
           (", torch.autocast(cpu, bfloat16)" if BF16 else "") +
          (", LoRA R %d on q and v" % LORA if LORA else "")))
    print("%-4s %12s %4s %5s %10s %12s" % ("cfg", "params", "B", "T", "ms/step", "tokens/s"))
    for n in names:
        bench(n, steps)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""nanoGPT's CPU recipe in PyTorch, the twin of bench/train_recipe.sh (not a test, not in CI).

The same run as `attend train --preset cpu-char` with train_recipe.sh's evaluation settings:
characters of the corpus as tokens (sorted), the first 90% to train and the rest to
validate, 4 layers, 4 heads, C 128, block 64, batch 12, dropout 0, AdamW lr 1e-3 (betas
0.9, 0.99, weight decay 0.1 on matrices and embeddings), 100 warmup steps, cosine to 1e-4 at
step 2000, clipping at 1.0, 2000 steps; the mean loss of 200 batches of each split every
500 steps and at the end. The model is bench/torch_twin.py's GPT. Random batches come from
torch's generator (attend draws its own from Philox: the same recipe, other batches).
Prints the final val loss and the wall time, evaluation included.

    bench/torch_recipe.py TEXT [--threads N] [--iters N]
"""
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    import torch.nn.functional as F
    from torch_twin import GPT
except ImportError:
    print("torch_recipe: python3-torch not installed (apt-get install python3-torch); skipped")
    sys.exit(77)


def main():
    args = sys.argv[1:]
    threads, iters = 2, 2000
    for flag in ("--threads", "--iters"):
        if flag in args:
            i = args.index(flag)
            if flag == "--threads":
                threads = int(args[i + 1])
            else:
                iters = int(args[i + 1])
            del args[i:i + 2]
    if not args:
        sys.exit("usage: torch_recipe.py TEXT [--threads N] [--iters N]")
    torch.set_num_threads(threads)
    start = time.perf_counter()
    text = open(args[0], encoding="utf-8").read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    splits = {"train": data[:n], "val": data[n:]}
    V, T, L, H, C, B = len(chars), 64, 4, 4, 128, 12
    torch.manual_seed(1337)
    model = GPT(V, T, L, H, C, 0.0)
    with torch.no_grad():  # GPT-2's initialisation, as attend and nanoGPT do
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                p.normal_(0.0, std)
            elif name.endswith("bias"):
                p.zero_()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.99))

    def batch(split):
        d = splits[split]
        ix = torch.randint(len(d) - T - 1, (B,))
        return (torch.stack([d[i:i + T] for i in ix]), torch.stack([d[i + 1:i + 1 + T] for i in ix]))

    @torch.no_grad()
    def estimate():
        model.eval()
        out = {}
        for split in ("train", "val"):
            out[split] = sum(model(*batch(split)).item() for _ in range(200)) / 200
        model.train()
        return out

    def lr_at(it, warmup=100, decay_iters=2000, lr=1e-3, min_lr=1e-4):
        if it < warmup:
            return lr * (it + 1) / (warmup + 1)
        if it > decay_iters:
            return min_lr
        ratio = (it - warmup) / (decay_iters - warmup)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

    model.train()
    losses = None
    for it in range(iters + 1):
        if it % 500 == 0 or it == iters:
            losses = estimate()
            print("step %d: train loss %.4f, val loss %.4f" % (it, losses["train"], losses["val"]))
            sys.stdout.flush()
        if it == iters:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        loss = model(*batch("train"))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    wall = time.perf_counter() - start
    print("torch %s recipe: threads %d, %d steps, val loss %.4f, wall time: %d ms" %
          (torch.__version__, torch.get_num_threads(), iters, losses["val"], wall * 1000))


if __name__ == "__main__":
    main()

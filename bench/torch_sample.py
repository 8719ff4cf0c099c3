#!/usr/bin/python3
"""Generation speed of nanoGPT's sample.py loop in PyTorch (not a test, not in CI).

The model is torch_twin's GPT (attend's architecture) with random weights; the loop is
nanoGPT's `GPT.generate`: crop the context to block_size, run the whole forward, take the
last position's logits / temperature, keep the top_k, draw with torch.multinomial. No
key/value cache, as nanoGPT has none. Prints tokens/s over the generated tokens.

    bench/torch_sample.py V T LAYERS HEADS C NEW_TOKENS [--threads N]
"""
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_sample: python3-torch not installed (apt-get install python3-torch); skipped")
    sys.exit(77)

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import torch_twin  # noqa: E402


def logits_of(model, idx):
    x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))
    for b in model.h:
        x = b(x, model.mask)
    return model.ln_f(x[:, -1, :]) @ model.wte.weight.T


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--threads" in sys.argv:
        torch.set_num_threads(int(sys.argv[sys.argv.index("--threads") + 1]))
        args = args[:-1]
    V, T, L, H, C, n = (int(a) for a in args)
    torch.manual_seed(1)
    model = torch_twin.GPT(V, T, L, H, C, 0.0).eval()
    idx = torch.zeros((1, 1), dtype=torch.long)
    with torch.no_grad():
        t0 = time.perf_counter()
        for _ in range(n):  # nanoGPT's generate()
            cond = idx if idx.size(1) <= T else idx[:, -T:]
            logits = logits_of(model, cond) / 0.8
            v, _ = torch.topk(logits, min(200, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float("Inf")
            nxt = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = torch.cat((idx, nxt), dim=1)
        s = time.perf_counter() - t0
    print(f"torch sample: {n} tokens in {s:.3f} s: {n / s:.1f} tokens/s "
          f"(threads {torch.get_num_threads()})")


if __name__ == "__main__":
    main()

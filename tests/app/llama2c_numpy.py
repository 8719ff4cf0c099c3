#!/usr/bin/python3
"""attend's llama2.c export read back by a reader of llama2.c's legacy format written here
(no attend code): the 7-int header, the weights at the offsets run.c's memory_map_weights
gives them, the RoPE tables skipped, the head after them when vocab_size is negative.
Its forward is run.c's arithmetic on whole windows: RMSNorm with eps 1e-5, RoPE on pairs
(2i, 2i+1) with theta 10000, GQA heads h sharing key/value head h // (H / KV), SwiGLU.
The text is encoded with tokenizer.bin (a char vocabulary: one token per character) and
scored over every non-overlapping window of seq_len, as `attend eval` does.

    llama2c_numpy.py EXPORT_DIR TEXT_FILE ATTEND_EVAL_LOSS
"""
import struct
import sys

import numpy as np

d, text_file, attend_loss = sys.argv[1], sys.argv[2], float(sys.argv[3])
raw = open(d + "/model.bin", "rb").read()
dim, hidden, L, H, KV, V, T = struct.unpack("<7i", raw[:28])
shared = V > 0
V = abs(V)
HS = dim // H
kv_dim = KV * HS
data = np.frombuffer(raw[28:], dtype="<f4").astype(np.float64)
at = 0


def take(*shape):
    global at
    n = int(np.prod(shape))
    out = data[at:at + n].reshape(shape)
    at += n
    return out


emb = take(V, dim)
rms_att = take(L, dim)
wq = take(L, dim, dim)
wk = take(L, kv_dim, dim)
wv = take(L, kv_dim, dim)
wo = take(L, dim, dim)
rms_ffn = take(L, dim)
w1 = take(L, hidden, dim)
w2 = take(L, dim, hidden)
w3 = take(L, hidden, dim)
rms_final = take(dim)
take(T, HS // 2)  # freq_cis_real, skipped as run.c skips it
take(T, HS // 2)  # freq_cis_imag
wcls = emb if shared else take(V, dim)
assert at == data.size, "model.bin holds %d floats, the layout %d" % (data.size, at)

tok = open(d + "/tokenizer.bin", "rb").read()
(max_len,) = struct.unpack("<i", tok[:4])
pos, vocab = 4, []
for _ in range(V):
    _, n = struct.unpack("<fi", tok[pos:pos + 8])
    vocab.append(tok[pos + 8:pos + 8 + n].decode("utf-8"))
    pos += 8 + n
assert pos == len(tok) and max(len(v.encode()) for v in vocab) == max_len
ids = [vocab.index(ch) for ch in open(text_file, encoding="utf-8").read()]


def rmsnorm(x, w):
    return w * x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5)


def rope(x):  # (T, heads, HS): pairs (2i, 2i+1) turned by pos * 10000^(-2i/HS)
    t = np.arange(x.shape[0])[:, None, None]
    freq = 1.0 / 10000.0 ** (np.arange(0, HS, 2) / HS)
    c, s = np.cos(t * freq), np.sin(t * freq)
    out = x.copy()
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    out[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
    return out


def logits(window):
    n = len(window)
    x = emb[window]
    for l in range(L):
        h = rmsnorm(x, rms_att[l])
        q = rope((h @ wq[l].T).reshape(n, H, HS))
        k = rope((h @ wk[l].T).reshape(n, KV, HS))
        v = (h @ wv[l].T).reshape(n, KV, HS)
        y = np.zeros((n, H, HS))
        for head in range(H):
            s = q[:, head] @ k[:, head // (H // KV)].T / np.sqrt(HS)
            s[np.triu_indices(n, 1)] = -np.inf
            p = np.exp(s - s.max(-1, keepdims=True))
            y[:, head] = (p / p.sum(-1, keepdims=True)) @ v[:, head // (H // KV)]
        x = x + y.reshape(n, dim) @ wo[l].T
        h = rmsnorm(x, rms_ffn[l])
        g = h @ w1[l].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ w3[l].T)) @ w2[l].T
    return rmsnorm(x, rms_final) @ wcls.T


total, windows = 0.0, (len(ids) - 1) // T
for w in range(windows):
    z = logits(ids[w * T:w * T + T])
    z = z - z.max(-1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    total += -lp[np.arange(T), ids[w * T + 1:w * T + T + 1]].mean()
loss = total / windows
print("llama2.c reader: dim %d hidden %d layers %d heads %d/%d vocab %d%s seq_len %d; "
      "%d windows, loss %.7f vs attend eval %.7f"
      % (dim, hidden, L, H, KV, V, "" if shared else " (untied head)", T, windows, loss,
         attend_loss))
assert abs(loss - attend_loss) < 2e-6 * max(1.0, loss), loss - attend_loss
print("llama2c ok")

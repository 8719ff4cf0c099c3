#!/usr/bin/python3
"""An independent GPT-2 in NumPy (no attend code, no torch): reads an `attend export`
folder (model.safetensors parsed by hand, config.json) and checks attend's logits.

    gpt2_numpy.py EXPORT_DIR IDS(comma-separated) ATTEND_LOGITS.f32
"""
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

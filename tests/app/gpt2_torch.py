#!/usr/bin/python3
"""attend's GPT-2 export in PyTorch: bench/torch_twin.py's GPT (torch.nn modules, the one
PyTorch GPT-2 that the benchmarks time too) loads model.safetensors by name with
strict=True and must give attend's logits and loss.

    gpt2_torch.py EXPORT_DIR IDS NEXT_IDS ATTEND_LOGITS.f32 ATTEND_LOSS
"""
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from torch_twin import GPT  # noqa: E402

torch.set_default_dtype(torch.float64)
d = sys.argv[1]
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
cfg = json.load(open(d + "/config.json"))
C, H, L, V, P = cfg["n_embd"], cfg["n_head"], cfg["n_layer"], cfg["vocab_size"], cfg["n_positions"]
# GPT-2's names -> the twin's; Conv1D weights are (in, out), nn.Linear's (out, in).
rename = {"attn.c_attn": "c_attn", "attn.c_proj": "attn_proj", "mlp.c_fc": "c_fc",
          "mlp.c_proj": "mlp_proj"}
state = {}
for name, e in header.items():
    if name == "__metadata__":
        continue
    assert e["dtype"] == "F32", e
    b, end = e["data_offsets"]
    t = torch.from_numpy(np.frombuffer(data[b:end], dtype="<f4").reshape(e["shape"]).astype(np.float64))
    name = name.replace("transformer.", "")
    for a, z in rename.items():
        if a in name:
            name = name.replace(a, z)
            if name.endswith(".weight"):
                t = t.T.contiguous()
    state[name] = t
model = GPT(V, P, L, H, C, 0.0, eps=cfg["layer_norm_epsilon"])
model.load_state_dict(state, strict=True)
model.eval()
ids = torch.tensor([[int(t) for t in sys.argv[2].split(",")]])
nxt = torch.tensor([int(t) for t in sys.argv[3].split(",")])
with torch.no_grad():
    logits = model.logits(ids)
ours = torch.from_numpy(np.fromfile(sys.argv[4], dtype="<f4").astype(np.float64)).view(logits.shape)
err = (logits - ours).abs().max().item()
loss = F.cross_entropy(logits[0], nxt).item()
print("torch %s: max abs logit difference %.3g, loss %.9f vs attend %s"
      % (torch.__version__, err, loss, sys.argv[5]))
assert err < 1e-4, err
assert abs(loss - float(sys.argv[5])) < 1e-5
print("torch ok")

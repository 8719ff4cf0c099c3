#!/usr/bin/python3
"""The independent check of attend's PEFT export: a Llama from Hugging Face's formulas
(llama_torch.py, loaded strictly from attend's Hugging Face export of the base) with LoRA
written here from PEFT's published formula, y = W x + (lora_alpha / r) B (A x), on the
modules adapter_config.json names, A and B read from adapter_model.safetensors under PEFT's
keys (base_model.model.<module>.lora_A.weight / .lora_B.weight; r and lora_alpha per
module from rank_pattern / alpha_pattern, keys matched as suffixes of the module's name, as
PEFT does). In f64: the loss of the ids, and the gradients of every A and B.

    peft_torch.py check BASE_DIR ADAPTER_DIR GRADS.safetensors IDS NEXT ATTEND_LOSS
        GRADS: attend's gradients of the same A and B, written by attend's PEFT export under
        the same keys. Prints the largest differences; exit 1 past the bounds.
    peft_torch.py dpo BASE_DIR ADAPTER_DIR GRADS.safetensors X_ROWS Y_ROWS BETA ATTEND_LOSS
        DPO (Rafailov et al. 2023) written here from the paper's formula on a batch of pairs:
        rows of ids and of targets ("/" between rows, "," between ids, -100 where not
        scored); the first half of the rows are the chosen responses, the second half the
        rejected ones in the same order. The policy is the LoRA model, the reference its
        base (every LoRA update scaled by 0). The loss and the gradients of A and B against
        attend's, as check does.
"""
import json
import os
import re
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_torch import LlamaForCausalLM, read_folder, read_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)


class LoraLinear(nn.Module):
    def __init__(self, base, A, B, scaling):
        super().__init__()
        self.base = base
        self.A = nn.Parameter(A.clone())
        self.B = nn.Parameter(B.clone())
        self.scaling = scaling

    def forward(self, x):
        return self.base(x) + self.scaling * ((x @ self.A.t()) @ self.B.t())


def pattern_value(patterns, module, default):
    for key, value in patterns.items():
        if re.match(r"(.*\.)?%s$" % key, module):
            return value
    return default


def lora_model(base_dir, adapter_dir):
    """The Hugging Face base with PEFT's LoRA on the modules the adapter names."""
    cfg = json.load(open(os.path.join(base_dir, "config.json")))
    model = LlamaForCausalLM(cfg)
    state = read_folder(base_dir)
    if cfg.get("tie_word_embeddings", False):
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    model.load_state_dict(state, strict=True)
    for p in model.parameters():
        p.requires_grad_(False)
    acfg = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
    assert acfg["peft_type"] == "LORA" and not acfg["fan_in_fan_out"], acfg
    tensors = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    prefix = "base_model.model."
    wrapped = {}
    for key in tensors:
        m = re.fullmatch(re.escape(prefix) + r"(.*)\.lora_A\.weight", key)
        if not m:
            continue
        module = m.group(1)
        assert any(module == t or module.endswith("." + t) for t in acfg["target_modules"]), module
        r = pattern_value(acfg["rank_pattern"], module, acfg["r"])
        alpha = pattern_value(acfg["alpha_pattern"], module, acfg["lora_alpha"])
        A, B = tensors[key], tensors[prefix + module + ".lora_B.weight"]
        assert A.shape[0] == r and B.shape[1] == r, (module, A.shape, B.shape, r)
        parent_name, child = module.rsplit(".", 1) if "." in module else ("", module)
        parent = model.get_submodule(parent_name)  # "": the model itself (lm_head)
        lora = LoraLinear(getattr(parent, child), A, B, alpha / r)
        setattr(parent, child, lora)
        wrapped[module] = lora
    assert len(wrapped) * 2 == len(tensors), "keys that are not lora_A/lora_B pairs"
    return model, wrapped, prefix


def compare_grads(wrapped, prefix, grads_file):
    """The largest difference of attend's A and B gradients from torch's, as a fraction of
    each tensor's largest."""
    theirs = read_safetensors(grads_file)
    worst = 0.0
    for module, lora in wrapped.items():
        for part, g in (("lora_A", lora.A.grad), ("lora_B", lora.B.grad)):
            ours = theirs[prefix + module + "." + part + ".weight"]
            scale = max(g.abs().max().item(), 1e-30)
            worst = max(worst, (g - ours).abs().max().item() / scale)
    return worst


def check(base_dir, adapter_dir, grads_file, ids, nxt, attend_loss):
    model, wrapped, prefix = lora_model(base_dir, adapter_dir)
    ids = torch.tensor([[int(t) for t in ids.split(",")]])
    nxt = torch.tensor([int(t) for t in nxt.split(",")])
    loss = F.cross_entropy(model(ids)[0], nxt)
    loss.backward()
    worst = compare_grads(wrapped, prefix, grads_file)
    print("torch %s: %d adapted modules; loss %.12f vs attend %s; largest gradient difference "
          "%.3g of the tensor's largest" % (torch.__version__, len(wrapped), loss.item(),
                                            attend_loss, worst))
    # Both sides in f64; attend's gradients reach this file rounded to f32 (2^-24 of each
    # value): a missing permutation of q's or k's rows, a wrong scale or a transposed B
    # moves them by far more than 1e-5 of the largest.
    assert abs(loss.item() - float(attend_loss)) < 1e-10 * max(1.0, loss.item())
    assert worst < 1e-5, worst
    print("torch ok")


def sequence_log_probs(model, x, y):
    """Per row: the sum of log p(y[t] | x[..t]) over the positions where y != -100."""
    logp = F.log_softmax(model(x), dim=-1)
    mask = y != -100
    picked = logp.gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (picked * mask).sum(-1)


def dpo(base_dir, adapter_dir, grads_file, x_rows, y_rows, beta, attend_loss):
    model, wrapped, prefix = lora_model(base_dir, adapter_dir)
    rows = lambda text: torch.tensor([[int(t) for t in r.split(",")] for r in text.split("/")])
    x, y, beta = rows(x_rows), rows(y_rows), float(beta)
    assert x.shape == y.shape and x.shape[0] % 2 == 0, (x.shape, y.shape)
    with torch.no_grad():
        for lora in wrapped.values():
            lora.scaling, lora.kept = 0.0, lora.scaling
        ref = sequence_log_probs(model, x, y)
        for lora in wrapped.values():
            lora.scaling = lora.kept
    pol = sequence_log_probs(model, x, y)
    n = x.shape[0] // 2
    z = beta * ((pol[:n] - ref[:n]) - (pol[n:] - ref[n:]))
    loss = -F.logsigmoid(z).mean()
    loss.backward()
    worst = compare_grads(wrapped, prefix, grads_file)
    print("torch %s: DPO on %d pairs, %d adapted modules; loss %.12f vs attend %s; reward "
          "margins %s; largest gradient difference %.3g of the tensor's largest"
          % (torch.__version__, n, len(wrapped), loss.item(), attend_loss,
             [round(v, 6) for v in z.tolist()], worst))
    # As check's bounds: both sides in f64, attend's gradients rounded to f32 in the file.
    assert abs(loss.item() - float(attend_loss)) < 1e-10 * max(1.0, loss.item())
    assert worst < 1e-5, worst
    print("torch ok")


if __name__ == "__main__":
    if sys.argv[1] == "dpo":
        dpo(*sys.argv[2:9])
    else:
        check(*sys.argv[2:8])

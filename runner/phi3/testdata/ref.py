#!/usr/bin/env python3
"""Reference for runner/phi3's logits test: tiny random-weight Phi-3 checkpoints built in
code, saved with save_pretrained (float32), and transformers' last-position logits and
greedy tokens for each of them, in float64 on the CPU with eager attention.

    python3 ref.py --out DIR      # writes DIR/<case>/ (the checkpoints) and DIR/refs.json

Run it from runner/phi3 with --out testdata (transformers 5.x). The greedy tokens are
decoded through transformers' cache, one token a step, as mlxg decodes: the prompt stays
below original_max_position_embeddings and the continuation crosses it, so that
transformers switches longrope to its long factors position by position, as mlxg does (a
single pass over a prompt longer than the original length would rotate all of it with the
long factors in transformers, and only the positions past it in mlxg).

Besides the float weights, each case has quantized variants ("q4", "q8": affine, groups of
32), whose reference runs transformers on the weights `mlxg create` quantizes (every 2-D
weight, fused ones included), quantized and dequantized here as internal/quant does.
"""
import argparse
import json
import os
import traceback

import numpy as np
import torch
import transformers
from transformers import Phi3Config, Phi3ForCausalLM

SHAPE = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, rms_norm_eps=1e-5)
ROT = 12  # rotated dims per head of 16 at partial_rotary_factor 0.75: 6 frequencies

CASES = [
    # Phi-4-mini's kind: partial rotary, longrope (original length 32, the greedy tokens cross it), tied embeddings.
    dict(name="phi3-longrope", seed=31, prompt_len=24, partial_rotary_factor=0.75, longrope=True, sliding_window=None,
         tie=True),
    # Phi-3's kind: the whole head rotated, a sliding window of 16 under a prompt of 30, a separate lm_head.
    dict(name="phi3-window", seed=32, prompt_len=30, partial_rotary_factor=1.0, longrope=False, sliding_window=16,
         tie=False),
]
GREEDY = 20
VARIANTS = {"f32": None, "q4": dict(bits=4, group=32), "q8": dict(bits=8, group=32)}

F32 = np.float32


def quant_affine_rows(w, bits, group):
    """internal/quant.QuantizeRow then DequantizeRow, per row of w (float32)."""
    w = np.asarray(w, dtype=F32)
    rows, cols = w.shape
    out = np.empty_like(w)
    n_bins = F32((1 << bits) - 1)
    eps = F32(1e-7)
    for r in range(rows):
        for g in range(cols // group):
            vals = w[r, g * group:(g + 1) * group]
            wmin, wmax = F32(vals.min()), F32(vals.max())
            mask = abs(wmin) > abs(wmax)
            scale = max(F32(F32(wmax - wmin) / n_bins), eps)
            edge = wmax
            if mask:
                edge = wmin
            else:
                scale = F32(-scale)
            bias = F32(0)
            q0 = F32(np.rint(F32(edge / scale)))
            if q0 != 0:
                scale = F32(edge / q0)
                bias = edge
            q = np.clip(np.rint(((vals - bias) / scale).astype(F32)), 0, n_bins).astype(F32)
            out[r, g * group:(g + 1) * group] = (scale * q + bias).astype(F32)
    return out


def quantized_state(sd, v):
    out = {}
    for name, t in sd.items():
        a = t.detach().cpu().numpy().astype(F32)
        if name.endswith(".weight") and a.ndim == 2 and a.shape[1] % v["group"] == 0:
            a = quant_affine_rows(a, v["bits"], v["group"])
        out[name] = torch.from_numpy(np.ascontiguousarray(a))
    return out



def build(case):
    torch.manual_seed(case["seed"])
    kw = dict(SHAPE, max_position_embeddings=1024, rope_theta=10000.0,
              partial_rotary_factor=case["partial_rotary_factor"], sliding_window=case["sliding_window"],
              tie_word_embeddings=case["tie"], bos_token_id=1, eos_token_id=2, pad_token_id=0,
              resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0)
    if case["longrope"]:
        half = ROT // 2
        kw["rope_scaling"] = {"type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(half)],
                              "long_factor": [1.0 + 0.9 * i for i in range(half)]}
        kw["original_max_position_embeddings"] = 32
    cfg = Phi3Config(**kw)
    cfg._attn_implementation = "eager"
    model = Phi3ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(case["seed"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            def rnd(std):
                return torch.randn(p.shape, generator=g, dtype=torch.float32) * std
            if "norm" in name:
                p.copy_(1 + rnd(0.1))
            elif "embed_tokens" in name:
                p.copy_(rnd(1.0))
            elif "lm_head" in name:
                p.copy_(rnd(0.3))
            else:
                p.copy_(rnd(0.15))
    return model


def run(model, sd, prompt):
    m = model.to(torch.float64)
    m.load_state_dict({k: v.to(torch.float64) for k, v in sd.items()}, strict=True)
    toks, margins = [], []
    with torch.no_grad():
        out = m(torch.tensor([prompt]), use_cache=True)
        logits = out.logits[0, -1]
        first = logits.tolist()
        past = out.past_key_values
        for _ in range(GREEDY):
            top = torch.topk(logits, 2)
            toks.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            out = m(torch.tensor([[toks[-1]]]), past_key_values=past, use_cache=True)
            logits, past = out.logits[0, -1], out.past_key_values
    return first, toks, margins


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    fixture = {"about": "transformers reference for runner/phi3 (runner/phi3/testdata/ref.py)",
               "transformers_version": transformers.__version__, "torch_version": torch.__version__,
               "precision": "float64 on CPU, eager attention, greedy decoding through the cache", "cases": []}
    for case in CASES:
        try:
            model = build(case)
            d = os.path.join(args.out, case["name"])
            model.save_pretrained(d, safe_serialization=True)
            sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
            rng = np.random.default_rng(case["seed"])
            prompt = [int(x) for x in rng.integers(3, SHAPE["vocab_size"] - 1, size=case["prompt_len"])]
            entry = {"name": case["name"], "prompt": prompt, "variants": {}}
            for vname, v in VARIANTS.items():
                state = sd if v is None else quantized_state(sd, v)
                logits, toks, margins = run(model, state, prompt)
                entry["variants"][vname] = {"logits": logits, "greedy": toks, "margins": margins}
                print(case["name"], vname, toks, "min margin %.4f" % min(margins), flush=True)
            fixture["cases"].append(entry)
        except Exception:  # the other cases are still written
            traceback.print_exc()
    with open(os.path.join(args.out, "refs.json"), "w") as f:
        json.dump(fixture, f)


if __name__ == "__main__":
    main()

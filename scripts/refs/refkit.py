"""What the architectures' reference generators (runner/<family>/testdata/ref.py) share: the
random weights they give a tiny model, internal/quant's affine quantizer repeated in numpy,
transformers' logits and greedy continuation in float64, and the refs.json they write, which
the Go side reads with runner/model/modeltest.

A generator imports it with

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 3, "scripts", "refs"))
    import refkit

and calls refkit.main with its cases and a function that builds and saves one of them.
"""
import argparse
import json
import os
import traceback

import numpy as np
import torch
import transformers

F32 = np.float32
GREEDY = 20  # tokens decoded after each prompt
AFFINE = {"f32": None, "q4": dict(bits=4, group=32), "q8": dict(bits=8, group=32)}


def randomize(model, seed, rules=(), buffers=False):
    """Fills model's parameters (and buffers with buffers=True; rotary tables are left) from
    a seeded generator: base + N(0, std) per tensor, (base, std) from the first rule whose
    test matches the name (a substring, or a callable on the name), else norms 1 + N(0.1),
    embeddings N(1), the output head N(0.3) and the rest N(0.15). Returns the generator, for
    whatever a generator draws after it."""
    defaults = [("norm", 1.0, 0.1), ("embed_tokens", 0.0, 1.0), ("lm_head", 0.0, 0.3)]
    g = torch.Generator().manual_seed(seed)
    tensors = list(model.named_parameters())
    if buffers:
        tensors += [(n, b) for n, b in model.named_buffers() if "rotary_emb" not in n and "inv_freq" not in n]
    with torch.no_grad():
        for name, p in tensors:
            base, std = 0.0, 0.15
            for test, b, s in list(rules) + defaults:
                if (test(name) if callable(test) else test in name):
                    base, std = b, s
                    break
            p.copy_(base + torch.randn(p.shape, generator=g, dtype=torch.float32) * std)
    return g


def quant_affine_rows(w, bits, group):
    """internal/quant.QuantizeRow then DequantizeRow, per row of w, step for step in float32
    (MLX's affine quantizer: the scale from the group's range, snapped so that the edge of
    larger magnitude is exact)."""
    w = np.asarray(w, dtype=F32)
    rows, cols = w.shape
    out = np.empty_like(w)
    n_bins = F32((1 << bits) - 1)
    eps = F32(1e-7)
    for r in range(rows):
        for g in range(cols // group):
            vals = w[r, g * group:(g + 1) * group]
            lo, hi = F32(vals.min()), F32(vals.max())
            scale = max(F32(F32(hi - lo) / n_bins), eps)
            if abs(lo) > abs(hi):
                edge = lo
            else:
                edge, scale = hi, F32(-scale)
            bias = F32(0)
            q0 = F32(np.rint(F32(edge / scale)))
            if q0 != 0:
                scale = F32(edge / q0)
                bias = edge
            q = np.clip(np.rint(((vals - bias) / scale).astype(F32)), 0, n_bins).astype(F32)
            out[r, g * group:(g + 1) * group] = (scale * q + bias).astype(F32)
    return out


def quantize_2d(sd, v, skip=lambda name: False):
    """sd with every 2-D weight whose input width the group divides replaced by its
    quantized-then-dequantized self (what `mlxg create` quantizes in a dense model)."""
    out = {}
    for name, t in sd.items():
        a = t.detach().cpu().numpy().astype(F32)
        if name.endswith(".weight") and a.ndim == 2 and a.shape[1] % v["group"] == 0 and not skip(name):
            a = quant_affine_rows(a, v["bits"], v["group"])
        out[name] = torch.from_numpy(np.ascontiguousarray(a))
    return out


def run(model, sd, prompt, cached):
    """The prompt's last-position logits under the weights sd in float64, and the greedy
    continuation with the margin between the two best logits at each step: decoded through
    transformers' cache a token a step (cached, as mlxg decodes), or by running the whole
    sequence again each step."""
    m = model.to(torch.float64)
    m.load_state_dict({k: v.to(torch.float64) for k, v in sd.items()}, strict=True)
    ids, toks, margins = list(prompt), [], []
    with torch.no_grad():
        out = m(input_ids=torch.tensor([ids]), use_cache=cached)
        logits = out.logits[0, -1]
        first = logits.tolist()
        for _ in range(GREEDY):
            top = torch.topk(logits, 2)
            toks.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            ids.append(toks[-1])
            if cached:
                out = m(input_ids=torch.tensor([[toks[-1]]]), past_key_values=out.past_key_values, use_cache=True)
            else:
                out = m(input_ids=torch.tensor([ids]), use_cache=False)
            logits = out.logits[0, -1]
    return first, toks, margins


def prompt_ids(seed, lo, hi, n):
    """n ids in [lo, hi) from numpy's generator seeded with seed."""
    return [int(x) for x in np.random.default_rng(seed).integers(lo, hi, size=n)]


def main(family, cases, make, variants=AFFINE, cached=False):
    """Writes --out/<case>/ for every case and --out/refs.json. make(case, dir) builds the
    case's model, saves its checkpoint in dir and returns (model, state dict, prompt,
    quantize, extra): quantize(state dict, variant) gives the weights a quantized variant
    decodes to, extra is merged into the case's entry. A case that fails is reported and
    left out; the others are still written."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    fixture = {"about": f"transformers reference for runner/{family} (runner/{family}/testdata/ref.py)",
               "transformers_version": transformers.__version__, "torch_version": torch.__version__,
               "precision": "float64 on CPU, eager attention" + (", greedy decoding through the cache" if cached else ""),
               "cases": []}
    for case in cases:
        try:
            model, sd, prompt, quantize, extra = make(case, os.path.join(args.out, case["name"]))
            entry = {"name": case["name"], "prompt": prompt, "variants": {}, **extra}
            for vname, v in variants.items():
                logits, toks, margins = run(model, sd if v is None else quantize(sd, v), prompt, cached)
                entry["variants"][vname] = {"logits": logits, "greedy": toks, "margins": margins}
                print(case["name"], vname, toks, "min margin %.4f" % min(margins), flush=True)
            fixture["cases"].append(entry)
        except Exception:
            traceback.print_exc()
    with open(os.path.join(args.out, "refs.json"), "w") as f:
        json.dump(fixture, f)

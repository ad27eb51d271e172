#!/usr/bin/env python3
"""Transformers reference for the mixture-of-experts and hybrid cases written by
`go run ./scripts/refs/gen -hybrid -out DIR`; writes runner/testdata/refs_hybrid.json.

    python3 scripts/refs/hybrid.py DIR OUT.json

Like reference.py (whose helpers it uses), everything runs on the CPU in float64.
Checkpoints in the MLX layout are turned back into Hugging Face's here, independently
of the Go converter: quantized weights dequantized with their per-module bits (the
8-bit routers), switch_mlp stacks split into one tensor per expert, and for
qwen3_next the conv1d weights moved back to [C, 1, K] and the 1 taken off the
zero-centred norms. The weights are then saved in float64 and loaded with
from_pretrained, so transformers applies its own checkpoint conversions (fused expert
parameters in transformers 5).

For the mixture-of-experts cases it also records, per layer with experts and per
prompt position, the experts the router picks (top num_experts_per_tok by router
logit, best first), computed from the router's input with its weight.
"""
import json
import os
import re
import sys
import tempfile
import traceback

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import load_dir, subset_logits, unpack, weights_digest, write_fixture  # noqa: E402

PLUS_ONE = (".input_layernorm.weight", ".post_attention_layernorm.weight", ".q_norm.weight", ".k_norm.weight")


def dequantize(sd, quant):
    """MLX affine weights (2-D or stacked 3-D) to float64, with per-module overrides."""
    out = {}
    for name, t in sd.items():
        if name.endswith(".scales") or name.endswith(".biases"):
            continue
        base = name[: -len(".weight")] if name.endswith(".weight") else None
        if quant is not None and base is not None and base + ".scales" in sd:
            o = quant.get(base)
            bits, group = (o["bits"], o["group_size"]) if isinstance(o, dict) else (quant["bits"], quant["group_size"])
            lead = t.shape[:-1]
            packed = t.reshape(-1, t.shape[-1])
            scales = sd[base + ".scales"].astype(np.float64).reshape(packed.shape[0], -1)
            biases = sd[base + ".biases"].astype(np.float64).reshape(packed.shape[0], -1)
            cols = t.shape[-1] * 32 // bits
            q = unpack(packed, bits, cols).astype(np.float64)
            w = np.repeat(scales, group, axis=1) * q + np.repeat(biases, group, axis=1)
            out[name] = w.reshape(*lead, cols)
        else:
            out[name] = t.astype(np.float64)
    return out


def to_hf(sd, raw):
    """MLX layout -> Hugging Face layout (see the module doc)."""
    out = {}
    for name, t in sd.items():
        m = re.match(r"(.*\.mlp)\.switch_mlp\.(\w+)\.weight$", name)
        if m:
            for e in range(t.shape[0]):
                out[f"{m.group(1)}.experts.{e}.{m.group(2)}.weight"] = np.ascontiguousarray(t[e])
            continue
        if raw["model_type"] == "qwen3_next":
            if name.endswith("conv1d.weight") and t.ndim == 3 and t.shape[2] == 1:
                t = np.ascontiguousarray(t.transpose(0, 2, 1))
            if t.ndim == 1 and (name == "model.norm.weight" or name.endswith(PLUS_ONE)):
                t = t - 1.0
        out[name] = t
    return out


def build_model(case, root, tmp):
    d = os.path.join(root, case["dir"])
    got = weights_digest(d)
    if got != case["weights_digest"]:
        raise SystemExit(f"{case['name']}: weights in {d} have digest {got}, cases.json says {case['weights_digest']}")
    raw = json.load(open(os.path.join(d, "config.json")))
    quant = raw.pop("quantization", None)
    raw.pop("quantization_config", None)
    for key in ("final_logit_softcapping", "attn_logit_softcapping", "partial_rotary_factor"):
        if isinstance(raw.get(key), int):
            raw[key] = float(raw[key])  # Go writes 3.0 as 3; transformers' strict configs want a float
    sd = to_hf(dequantize(load_dir(d), quant), raw)
    hf = os.path.join(tmp, case["name"])
    os.makedirs(hf, exist_ok=True)
    save_file({k: np.ascontiguousarray(v) for k, v in sd.items()}, os.path.join(hf, "model.safetensors"), metadata={"format": "pt"})
    json.dump(raw, open(os.path.join(hf, "config.json"), "w"))
    extra = {"experts_implementation": "eager"} if raw.get("num_experts") else {}  # grouped_mm has no float64
    model, info = AutoModelForCausalLM.from_pretrained(
        hf, dtype=torch.float64, attn_implementation="eager", output_loading_info=True, **extra
    )
    missing = [m for m in info.get("missing_keys", []) if not (m == "lm_head.weight" and model.config.tie_word_embeddings)]
    if missing or info.get("unexpected_keys") or info.get("mismatched_keys"):
        raise SystemExit(f"{case['name']}: loading info {info}")
    print(f"  {case['name']}: {type(model).__name__}, config {type(model.config).__name__}", flush=True)
    return model.to(torch.float64).eval(), raw


@torch.no_grad()
def run_case(case, root, tmp):
    model, raw = build_model(case, root, tmp)
    routes, hooks = {}, []
    k = raw.get("num_experts_per_tok")
    for name, mod in model.named_modules():
        m = re.search(r"layers\.(\d+)\.mlp\.gate$", name)
        if m and k and hasattr(mod, "weight"):
            layer = int(m.group(1))

            def hook(mod, args, layer=layer):
                x = args[0].reshape(-1, args[0].shape[-1])
                logits = x @ mod.weight.T
                routes[layer] = torch.topk(logits, k, dim=-1).indices.tolist()

            hooks.append(mod.register_forward_pre_hook(hook))
    ids = torch.tensor([case["prompt"]], dtype=torch.long)
    logits = model(ids, use_cache=False).logits[0, -1]
    for h in hooks:
        h.remove()
    greedy, margins, seq = [], [], ids
    for _ in range(case["greedy_n"]):
        step = model(seq, use_cache=False).logits[0, -1]
        top2 = torch.topk(step, 2).values
        nxt = int(torch.argmax(step))
        greedy.append(nxt)
        margins.append(float(top2[0] - top2[1]))
        seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
    out = dict(case)
    out.pop("dir", None)
    index, values = subset_logits([float(f"{x:.9g}") for x in logits.tolist()])
    if index is not None:
        out["logits_index"] = index
    out["logits"] = values
    out["greedy"] = greedy
    out["greedy_margins"] = [float(f"{m:.4g}") for m in margins]
    if routes:
        out["routes"] = {str(layer): r for layer, r in sorted(routes.items())}
    print(f"  {case['name']}: greedy {greedy}, smallest margin {min(margins):.3g}, routed layers {sorted(routes)}", flush=True)
    return out


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    root, out_path = sys.argv[1], sys.argv[2]
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    cases = json.load(open(os.path.join(root, "cases.json")))
    results, failed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for c in cases:
            try:
                results.append(run_case(c, root, tmp))
            except BaseException:
                traceback.print_exc()
                failed.append(c["name"])
    fixture = {
        "about": "transformers reference for runner's hybrid and MoE logits tests; regenerate with scripts/refs/regen.sh -hybrid",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "precision": "float64 on CPU, eager attention",
        "cases": results,
    }
    write_fixture(fixture, out_path)
    print(f"wrote {out_path}: {len(results)} cases; failed: {failed or 'none'}", flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

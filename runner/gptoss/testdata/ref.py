#!/usr/bin/env python3
"""Reference for runner/gptoss's logits test: tiny random-weight gpt-oss checkpoints built
in code, saved with save_pretrained (float32), and transformers' last-position logits and
greedy tokens for each of them, in float64 on the CPU with eager attention.

    python3 ref.py --out DIR      # writes DIR/<case>/ (the checkpoints) and DIR/refs.json

Besides the float weights, each case has quantized variants. Their reference runs
transformers on the dequantized weights, quantized here with numpy code that repeats
internal/quant's arithmetic step for step in float32 (MLX's affine quantizer; MLX's mxfp4
quantizer: e8m0 scale 2^round(log2(max|w|/6)), the nearest e2m1 value, lowest code on a
tie), on the tensors `mlxg create` quantizes: every 2-D weight and each stacked expert
row, the router at 8 bits in groups of 64, and with the "mxfp4" recipe (mlx-community's
MXFP4-Q8) the experts in mxfp4 and the rest at 8 bits. The variant "mxfp4-experts" keeps
everything but the experts in float, as converting OpenAI's own mxfp4 checkpoint does.
"""
import os
import sys

import numpy as np
import torch
from transformers import GptOssConfig, GptOssForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 3, "scripts", "refs"))
import refkit  # noqa: E402

CASES = [
    # 4 layers, sliding/full alternating (transformers' default layer_types), GQA 4:2.
    dict(name="gptoss-a", seed=11, vocab_size=256, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
         num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
         sliding_window=8, layer_types=None, prompt_len=24),
    # 2 layers, full then sliding, 8 experts, multi-head attention, a window of 5.
    dict(name="gptoss-b", seed=12, vocab_size=256, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
         num_attention_heads=4, num_key_value_heads=4, head_dim=16, num_local_experts=8, num_experts_per_tok=2,
         sliding_window=5, layer_types=["full_attention", "sliding_attention"], prompt_len=21),
]

# Variants: name -> (bits, group) for affine weights, expert mode.
VARIANTS = {
    "f32": None,
    "q4": dict(bits=4, group=32, experts="affine"),
    "q8": dict(bits=8, group=32, experts="affine"),
    "mxfp4": dict(bits=8, group=64, experts="mxfp4"),
    "mxfp4-experts": dict(bits=0, group=0, experts="mxfp4"),
}

F32 = np.float32


FP4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=F32)


def quant_mxfp4_rows(w):
    """MLX's mxfp4 quantizer (and internal/quant's), dequantized: per group of 32, the
    scale 2^round(log2(max|w|/6)) and the nearest e2m1 value (the first code on a tie)."""
    w = np.asarray(w, dtype=F32)
    rows, cols = w.shape
    out = np.empty_like(w)
    for r in range(rows):
        for g in range(cols // 32):
            vals = w[r, g * 32:(g + 1) * 32]
            s = F32(F32(np.abs(vals).max()) / F32(6))
            e = 0 if s == 0 else int(np.round(np.log2(np.float64(s))))
            p = F32(2.0 ** e)
            scaled = (vals / p).astype(F32)
            codes = np.argmin(np.abs(scaled[:, None] - FP4[None, :]), axis=1)
            out[r, g * 32:(g + 1) * 32] = (FP4[codes] * p).astype(F32)
    return out


def quantized_state(sd, cfg, v):
    """The state dict with every tensor `mlxg create` quantizes replaced by its dequantized self."""
    out = {}
    for name, t in sd.items():
        a = t.detach().cpu().numpy().astype(F32)
        if name.endswith("mlp.experts.gate_up_proj"):  # [E, H, 2I], gate/up interleaved
            E, H, two = a.shape
            mats = np.transpose(a, (0, 2, 1)).reshape(E * two, H)  # rows: experts' outputs
            mats = quant_mxfp4_rows(mats) if v["experts"] == "mxfp4" else refkit.quant_affine_rows(mats, v["bits"], v["group"])
            a = np.transpose(mats.reshape(E, two, H), (0, 2, 1))
        elif name.endswith("mlp.experts.down_proj"):  # [E, I, H]
            E, I, H = a.shape
            mats = np.transpose(a, (0, 2, 1)).reshape(E * H, I)
            mats = quant_mxfp4_rows(mats) if v["experts"] == "mxfp4" else refkit.quant_affine_rows(mats, v["bits"], v["group"])
            a = np.transpose(mats.reshape(E, H, I), (0, 2, 1))
        elif v["bits"] and name.endswith(".weight") and a.ndim == 2:
            bits, group = (8, 64) if name.endswith("mlp.router.weight") else (v["bits"], v["group"])
            if a.shape[1] % group == 0:
                a = refkit.quant_affine_rows(a, bits, group)
        out[name] = torch.from_numpy(np.ascontiguousarray(a))
    return out


def build(case):
    torch.manual_seed(case["seed"])
    kw = {k: case[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads", "num_key_value_heads", "head_dim", "num_local_experts",
                               "num_experts_per_tok", "sliding_window")}
    if case["layer_types"]:
        kw["layer_types"] = case["layer_types"]
    cfg = GptOssConfig(**kw, max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
                       rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                        "truncate": False, "original_max_position_embeddings": 4096,
                                        "rope_theta": 150000.0},
                       eos_token_id=[case["vocab_size"] - 1], bos_token_id=0, pad_token_id=None)
    cfg._attn_implementation = "eager"
    try:
        cfg._experts_implementation = "eager"  # the plain per-expert loop, in float64
    except Exception as e:  # older releases have one implementation
        print("experts implementation:", e)
    model = GptOssForCausalLM(cfg).eval()
    refkit.randomize(model, case["seed"], rules=[
        ("norm", 1.0, 0.1), (lambda n: n.endswith("sinks"), 0.0, 1.0), ("embed_tokens", 0.0, 1.0),
        ("lm_head", 0.0, 0.3), ("router.weight", 0.0, 0.4), ("router.bias", 0.0, 0.3),
        (lambda n: n.endswith("gate_up_proj"), 0.0, 0.45),  # gates beyond the clamp at 7 now and then
        (lambda n: n.endswith("down_proj"), 0.0, 0.15), (lambda n: n.endswith("_bias") or n.endswith(".bias"), 0.0, 0.1)])
    return model, cfg


def make(case, d):
    model, cfg = build(case)
    model.save_pretrained(d, safe_serialization=True)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    prompt = refkit.prompt_ids(case["seed"], 0, case["vocab_size"] - 1, case["prompt_len"])
    quantize = lambda sd, v: quantized_state(sd, cfg, v)  # noqa: E731
    return model, sd, prompt, quantize, {"shapes": {k: list(v.shape) for k, v in sd.items() if "layers.0." in k}}


if __name__ == "__main__":
    refkit.main("gptoss", CASES, make, variants=VARIANTS)

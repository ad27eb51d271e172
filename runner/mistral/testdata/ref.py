#!/usr/bin/env python3
"""Reference for runner/mistral's logits test: tiny random-weight mistral, ministral3 and
mistral3 checkpoints built in code, saved with save_pretrained (float32), and transformers'
last-position logits and greedy tokens for each of them, in float64 on the CPU with eager
attention.

    python3 ref.py --out DIR      # writes DIR/<case>/ (the checkpoints) and DIR/refs.json

Run it from runner/mistral with --out testdata (transformers 5.x: Ministral3 and the
rope_parameters spelling). The greedy tokens are decoded through transformers' cache, one
token a step, as mlxg decodes.

Besides the float weights, each case has quantized variants ("q4", "q8": affine, groups of
32). Their reference runs transformers on the dequantized weights, quantized here with
numpy code that repeats internal/quant's arithmetic step for step in float32 (MLX's affine
quantizer) on the tensors `mlxg create` quantizes: every 2-D weight whose input width the
group divides.
"""
import argparse
import json
import os
import traceback

import numpy as np
import torch
import transformers
from transformers import (Ministral3Config, Ministral3ForCausalLM, Mistral3Config, Mistral3ForConditionalGeneration,
                          MistralConfig, MistralForCausalLM, PixtralVisionConfig)

SHAPE = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5)
YARN = {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0, "original_max_position_embeddings": 16,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1}

CASES = [
    # Mistral 7B's kind: a sliding window of 8 on both layers, a prompt of three windows.
    dict(name="mistral-window", seed=21, kind="mistral", sliding_window=8, prompt_len=24),
    # Ministral 3's text model: YaRN and the query scale, whose period of 16 the prompt crosses twice.
    dict(name="ministral3", seed=22, kind="ministral3", prompt_len=40),
    # Devstral Small 2 / Ministral 3 as shipped: the multimodal wrapper around a ministral3 text model.
    dict(name="mistral3-ministral3", seed=23, kind="mistral3", text="ministral3", prompt_len=36),
    # Mistral Small 3.1/3.2 and Magistral: the wrapper around a mistral text model without a window.
    dict(name="mistral3-mistral", seed=24, kind="mistral3", text="mistral", prompt_len=20),
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


def text_config(kind, case):
    if kind == "mistral":
        return MistralConfig(**SHAPE, max_position_embeddings=4096, rope_theta=1000000.0,
                             sliding_window=case.get("sliding_window"), tie_word_embeddings=False,
                             bos_token_id=1, eos_token_id=2, pad_token_id=None)
    return Ministral3Config(**SHAPE, max_position_embeddings=4096, rope_parameters=dict(YARN), sliding_window=None,
                            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=11)


def build(case):
    torch.manual_seed(case["seed"])
    if case["kind"] == "mistral3":
        vision = PixtralVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                     image_size=64, patch_size=16)
        cfg = Mistral3Config(text_config=text_config(case["text"], case).to_dict(), vision_config=vision.to_dict(),
                             image_token_index=10, spatial_merge_size=2, tie_word_embeddings=False)
        cls = Mistral3ForConditionalGeneration
    else:
        cfg = text_config(case["kind"], case)
        cls = MistralForCausalLM if case["kind"] == "mistral" else Ministral3ForCausalLM
    cfg._attn_implementation = "eager"
    if getattr(cfg, "text_config", None) is not None:
        cfg.text_config._attn_implementation = "eager"
        cfg.vision_config._attn_implementation = "eager"
    model = cls(cfg).eval()
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
    fixture = {"about": "transformers reference for runner/mistral (runner/mistral/testdata/ref.py)",
               "transformers_version": transformers.__version__, "torch_version": torch.__version__,
               "precision": "float64 on CPU, eager attention, greedy decoding through the cache", "cases": []}
    for case in CASES:
        try:
            model = build(case)
            d = os.path.join(args.out, case["name"])
            model.save_pretrained(d, safe_serialization=True)
            sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
            rng = np.random.default_rng(case["seed"])
            # Ids 11 and up: not the image token (10) nor the control tokens below it.
            prompt = [int(x) for x in rng.integers(11, SHAPE["vocab_size"] - 1, size=case["prompt_len"])]
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

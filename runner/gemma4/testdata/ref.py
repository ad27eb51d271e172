#!/usr/bin/env python3
"""Reference for runner/gemma4's logits test: tiny random-weight Gemma 4 checkpoints built
in code from transformers' own config classes, saved with save_pretrained (float32), and
transformers' last-position logits and greedy tokens for each, in float64 on the CPU with
eager attention. Needs transformers 5.x (Gemma 4) and torch.

    python3 ref.py --out DIR      # writes DIR/<case>/ (the checkpoints) and DIR/refs.json

Run it with --out runner/gemma4/testdata and commit what it writes (a few hundred KB);
TestLogitsAgainstTransformers skips while refs.json is absent.

The cases cover the three kinds of Gemma 4: the E2B/E4B kind (per-layer embeddings, the
last layers reading earlier layers' KV, double-wide MLPs there), the 26B-A4B kind in the
multimodal layout (Gemma4ForConditionalGeneration without towers: text_config nested,
weights under model.language_model.; attention_k_eq_v with num_global_key_value_heads;
experts beside the dense MLP), and the 31B kind (dense, attention_k_eq_v, an untied
head). Every prompt is longer than the sliding window.

Besides the float weights each case has quantized variants. Their reference runs
transformers on dequantized weights, quantized here with numpy code that repeats
internal/quant's affine arithmetic step for step in float32, on the tensors `mlxg create`
quantizes: every 2-D weight whose width the group divides (embeddings included) and each
row of the stacked experts, with, for a model with experts, the router (router.proj) and
the dense MLP beside the experts at 8 bits in groups of 64.
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import Gemma4Config, Gemma4ForCausalLM, Gemma4ForConditionalGeneration, Gemma4TextConfig

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 3, "scripts", "refs"))
import refkit  # noqa: E402

S, F = "sliding_attention", "full_attention"
ROPE = {S: {"rope_type": "default", "rope_theta": 10000.0},
        F: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}}

CASES = [
    # E2B kind: 6 layers, two sliding to a full one, the last 2 layers reading layers 3 and 2.
    dict(name="gemma4-e2b", seed=21, wrapped=False, prompt_len=26,
         text=dict(vocab_size=256, vocab_size_per_layer_input=256, hidden_size=64, intermediate_size=64,
                   num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   global_head_dim=32, layer_types=[S, S, F, S, S, F], sliding_window=8,
                   hidden_size_per_layer_input=8, num_kv_shared_layers=2, use_double_wide_mlp=True,
                   final_logit_softcapping=30.0, attention_k_eq_v=False, enable_moe_block=False,
                   tie_word_embeddings=True)),
    # 26B-A4B kind, multimodal layout: 4 layers alternating, k_eq_v over one global KV head,
    # 8 experts (top 2) beside the MLP.
    dict(name="gemma4-moe", seed=22, wrapped=True, prompt_len=23,
         text=dict(vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                   num_global_key_value_heads=1, attention_k_eq_v=True, layer_types=[S, F, S, F],
                   sliding_window=6, hidden_size_per_layer_input=0, num_kv_shared_layers=0,
                   use_double_wide_mlp=False, final_logit_softcapping=30.0, enable_moe_block=True,
                   num_experts=8, top_k_experts=2, moe_intermediate_size=32, tie_word_embeddings=True)),
    # 31B kind: dense, k_eq_v, an untied lm_head, no soft-capping.
    dict(name="gemma4-dense", seed=23, wrapped=False, prompt_len=21,
         text=dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                   num_global_key_value_heads=2, attention_k_eq_v=True, layer_types=[S, S, F],
                   sliding_window=7, hidden_size_per_layer_input=0, num_kv_shared_layers=0,
                   use_double_wide_mlp=False, final_logit_softcapping=None, enable_moe_block=False,
                   tie_word_embeddings=False)),
]
F32 = np.float32


def quantized_state(sd, text, v):
    """The state dict with every tensor `mlxg create` quantizes replaced by its dequantized self."""
    moe = text.get("enable_moe_block")
    out = {}
    for name, t in sd.items():
        a = t.detach().cpu().numpy().astype(F32)
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):  # [E, out, in]
            E, o, i = a.shape
            if i % v["group"] == 0:
                a = refkit.quant_affine_rows(a.reshape(E * o, i), v["bits"], v["group"]).reshape(E, o, i)
        elif name.endswith(".weight") and a.ndim == 2:
            bits, group = v["bits"], v["group"]
            if moe and (".router.proj." in name or ".mlp." in name):
                bits, group = 8, 64
            if a.shape[1] % group == 0:
                a = refkit.quant_affine_rows(a, bits, group)
        out[name] = torch.from_numpy(np.ascontiguousarray(a))
    return out


def build(case):
    torch.manual_seed(case["seed"])
    text = dict(case["text"])
    text.update(max_position_embeddings=4096, rms_norm_eps=1e-6, rope_parameters=ROPE,
                hidden_activation="gelu_pytorch_tanh", eos_token_id=[text["vocab_size"] - 1], bos_token_id=0,
                pad_token_id=None)
    tcfg = Gemma4TextConfig(**text)
    if case["wrapped"]:
        cfg = Gemma4Config(text_config=tcfg.to_dict(), vision_config=None, audio_config=None,
                           tie_word_embeddings=text["tie_word_embeddings"])
        cfg.text_config._attn_implementation = "eager"
        cls = Gemma4ForConditionalGeneration
    else:
        cfg = tcfg
        cls = Gemma4ForCausalLM
    cfg._attn_implementation = "eager"
    try:
        cfg._experts_implementation = "eager"  # the plain per-expert loop, in float64
        if case["wrapped"]:
            cfg.text_config._experts_implementation = "eager"
    except Exception as e:
        print("experts implementation:", e)
    model = cls(cfg).eval()
    g = refkit.randomize(model, case["seed"], rules=[
        (lambda n: "norm" in n or n.endswith("router.scale") or n.endswith("per_expert_scale"), 1.0, 0.1),
        ("embed_tokens", 0.0, 0.5), ("router.proj", 0.0, 0.4)])
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.8 + 0.4 * torch.rand(b.shape, generator=g))
    return model, cfg


def patch_config(d, text):
    """config.json as Google's checkpoints write it: global_head_dim and
    num_global_key_value_heads spelled out (a transformers that folds them into a
    per-layer block still reads them)."""
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    tc = cfg.get("text_config", cfg)
    for k in ("global_head_dim", "num_global_key_value_heads", "attention_k_eq_v", "num_kv_shared_layers",
              "hidden_size_per_layer_input", "use_double_wide_mlp", "layer_types", "sliding_window"):
        if text.get(k) is not None:
            tc[k] = text[k]
    tc.pop("per_layer_config", None)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def make(case, d):
    model, cfg = build(case)
    model.save_pretrained(d, safe_serialization=True)
    patch_config(d, case["text"])
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    prompt = refkit.prompt_ids(case["seed"], 1, case["text"]["vocab_size"] - 1, case["prompt_len"])
    quantize = lambda sd, v: quantized_state(sd, case["text"], v)  # noqa: E731
    return model, sd, prompt, quantize, {"shapes": {k: list(v.shape) for k, v in sd.items() if "layers.0." in k}}


if __name__ == "__main__":
    refkit.main("gemma4", CASES, make)

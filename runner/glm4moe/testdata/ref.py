#!/usr/bin/env python3
"""Reference for runner/glm4moe's logits test: tiny random-weight GLM checkpoints
(glm4_moe: GLM-4.5/4.6/4.7; glm4_moe_lite: GLM-4.7-Flash) built in code from
transformers' config classes, saved with save_pretrained (float32), and transformers'
last-position logits and greedy tokens for each, in float64 on the CPU with eager
attention.

    python3 ref.py --out DIR      # writes DIR/<case>/ (the checkpoints) and DIR/refs.json

Run it from runner/glm4moe/testdata (--out .) to give the Go test its fixture.

Besides the float weights each case has 4- and 8-bit variants (groups of 32). Their
reference runs transformers on dequantized weights, quantized here with numpy code that
repeats internal/quant's affine quantizer step for step in float32, on the tensors
`mlxg create` quantizes: every 2-D weight whose width the group divides but the router
(mlp.gate, kept in float as mlx-lm keeps it), each stacked expert row, and for
glm4_moe_lite kv_b_proj as create stores it: split per head into embed_q (the key half,
transposed, quantized along qk_nope_head_dim) and unembed_out (the value half, quantized
along kv_lora_rank), dequantized and put back together.
"""
import argparse
import json
import os
import re
import traceback

import numpy as np
import torch
import transformers

CASES = [
    # glm4_moe: q/k norm, attention biases, RoPE over half of each head, 8 experts in 2
    # groups (1 kept), a shared expert, the first layer dense.
    dict(name="glm45-a", arch="glm4_moe", seed=21, vocab_size=256, hidden_size=64, intermediate_size=96,
         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32, partial_rotary_factor=0.5,
         use_qk_norm=True, attention_bias=True, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
         n_shared_experts=1, n_group=2, topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True,
         first_k_dense_replace=1, prompt_len=24),
    # glm4_moe: no q/k norm, no grouping, weights not renormalised, 2 shared experts, every
    # layer sparse.
    dict(name="glm45-b", arch="glm4_moe", seed=22, vocab_size=256, hidden_size=64, intermediate_size=96,
         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, head_dim=16, partial_rotary_factor=0.5,
         use_qk_norm=False, attention_bias=True, n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=32,
         n_shared_experts=2, n_group=1, topk_group=1, routed_scaling_factor=1.0, norm_topk_prob=False,
         first_k_dense_replace=0, prompt_len=20),
    # glm4_moe_lite: the query through q_lora_rank, interleaved rotary pairs.
    dict(name="glm47flash-a", arch="glm4_moe_lite", seed=23, vocab_size=256, hidden_size=64, intermediate_size=96,
         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32,
         qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=16, rope_interleave=True, n_routed_experts=8,
         num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1, n_group=2, topk_group=1,
         routed_scaling_factor=1.8, norm_topk_prob=True, rope=None, prompt_len=24),
    # glm4_moe_lite: q_proj (no q_lora_rank), rotate-half pairs, YaRN with mscale_all_dim
    # (which scales the softmax by mscale²).
    dict(name="glm47flash-b", arch="glm4_moe_lite", seed=24, vocab_size=256, hidden_size=64, intermediate_size=96,
         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=32,
         qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, rope_interleave=False, n_routed_experts=8,
         num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1, n_group=1, topk_group=1,
         routed_scaling_factor=1.0, norm_topk_prob=True,
         rope=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64, beta_fast=32.0, beta_slow=1.0,
                   mscale=1.0, mscale_all_dim=1.0),
         prompt_len=22),
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
            lo, hi = F32(vals.min()), F32(vals.max())
            use_lo = abs(lo) > abs(hi)
            scale = max(F32(F32(hi - lo) / n_bins), eps)
            edge = lo if use_lo else hi
            if not use_lo:
                scale = F32(-scale)
            bias = F32(0)
            q0 = F32(np.rint(F32(edge / scale)))
            if q0 != 0:
                scale = F32(edge / q0)
                bias = edge
            q = np.clip(np.rint(((vals - bias) / scale).astype(F32)), 0, n_bins).astype(F32)
            out[r, g * group:(g + 1) * group] = (scale * q + bias).astype(F32)
    return out


def quantized_state(sd, case, v):
    """The state dict with every tensor `mlxg create` quantizes replaced by its dequantized self."""
    bits, group = v["bits"], v["group"]
    q = lambda m: quant_affine_rows(m, bits, group) if m.shape[1] % group == 0 else m
    out = {}
    for name, t in sd.items():
        a = t.detach().cpu().numpy().astype(F32)
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            E, o, i = a.shape  # [experts, out, in]: rows are the experts' outputs
            a = q(a.reshape(E * o, i)).reshape(E, o, i)
        elif name.endswith("self_attn.kv_b_proj.weight"):
            H, nope, vd = case["num_attention_heads"], case["qk_nope_head_dim"], case["v_head_dim"]
            rank = a.shape[1]
            w = a.reshape(H, nope + vd, rank)
            k = np.transpose(w[:, :nope, :], (0, 2, 1)).reshape(H * rank, nope)  # embed_q rows
            val = w[:, nope:, :].reshape(H * vd, rank)  # unembed_out rows
            k = np.transpose(q(k).reshape(H, rank, nope), (0, 2, 1))
            val = q(val).reshape(H, vd, rank)
            a = np.concatenate([k, val], axis=1).reshape(H * (nope + vd), rank)
        elif name.endswith(".weight") and a.ndim == 2 and not name.endswith("mlp.gate.weight"):
            a = q(a)
        out[name] = torch.from_numpy(np.ascontiguousarray(a))
    return out


def make_config(cls, kw):
    """cls(**kw); a keyword this transformers release does not take is set as an attribute
    afterwards (configs moved fields between releases), and said so."""
    kw = dict(kw)
    extra = {}
    while True:
        try:
            cfg = cls(**kw)
            break
        except TypeError as e:
            m = re.search(r"unexpected keyword argument '(\w+)'", str(e))
            if not m:
                raise
            extra[m.group(1)] = kw.pop(m.group(1))
    for k, v in extra.items():
        print("config: setting", k, "after construction", flush=True)
        setattr(cfg, k, v)
    return cfg


def build(case):
    torch.manual_seed(case["seed"])
    common = dict(vocab_size=case["vocab_size"], hidden_size=case["hidden_size"],
                  intermediate_size=case["intermediate_size"], num_hidden_layers=case["num_hidden_layers"],
                  num_attention_heads=case["num_attention_heads"], num_key_value_heads=case["num_key_value_heads"],
                  n_routed_experts=case["n_routed_experts"], num_experts_per_tok=case["num_experts_per_tok"],
                  moe_intermediate_size=case["moe_intermediate_size"], n_shared_experts=case["n_shared_experts"],
                  n_group=case["n_group"], topk_group=case["topk_group"],
                  routed_scaling_factor=case["routed_scaling_factor"], norm_topk_prob=case["norm_topk_prob"],
                  max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  eos_token_id=[case["vocab_size"] - 1], bos_token_id=0, pad_token_id=None)
    if case["arch"] == "glm4_moe":
        from transformers import Glm4MoeConfig as Config, Glm4MoeForCausalLM as Model
        rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": case["partial_rotary_factor"]}
        cfg = make_config(Config, dict(common, head_dim=case["head_dim"], partial_rotary_factor=case["partial_rotary_factor"],
                                       use_qk_norm=case["use_qk_norm"], attention_bias=case["attention_bias"],
                                       first_k_dense_replace=case["first_k_dense_replace"], rope_parameters=rope))
    else:
        from transformers import Glm4MoeLiteConfig as Config, Glm4MoeLiteForCausalLM as Model
        rope = {"rope_type": "default", "rope_theta": 10000.0}
        if case["rope"]:
            rope = dict(case["rope"], rope_theta=10000.0)
        cfg = make_config(Config, dict(common, q_lora_rank=case["q_lora_rank"], kv_lora_rank=case["kv_lora_rank"],
                                       qk_nope_head_dim=case["qk_nope_head_dim"], qk_rope_head_dim=case["qk_rope_head_dim"],
                                       v_head_dim=case["v_head_dim"], rope_interleave=case["rope_interleave"],
                                       rope_parameters=rope,
                                       mlp_layer_types=["dense"] + ["sparse"] * (case["num_hidden_layers"] - 1)))
    cfg._attn_implementation = "eager"
    try:
        cfg._experts_implementation = "eager"  # the plain per-expert loop, in float64
    except Exception as e:
        print("experts implementation:", e)
    model = Model(cfg).eval()
    g = torch.Generator().manual_seed(case["seed"])
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            def rnd(std):
                return torch.randn(p.shape, generator=g, dtype=torch.float32) * std
            if "rotary_emb" in name or "inv_freq" in name:
                continue
            if "norm" in name:
                p.copy_(1 + rnd(0.1))
            elif name.endswith("e_score_correction_bias"):
                p.copy_(rnd(0.1))
            elif "embed_tokens" in name:
                p.copy_(rnd(1.0))
            elif "lm_head" in name:
                p.copy_(rnd(0.3))
            elif name.endswith("mlp.gate.weight"):
                p.copy_(rnd(0.5))  # router logits of a few units: sigmoid scores well apart
            elif name.endswith(".bias"):
                p.copy_(rnd(0.1))
            else:
                p.copy_(rnd(0.15))
    return model, cfg


def greedy(model, prompt, n):
    ids = list(prompt)
    out, margins = [], []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1]
            top = torch.topk(logits, 2)
            out.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            ids.append(out[-1])
    return out, margins


def run(model, sd, prompt):
    m = model.to(torch.float64)
    m.load_state_dict({k: v.to(torch.float64) for k, v in sd.items()}, strict=True)
    with torch.no_grad():
        logits = m(torch.tensor([prompt])).logits[0, -1].tolist()
    toks, margins = greedy(m, prompt, GREEDY)
    return logits, toks, margins


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    fixture = {"about": "transformers reference for runner/glm4moe (runner/glm4moe/testdata/ref.py)",
               "transformers_version": transformers.__version__, "torch_version": torch.__version__,
               "precision": "float64 on CPU, eager attention", "cases": []}
    for case in CASES:
        try:
            model, cfg = build(case)
            d = os.path.join(args.out, case["name"])
            model.save_pretrained(d, safe_serialization=True)
            sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
            rng = np.random.default_rng(case["seed"])
            prompt = [int(x) for x in rng.integers(0, case["vocab_size"] - 1, size=case["prompt_len"])]
            entry = {"name": case["name"], "arch": case["arch"], "prompt": prompt, "variants": {},
                     "config": json.loads(cfg.to_json_string()),
                     "shapes": {k: list(v.shape) for k, v in sd.items() if "layers.1." in k}}
            for vname, v in VARIANTS.items():
                state = sd if v is None else quantized_state(sd, case, v)
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

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
import json
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 3, "scripts", "refs"))
import refkit  # noqa: E402

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
F32 = np.float32


def quantized_state(sd, case, v):
    """The state dict with every tensor `mlxg create` quantizes replaced by its dequantized self."""
    bits, group = v["bits"], v["group"]
    q = lambda m: refkit.quant_affine_rows(m, bits, group) if m.shape[1] % group == 0 else m
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
    refkit.randomize(model, case["seed"], buffers=True, rules=[
        ("norm", 1.0, 0.1), (lambda n: n.endswith("e_score_correction_bias"), 0.0, 0.1),
        ("embed_tokens", 0.0, 1.0), ("lm_head", 0.0, 0.3),
        (lambda n: n.endswith("mlp.gate.weight"), 0.0, 0.5),  # router logits of a few units: sigmoid scores well apart
        (lambda n: n.endswith(".bias"), 0.0, 0.1)])
    return model, cfg


def make(case, d):
    model, cfg = build(case)
    model.save_pretrained(d, safe_serialization=True)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    prompt = refkit.prompt_ids(case["seed"], 0, case["vocab_size"] - 1, case["prompt_len"])
    quantize = lambda sd, v: quantized_state(sd, case, v)  # noqa: E731
    return model, sd, prompt, quantize, {"arch": case["arch"], "config": json.loads(cfg.to_json_string()),
                                         "shapes": {k: list(v.shape) for k, v in sd.items() if "layers.1." in k}}


if __name__ == "__main__":
    refkit.main("glm4moe", CASES, make)

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
import os
import sys

import torch
from transformers import Phi3Config, Phi3ForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 3, "scripts", "refs"))
import refkit  # noqa: E402

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
    refkit.randomize(model, case["seed"])
    return model


def make(case, d):
    model = build(case)
    model.save_pretrained(d, safe_serialization=True)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    prompt = refkit.prompt_ids(case["seed"], 3, SHAPE["vocab_size"] - 1, case["prompt_len"])
    return model, sd, prompt, refkit.quantize_2d, {}


if __name__ == "__main__":
    refkit.main("phi3", CASES, make, cached=True)

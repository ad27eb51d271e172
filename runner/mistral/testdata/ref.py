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
import os
import sys

import torch
from transformers import (Ministral3Config, Ministral3ForCausalLM, Mistral3Config, Mistral3ForConditionalGeneration,
                          MistralConfig, MistralForCausalLM, PixtralVisionConfig)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 3, "scripts", "refs"))
import refkit  # noqa: E402

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
    refkit.randomize(model, case["seed"])
    return model


def make(case, d):
    model = build(case)
    model.save_pretrained(d, safe_serialization=True)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    # Ids 11 and up: not the image token (10) nor the control tokens below it.
    prompt = refkit.prompt_ids(case["seed"], 11, SHAPE["vocab_size"] - 1, case["prompt_len"])
    return model, sd, prompt, refkit.quantize_2d, {}


if __name__ == "__main__":
    refkit.main("mistral", CASES, make, cached=True)

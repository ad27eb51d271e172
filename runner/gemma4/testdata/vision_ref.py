#!/usr/bin/env python3
"""Reference for runner/gemma4's vision test (TestVisionReference): a tiny random-weight
Gemma 4 (Gemma4ForConditionalGeneration: a four-layer language model alternating a sliding
window of 8 positions, shorter than an image, and full attention of its own head size, with
use_bidirectional_attention "vision" and per-layer embeddings (whose image rows read the pad
token); a two-layer vision tower reading 4-pixel patches
pooled 2x2, a budget of 70 tokens an image, standardised) built in code from transformers'
own config classes, saved with save_pretrained (float32), and what transformers and Pillow
compute for it:

  - each test image (PNGs written here from a fixed seed: odd sizes and aspect ratios)
    through Gemma4ImageProcessor (the PIL one: the aspect-ratio-preserving resize to the
    token budget, bicubic, rescaled to [0, 1], not normalised): pixel_values (the real
    patches, without the padding) and image_position_ids;
  - the image features (get_image_features: tower, pooling, standardisation,
    embed_vision) of each image alone;
  - for prompts with 0, 1 and 2 images and text after them (each image as <|image>, its
    <|image|> tokens, <image|>), input_ids and the last position's logits, with
    mm_token_type_ids marking the image tokens as Gemma4Processor does (the bidirectional
    image mask), and for the prompts with images also without them (the plain causal
    mask), which the Go test must not match.

The model runs in float64 on the CPU with eager attention.

    python3 vision_ref.py --out DIR     # writes DIR/ckpt (checkpoint + preprocessor_config.json),
                                        # DIR/img*.png and DIR/refs.json

The Go test reads runner/gemma4/testdata/vision/ (the default --out) and skips while
refs.json is absent.
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from PIL import Image

VOCAB = 256
IMAGE, BOI, EOI = 250, 251, 252
IMAGES = [("img0.png", 45, 37), ("img1.png", 20, 52)]  # (name, width, height)
CASES = [
    dict(name="text", images=[]),
    dict(name="one", images=[0]),
    dict(name="two", images=[0, 1]),
]


def config():
    text = dict(vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB, hidden_size=64, intermediate_size=96,
                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                global_head_dim=32, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                sliding_window=8, layer_types=["sliding_attention", "full_attention"] * 2,
                max_position_embeddings=4096, final_logit_softcapping=30.0, tie_word_embeddings=True,
                hidden_size_per_layer_input=8, num_kv_shared_layers=0, use_double_wide_mlp=False,
                attention_k_eq_v=False, enable_moe_block=False, use_bidirectional_attention="vision",
                rope_parameters={
                    "sliding_attention": dict(rope_type="default", rope_theta=1e4),
                    "full_attention": dict(rope_type="proportional", partial_rotary_factor=0.25, rope_theta=1e6),
                },
                pad_token_id=0, bos_token_id=2, eos_token_id=1)
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=16, patch_size=4, pooling_kernel_size=2,
                  position_embedding_size=64, default_output_length=70, rms_norm_eps=1e-6,
                  hidden_activation="gelu_pytorch_tanh", standardize=True, use_clipped_linears=False,
                  rope_parameters=dict(rope_type="default", rope_theta=100.0))
    cfg = transformers.Gemma4Config(text_config=text, vision_config=vision, audio_config=None,
                                    image_token_id=IMAGE, boi_token_id=BOI, eoi_token_id=EOI,
                                    tie_word_embeddings=True)
    for c in (cfg, cfg.text_config, cfg.vision_config):
        c._attn_implementation = "eager"
    return cfg


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)

    def rnd(shape, std):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std

    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + rnd(p.shape, 0.1))  # Gemma 4's RMSNorms scale by w
            elif "position_embedding" in name or "embed_tokens" in name:
                p.copy_(rnd(p.shape, 0.5))
            else:
                fan_in = int(np.prod(p.shape[1:])) if p.dim() > 1 else p.shape[0]
                p.copy_(rnd(p.shape, 1 / np.sqrt(fan_in)))
        tower = model.model.vision_tower
        tower.std_bias.copy_(rnd(tower.std_bias.shape, 0.5))
        tower.std_scale.copy_(1 + rnd(tower.std_scale.shape, 0.3))


def write_images(out):
    rng = np.random.default_rng(11)
    paths = []
    for name, w, h in IMAGES:
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx * 3 + yy * 5) % 256], -1)
        noise = rng.integers(0, 60, size=(h, w, 3))
        arr = np.clip(base + noise, 0, 255).astype(np.uint8)
        path = os.path.join(out, name)
        Image.fromarray(arr, "RGB").save(path)
        paths.append(path)
    return paths


def processor():
    cls = getattr(transformers, "Gemma4ImageProcessorPil", None) or transformers.Gemma4ImageProcessor
    return cls(patch_size=4, pooling_kernel_size=2, max_soft_tokens=70, resample=Image.BICUBIC,
               do_resize=True, do_rescale=True, rescale_factor=1 / 255, do_normalize=False,
               image_mean=[0.0, 0.0, 0.0], image_std=[1.0, 1.0, 1.0], do_convert_rgb=True)


def features_of(model, pv, pos):
    feats = model.model.get_image_features(pv, pos)
    if hasattr(feats, "pooler_output") and feats.pooler_output is not None:
        feats = feats.pooler_output
    if isinstance(feats, (tuple, list)):
        feats = feats[0]
    return feats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "vision"))
    args = ap.parse_args()
    out = args.out
    ckpt = os.path.join(out, "ckpt")
    os.makedirs(ckpt, exist_ok=True)
    torch.manual_seed(0)

    cfg = config()
    model = transformers.Gemma4ForConditionalGeneration(cfg).eval()
    randomize(model, 23)
    model.save_pretrained(ckpt, safe_serialization=True)
    proc = processor()
    proc.save_pretrained(ckpt)
    model = model.double()

    images = []
    for path in write_images(out):
        x = proc(images=[Image.open(path)], return_tensors="pt")
        pv, pos = x["pixel_values"], x["image_position_ids"]
        real = int((pos[0, :, 0] >= 0).sum())
        n = int(x["num_soft_tokens_per_image"][0])
        with torch.no_grad():
            feats = features_of(model, pv.double(), pos)
        images.append(dict(file=os.path.basename(path), tokens=n,
                           pixel_values=pv[0, :real].float().flatten().tolist(), patches=real,
                           positions=pos[0, :real].flatten().tolist(),
                           pv_full=pv.float().flatten().tolist(), pv_shape=list(pv.shape),
                           pos_full=pos.flatten().tolist(), pos_shape=list(pos.shape),
                           features=feats.float().flatten().tolist(), feature_shape=list(feats.shape)))

    rng = np.random.default_rng(5)
    cases = []
    for c in CASES:
        ids = [2] + [int(v) for v in rng.integers(3, 240, size=5)]
        pv, pos = [], []
        for k in c["images"]:
            im = images[k]
            ids += [BOI] + [IMAGE] * im["tokens"] + [EOI] + [int(v) for v in rng.integers(3, 240, size=3)]
            pv.append(torch.tensor(im["pv_full"]).reshape(im["pv_shape"]))
            pos.append(torch.tensor(im["pos_full"]).reshape(im["pos_shape"]))
        ids += [int(v) for v in rng.integers(3, 240, size=4)]
        input_ids = torch.tensor([ids])
        entry = dict(name=c["name"], images=c["images"], input_ids=ids)
        with torch.no_grad():
            if pv:
                pixel_values, positions = torch.cat(pv, 0).double(), torch.cat(pos, 0)
                mm = (input_ids == IMAGE).long()
                logits = model(input_ids=input_ids, pixel_values=pixel_values, image_position_ids=positions,
                               mm_token_type_ids=mm).logits[0, -1]
                causal = model(input_ids=input_ids, pixel_values=pixel_values,
                               image_position_ids=positions).logits[0, -1]
                if torch.allclose(causal, logits, rtol=1e-6, atol=1e-9):
                    print(c["name"], ": logits without mm_token_type_ids equal those with them; no causal reference")
                else:
                    entry["logits_causal"] = causal.float().tolist()
            else:
                logits = model(input_ids=input_ids).logits[0, -1]
        entry["logits"] = logits.float().tolist()
        cases.append(entry)

    for im in images:
        for k in ("pv_full", "pos_full", "pv_shape", "pos_shape"):
            del im[k]
    refs = dict(transformers=transformers.__version__, torch=torch.__version__,
                pillow=Image.__version__, images=images, cases=cases)
    with open(os.path.join(out, "refs.json"), "w") as f:
        json.dump(refs, f)
    print("wrote", out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reference for runner/qwen25vl's TestVisionReference: a tiny random-weight Qwen2.5-VL
(a two-layer Qwen2 text model with M-RoPE, and a three-block vision tower with windowed
attention, block 1 attending over the whole image) built in code from transformers' own
config classes, saved with save_pretrained (float32), and what transformers and Pillow
compute for it:

  - each test image (PNGs written here from a fixed seed: one whose merged grid fills
    whole windows, one that leaves partial windows at its edges and needs a resize)
    through Qwen2VLImageProcessor (the PIL one): pixel_values and image_grid_thw;
  - the tower's merged features for each image alone;
  - for prompts with 0, 1 and 2 images and text after them: input_ids, the M-RoPE
    position ids and rope delta of get_rope_index, and the last position's logits.

The model runs in float64 on the CPU with eager attention.

    python3 vision_ref.py --out DIR     # writes DIR/ckpt (checkpoint + preprocessor_config.json),
                                        # DIR/img*.png and DIR/refs.json

The Go test reads runner/qwen25vl/testdata/vision/ (the default --out) and skips while
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
IMAGE, VIDEO, VSTART, VEND = 250, 251, 252, 253
# (name, width, height): 64×48 is 8×6 merged tokens (whole 2×2 windows); 37×70 resizes to
# 40×72, 5×9 tokens (windows cut at the right and bottom edges).
IMAGES = [("img0.png", 64, 48), ("img1.png", 37, 70)]
CASES = [
    dict(name="text", images=[]),
    dict(name="one", images=[0]),
    dict(name="two", images=[0, 1]),
]


def config():
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                max_position_embeddings=4096, tie_word_embeddings=False,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3]),
                eos_token_id=VOCAB - 1, bos_token_id=None, pad_token_id=None)
    vision = dict(depth=3, hidden_size=32, hidden_act="silu", intermediate_size=48, num_heads=2,
                  in_channels=3, patch_size=4, spatial_merge_size=2, temporal_patch_size=2,
                  window_size=16, fullatt_block_indexes=[1], out_hidden_size=64, tokens_per_second=2)
    cfg = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE,
                                        video_token_id=VIDEO, vision_start_token_id=VSTART,
                                        vision_end_token_id=VEND, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    return cfg


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            def rnd(std):
                return torch.randn(p.shape, generator=g, dtype=torch.float32) * std
            if ("norm" in name or "ln_q" in name) and name.endswith("weight"):
                p.copy_(1 + rnd(0.1))  # every RMSNorm here is plain
            elif name.endswith("bias"):
                p.copy_(rnd(0.1))
            elif "embed_tokens" in name:
                p.copy_(rnd(0.5))
            else:
                fan_in = int(np.prod(p.shape[1:])) if p.dim() > 1 else p.shape[0]
                p.copy_(rnd(1 / np.sqrt(fan_in)))


def write_images(out):
    rng = np.random.default_rng(11)
    paths = []
    for name, w, h in IMAGES:
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([(xx * 5 + yy) % 256, yy * 255 // max(h - 1, 1), (xx * yy) % 256], -1)
        noise = rng.integers(0, 60, size=(h, w, 3))
        arr = np.clip(base + noise, 0, 255).astype(np.uint8)
        path = os.path.join(out, name)
        Image.fromarray(arr, "RGB").save(path)
        paths.append(path)
    return paths


def flat_features(feats):
    """get_image_features' result across releases: a tensor, a tuple of per-image tensors,
    or an output object with pooler_output."""
    if hasattr(feats, "pooler_output") and feats.pooler_output is not None:
        feats = feats.pooler_output
    while isinstance(feats, (tuple, list)):
        feats = torch.cat(list(feats), 0) if len(feats) > 1 or torch.is_tensor(feats[0]) else feats[0]
    return feats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "vision"))
    args = ap.parse_args()
    out = args.out
    ckpt = os.path.join(out, "ckpt")
    os.makedirs(ckpt, exist_ok=True)
    torch.manual_seed(0)

    model = transformers.Qwen2_5_VLForConditionalGeneration(config()).eval()
    randomize(model, 5)
    model.save_pretrained(ckpt, safe_serialization=True)
    proc = transformers.Qwen2VLImageProcessor(patch_size=4, temporal_patch_size=2, merge_size=2,
                                              size={"shortest_edge": 16 * 64, "longest_edge": 256 * 64})
    proc.save_pretrained(ckpt)
    model = model.double()

    images = []
    for path in write_images(out):
        x = proc(images=[Image.open(path)], return_tensors="pt")
        pv, grid = x["pixel_values"], x["image_grid_thw"]
        with torch.no_grad():
            feats = flat_features(model.model.get_image_features(pv.double(), grid))
        images.append(dict(file=os.path.basename(path), pixel_values=pv.float().flatten().tolist(),
                           pixel_shape=list(pv.shape), grid=grid[0].tolist(),
                           features=feats.float().flatten().tolist(), feature_shape=list(feats.shape)))

    rng = np.random.default_rng(4)
    cases = []
    for c in CASES:
        ids = [int(v) for v in rng.integers(0, 240, size=5)]
        pv, grids = [], []
        for k in c["images"]:
            im = images[k]
            n = int(np.prod(im["grid"])) // 4
            ids += [VSTART] + [IMAGE] * n + [VEND] + [int(v) for v in rng.integers(0, 240, size=3)]
            pv.append(torch.tensor(im["pixel_values"]).reshape(im["pixel_shape"]))
            grids.append(im["grid"])
        ids += [int(v) for v in rng.integers(0, 240, size=4)]
        input_ids = torch.tensor([ids])
        kw = {}
        if pv:
            kw = dict(pixel_values=torch.cat(pv, 0).double(), image_grid_thw=torch.tensor(grids))
        entry = dict(name=c["name"], images=c["images"], input_ids=ids)
        try:
            pos, delta = model.model.get_rope_index(input_ids, kw.get("image_grid_thw"), None)
            entry["position_ids"] = pos[:, 0, :].tolist()
            entry["rope_delta"] = int(delta.flatten()[0])
        except Exception as e:  # the signature moves between releases
            print("get_rope_index:", e)
        with torch.no_grad():
            logits = model(input_ids=input_ids, **kw).logits[0, -1]
        entry["logits"] = logits.float().tolist()
        cases.append(entry)

    refs = dict(transformers=transformers.__version__, torch=torch.__version__,
                pillow=Image.__version__, images=images, cases=cases)
    with open(os.path.join(out, "refs.json"), "w") as f:
        json.dump(refs, f)
    print("wrote", out)


if __name__ == "__main__":
    main()

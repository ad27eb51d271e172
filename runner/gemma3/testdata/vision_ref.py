#!/usr/bin/env python3
"""Reference for runner/gemma3's vision test (TestVisionReference): a tiny random-weight
Gemma 3 (Gemma3ForConditionalGeneration: a four-layer language model alternating a sliding
window of 8 positions, shorter than an image, and full attention; a two-layer SigLIP tower
over 32×32 images in 4-pixel patches, pooled to 16 tokens an image) built in code from
transformers' own config classes, saved with save_pretrained (float32), and what
transformers and Pillow compute for it:

  - each test image (PNGs written here from a fixed seed: odd sizes, one enlarged and one
    reduced to 32×32) through Gemma3ImageProcessor (the PIL one, bilinear, mean and std
    0.5, no pan and scan): pixel_values;
  - the image features (get_image_features: tower, pooling, soft-embedding norm,
    projection) of each image alone;
  - for prompts with 0, 1 and 2 images and text after them (each image as
    <start_of_image>, 16 <image_soft_token>s, <end_of_image>), input_ids and the last
    position's logits, with token_type_ids marking the image tokens as Gemma3Processor
    does (the bidirectional image mask), and for the prompts with images also without
    them (the plain causal mask), which the Go test must not match.

The model runs in float64 on the CPU with eager attention.

    python3 vision_ref.py --out DIR     # writes DIR/ckpt (checkpoint + preprocessor_config.json),
                                        # DIR/img*.png and DIR/refs.json

The Go test reads runner/gemma3/testdata/vision/ (the default --out) and skips while
refs.json is absent.
"""
import argparse
import inspect
import json
import os

import numpy as np
import torch
import transformers
from PIL import Image

VOCAB = 256
IMAGE, BOI, EOI = 250, 251, 252
TOKENS = 16  # mm_tokens_per_image
IMAGES = [("img0.png", 45, 37), ("img1.png", 20, 52)]  # (name, width, height)
CASES = [
    dict(name="text", images=[]),
    dict(name="one", images=[0]),
    dict(name="two", images=[0, 1]),
]


def config():
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=1, head_dim=32, rms_norm_eps=1e-6,
                hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=32, sliding_window=8,
                layer_types=["sliding_attention", "full_attention"] * 2, max_position_embeddings=4096,
                final_logit_softcapping=None, attn_logit_softcapping=None, tie_word_embeddings=True,
                pad_token_id=0, bos_token_id=2, eos_token_id=1)
    if "rope_parameters" in inspect.signature(transformers.Gemma3TextConfig.__init__).parameters:
        text["rope_parameters"] = {"full_attention": dict(rope_type="default", rope_theta=1e6),
                                   "sliding_attention": dict(rope_type="default", rope_theta=1e4)}
    else:
        text.update(rope_theta=1e6, rope_local_base_freq=1e4, rope_scaling=None)
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
                  num_channels=3, image_size=32, patch_size=4, layer_norm_eps=1e-6,
                  hidden_act="gelu_pytorch_tanh", vision_use_head=False)
    cfg = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=TOKENS,
                                    image_token_index=IMAGE, boi_token_index=BOI, eoi_token_index=EOI,
                                    tie_word_embeddings=True)
    cfg._attn_implementation = "eager"
    cfg.text_config._attn_implementation = "eager"
    cfg.vision_config._attn_implementation = "eager"
    return cfg


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            def rnd(std):
                return torch.randn(p.shape, generator=g, dtype=torch.float32) * std
            if "norm" in name and name.endswith("weight"):
                # the language model's RMSNorms and the projector's soft-embedding norm
                # scale by 1 + w (weights around 0); the tower's LayerNorms by w
                plain = "vision_tower" in name
                p.copy_(1 + rnd(0.1) if plain else rnd(0.1))
            elif name.endswith("bias"):
                p.copy_(rnd(0.1))
            elif "position_embedding" in name or "embed_tokens" in name:
                p.copy_(rnd(0.5))
            elif name.endswith("mm_input_projection_weight"):
                p.copy_(rnd(1 / np.sqrt(p.shape[0])))  # [vision hidden, text hidden]: x @ w
            else:
                fan_in = int(np.prod(p.shape[1:])) if p.dim() > 1 else p.shape[0]
                p.copy_(rnd(1 / np.sqrt(fan_in)))


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
    # transformers 5 names the PIL processor Gemma3ImageProcessorPil (Gemma3ImageProcessor
    # may be the torchvision one); earlier releases' Gemma3ImageProcessor is the PIL one.
    cls = getattr(transformers, "Gemma3ImageProcessorPil", None) or transformers.Gemma3ImageProcessor
    return cls(size={"height": 32, "width": 32}, resample=Image.BILINEAR, do_resize=True, do_rescale=True,
               rescale_factor=1 / 255, do_normalize=True, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
               do_convert_rgb=True, do_pan_and_scan=False)


def features_of(model, pv):
    feats = model.model.get_image_features(pv)
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
    model = transformers.Gemma3ForConditionalGeneration(cfg).eval()
    randomize(model, 23)
    model.save_pretrained(ckpt, safe_serialization=True)
    proc = processor()
    proc.save_pretrained(ckpt)
    model = model.double()

    images = []
    for path in write_images(out):
        x = proc(images=[Image.open(path)], return_tensors="pt")
        pv = x["pixel_values"]
        with torch.no_grad():
            feats = features_of(model, pv.double())
        images.append(dict(file=os.path.basename(path), pixel_values=pv.float().flatten().tolist(),
                           pixel_shape=list(pv.shape), features=feats.float().flatten().tolist(),
                           feature_shape=list(feats.shape)))

    rng = np.random.default_rng(5)
    cases = []
    for c in CASES:
        ids = [2] + [int(v) for v in rng.integers(3, 240, size=5)]
        pv = []
        for k in c["images"]:
            im = images[k]
            ids += [BOI] + [IMAGE] * TOKENS + [EOI] + [int(v) for v in rng.integers(3, 240, size=3)]
            pv.append(torch.tensor(im["pixel_values"]).reshape(im["pixel_shape"]))
        ids += [int(v) for v in rng.integers(3, 240, size=4)]
        input_ids = torch.tensor([ids])
        entry = dict(name=c["name"], images=c["images"], input_ids=ids)
        with torch.no_grad():
            if pv:
                pixel_values = torch.cat(pv, 0).double()
                token_type_ids = (input_ids == IMAGE).long()
                logits = model(input_ids=input_ids, pixel_values=pixel_values, token_type_ids=token_type_ids).logits[0, -1]
                causal = model(input_ids=input_ids, pixel_values=pixel_values).logits[0, -1]
                if torch.allclose(causal, logits, rtol=1e-6, atol=1e-9):
                    # this release derives token_type_ids itself: no causal reference
                    print(c["name"], ": logits without token_type_ids equal those with them; no causal reference")
                else:
                    entry["logits_causal"] = causal.float().tolist()
            else:
                logits = model(input_ids=input_ids).logits[0, -1]
        entry["logits"] = logits.float().tolist()
        cases.append(entry)

    refs = dict(transformers=transformers.__version__, torch=torch.__version__,
                pillow=Image.__version__, images=images, cases=cases)
    with open(os.path.join(out, "refs.json"), "w") as f:
        json.dump(refs, f)
    print("wrote", out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Compute transformers reference logits and greedy tokens for the cases written by
`go run ./scripts/refs/gen -out DIR`, and write the fixture runner/testdata/refs.json.

    python3 scripts/refs/reference.py DIR OUT.json

Needs torch, transformers (5.x) and safetensors. Everything runs on the CPU in
float64, so the reference carries no rounding of its own: the fp32 cases load the
float32 weights and widen them; the MLX-quantized cases are dequantized here
(w = scale * q + bias per group, codes read as MLX's little-endian bit stream,
independently of the Go code) and loaded into the same transformers model class.

For every case it records the last-position logits of the prompt and the first
greedy_n greedy tokens (argmax over the full recomputed sequence at each step), with
the margin between the two best logits at each step so a fragile case can be
spotted, and the rotary inverse frequencies and attention scaling transformers used.
A case that fails is reported with its traceback; the others are still written.
"""
import hashlib
import json
import os
import sys
import traceback

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file
from transformers import AutoConfig, AutoModelForCausalLM

FULL_LOGITS = 4096  # larger vocabularies store a subset, keeping the fixture small


def subset_logits(values):
    """All logits of a small vocabulary; else the 256 largest and every (V//1024)-th."""
    n = len(values)
    if n <= FULL_LOGITS:
        return None, values
    top = sorted(range(n), key=lambda i: -values[i])[:256]
    index = sorted(set(top) | set(range(0, n, n // 1024)))
    return index, [values[i] for i in index]


def weights_digest(d):
    """registry/randmodel.Digest: sha256 over each tensor, in name order, of
    name NUL dtype NUL shape-as-JSON NUL bytes; independent of the file layout."""
    tensors = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".safetensors"):
            continue
        with open(os.path.join(d, f), "rb") as fh:
            blob = fh.read()
        n = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8 : 8 + n])
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            tensors[name] = (info["dtype"], info["shape"], blob[base + begin : base + end])
    h = hashlib.sha256()
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        h.update(f"{name}\0{dtype}\0{json.dumps(shape, separators=(',', ':'))}\0".encode())
        h.update(data)
    return h.hexdigest()


def load_dir(d):
    sd = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            sd.update(load_file(os.path.join(d, f)))
    return sd


def unpack(packed, bits, cols):
    """MLX codes: each row a little-endian bit stream, code i at bits [i*bits, (i+1)*bits)."""
    rows = packed.shape[0]
    by = packed.astype("<u4").view(np.uint8).reshape(rows, -1)
    stream = np.unpackbits(by, axis=1, bitorder="little")[:, : cols * bits]
    stream = stream.reshape(rows, cols, bits).astype(np.int64)
    return (stream << np.arange(bits)).sum(axis=2)


def dequantize(sd, bits, group):
    out = {}
    for name, t in sd.items():
        if name.endswith(".scales") or name.endswith(".biases"):
            continue
        base = name[: -len(".weight")] if name.endswith(".weight") else None
        if base is not None and base + ".scales" in sd:
            scales = sd[base + ".scales"].astype(np.float64)
            biases = sd[base + ".biases"].astype(np.float64)
            cols = t.shape[1] * 32 // bits
            q = unpack(t, bits, cols).astype(np.float64)
            s = np.repeat(scales, group, axis=1)
            b = np.repeat(biases, group, axis=1)
            out[name] = torch.from_numpy(s * q + b)
        else:
            out[name] = torch.from_numpy(t.astype(np.float64))
    return out


def rope_parameters(cfg):
    rp = {"rope_type": "default", "rope_theta": cfg["rope_theta"]}
    for k, v in (cfg.get("rope_scaling") or {}).items():
        rp["rope_type" if k == "type" else k] = v
    return rp


def build_model(case, root):
    d = os.path.join(root, case["dir"])
    got = weights_digest(d)
    if got != case["weights_digest"]:
        raise SystemExit(f"{case['name']}: weights in {d} have digest {got}, cases.json says {case['weights_digest']}")
    raw = json.load(open(os.path.join(d, "config.json")))
    raw.pop("quantization", None)
    raw.pop("quantization_config", None)
    config = AutoConfig.for_model(**raw)
    try:
        config._attn_implementation = "eager"
    except Exception:
        pass
    want = rope_parameters(raw)
    rp = getattr(config, "rope_parameters", None)
    if rp is not None and any(rp.get(k) != v for k, v in want.items()):
        print(f"  {case['name']}: config.rope_parameters {rp} differs from {want}; setting it", flush=True)
        config.rope_parameters = want
        if hasattr(config, "standardize_rope_params"):
            config.standardize_rope_params()
    print(f"  {case['name']}: rope {getattr(config, 'rope_parameters', None)}", flush=True)

    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model = model.to(torch.float64).eval()
    sd = load_dir(d)
    if case.get("quantize"):
        q = case["quantize"]
        weights = dequantize(sd, q["bits"], q["group_size"])
    else:
        weights = {k: torch.from_numpy(v.astype(np.float64)) for k, v in sd.items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise SystemExit(f"{case['name']}: missing {missing}, unexpected {unexpected}")
    if config.tie_word_embeddings:
        model.tie_weights()
        assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    return model


@torch.no_grad()
def run_case(case, root):
    model = build_model(case, root)
    ids = torch.tensor([case["prompt"]], dtype=torch.long)
    logits = model(ids).logits[0, -1]
    greedy, margins = [], []
    seq = ids
    for _ in range(case["greedy_n"]):
        step = model(seq).logits[0, -1]
        top2 = torch.topk(step, 2).values
        nxt = int(torch.argmax(step))
        greedy.append(nxt)
        margins.append(float(top2[0] - top2[1]))
        seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
    out = dict(case)
    out.pop("dir", None)
    index, values = subset_logits([float(f"{x:.9g}") for x in logits.tolist()])
    if index is not None:
        out["logits_index"] = index
    out["logits"] = values
    out["greedy"] = greedy
    out["greedy_margins"] = [float(f"{m:.4g}") for m in margins]
    rot = model.model.rotary_emb
    out["rope_inv_freq"] = [float(f"{x:.9g}") for x in rot.inv_freq.tolist()]
    out["rope_attention_scaling"] = float(getattr(rot, "attention_scaling", 1.0))
    print(f"  {case['name']}: greedy {greedy}, smallest margin {min(margins):.3g}, logit range "
          f"[{float(logits.min()):.3f}, {float(logits.max()):.3f}]", flush=True)
    return out


def write_fixture(fixture, path):
    """One line per case, so a regenerated fixture diffs case by case."""
    cases = fixture["cases"]
    head = {k: v for k, v in fixture.items() if k != "cases"}
    with open(path, "w") as f:
        f.write(json.dumps(head)[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c) for c in cases))
        f.write("\n]}\n")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    root, out_path = sys.argv[1], sys.argv[2]
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    cases = json.load(open(os.path.join(root, "cases.json")))
    results, failed = [], []
    for c in cases:
        try:
            results.append(run_case(c, root))
        except BaseException:
            traceback.print_exc()
            failed.append(c["name"])
    fixture = {
        "about": "transformers reference for runner's logits tests; regenerate with scripts/refs/regen.sh",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "precision": "float64 on CPU, eager attention",
        "cases": results,
    }
    write_fixture(fixture, out_path)
    print(f"wrote {out_path}: {len(results)} cases; failed: {failed or 'none'}", flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

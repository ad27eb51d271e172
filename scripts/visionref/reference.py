"""Pillow and transformers reference outputs for vision/ (run where Pillow and transformers are
installed, e.g. the GPU device): python3 reference.py IMAGES_DIR OUT_DIR.

IMAGES_DIR holds the PNG and JPEG files `go test ./vision -run TestWriteReferenceImages
-args -write-reference-images DIR` writes. OUT_DIR receives reference.json (sha256 of every
converted and resized image, the processors' pixel_values summaries) and raw/ with the bytes of
the small cases, for debugging a mismatch."""
import hashlib, io, json, os, sys
import numpy as np
from PIL import Image, ImageOps, __version__ as pil_version

src, out = sys.argv[1], sys.argv[2]
os.makedirs(os.path.join(out, "raw"), exist_ok=True)
filters = {"bilinear": 2, "bicubic": 3, "lanczos": 1, "box": 4}
ref = {"pillow": pil_version, "convert": {}, "resize": [], "orient": {}, "processors": []}


def sha(b):
    return hashlib.sha256(b).hexdigest()


def targets(w, h):
    t = {(max(1, w * 2 // 3), max(1, h * 3 // 5)), (w * 2 + 1, h + 3), (w, max(1, h // 2)), (max(1, w // 3), h), (7, 5)}
    if (w, h) == (640, 480):
        t |= {(448, 336), (224, 224), (896, 896), (1000, 1)}
    return sorted(t)


for name in sorted(os.listdir(src)):
    path = os.path.join(src, name)
    if name.endswith(".png"):
        im = Image.open(path)
        mode = im.mode
        rgb = im.convert("RGB")
        ref["convert"][name] = {"mode": mode, "sha256": sha(rgb.tobytes())}
        if rgb.width * rgb.height <= 101 * 67:
            open(os.path.join(out, "raw", name + ".rgb"), "wb").write(rgb.tobytes())
        for (w, h) in targets(*rgb.size):
            for fname, f in filters.items():
                r = rgb.resize((w, h), resample=f)
                ref["resize"].append({"image": name, "filter": fname, "w": w, "h": h, "sha256": sha(r.tobytes())})
    elif name.endswith(".jpg"):
        im = ImageOps.exif_transpose(Image.open(path)).convert("RGB")
        ref["orient"][name] = {"w": im.width, "h": im.height, "rgb": list(im.tobytes())}

# Lossless WebP and GIF written by Pillow from a reference PNG: decoding them must give the
# same pixels as Pillow's convert("RGB").
for name, fmt, kw in [("rgba-53x41.png", "WEBP", {"lossless": True}), ("palette-45x30.png", "GIF", {})]:
    im = Image.open(os.path.join(src, name))
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    again = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    ext = fmt.lower()
    open(os.path.join(out, name[:-4] + "." + ext), "wb").write(buf.getvalue())
    ref["convert"][name[:-4] + "." + ext] = {"mode": Image.open(io.BytesIO(buf.getvalue())).mode, "sha256": sha(again.tobytes())}

# transformers' PIL image processors, where transformers is installed.
procs = []
try:
    import transformers
    ref["transformers"] = transformers.__version__
except ImportError:
    transformers = None
try:
    from transformers import Qwen2VLImageProcessor  # noqa
    procs.append(("qwen2vl", Qwen2VLImageProcessor, dict(patch_size=14, temporal_patch_size=2, merge_size=2,
                  min_pixels=56 * 56, max_pixels=28 * 28 * 64), {
        "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
        "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 64,
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}))
    procs.append(("qwen3vl-like", Qwen2VLImageProcessor, dict(patch_size=16, temporal_patch_size=2, merge_size=2,
                  size={"shortest_edge": 32 * 32, "longest_edge": 32 * 32 * 48}, image_mean=[0.5] * 3, image_std=[0.5] * 3), {
        "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
        "size": {"shortest_edge": 32 * 32, "longest_edge": 32 * 32 * 48}, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}))
except Exception as e:
    ref["qwen_error"] = repr(e)
try:
    from transformers import Gemma3ImageProcessor
    procs.append(("gemma3", Gemma3ImageProcessor, dict(size={"height": 64, "width": 64}), {
        "image_processor_type": "Gemma3ImageProcessor", "size": {"height": 64, "width": 64},
        "image_mean": [0.5] * 3, "image_std": [0.5] * 3, "resample": 2}))
except Exception as e:
    ref["gemma_error"] = repr(e)

for pname, cls, kwargs, config in procs:
    proc = cls(**kwargs)
    for name in ["rgb-101x67.png", "rgb-640x480.png", "rgba-53x41.png", "rgb-999x3.png", "rgb-5x7.png"]:
        im = Image.open(os.path.join(src, name)).convert("RGB")
        try:
            res = proc(images=[im], return_tensors="np")
        except Exception as e:
            ref["processors"].append({"processor": pname, "image": name, "error": repr(e)})
            continue
        pv = np.asarray(res["pixel_values"], dtype=np.float32)
        entry = {"processor": pname, "class": type(proc).__name__, "config": config, "image": name,
                 "shape": list(pv.shape), "sum": float(pv.astype(np.float64).sum())}
        if "image_grid_thw" in res:
            entry["grid"] = np.asarray(res["image_grid_thw"]).reshape(-1).tolist()
        flat = pv.reshape(-1)
        entry["sample_every"] = 53
        entry["sample"] = flat[::53].tolist()
        ref["processors"].append(entry)

json.dump(ref, open(os.path.join(out, "reference.json"), "w"))
print("pillow", pil_version, "transformers", ref.get("transformers"), "cases", len(ref["resize"]), "procs", len(ref["processors"]))

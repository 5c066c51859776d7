"""What the vision tests share: paths, synthetic images, the harness."""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SPINDLE_BUILD_DIR", ROOT / "build"))
HARNESS = BUILD / "vision_harness"
SPINDLE_BIN = Path(os.environ.get("SPINDLE_BIN", BUILD / "spindle"))


@pytest.fixture(scope="session")
def harness():
    if not HARNESS.is_file():
        pytest.skip(f"{HARNESS} not built")
    return HARNESS


def synthetic(kind, w, h, seed):
    """A PIL image with structure (gradients, edges) and noise: mode RGB,
    L (grayscale), RGBA (varying alpha) or P (32-color palette)."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                     ((x + y) % 17) * 15], -1)
    noise = rng.integers(-40, 40, (h, w, 3))
    rgb = np.clip(base + noise, 0, 255).astype(np.uint8)
    if kind == "RGB":
        return Image.fromarray(rgb, "RGB")
    if kind == "L":
        return Image.fromarray(rgb[..., 0], "L")
    if kind == "RGBA":
        alpha = rng.integers(0, 256, (h, w), dtype=np.uint8)
        alpha[: h // 3] = 255
        alpha[-2:] = 0
        return Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
    if kind == "P":
        return Image.fromarray(rgb, "RGB").quantize(colors=32)
    raise ValueError(kind)


def save(img, path, fmt):
    kw = {"lossless": True} if fmt == "WEBP" else {}
    if fmt == "JPEG":
        img = img.convert("RGB")
        kw = {"quality": 92}
    img.save(path, fmt, **kw)
    return path


def run_harness(harness, *args):
    r = subprocess.run([str(harness), *map(str, args)], capture_output=True,
                       text=True, timeout=120)
    return r.returncode, r.stderr.strip()


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory):
    """The tiny Gemma 3 vision-language model (make_gemma3_vlm.py), built
    once per session unless SPINDLE_VLM_DIR names one."""
    given = os.environ.get("SPINDLE_VLM_DIR")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("gemma3-vlm")
    r = subprocess.run([os.sys.executable, str(Path(__file__).parent /
                                               "make_gemma3_vlm.py"), str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def load_reference(mdir):
    """mlx-vlm's own loader: the model in float32 and its processor."""
    import mlx.core as mx
    from mlx_vlm.utils import load
    model, processor = load(str(mdir))
    model.set_dtype(mx.float32)
    return model, processor


def reference_image_rows(model, pixel_values):
    """mlx-vlm's image features as they enter the language model: the tower,
    the projector, the division by sqrt(hidden) of
    prepare_inputs_for_multimodal and the language model's bf16-rounded
    sqrt(hidden) factor."""
    import mlx.core as mx
    hidden = model.config.text_config.hidden_size
    pv = mx.array(np.asarray(pixel_values, np.float32))
    h, _, _ = model.vision_tower(pv.transpose(0, 2, 3, 1),
                                 output_hidden_states=True)
    feats = model.multi_modal_projector(h) / (hidden ** 0.5)
    feats = feats * mx.array(hidden ** 0.5, mx.bfloat16).astype(mx.float32)
    return np.array(feats.astype(mx.float32))

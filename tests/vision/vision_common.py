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
    L (grayscale), RGBA (varying alpha) or P (palette, one transparent
    index)."""
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
        img = Image.fromarray(rgb, "RGB").quantize(colors=32)
        img.info["transparency"] = 3
        return img
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

"""The Gemma 3 image encoder (SigLIP tower + multimodal projector) against
mlx-vlm's own classes on the tiny random-weight model
(make_gemma3_vlm.py): the rows Spindle puts in the prompt equal mlx-vlm's
image features as they enter the language model within f32 tolerance
(relative max error 1e-4 of their spread; measured ~1e-6). The digest is
the image bytes' and the encoder's: the same file gives the same digest,
another file another."""
import numpy as np
import pytest

from vision_common import (harness, load_reference, reference_image_rows,  # noqa: F401
                           run_harness, save, synthetic, tiny_vlm)

TOL_REL = 1e-4


def encode(harness, mdir, path, tmp_path):
    out = tmp_path / "rows.f32"
    import subprocess
    r = subprocess.run([str(harness), "encode", str(mdir), str(path), str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, np.float32), r.stdout.strip()


@pytest.mark.parametrize("mode,w,h", [("RGB", 300, 200), ("RGBA", 97, 131),
                                      ("L", 896, 896)])
def test_encoder_rows_match_mlx_vlm(harness, tiny_vlm, tmp_path, mode, w, h):
    from mlx_vlm.utils import load_image
    path = save(synthetic(mode, w, h, w + h), tmp_path / "img.png", "PNG")
    model, processor = load_reference(tiny_vlm)
    pv = processor.image_processor(load_image(str(path)))["pixel_values"]
    want = reference_image_rows(model, np.stack(pv)).reshape(-1)
    got, _ = encode(harness, tiny_vlm, path, tmp_path)
    assert got.shape == want.shape
    err = float(np.max(np.abs(got - want)) / np.std(want))
    assert err <= TOL_REL, f"max|err|/std {err:.3g} > {TOL_REL}"


def test_digest_names_the_image(harness, tiny_vlm, tmp_path):
    a = save(synthetic("RGB", 40, 30, 1), tmp_path / "a.png", "PNG")
    b = save(synthetic("RGB", 40, 30, 2), tmp_path / "b.png", "PNG")
    _, da = encode(harness, tiny_vlm, a, tmp_path)
    _, da2 = encode(harness, tiny_vlm, a, tmp_path)
    _, db = encode(harness, tiny_vlm, b, tmp_path)
    assert len(da) == 32 and da == da2 and da != db

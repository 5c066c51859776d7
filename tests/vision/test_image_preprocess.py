"""Image decoding and Gemma 3's pre-processing against transformers'
load_image (what mlx-vlm's does too: Image.convert("RGB")) and
Gemma3ImageProcessorPil (its PIL backend: Image.resize, rescale,
normalize) on synthetic images of odd sizes, grayscale, alpha and
palettes, in every format Spindle decodes (PNG, GIF, WebP lossless, JPEG
through libjpeg-turbo as PIL decodes it): the pixel tensors are equal to
the last f32 bit, since Spindle reproduces PIL's fixed-point resampling.

Malformed inputs get a one-line error naming the problem."""
import numpy as np
import pytest

from vision_common import harness, run_harness, save, synthetic  # noqa: F401

CASES = [  # (mode, width, height, format)
    ("RGB", 53, 37, "PNG"), ("RGB", 1000, 700, "PNG"), ("L", 41, 29, "PNG"),
    ("RGBA", 67, 45, "PNG"), ("P", 50, 31, "GIF"), ("RGB", 19, 911, "PNG"),
    ("RGBA", 33, 21, "WEBP"), ("RGB", 896, 896, "PNG"), ("RGB", 2, 2, "PNG"),
    ("RGB", 121, 77, "JPEG"), ("L", 64, 48, "JPEG"),
]


def load_image(path):
    from transformers.image_utils import load_image as hf_load_image
    return hf_load_image(path)


def reference(img, w, h, resample):
    from transformers.models.gemma3.image_processing_pil_gemma3 import \
        Gemma3ImageProcessorPil
    proc = Gemma3ImageProcessorPil(size={"height": h, "width": w},
                                   resample=resample)
    return np.asarray(proc(img)["pixel_values"][0], np.float32)


def ours(harness, path, w, h, resample, tmp_path):
    out = tmp_path / "px.f32"
    rc, err = run_harness(harness, "pixels", path, w, h, resample, out)
    assert rc == 0, err
    return np.fromfile(out, np.float32).reshape(3, h, w)


@pytest.mark.parametrize("mode,w,h,fmt", CASES,
                         ids=[f"{m}-{w}x{h}-{f}" for m, w, h, f in CASES])
@pytest.mark.parametrize("size,resample", [((896, 896), 2), ((61, 47), 2),
                                           ((61, 47), 3), ((96, 130), 1)])
def test_pixels_equal_gemma3_processor(harness, tmp_path, mode, w, h, fmt,
                                       size, resample):
    path = save(synthetic(mode, w, h, w * h), tmp_path / f"img.{fmt.lower()}",
                fmt)
    want = reference(load_image(str(path)), *size, resample)
    got = ours(harness, path, *size, resample, tmp_path)
    diff = np.abs(got - want)
    assert diff.max() == 0, (
        f"max |diff| {diff.max()} at {np.unravel_index(diff.argmax(), diff.shape)}"
        f", {int((diff > 0).sum())} values differ")


@pytest.mark.parametrize("orientation", range(1, 9))
def test_jpeg_exif_orientation_as_load_image(harness, tmp_path, orientation):
    """load_image turns the image upright (ImageOps.exif_transpose); a
    non-square image shows every mirror and rotation."""
    from PIL import Image
    img = synthetic("RGB", 64, 40, orientation)
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / "exif.jpg"
    img.save(path, "JPEG", quality=95, exif=exif)
    want = reference(load_image(str(path)), 48, 48, 2)
    got = ours(harness, path, 48, 48, 2, tmp_path)
    assert np.array_equal(got, want)


def test_gif_first_frame(harness, tmp_path):
    from PIL import Image
    frames = [Image.new("RGB", (20, 10), c) for c in ("red", "blue")]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    got = ours(harness, path, 20, 10, 2, tmp_path)
    assert np.allclose(got[:, 0, 0], [1, -1, -1])


def malformed(tmp_path):
    from PIL import Image
    png = save(synthetic("RGB", 40, 30, 1), tmp_path / "ok.png", "PNG")
    data = png.read_bytes()
    big = Image.new("L", (8000, 8000))
    bomb = tmp_path / "bomb.png"
    big.save(bomb, "PNG")
    return {
        "empty": (b"", "empty"),
        "text": (b"hello, not an image", "not a JPEG, PNG, WebP or GIF"),
        "truncated-png": (data[: len(data) // 2], "PNG image is damaged"),
        "header-only-png": (data[:40], "PNG image is damaged"),
        "bad-webp": (b"RIFF\x10\x00\x00\x00WEBPVP8 junkjunk", "WebP image is damaged"),
        "bomb": (bomb.read_bytes(), "over the limit of 40000000 pixels"),
    }


@pytest.mark.parametrize("name", ["empty", "text", "truncated-png",
                                  "header-only-png", "bad-webp", "bomb"])
def test_malformed_image_one_line_error(harness, tmp_path, name):
    data, want = malformed(tmp_path)[name]
    path = tmp_path / f"{name}.bin"
    path.write_bytes(data)
    rc, err = run_harness(harness, "pixels", path, 8, 8, 2, tmp_path / "o")
    assert rc == 1 and "\n" not in err and want in err, err


@pytest.mark.parametrize("size", [(61, 47), (896, 896)])
def test_cmyk_jpeg_as_load_image(harness, tmp_path, size):
    """A CMYK JPEG (as Photoshop writes them: Adobe's inverted CMYK, which
    PIL assumes for every CMYK JPEG) converted to RGB as PIL converts it."""
    path = tmp_path / "cmyk.jpg"
    img = synthetic("RGB", 83, 59, 7).convert("CMYK")
    img.save(path, "JPEG", quality=90)
    assert load_image_mode(path) == "CMYK"
    want = reference(load_image(str(path)), *size, 2)
    got = ours(harness, path, *size, 2, tmp_path)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("size", [(61, 47), (40, 30)])
def test_transparent_gif_as_load_image(harness, tmp_path, size):
    """A GIF's transparent pixels take their palette colour, as
    Image.convert("RGB") gives them (not black)."""
    img = synthetic("P", 40, 30, 11)
    path = tmp_path / "transparent.gif"
    img.save(path, "GIF", transparency=3)
    want = reference(load_image(str(path)), *size, 2)
    got = ours(harness, path, *size, 2, tmp_path)
    assert np.array_equal(got, want)


def load_image_mode(path):
    from PIL import Image
    with Image.open(path) as im:
        return im.mode

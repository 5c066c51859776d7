"""MLX affine quantization: our decoders and matmul against MLX itself.

Quantizes random matrices with mx.quantize, hands the packed words, scales
and biases to tests/tools/affine_harness (built with the library), and
compares sp_weight_row with mx.dequantize and sp_matmul with
mx.quantized_matmul. This pins the bit layout for every width, including
the 3/5/6-bit streams.

The harness is looked up as $SPINDLE_AFFINE_HARNESS, else
$SPINDLE_BUILD_DIR/affine_harness, else build/affine_harness.
"""
import os
import pathlib
import subprocess

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def harness_path():
    explicit = os.environ.get("SPINDLE_AFFINE_HARNESS")
    if explicit:
        return pathlib.Path(explicit)
    build = pathlib.Path(os.environ.get("SPINDLE_BUILD_DIR", ROOT / "build"))
    return build / "affine_harness"


@pytest.fixture(scope="module")
def harness():
    path = harness_path()
    if not path.is_file():
        pytest.fail(f"{path} not found: build the project first "
                    "(cmake --build build) or set SPINDLE_BUILD_DIR")
    return str(path)


MX_DTYPES = {"f32": mx.float32, "f16": mx.float16, "bf16": mx.bfloat16}


def raw_bytes(a):
    """Little-endian bytes of an mlx array (bf16 via a uint16 view)."""
    if a.dtype in (mx.float16, mx.bfloat16):
        a = a.view(mx.uint16)
    return np.array(a).tobytes()


def quantized(rows, cols, bits, gs, qdtype, seed):
    mx.random.seed(seed)
    w = mx.random.normal((rows, cols)).astype(MX_DTYPES[qdtype])
    wq, scales, biases = mx.quantize(w, group_size=gs, bits=bits)
    assert wq.dtype == mx.uint32
    assert wq.shape == (rows, cols * bits // 32)
    assert scales.dtype == MX_DTYPES[qdtype]
    assert scales.shape == (rows, cols // gs)
    return wq, scales, biases


def write_inputs(tmp_path, wq, scales, biases):
    paths = []
    for name, arr in (("packed", wq), ("scales", scales), ("biases", biases)):
        p = tmp_path / f"{name}.bin"
        p.write_bytes(raw_bytes(arr))
        paths.append(str(p))
    return paths


def term_magnitude(scales, biases, bits, gs):
    """|s| * (2^bits - 1) + |b| per element: bounds the rounded terms."""
    s = np.abs(np.array(scales.astype(mx.float32)))
    b = np.abs(np.array(biases.astype(mx.float32)))
    return np.repeat(s * (2 ** bits - 1) + b, gs, axis=1)


@pytest.mark.parametrize("qdtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_affine_against_mlx(harness, tmp_path, bits, gs, qdtype):
    rows, cols = 19, 640  # 640 crosses the kernels' 512-column tile
    wq, scales, biases = quantized(rows, cols, bits, gs, qdtype,
                                   seed=bits * 1000 + gs)
    packed, sc, bi = write_inputs(tmp_path, wq, scales, biases)
    shape = [str(rows), str(cols), str(bits), str(gs), qdtype]

    # mlx in f32 with the exact f32 widening of the stored qparams, so the
    # only difference left is the rounding of s * q + b.
    s32, b32 = scales.astype(mx.float32), biases.astype(mx.float32)
    ref = np.array(mx.dequantize(wq, s32, b32, group_size=gs, bits=bits))
    mag = term_magnitude(scales, biases, bits, gs)

    out = tmp_path / "deq.bin"
    subprocess.run([harness, "dequant", *shape, packed, sc, bi, str(out)],
                   check=True)
    got = np.fromfile(out, dtype=np.float32).reshape(rows, cols)
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= 2.0 ** -22 * mag), f"max err {err.max()}"

    for n_tokens, threads in ((1, 2), (3, 3), (4, 1)):
        x = np.random.default_rng(bits + gs + n_tokens).standard_normal(
            (n_tokens, cols)).astype(np.float32)
        xp = tmp_path / "x.bin"
        xp.write_bytes(x.tobytes())
        yp = tmp_path / "y.bin"
        subprocess.run([harness, "matmul", *shape, packed, sc, bi, str(yp),
                        str(xp), str(n_tokens), str(threads)], check=True)
        y = np.fromfile(yp, dtype=np.float32).reshape(n_tokens, rows)
        y_mlx = np.array(mx.quantized_matmul(
            mx.array(x), wq, s32, b32, transpose=True, group_size=gs,
            bits=bits))
        bound = 1e-5 * np.sqrt(cols) * (np.abs(x) @ mag.T.astype(np.float64))
        diff = np.abs(y.astype(np.float64) - y_mlx)
        assert np.all(diff <= bound), (
            f"tokens={n_tokens}: max diff {diff.max()} bound {bound.min()}")


@pytest.mark.parametrize("wdtype", ["f32", "bf16"])
def test_mxfp4_against_mlx(harness, tmp_path, wdtype):
    """MLX's mxfp4 mode: codes in the 4-bit affine layout, uint8 E8M0
    exponents per 32. Decoding is exact (each value is a 2-bit mantissa
    times a power of two), so sp_weight_row must equal mx.dequantize value
    for value (MLX's -0 of code 8 equals our +0), and sp_matmul must stay
    within f32 accumulation of mx.quantized_matmul."""
    rows, cols = 19, 640
    mx.random.seed(7)
    w = (mx.random.normal((rows, cols)) *
         mx.exp(mx.random.uniform(-4, 4, (rows, 1)))).astype(MX_DTYPES[wdtype])
    wq, scales = mx.quantize(w, mode="mxfp4")
    assert wq.dtype == mx.uint32 and wq.shape == (rows, cols // 8)
    assert scales.dtype == mx.uint8 and scales.shape == (rows, cols // 32)
    packed = tmp_path / "packed.bin"
    packed.write_bytes(raw_bytes(wq))
    sc = tmp_path / "scales.bin"
    sc.write_bytes(np.array(scales).tobytes())
    shape = [str(rows), str(cols), "4", "32", "mxfp4"]

    ref = np.array(mx.dequantize(wq, scales, mode="mxfp4", dtype=mx.float32))
    out = tmp_path / "deq.bin"
    subprocess.run([harness, "dequant", *shape, str(packed), str(sc), "-",
                    str(out)], check=True)
    got = np.fromfile(out, dtype=np.float32).reshape(rows, cols)
    assert np.array_equal(got, ref), f"max err {np.abs(got - ref).max()}"

    mag = np.abs(ref).astype(np.float64)
    for n_tokens, threads in ((1, 2), (3, 3), (4, 1), (9, 2)):
        x = np.random.default_rng(n_tokens).standard_normal(
            (n_tokens, cols)).astype(np.float32)
        xp = tmp_path / "x.bin"
        xp.write_bytes(x.tobytes())
        yp = tmp_path / "y.bin"
        subprocess.run([harness, "matmul", *shape, str(packed), str(sc), "-",
                        str(yp), str(xp), str(n_tokens), str(threads)],
                       check=True)
        y = np.fromfile(yp, dtype=np.float32).reshape(n_tokens, rows)
        y_mlx = np.array(mx.quantized_matmul(
            mx.array(x), wq, scales, transpose=True, mode="mxfp4"))
        bound = 1e-5 * np.sqrt(cols) * (np.abs(x) @ mag.T)
        diff = np.abs(y.astype(np.float64) - y_mlx)
        assert np.all(diff <= bound), (
            f"tokens={n_tokens}: max diff {diff.max()} bound {bound.min()}")

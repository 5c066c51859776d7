"""The safetensors reader against the reference writers and readers.

Files are written by the `safetensors` package (numpy) and by MLX (which
writes BF16); tests/tools/safetensors_dump prints what Spindle's reader sees
and every name, dtype, shape, byte and metadata value must match what the
reference reads back. A bounded fuzz pass then corrupts a valid file at
random: the reader may accept or reject, but must never crash, and a
rejection is one line on stderr.
"""
import json
import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

BUILD = Path(os.environ.get("SPINDLE_BUILD", "/work/main/build"))
DUMP = BUILD / "safetensors_dump"

pytestmark = pytest.mark.skipif(
    not DUMP.is_file(), reason=f"{DUMP} not built (set SPINDLE_BUILD)")

NP_DTYPES = {
    np.float64: "F64", np.float32: "F32", np.float16: "F16",
    np.int64: "I64", np.int32: "I32", np.int16: "I16", np.int8: "I8",
    np.uint64: "U64", np.uint32: "U32", np.uint16: "U16", np.uint8: "U8",
    np.bool_: "BOOL",
}


def dump(path, *keys, check=True):
    proc = subprocess.run([str(DUMP), str(path), *keys], capture_output=True,
                          text=True, timeout=60, errors="replace")
    if check:
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)
    return proc


def by_name(result):
    return {t["name"]: t for t in result["tensors"]}


def sample_tensors():
    rng = np.random.default_rng(1)
    out = {}
    for i, (dt, _) in enumerate(NP_DTYPES.items()):
        shape = [(3,), (2, 5), (1, 2, 3), (4, 1)][i % 4]
        if dt is np.bool_:
            out[f"t.{i}"] = rng.integers(0, 2, shape).astype(np.bool_)
        elif np.issubdtype(dt, np.integer):
            info = np.iinfo(dt)
            out[f"t.{i}"] = rng.integers(info.min, info.max, shape, dtype=dt)
        else:
            out[f"t.{i}"] = rng.standard_normal(shape).astype(dt)
    out["scalar"] = np.array(7.5, dtype=np.float32)
    out["empty"] = np.zeros((0, 4), dtype=np.float16)
    return out


def test_numpy_writer_all_dtypes(tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file
    path = tmp_path / "x.safetensors"
    save_file(sample_tensors(), str(path), metadata={"format": "np", "k": "é"})
    ref = load_file(str(path))
    with safe_open(str(path), framework="np") as f:
        ref_meta = f.metadata()
    got = dump(path, "format", "k", "absent")
    tensors = by_name(got)
    assert [t["name"] for t in got["tensors"]] == sorted(ref)
    for name, arr in ref.items():
        t = tensors[name]
        assert t["dtype"] == NP_DTYPES[arr.dtype.type], name
        assert t["shape"] == list(arr.shape), name
        assert bytes.fromhex(t["hex"]) == arr.tobytes(), name
        assert t["file"] == "x.safetensors"
    assert got["metadata"] == {**ref_meta, "absent": None}


def test_mlx_writer_bf16(tmp_path):
    mx = pytest.importorskip("mlx.core")
    path = tmp_path / "m.safetensors"
    arrays = {
        "w.bf16": mx.array(np.linspace(-3, 3, 24).reshape(4, 6),
                           dtype=mx.bfloat16),
        "w.f16": mx.array(np.arange(5), dtype=mx.float16),
        "w.u32": mx.array(np.arange(8, dtype=np.uint32).reshape(2, 4)),
    }
    mx.save_safetensors(str(path), arrays, metadata={"format": "mlx"})
    ref = mx.load(str(path))
    tensors = by_name(dump(path))
    assert set(tensors) == set(ref)
    for name, a in ref.items():
        t = tensors[name]
        assert t["shape"] == list(a.shape)
        raw = (np.array(a.view(mx.uint16)) if a.dtype == mx.bfloat16
               else np.array(a)).tobytes()
        assert bytes.fromhex(t["hex"]) == raw, name
    assert tensors["w.bf16"]["dtype"] == "BF16"
    assert tensors["w.f16"]["dtype"] == "F16"
    assert tensors["w.u32"]["dtype"] == "U32"


def test_mlx_writer_without_metadata(tmp_path):
    """mlx's save_safetensors without metadata writes "__metadata__": null,
    which the safetensors package reads as no metadata; so must Spindle."""
    mx = pytest.importorskip("mlx.core")
    st = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "n.safetensors"
    mx.save_safetensors(str(path), {"w": mx.arange(6, dtype=mx.float32)})
    assert b'"__metadata__":null' in path.read_bytes()[:200]
    ref = st.load_file(str(path))
    tensors = by_name(dump(path))
    assert set(tensors) == set(ref) == {"w"}
    assert bytes.fromhex(tensors["w"]["hex"]) == ref["w"].tobytes()


def test_sharded_directory(tmp_path):
    from safetensors.numpy import load_file, save_file
    all_tensors = sample_tensors()
    names = sorted(all_tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, members in shards.items():
        save_file({n: all_tensors[n] for n in members}, str(tmp_path / shard),
                  metadata={"format": "pt"})
        weight_map.update({n: shard for n in members})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}))
    tensors = by_name(dump(tmp_path))
    assert set(tensors) == set(all_tensors)
    for shard in shards:
        for name, arr in load_file(str(tmp_path / shard)).items():
            assert tensors[name]["file"] == shard
            assert bytes.fromhex(tensors[name]["hex"]) == arr.tobytes()


def test_fuzzed_files_never_crash(tmp_path):
    from safetensors.numpy import save_file
    good = tmp_path / "good.safetensors"
    save_file(sample_tensors(), str(good), metadata={"format": "np"})
    raw = good.read_bytes()
    hlen = int.from_bytes(raw[:8], "little")
    rng = random.Random(1234)
    path = tmp_path / "fuzz.safetensors"
    digits = [i for i in range(8, 8 + hlen) if chr(raw[i]).isdigit()]
    for i in range(200):
        data = bytearray(raw)
        kind = i % 4
        if kind == 0:    # flip bytes inside the header
            for _ in range(rng.randint(1, 4)):
                data[8 + rng.randrange(hlen)] = rng.randrange(256)
        elif kind == 3:  # still JSON: change shapes and offsets
            for _ in range(rng.randint(1, 3)):
                data[rng.choice(digits)] = ord(rng.choice("0123456789"))
        elif kind == 1:  # cut the file anywhere
            data = data[: rng.randrange(len(data))]
        else:            # corrupt the length prefix
            data[rng.randrange(8)] = rng.randrange(256)
        path.write_bytes(bytes(data))
        proc = dump(path, check=False)
        assert proc.returncode in (0, 1), (i, proc.returncode, proc.stderr)
        if proc.returncode == 1:
            lines = proc.stderr.splitlines()
            assert len(lines) == 1 and "fuzz.safetensors" in lines[0], \
                (i, proc.stderr)

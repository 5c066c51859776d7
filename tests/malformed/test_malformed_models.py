"""`spindle info -m DIR` on corrupted model directories.

A tiny two-shard Llama directory is written by hand (numpy + the safetensors
byte layout) and checked against the reference `safetensors` package; each
case then corrupts one thing. Spindle must exit non-zero without a signal,
print exactly one line on stderr naming the file (and the tensor where there
is one), and do so within a timeout. Where the corruption is at the
safetensors level, the reference reader must reject the file too, so the case
is known to be malformed independently of Spindle.
"""
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

SPINDLE_BIN = os.environ.get("SPINDLE_BIN", "/work/main/build/spindle")
TIMEOUT_S = 60

pytestmark = pytest.mark.skipif(
    not (os.path.isfile(SPINDLE_BIN) and os.access(SPINDLE_BIN, os.X_OK)),
    reason=f"spindle binary not found at {SPINDLE_BIN} (set SPINDLE_BIN)",
)

HIDDEN, LAYERS, HEADS, KV_HEADS, INTER, VOCAB = 64, 2, 4, 2, 128, 128
HEAD_DIM = HIDDEN // HEADS

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": HIDDEN,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "intermediate_size": INTER,
    "vocab_size": VOCAB,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 256,
    "hidden_act": "silu",
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"
INDEX = "model.safetensors.index.json"

ST_DTYPES = {np.dtype("float32"): "F32", np.dtype("float16"): "F16",
             np.dtype("uint32"): "U32", np.dtype("uint8"): "U8"}


def llama_tensors():
    """HF Llama names and shapes, split over two shards (layer 0 / layer 1)."""
    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    shards = {SHARD1: {}, SHARD2: {}}
    shards[SHARD1]["model.embed_tokens.weight"] = w(VOCAB, HIDDEN)
    for layer in range(LAYERS):
        d = shards[SHARD1 if layer == 0 else SHARD2]
        p = f"model.layers.{layer}."
        d[p + "input_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        d[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        d[p + "self_attn.q_proj.weight"] = w(HEADS * HEAD_DIM, HIDDEN)
        d[p + "self_attn.k_proj.weight"] = w(KV_HEADS * HEAD_DIM, HIDDEN)
        d[p + "self_attn.v_proj.weight"] = w(KV_HEADS * HEAD_DIM, HIDDEN)
        d[p + "self_attn.o_proj.weight"] = w(HIDDEN, HEADS * HEAD_DIM)
        d[p + "mlp.gate_proj.weight"] = w(INTER, HIDDEN)
        d[p + "mlp.up_proj.weight"] = w(INTER, HIDDEN)
        d[p + "mlp.down_proj.weight"] = w(HIDDEN, INTER)
    shards[SHARD2]["model.norm.weight"] = np.ones(HIDDEN, np.float32)
    shards[SHARD2]["lm_head.weight"] = w(VOCAB, HIDDEN)
    return shards


def safetensors_bytes(tensors, edit_header=None):
    """The safetensors layout: u64 LE header length, JSON header padded with
    spaces to 8 bytes, then the tensors back to back. `edit_header` may
    change the header dict before it is written."""
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {
            "dtype": ST_DTYPES[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    if edit_header:
        edit_header(header)
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js + b"".join(chunks)


def write_model(d: Path, shards, edit=None):
    """Write config, shards and index; `edit(shard_name, header)` may alter
    any shard's header."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(CONFIG, indent=2))
    weight_map = {}
    for shard, tensors in shards.items():
        hook = (lambda h, s=shard: edit(s, h)) if edit else None
        (d / shard).write_bytes(safetensors_bytes(tensors, hook))
        weight_map.update({name: shard for name in tensors})
    total = sum(a.nbytes for t in shards.values() for a in t.values())
    (d / INDEX).write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))


def reference_rejects(path: Path) -> bool:
    from safetensors.numpy import load_file
    try:
        load_file(str(path))
    except Exception:
        return True
    return False


def run_info(model_dir: Path):
    proc = subprocess.run([SPINDLE_BIN, "info", "-m", str(model_dir)],
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          errors="replace")
    return proc


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_llama") / "model"
    shards = llama_tensors()
    write_model(d, shards)
    # The hand-written files must read back exactly through the reference.
    from safetensors.numpy import load_file
    for shard, tensors in shards.items():
        loaded = load_file(str(d / shard))
        assert set(loaded) == set(tensors)
        for name, arr in tensors.items():
            np.testing.assert_array_equal(loaded[name], arr)
    return d


def test_valid_model_is_accepted(base_model):
    proc = run_info(base_model)
    assert proc.returncode == 0, proc.stderr


# ----------------------------------------------------------------- mutations
# Each returns what the one stderr line must mention: (alternatives for the
# file, tensor or None, whether the reference reader must reject `file`).


def truncate_shard(d):
    p = d / SHARD2
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    return (SHARD2,), None, SHARD2


def missing_shard(d):
    (d / SHARD2).unlink()
    return (SHARD2,), None, None


def header_past_eof(d):
    p = d / SHARD1
    raw = bytearray(p.read_bytes())
    raw[:8] = struct.pack("<Q", len(raw) * 4)
    p.write_bytes(bytes(raw))
    return (SHARD1,), None, SHARD1


def header_edit(shard, fn):
    """Rewrite `shard` with its header changed by fn(header)."""
    def mutate(d):
        write_model(d, llama_tensors(),
                    lambda s, h: fn(h) if s == shard else None)
    return mutate


TARGET = "model.layers.1.mlp.up_proj.weight"


def overlapping_offsets(d):
    def fn(h):
        begin, end = h["model.layers.1.mlp.gate_proj.weight"]["data_offsets"]
        h[TARGET]["data_offsets"] = [begin + 8, end + 8]
    header_edit(SHARD2, fn)(d)
    return (SHARD2,), TARGET, SHARD2


def offsets_out_of_range(d):
    def fn(h):
        begin, end = h[TARGET]["data_offsets"]
        h[TARGET]["data_offsets"] = [begin + 10**6, end + 10**6]
    header_edit(SHARD2, fn)(d)
    return (SHARD2,), TARGET, SHARD2


def dtype_size_mismatch(d):
    header_edit(SHARD2, lambda h: h[TARGET].update(dtype="F16"))(d)
    return (SHARD2,), TARGET, SHARD2


def unknown_dtype(d):
    header_edit(SHARD2, lambda h: h[TARGET].update(dtype="F33"))(d)
    return (SHARD2,), TARGET, SHARD2


def bad_json_header(d):
    p = d / SHARD1
    raw = bytearray(p.read_bytes())
    n = struct.unpack("<Q", raw[:8])[0]
    close = raw.rindex(b"}", 8, 8 + n)
    raw[close] = ord(",")  # same length, the object is never closed
    p.write_bytes(bytes(raw))
    return (SHARD1,), None, SHARD1


def shape_mismatch(d):
    # A valid safetensors file, but up_proj stored transposed: [hidden, inter]
    # instead of [inter, hidden].
    shards = llama_tensors()
    shards[SHARD2][TARGET] = np.ascontiguousarray(shards[SHARD2][TARGET].T)
    write_model(d, shards)
    return (SHARD2, str(d)), TARGET, None


def missing_tensor(d):
    shards = llama_tensors()
    del shards[SHARD2][TARGET]
    write_model(d, shards)
    return (SHARD2, INDEX, str(d)), TARGET, None


def no_config(d):
    (d / "config.json").unlink()
    return ("config.json",), None, None


def malformed_config(d):
    (d / "config.json").write_text('{"model_type": "llama", "hidden_size": ')
    return ("config.json",), None, None


CASES = [
    truncate_shard, missing_shard, header_past_eof, overlapping_offsets,
    offsets_out_of_range, dtype_size_mismatch, unknown_dtype,
    bad_json_header, shape_mismatch, missing_tensor, no_config,
    malformed_config,
]


@pytest.mark.parametrize("mutate", CASES, ids=[c.__name__ for c in CASES])
def test_malformed_model(base_model, tmp_path, mutate):
    d = tmp_path / "model"
    shutil.copytree(base_model, d)
    files, tensor, rejected_file = mutate(d)
    if rejected_file:
        assert reference_rejects(d / rejected_file), \
            "the reference safetensors reader accepts the corrupted file"

    proc = run_info(d)

    assert proc.returncode >= 0, \
        f"killed by signal {-proc.returncode}; stderr: {proc.stderr!r}"
    assert proc.returncode > 0, f"accepted; stdout: {proc.stdout[:500]!r}"
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"want one stderr line, got: {proc.stderr!r}"
    line = lines[0]
    assert any(f in line for f in files), f"names none of {files}: {line}"
    if tensor:
        assert tensor in line, f"does not name {tensor}: {line}"

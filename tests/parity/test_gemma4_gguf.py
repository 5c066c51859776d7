"""Gemma 4 GGUF files: Spindle against llama.cpp (llama-cpp-python) on the
same tiny files, as test_dense_gguf.py does for the dense families.

The files are make_gemma4_models.py's float models written by
tests/gguf_writer.py in llama.cpp's converter's Gemma 4 form
(tests/gguf_writer_gemma4.py: architecture gemma4, per-kind head sizes,
rope_freqs for the proportional RoPE, fused expert gate_up, per-layer
arrays); both engines run them, llama.cpp in its f32 configuration
(tests/llama_cpp_ref.py). Cases cover each variant llama.cpp 0.3.36 runs:
  gemma4     dense, sliding and full layers, the default softcap 30;
  wide       layer_types listed, head_dim 64 with heads * head_dim !=
             hidden, one KV head, softcap 10, sliding RoPE base 20000
             (its proportional RoPE factor 4 dropped first: the converter
             drops it, so the file has no mlx-lm reference);
  global     full layers with heads twice as wide (global_head_dim);
  shared     KV sharing with double-wide MLPs (feed_forward_length per
             layer);
  k-eq-v     K = V full layers (no attn_v), "-gkv" with their own KV head
             count (attention.head_count_kv per layer);
  per-layer  Gemma 4 E2B/E4B's per-layer inputs;
  moe        Gemma 4 26B's routed experts beside the dense MLP.
Weights are F32 and, for three models, Q8_0 (held to llama.cpp on its F32
twin of the same dequantized values, and within Q8_0_LOOSE of llama.cpp on
the Q8_0 file itself, which rounds its activations to q8_0 blocks before
every product: measured 0.06-0.17 of the std here, the per-layer inputs'
extra products the most; parity_common).

Checks, per prompt (make_models.PROMPTS; 32 generated tokens):
  (a) last-prompt logits: max |spindle - llama.cpp| / std(llama.cpp)
      <= TOL, and greedy tokens identical up to a near-tie of llama.cpp's
      own margins (TIE_FACTOR * TOL * std);
  (b) on the F32 files of unedited models, the same logits against mlx-lm's
      f32 reference of the source model within TOL_MLX: the file holds the
      model exactly, independent of llama.cpp's rounding.
TOL is 1e-2, not the dense suites' 1e-4: llama.cpp's CPU GELU reads a
table of f16 results at the f16-rounded input (ggml's GGML_GELU_FP16),
which moves its logits by 1-3e-3 of their std from exact math here;
mlx-lm and Spindle agree to ~5e-6 (TOL_MLX 1e-4), and Spindle with that
f16 GELU emulated comes within 2-5e-4 of llama.cpp.

Malformed files (a missing tensor, a wrong shape, a missing key, values
llama.cpp computes otherwise) fail at load with one line.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS (2),
SPINDLE_GEMMA4_PARITY_DIR (default tests/.work/parity-gemma4).
"""
import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import gguf_writer as gw  # noqa: E402
import gguf_writer_gemma4 as g4w  # noqa: E402
import make_gemma4_models as gm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_GEMMA4_PARITY_DIR", gm.DEFAULT_OUT))
THREADS = int(os.environ.get("SPINDLE_THREADS", "2"))
N_GEN = gm.MAX_TOKENS
N_CTX = 128
TOL = 1e-2
TOL_MLX = 1e-4
Q8_0_LOOSE = 0.3


def _no_rope_factor(cfg):
    cfg["rope_parameters"]["full_attention"].pop("factor")


# (model, weight type, config edit before writing the GGUF or None)
CASES = [
    ("gemma4-f32", "f32", None),
    ("gemma4-f32", "q8_0", None),
    ("gemma4-wide-f32", "f32", _no_rope_factor),
    ("gemma4-global-f32", "f32", None),
    ("gemma4-shared-f32", "f32", None),
    ("gemma4-k-eq-v-f32", "f32", None),
    ("gemma4-k-eq-v-gkv-f32", "f32", None),
    ("gemma4-per-layer-f32", "f32", None),
    ("gemma4-per-layer-f32", "q8_0", None),
    ("gemma4-moe-f32", "f32", None),
    ("gemma4-moe-f32", "q8_0", None),
]


@pytest.fixture(scope="module")
def gemma4_models(spindle_bin):  # noqa: F811
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python is missing (pip install -r "
                    "tests/requirements.txt)")
    return pc.ensure_models(OUT, gm)


def _edited(src, dst, edit):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    edit(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.fixture(scope="module", params=CASES,
                ids=[f"{m}-{q}" + (f"-{e.__name__[1:]}" if e else "")
                     for m, q, e in CASES])
def gguf_case(request, gemma4_models, tmp_path_factory):
    name, qtype, edit = request.param
    d = tmp_path_factory.mktemp("gguf")
    src = gemma4_models / name
    if edit:
        src = _edited(src, d / name, edit)
    case = pc.open_gguf_case(src, qtype, d, N_CTX, THREADS)
    case["mlx"] = None if edit or qtype != "f32" else gemma4_models / name
    yield case
    pc.close_gguf_case(case)


@pytest.mark.parametrize("prompt", sorted(gm.PROMPTS))
def test_gemma4_gguf_parity(spindle_bin, gguf_case, prompt,  # noqa: F811
                            tmp_path):
    got = pc.assert_gguf_parity(spindle_bin, gguf_case, gm.PROMPTS[prompt],
                                N_GEN, THREADS, tmp_path, TOL, Q8_0_LOOSE)
    src = gguf_case["mlx"]
    if src is None:
        return
    ref = json.loads((src / "reference.json").read_text())
    want = np.load(src / ref["prompts"][prompt]["f32"]["logits_file"])
    err = pc.rel_err(got, want)
    print(f"{gguf_case['name']}/{prompt}: max|err|/std {err:.3g} vs mlx-lm "
          "f32 on the source model")
    assert err <= TOL_MLX, f"logits off mlx-lm's f32 by {err:.4g} of std"


# ------------------------------------------------------------- malformed

class _Skip:
    """A GGUFWriter that leaves out the keys written by `skip` methods."""
    def __init__(self, w, skip):
        self._w, self._skip = w, skip

    def __getattr__(self, name):
        if name in self._skip:
            return lambda *a, **k: None
        return getattr(self._w, name)


def _bad_rope_freqs(items):
    for hf, arr in items:
        yield hf, (np.where(arr > 1, 0.5, arr).astype(np.float32)
                   if hf == "rope_freqs" else arr)


def _drop(hf_name):
    return lambda items: ((h, a) for h, a in items if h != hf_name)


def _truncate(hf_name):
    return lambda items: ((h, a[:-1] if h == hf_name else a)
                          for h, a in items)


# (id, model, stream edit or None, writer methods skipped, text the one
# error line must hold)
MALFORMED = [
    ("missing-tensor", "gemma4-f32",
     _drop("model.layers.1.self_attn.k_norm.weight"), (), "k_norm"),
    ("missing-rope-freqs", "gemma4-f32", _drop("rope_freqs"), (),
     "rope_freqs.weight"),
    ("wrong-shape", "gemma4-global-f32",
     _truncate("model.layers.2.self_attn.q_proj.weight"), (), "q_proj"),
    ("wrong-expert-shape", "gemma4-moe-f32",
     _truncate("model.layers.0.experts.gate_up_proj.weight"), (),
     "gate_up_proj"),
    ("missing-per-layer-table", "gemma4-per-layer-f32",
     _drop("model.embed_tokens_per_layer.weight"), (),
     "embed_tokens_per_layer"),
    ("missing-key-swa", "gemma4-f32", None, ("add_key_length_swa",),
     "gemma4.attention.key_length_swa"),
    ("missing-key-per-layer", "gemma4-f32", None,
     ("add_embedding_length_per_layer_input",),
     "gemma4.embedding_length_per_layer_input"),
    ("missing-key-window", "gemma4-f32", None, ("add_sliding_window",),
     "gemma4.attention.sliding_window"),
    ("missing-key-experts", "gemma4-moe-f32", None, ("add_expert_count",),
     "gemma4.expert_count"),
    ("rope-freqs-values", "gemma4-f32", _bad_rope_freqs, (),
     "rope_freqs.weight"),
]


@pytest.mark.parametrize("model,stream_edit,skip,needle",
                         [m[1:] for m in MALFORMED],
                         ids=[m[0] for m in MALFORMED])
def test_gemma4_gguf_malformed(spindle_bin, gemma4_models,  # noqa: F811
                               tmp_path, monkeypatch, model, stream_edit,
                               skip, needle):
    arch = gw.ARCHS["gemma4_text"]

    def keys(w, *a):
        g4w.keys(_Skip(w, skip), *a)

    def stream(cfg, items):
        out = g4w.stream(cfg, items)
        return stream_edit(out) if stream_edit else out
    monkeypatch.setitem(gw.ARCHS, "gemma4_text",
                        dataclasses.replace(arch, keys=keys, stream=stream))
    path = gw.write_gguf(str(gemma4_models / model),
                         str(tmp_path / "bad.gguf"), "f32")
    r = subprocess.run([str(spindle_bin), "run", "-m", path,
                        "--prompt-tokens", "1,2", "-n", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, "a malformed file was accepted"
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"want one stderr line, got: {r.stderr!r}"
    assert "bad.gguf" in lines[0] and needle in lines[0], lines[0]

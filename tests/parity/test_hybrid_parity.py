"""Oracle parity for the hybrid families (gated DeltaNet + gated attention):
Spindle against mlx-lm's qwen3_5 and qwen3_next.

Models and references come from make_hybrid_models.py (mlx / mlx-lm's own
code); the checks are test_parity.py's (parity_common.py): greedy tokens
identical up to a near-tie, and last-prompt-position logits within
TOL_F32_REL of the float32 reference (and of the native one within
NATIVE_FACTOR times mlx's own native-vs-f32 gap). The 100-token prompt
takes the chunked delta rule across a chunk boundary (64 tokens); decode
steps take the recurrent one.

Besides: a config giving the layer pattern as layer_types instead of
full_attention_interval gives the same outputs; malformed linear-attention
configs fail with one line naming the key; the sequence state (recurrent
DeltaNet layers and full KV attention layers) rolls back exactly within
max_rollback, refuses beyond it, and snapshots restore bit for bit
(tests/tools/seq_state_harness).

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS,
SPINDLE_HYBRID_PARITY_DIR (default tests/.work/parity-hybrid).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_hybrid_models as hm  # noqa: E402  (cheap: no mlx at import)
import parity_common as tp  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_HYBRID_PARITY_DIR", hm.DEFAULT_OUT))
N_TOKENS = hm.MAX_TOKENS
CASES = [(s["name"], p) for s in hm.SPECS for p in hm.PROMPTS]
IDS = [f"{m}-{p}" for m, p in CASES]


@pytest.fixture(scope="session")
def hybrid_models(spindle_bin):  # noqa: F811
    """The model set, rebuilt when its generator or mlx changed."""
    return tp.ensure_models(OUT, hm)


@pytest.fixture
def case(spindle_bin, hybrid_models, tmp_path_factory, model, prompt):  # noqa: F811
    return tp.run_case(spindle_bin, hybrid_models, model, prompt,
                       tmp_path_factory.getbasetemp(), N_TOKENS)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_hybrid_greedy_tokens(case, hybrid_models, model, prompt):
    ref, entry, out, _ = case
    tp.assert_greedy_tokens(out, ref, entry)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_hybrid_last_logits(case, hybrid_models, model, prompt):
    ref, entry, _, dump = case
    tp.assert_last_logits(dump, hybrid_models / model, ref, entry,
                          f"{model}/{prompt}")


def _copy_with_config(src, dst, edit):
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix in (".safetensors", ".npy", ".json"):
            (dst / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((src / "config.json").read_text())
    edit(cfg.get("text_config", cfg))
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_hybrid_layer_types(spindle_bin, hybrid_models, tmp_path):  # noqa: F811
    """The pattern of full_attention_interval 4 written as layer_types (the
    interval dropped) gives the reference outputs."""
    name, prompt = "qwen3_5-f32", "len100"

    def edit(cfg):
        n = cfg.pop("full_attention_interval")
        cfg["layer_types"] = [
            "full_attention" if (i + 1) % n == 0 else "linear_attention"
            for i in range(cfg["num_hidden_layers"])]
    d = _copy_with_config(hybrid_models / name, tmp_path / name, edit)
    entry = tp.load_ref(hybrid_models, name)["prompts"][prompt]
    out, dump = tp.run_spindle(spindle_bin, d, entry["prompt_tokens"],
                               tmp_path, N_TOKENS)
    want = np.load(d / entry["f32"]["logits_file"])
    err = float(np.max(np.abs(np.load(dump) - want)) / np.std(want))
    assert err <= tp.TOL_F32_REL, f"max|err|/std {err:.4g}"


@pytest.mark.parametrize("model,key,value,needle", [
    ("qwen3_5-f32", "layer_types",
     ["linear_attention", "mamba", "linear_attention", "full_attention"],
     "layer_types[1]"),
    ("qwen3_5-f32", "layer_types", ["linear_attention"] * 3, "layer_types"),
    ("qwen3_5-f32", "layer_types", ["linear_attention"] * 4,
     "disagrees with full_attention_interval"),
    ("qwen3_5-f32", "full_attention_interval", 0, "full_attention_interval"),
    ("qwen3_5-f32", "full_attention_interval", 2.5, "full_attention_interval"),
    ("qwen3_5-f32", "linear_num_value_heads", 3, "multiple of"),
    ("qwen3_5-f32", "linear_key_head_dim", None, "linear_key_head_dim"),
    ("qwen3_5-f32", "linear_conv_kernel_dim", 3, "conv1d"),
    ("qwen3_5-f32", "rope_parameters", {"rope_type": "yarn"}, "yarn"),
    ("qwen3_next-f32", "full_attention_interval", 0, "full_attention_interval"),
    ("qwen3_next-f32", "linear_num_key_heads", -2, "linear_num_key_heads"),
])
def test_hybrid_bad_config(spindle_bin, hybrid_models, tmp_path,  # noqa: F811
                           model, key, value, needle):
    def edit(cfg):
        if value is None:
            cfg.pop(key)
        else:
            cfg[key] = value
    d = _copy_with_config(hybrid_models / model, tmp_path / "m", edit)
    r = subprocess.run([str(spindle_bin), "run", "-m", str(d),
                        "--prompt-tokens", "1,2", "-n", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, "a malformed config was accepted"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


def _harness(spindle_bin, model_dir, *args):  # noqa: F811
    build = Path(os.environ.get("SPINDLE_BUILD_DIR", spindle_bin.parent))
    path = build / "seq_state_harness"
    if not path.is_file():
        pytest.fail(f"seq_state_harness not found at {path}")
    cmd = [str(path), str(model_dir), "--recurrent", "1", *map(str, args)]
    if os.environ.get("SPINDLE_THREADS"):
        cmd += ["--threads", os.environ["SPINDLE_THREADS"]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode not in (0, 1):
        pytest.fail(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}")
    return json.loads(r.stdout), r.returncode


@pytest.mark.parametrize("model,k", [("qwen3_5-f32", 0),
                                     ("qwen3_5-q4g64", 3),
                                     ("qwen3_next-f32", 2)])
def test_hybrid_rollback_and_snapshot(spindle_bin, hybrid_models,  # noqa: F811
                                      model, k):
    """Truncation within the last pass of at most max_rollback tokens is
    exact (to its start and, for passes up to 4 tokens, to every length
    inside it), beyond that a one-line refusal naming the recurrent layer
    that leaves the sequence unchanged; snapshots restore bit for bit; a
    failed batch changes nothing (seq_state_harness --recurrent)."""
    out, rc = _harness(spindle_bin, hybrid_models / model,
                       *(["--max-rollback", k] if k else []))
    print(f"  {model}: {out}")
    assert out["failures"] == [] and rc == 0, out["failures"]
    assert out["max_rollback"] == (k or 8)
    assert out["recurrent_refused"] > 0 and out["beyond_k_accepted"] == 0
    assert out["checks"] > 100


def file_parameters(d):
    """Every tensor element of the safetensors files in d, read from their
    headers."""
    total = 0
    for f in d.glob("*.safetensors"):
        raw = f.read_bytes()
        header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
        total += sum(int(np.prod(t["shape"])) for k, t in header.items()
                     if k != "__metadata__")
    return total


def test_hybrid_info(spindle_bin, hybrid_models):  # noqa: F811
    """spindle info: the state kind of every layer, and parameters counting
    the DeltaNet weights the family keeps (every element of the f32
    files, read from their headers)."""
    d = hybrid_models / "qwen3_5-wide-f32"
    r = subprocess.run([str(spindle_bin), "info", "-m", str(d)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["state"] == {
        "full_kv": 2, "window_kv": 0, "recurrent": 4, "max_rollback": 8}
    assert info["parameters"] == file_parameters(d)


NORMS_PLUS_ONE = (".input_layernorm.weight", ".post_attention_layernorm.weight",
                  "model.norm.weight", ".q_norm.weight", ".k_norm.weight")


@pytest.mark.parametrize("name", ["qwen3_5-bf16", "qwen3_next-f32"])
def test_hybrid_hf_layout(spindle_bin, hybrid_models, tmp_path,  # noqa: F811
                          name):
    """A Hugging Face checkpoint (flat config, conv1d [C, 1, K], the (1 + w)
    norms stored as w, no "language_model." prefix, Qwen3-Next's experts
    one tensor each), written from the MLX model: Spindle must compute
    what mlx-lm computes after its sanitize (which moves the conv axis,
    stacks the experts and adds the 1 in the weights' dtype)."""
    mx = pytest.importorskip("mlx.core")
    mlu = pytest.importorskip("mlx_lm.utils")
    src = hybrid_models / name
    weights = {}
    for f in sorted(src.glob("*.safetensors")):
        weights.update(mx.load(str(f)))
    hf = {}
    for k, v in weights.items():
        k = k.removeprefix("language_model.")
        if "conv1d.weight" in k:
            v = v.moveaxis(2, 1)
        elif k.endswith(NORMS_PLUS_ONE):
            v = v - 1.0
        if ".switch_mlp." in k:
            for e in range(v.shape[0]):
                hf[k.replace(".switch_mlp.", f".experts.{e}.")] = v[e]
            continue
        hf[k] = v
    d = tmp_path / "hf"
    d.mkdir()
    mx.save_safetensors(str(d / "model.safetensors"), hf)
    cfg = json.loads((src / "config.json").read_text())
    if "text_config" in cfg:
        cfg = dict(cfg.pop("text_config"), model_type="qwen3_5")
    (d / "config.json").write_text(json.dumps(cfg))
    prompt = hm.PROMPTS["len40"]
    model, _ = mlu.load_model(d)
    model.set_dtype(mx.float32)
    want = np.array(model(mx.array([prompt]))[0, -1])
    _, dump = tp.run_spindle(spindle_bin, d, prompt, tmp_path, 1)
    err = float(np.max(np.abs(np.load(dump) - want)) / np.std(want))
    assert err <= tp.TOL_F32_REL, f"max|err|/std {err:.4g}"

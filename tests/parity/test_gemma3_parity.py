"""Oracle parity for Gemma 3 text: Spindle against mlx-lm's gemma3_text.

Models and references come from make_gemma3_models.py (mlx / mlx-lm's own
code); the checks are test_parity.py's (parity_common.py):
  (a) greedy tokens identical to the reference up to a near-tie;
  (b) last-prompt-position logits within a relative tolerance (max abs error
      / std of the reference logits).

Tolerances, as in test_parity.py:
  * "f32" reference: the stored weights upcast to float32, with each RMSNorm
    scale 1 + w rounded to the stored dtype exactly as the native model
    rounds it (make_gemma3_models.fold_native_norm_rounding).  That is what
    Spindle computes, so it is held to TOL_F32_REL (1e-4 of the logit std;
    measured: ~5e-6).  Without the rounding the error is ~2e-2.
  * "native" reference: mlx-lm in the stored dtype (bf16 activations);
    tolerance max(NATIVE_FACTOR * mlx's own native-vs-f32 gap, TOL_F32_REL).
    Measured gaps: bf16 0.06-0.08, bf16-scaled 4-bit 0.28-0.40.

The "-softcap" model's config sets final_logit_softcapping, which mlx-lm's
gemma3_text ignores: its expected logits are cap * tanh(reference / cap),
computed here; greedy tokens are unchanged by that monotone map.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS,
SPINDLE_GEMMA3_PARITY_DIR (default tests/.work/parity-gemma3).
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
import make_gemma3_models as gm  # noqa: E402  (cheap: no mlx at import)
import parity_common as tp  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_GEMMA3_PARITY_DIR", gm.DEFAULT_OUT))
N_TOKENS = gm.MAX_TOKENS
gemma3_models, case = tp.parity_fixtures(gm, OUT, "gemma3_models")
CASES, IDS = tp.parity_cases(gm)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_gemma3_greedy_tokens(case, gemma3_models, model, prompt):
    ref, entry, out, _ = case
    tp.assert_greedy_tokens(out, ref, entry)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_gemma3_last_logits(case, gemma3_models, model, prompt):
    ref, entry, _, dump = case
    cap = ref.get("final_logit_softcapping")
    tp.assert_last_logits(
        dump, gemma3_models / model, ref, entry, f"{model}/{prompt}",
        (lambda w: cap * np.tanh(w.astype(np.float64) / cap)) if cap
        else (lambda w: w))


def _copy_with_config(src, dst, edit):
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix in (".safetensors", ".npy", ".json"):
            (dst / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((src / "config.json").read_text())
    edit(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_gemma3_layer_types(spindle_bin, gemma3_models,  # noqa: F811
                            tmp_path):
    """Newer configs list layer_types; the same layout written that way must
    give the reference outputs of the sliding_window_pattern form."""
    name, prompt = "gemma3-f32", "len40"

    def edit(cfg):
        n = cfg.pop("sliding_window_pattern")
        cfg["layer_types"] = [
            "full_attention" if (i + 1) % n == 0 else "sliding_attention"
            for i in range(cfg["num_hidden_layers"])]
    d = _copy_with_config(gemma3_models / name, tmp_path / name, edit)
    entry = tp.load_ref(gemma3_models, name)["prompts"][prompt]
    out, dump = tp.run_spindle(spindle_bin, d, entry["prompt_tokens"],
                               tmp_path, N_TOKENS)
    want = np.load(d / entry["f32"]["logits_file"])
    err = float(np.max(np.abs(np.load(dump) - want)) / np.std(want))
    assert err <= tp.TOL_F32_REL, f"max|err|/std {err:.4g}"
    assert tp.check_tokens([int(t) for t in out["tokens"]], entry["f32"],
                           tp.TOL_F32_REL, "mlx f32") is None


@pytest.mark.parametrize("key,value,needle", [
    ("layer_types", ["sliding_attention"], "layer_types"),
    ("layer_types", ["sliding_attention"] * 4 + ["global"], "layer_types[4]"),
    ("head_dim", None, "head_dim"),
    ("query_pre_attn_scalar", -1, "query_pre_attn_scalar"),
    ("sliding_window", 0, "sliding_window"),
])
def test_gemma3_bad_config(spindle_bin, gemma3_models,  # noqa: F811
                           tmp_path, key, value, needle):
    def edit(cfg):
        if value is None:
            cfg.pop(key)
        else:
            cfg[key] = value
    d = _copy_with_config(gemma3_models / "gemma3-f32", tmp_path / "m", edit)
    r = subprocess.run([str(spindle_bin), "run", "-m", str(d),
                        "--prompt-tokens", "1,2", "-n", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, "a malformed config was accepted"
    assert needle in r.stderr, r.stderr


@pytest.mark.parametrize("name", ["gemma3-f32", "gemma3-wide-f32",
                                  "gemma3-f32-softcap"])
def test_numpy_reference_matches_mlx(gemma3_models, name):
    """The float64 numpy model agrees with mlx-lm where mlx-lm applies."""
    import gemma3_numpy_ref as npref
    ref = tp.load_ref(gemma3_models, name)
    cap = ref.get("final_logit_softcapping")
    for entry in ref["prompts"].values():
        want = np.load(gemma3_models / name / entry["f32"]["logits_file"])
        if cap:
            want = cap * np.tanh(want.astype(np.float64) / cap)
        got = npref.last_logits(gemma3_models / name, entry["prompt_tokens"])
        err = float(np.max(np.abs(got - want)) / np.std(want))
        assert err <= tp.TOL_F32_REL, f"numpy model off mlx by {err:.3g}"


@pytest.mark.parametrize("name", ["gemma3-f32", "gemma3-wide-f32"])
def test_gemma3_attn_softcap(spindle_bin, gemma3_models,  # noqa: F811
                             tmp_path, name):
    """attn_logit_softcapping, which mlx-lm's gemma3_text ignores, against
    the numpy model.  Cap 1 is far inside the score range, so a missing or
    misplaced cap moves the logits by much more than the tolerance."""
    import gemma3_numpy_ref as npref
    d = _copy_with_config(gemma3_models / name, tmp_path / name,
                          lambda c: c.update(attn_logit_softcapping=1.0))
    prompt = tp.load_ref(gemma3_models, name)["prompts"]["len40"][
        "prompt_tokens"]
    _, dump = tp.run_spindle(spindle_bin, d, prompt, tmp_path, N_TOKENS)
    want = npref.last_logits(d, prompt)
    uncapped = npref.last_logits(gemma3_models / name, prompt)
    assert np.max(np.abs(want - uncapped)) / np.std(want) > 100 * \
        tp.TOL_F32_REL, "the cap does not matter for this model"
    err = float(np.max(np.abs(np.load(dump) - want)) / np.std(want))
    assert err <= tp.TOL_F32_REL, f"max|err|/std {err:.4g}"

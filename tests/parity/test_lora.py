"""LoRA adapters against mlx-lm: `spindle run --lora` greedy tokens and
last-position logits on tiny random models (f32, 4-bit quantized, bf16 with
biases) with random adapters written by mlx-lm's tuner, in mlx-lm's layout
and in PEFT's (make_lora_models.py says why one reference covers both);
stacked --lora options against the one adapter they sum to; and malformed
adapters, which must fail with one line naming what is wrong.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_lora_models as gen  # noqa: E402
from parity_common import (  # noqa: E402,F401
    assert_greedy_tokens, assert_last_logits, ensure_models, spindle_bin)

OUT = gen.DEFAULT_OUT


@pytest.fixture(scope="session")
def lora_models(spindle_bin):
    return ensure_models(OUT, gen)


def run(bin_path, model, prompt, loras, dump, *extra):
    """`spindle run` of model (a directory or GGUF) on prompt's token ids
    with each adapter of loras, its last logits dumped to dump."""
    cmd = [str(bin_path), "run", "-m", str(model), "--prompt-tokens",
           ",".join(map(str, prompt)), "-n", str(gen.MAX_TOKENS), "--json",
           "--dump-logits", str(dump), *extra]
    for lora in loras:
        cmd += ["--lora", str(lora)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr[-3000:]}"
    return json.loads(r.stdout)


def adapter_ref(d, adapter):
    """Model directory d's mlx-lm reference with adapter's runs in place."""
    ref = json.loads((d / "reference.json").read_text())
    return dict(ref, **ref["adapters"][adapter])


def assert_adapter_ref(bin_path, d, adapter, prompt, model, loras, dump, label,
                       *extra):
    """model (d itself, its GGUF form or a merge) run with loras on one of
    d's prompts gives the greedy tokens and last logits of mlx-lm's run of
    d with adapter."""
    aref = adapter_ref(d, adapter)
    entry = aref["prompts"][prompt]
    out = run(bin_path, model, entry["prompt_tokens"], loras, dump, *extra)
    assert_greedy_tokens(out, aref, entry)
    assert_last_logits(dump, d, aref, entry, label)


CASES = [(s["name"], a, layout, p) for s in gen.SPECS for a in gen.ADAPTERS
         for layout in ("mlx", "peft") for p in gen.PROMPTS]


@pytest.mark.parametrize("model,adapter,layout,prompt", CASES,
                         ids=["-".join(c) for c in CASES])
def test_adapter_matches_mlx_lm(lora_models, spindle_bin, tmp_path, model,
                                adapter, layout, prompt):
    d = lora_models / model
    path = d / (adapter if layout == "mlx" else f"{adapter}-peft")
    assert_adapter_ref(spindle_bin, d, adapter, prompt, d, [path],
                       tmp_path / "l.npy", f"{model}+{adapter} ({layout})")


def test_stacked_halves_equal_the_adapter(lora_models, spindle_bin, tmp_path):
    """--lora A:0.5 --lora A:0.5 (one adapter stacked from two) is A."""
    d = lora_models / "qwen3-f32"
    assert_adapter_ref(spindle_bin, d, "all8", "len7", d,
                       [f"{d / 'all8'}:0.5", f"{d / 'all8-peft'}:0.5"],
                       tmp_path / "l.npy", "stacked")


def _edit_config(p, **kv):
    cfg = json.loads((p / "adapter_config.json").read_text())
    for k, v in kv.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k].update(v)
        else:
            cfg[k] = v
    (p / "adapter_config.json").write_text(json.dumps(cfg))


def _rewrite_tensors(p, file, change):
    from safetensors.numpy import load_file, save_file
    t = load_file(str(p / file))
    change(t)
    save_file(t, str(p / file))


def _peft_tensors(change):
    return lambda p: _rewrite_tensors(p, "adapter_model.safetensors", change)


def _drop_first_lora_b(t):
    del t[sorted(k for k in t if "lora_B" in k or "lora_b" in k)[0]]


def _rank_mismatch(t):
    k = sorted(t)[0]
    t[k] = t[k][:-1].copy() if "lora_A" in k else t[k][:, :-1].copy()


def _rename_to_unknown(t):
    k = sorted(t)[0]
    t[k.replace(".down_proj.", ".foo_proj.")] = t.pop(k)


def _bad_layer(t):
    k = sorted(t)[0]
    t[k.replace("layers.0.", "layers.99.")] = t.pop(k)


MALFORMED = {
    "missing-config": ("peft", lambda p: (p / "adapter_config.json").unlink(),
                       "no adapter_config.json"),
    "missing-weights": ("mlx", lambda p: (p / "adapters.safetensors").unlink(),
                        "no adapters.safetensors"),
    "unknown-target": ("peft", lambda p: _edit_config(
        p, target_modules=["q_proj", "wq"]), "unknown target module 'wq'"),
    "unknown-key": ("mlx", lambda p: _edit_config(
        p, lora_parameters={"keys": ["self_attn.q_proj", "attn.c_attn"]}),
        "unknown target module 'attn.c_attn'"),
    "rank-config": ("peft", lambda p: _edit_config(p, r=5),
                    "rank or shape mismatch"),
    "rank-tensor": ("peft", _peft_tensors(_rank_mismatch),
                    "rank or shape mismatch"),
    "unpaired": ("peft", _peft_tensors(_drop_first_lora_b), "but no lora_B"),
    "unknown-module-tensor": (
        "peft", _peft_tensors(_rename_to_unknown),
        "not a lora_A/lora_B weight of a supported projection"),
    "layer-out-of-range": ("peft", _peft_tensors(_bad_layer),
                           "targets layer 99; the model has 3"),
    "dora": ("mlx", lambda p: _edit_config(p, fine_tune_type="dora"),
             "fine_tune_type must be \"lora\""),
    "mlx-no-scale": ("mlx", lambda p: _edit_config(
        p, lora_parameters={"rank": 8, "alpha": 16}) or _drop_scale(p),
        "lora_parameters has no scale (mlx-lm uses scale, not alpha)"),
    "not-json": ("peft", lambda p: (p / "adapter_config.json").write_text(
        "{r: 8"), "not a JSON object"),
}


def _drop_scale(p):
    cfg = json.loads((p / "adapter_config.json").read_text())
    del cfg["lora_parameters"]["scale"]
    (p / "adapter_config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_adapter_one_line(lora_models, spindle_bin, tmp_path, case):
    layout, breaker, needle = MALFORMED[case]
    d = lora_models / "qwen3-f32"
    bad = tmp_path / "adapter"
    shutil.copytree(d / ("all8" if layout == "mlx" else "all8-peft"), bad)
    breaker(bad)
    assert_adapter_refused(spindle_bin, d, bad, needle)


def assert_adapter_refused(spindle_bin, model_dir, adapter, needle):
    """`spindle run --lora adapter` exits 1 with one stderr line naming
    `needle` (test_lora_moe.py's malformed expert adapters too)."""
    r = subprocess.run([str(spindle_bin), "run", "-m", str(model_dir),
                        "--prompt-tokens", "1,2", "-n", "1", "--lora",
                        str(adapter)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


@pytest.mark.parametrize("model", ["llama-f32", "qwen3-f32"])
@pytest.mark.parametrize("layout", ["mlx", "peft"])
def test_adapter_on_gguf_base(lora_models, spindle_bin, tmp_path, model,
                              layout):
    """The same adapters over the model as an F32 GGUF (tests/gguf_writer,
    llama.cpp's names; Llama's q/k rows permuted as llama.cpp's converter
    does): the mlx-lm reference of the safetensors model still holds."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import gguf_writer
    d = lora_models / model
    gguf = tmp_path / "m.gguf"
    gguf_writer.write_gguf(str(d), str(gguf), "f32")
    path = d / ("all8" if layout == "mlx" else "all8-peft")
    assert_adapter_ref(spindle_bin, d, "all8", "len40", gguf, [path],
                       tmp_path / "l.npy", f"{model} gguf")

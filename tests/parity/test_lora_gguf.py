"""llama.cpp's LoRA GGUF adapters (general.type "adapter", adapter.type
"lora", adapter.lora.alpha, blk.N.<module>.weight.lora_a/.lora_b):
`spindle run --lora FILE.gguf` against llama.cpp (llama-cpp-python with
`lora_path`) on the same base GGUF and the same adapter file, and against
the mlx-lm reference of the same adapter in PEFT form (make_lora_models.py)
on the GGUF base and on the safetensors base (whose q/k rows are not
permuted, so the loader un-permutes the adapter's B); malformed adapter
files fail with one line naming what is wrong.

The adapter files are written by tests/gguf_writer.write_lora_gguf, the
way llama.cpp's convert_lora_to_gguf.py writes a PEFT adapter (names, B's
q/k permutation for Llama, lora_alpha as written). llama.cpp scales a pair
by alpha / rank and ignores use_rslora, so the rsLoRA adapter (qvd4) is
held to llama.cpp only; all8 to both.
"""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import gguf_writer  # noqa: E402
import make_lora_models as gen  # noqa: E402
import parity_common as pc  # noqa: E402
import test_lora as tl  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

THREADS = 2
N_CTX = 128
TOL = 1e-4
MODELS = ["llama-f32", "qwen3-f32"]


@pytest.fixture(scope="module")
def lora_models(spindle_bin):  # noqa: F811
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python is missing (pip install -r "
                    "tests/requirements.txt)")
    return pc.ensure_models(gen.DEFAULT_OUT, gen)


@pytest.fixture(scope="module")
def files(lora_models, tmp_path_factory):
    """{model: (base GGUF, {adapter: adapter GGUF})}."""
    d = tmp_path_factory.mktemp("lora-gguf")
    out = {}
    for m in MODELS:
        src = lora_models / m
        base = gguf_writer.write_gguf(str(src), str(d / f"{m}.gguf"), "f32")
        out[m] = (base, {a: gguf_writer.write_lora_gguf(
            str(src), str(src / f"{a}-peft"), str(d / f"{m}-{a}.gguf"))
            for a in gen.ADAPTERS})
    return out


CASES = [(m, a, p) for m in MODELS for a in gen.ADAPTERS for p in gen.PROMPTS]


@pytest.mark.parametrize("model,adapter,prompt", CASES,
                         ids=["-".join(c) for c in CASES])
def test_gguf_adapter_matches_llama_cpp(spindle_bin, lora_models, files,  # noqa: F811
                                        model, adapter, prompt, tmp_path):
    import llama_cpp
    import llama_cpp_ref
    base, adapters = files[model]
    ref = json.loads((lora_models / model / "reference.json").read_text())
    ids = ref["adapters"][adapter]["prompts"][prompt]["prompt_tokens"]
    llm = llama_cpp_ref.f32_llama(llama_cpp, base, N_CTX, THREADS,
                                  lora_path=str(adapters[adapter]))
    try:
        case = {"path": base, "llm": llm, "exact": llm, "qtype": "f32",
                "name": f"{model}+{adapter}"}
        pc.assert_gguf_parity(spindle_bin, case, ids, gen.MAX_TOKENS, THREADS,
                              tmp_path, TOL, None,
                              ["--lora", str(adapters[adapter])])
    finally:
        llm.close()


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("base_form", ["gguf", "safetensors"])
def test_gguf_adapter_matches_peft_form(spindle_bin, lora_models, files,  # noqa: F811
                                        model, base_form, tmp_path):
    """all8 as GGUF equals all8 as PEFT / mlx-lm: mlx-lm's reference holds,
    over the GGUF base and over the safetensors directory."""
    d = lora_models / model
    base, adapters = files[model]
    tl.assert_adapter_ref(spindle_bin, d, "all8", "len40",
                          base if base_form == "gguf" else d,
                          [adapters["all8"]], tmp_path / "l.npy",
                          f"{model} {base_form} + gguf adapter")


def _first(t, kind):
    return sorted(k for k in t if k.endswith(kind))[0]


def _drop_b(t):
    del t[_first(t, ".lora_b")]


def _rank_mismatch(t):
    k = _first(t, ".lora_b")
    t[k] = t[k][:, :-1].copy()


def _unknown_module(t):
    t["blk.0.attn_qkv.weight.lora_a"] = t.pop("blk.0.attn_q.weight.lora_a")


def _embedding(t):
    t["token_embd.weight.lora_a"] = np.zeros((8, 256), np.float32)


def _bad_layer(t):
    for k in [k for k in t if k.startswith("blk.0.")]:
        t[k.replace("blk.0.", "blk.99.", 1)] = t.pop(k)


def _odd_suffix(t):
    t["blk.0.attn_q.weight.lora_c"] = t[_first(t, ".lora_a")]


MALFORMED = {
    "not-adapter": ({"general_type": "model"}, "not a LoRA adapter"),
    "arch-mismatch": ({"arch_name": "qwen2"},
                      "an adapter for architecture 'qwen2'; the model is "
                      "'qwen3'"),
    "unknown-arch": ({"arch_name": "mamba"},
                     "GGUF architecture 'mamba' is not supported"),
    "unpaired": ({"edit": _drop_b}, "but no lora_B"),
    "rank-mismatch": ({"edit": _rank_mismatch}, "rank or shape mismatch"),
    "unknown-module": ({"edit": _unknown_module},
                       "is not a lora_a/lora_b of a supported projection"),
    "embedding": ({"edit": _embedding},
                  "token_embd.weight.lora_a is not a lora_a/lora_b"),
    "layer-out-of-range": ({"edit": _bad_layer},
                           "targets layer 99; the model has 3"),
    "odd-suffix": ({"edit": _odd_suffix}, "lora_c is not a lora_a/lora_b"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_gguf_adapter_one_line(spindle_bin, lora_models,  # noqa: F811
                                         tmp_path, case):
    kwargs, needle = MALFORMED[case]
    d = lora_models / "qwen3-f32"
    bad = gguf_writer.write_lora_gguf(str(d), str(d / "all8-peft"),
                                      str(tmp_path / "bad.gguf"), **kwargs)
    r = subprocess.run([str(spindle_bin), "run", "-m", str(d),
                        "--prompt-tokens", "1,2", "-n", "1", "--lora", bad],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr

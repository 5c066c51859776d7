"""GGUF files of the grouped-routing MoE families, llama.cpp's "deepseek2"
(MLA: DeepSeek-V3, GLM-4.7-Flash) and "glm4moe" (GLM-4.5 to 4.7): Spindle
against llama.cpp (llama-cpp-python) on the same file.

The GGUFs are written from make_mla_models.py's dsv3-f32 (DeepSeek-V3:
q_lora_rank, one dense layer, grouped sigmoid routing, a shared expert)
and glm-lite-f32 (glm4_moe_lite, rms_norm_eps 1e-5, which llama.cpp
applies to the latent norms too) by tests/gguf_writer.py's deepseek2 entry
(tests/gguf_writer_mla.py) in llama.cpp's converter spelling: the MLA keys
(kv_lora_rank, key_length_mla / value_length_mla beside the latent row's
key_length / value_length, one KV head), the expert keys (group counts,
expert_weights_scale / _norm, gating func sigmoid,
leading_dense_block_count), kv_b split into attn_k_b / attn_v_b, the bias
as exp_probs_b.bias; matrices F32 or Q8_0. llama.cpp runs in its f32
configuration (tests/llama_cpp_ref.py). dsv3-f32-hf adds YaRN (factor 4,
mscale 1, mscale_all_dim 0.707) and Hugging Face's kv_b_proj, which the
writer splits as the converter does; the file says only 0.1
mscale_all_dim (yarn_log_multiplier), and llama.cpp's deepseek2 computes
as if mscale were mscale_all_dim, so Spindle reads it so, and there it
differs from the safetensors model by design.

And make_glm4moe_models.py's glm4moe-f32 (q/k/v biases, q/k norms, half
rotary, one dense layer, a shared expert, one MTP layer in its config
that mlx-lm's layout has dropped) as glm4moe: block_count counting the
MTP layer with nextn_predict_layers 1, the rotary part as
rope.dimension_count, the pre-MLP norm as post_attention_norm.

Per file and prompt (the parity suite's 1/7/40-token prompts): the
last-prompt-position logits, centered, max |error| / std of llama.cpp's
within the tolerance, and 32 greedy tokens (EOS ignored) identical to
llama.cpp's up to a near-tie. Tolerances: F32 1e-4 (summation order;
measured 2-7e-6); Q8_0 with SPINDLE_PRECISION=fast (activations quantized
as llama.cpp does) 0.1: 2-5e-7 on most prompts, but on one prompt per
model (dsv3 and glm-lite 40 tokens, glm4moe 7) the group-limited sigmoid
routing of these tiny random models meets a near-tie that the last-bit
differences of the quantized products flip (one expert of one position:
0.04-0.05; a random 40-token prompt gives 4e-7 again), and greedy tokens
then match up to the near-tie rule at that tolerance; the F32 files, with
the same routing, agree to 1e-5 everywhere.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS (2).
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))
import make_glm4moe_models as glm  # noqa: E402
import make_mla_models as mla  # noqa: E402
import parity_common as tp  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)
from llama_cpp_ref import f32_llama, greedy_reference  # noqa: E402

# model name -> (generator module, environment override of its directory)
SOURCES = {"dsv3-f32": (mla, "SPINDLE_MLA_PARITY_DIR"),
           "dsv3-f32-hf": (mla, "SPINDLE_MLA_PARITY_DIR"),
           "glm-lite-f32": (mla, "SPINDLE_MLA_PARITY_DIR"),
           "glm4moe-f32": (glm, "SPINDLE_GLM4MOE_PARITY_DIR")}
assert glm.PROMPTS == mla.PROMPTS and glm.MAX_TOKENS == mla.MAX_TOKENS
N_GEN = mla.MAX_TOKENS
N_CTX = 128
THREADS = os.environ.get("SPINDLE_THREADS", "2")
# qtype -> (SPINDLE_PRECISION or None for the environment's, tolerance)
CHECKS = {"f32": (None, 1e-4), "q8_0": ("fast", 0.1)}
FILES = [(s, t) for s in SOURCES for t in CHECKS]
CASES = [(s, t, p) for s, t in FILES for p in mla.PROMPTS]


@pytest.fixture(scope="session")
def ggufs(spindle_bin, tmp_path_factory):  # noqa: F811
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python is missing (pip install -r "
                    "tests/requirements.txt)")
    import gguf_writer
    dirs = {gen: tp.ensure_models(Path(os.environ.get(env, gen.DEFAULT_OUT)),
                                  gen)
            for gen, env in SOURCES.values()}
    out = tmp_path_factory.mktemp("moe-gguf")
    return {(s, t): gguf_writer.write_gguf(str(dirs[SOURCES[s][0]] / s),
                                           str(out / f"{s}-{t}.gguf"), t)
            for s, t in FILES}


@pytest.fixture(scope="session")
def llama_runs(ggufs):
    """llama.cpp's (logits, tokens, margins) per (source, type, prompt)."""
    import llama_cpp
    runs = {}
    for (s, t), path in ggufs.items():
        llm = f32_llama(llama_cpp, path, N_CTX, int(THREADS))
        for name, ids in mla.PROMPTS.items():
            runs[s, t, name] = greedy_reference(llm, ids, N_GEN)
        llm.close()
    return runs


def spindle_run(path, ids, precision, tmp_path):
    npy = tmp_path / "logits.npy"
    env = dict(os.environ)
    if precision:
        env["SPINDLE_PRECISION"] = precision
    r = subprocess.run(
        [str(tp.SPINDLE_BIN), "run", "-m", str(path), "--prompt-tokens",
         ",".join(map(str, ids)), "-n", str(N_GEN), "--ignore-eos", "--json",
         "--dump-logits", str(npy), "-t", THREADS],
        capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    return np.load(npy).astype(np.float64), json.loads(r.stdout)["tokens"]


@pytest.mark.parametrize("source,qtype,prompt", CASES,
                         ids=[f"{s}-{t}-{p}" for s, t, p in CASES])
def test_mla_gguf_vs_llama_cpp(ggufs, llama_runs, source, qtype, prompt,
                               tmp_path):
    ref_logits, ref_tokens, margins = llama_runs[source, qtype, prompt]
    precision, tol = CHECKS[qtype]
    sd = float(np.std(ref_logits))
    logits, tokens = spindle_run(ggufs[source, qtype], mla.PROMPTS[prompt],
                                 precision, tmp_path)
    diff = (logits - logits.mean()) - (ref_logits - ref_logits.mean())
    rel = float(np.max(np.abs(diff))) / sd
    label = f"{source}/{qtype}/{prompt}"
    print(f"  {label}: centered logit err/std {rel:.3g} (tol {tol})")
    assert rel <= tol, f"{label}: logit err/std {rel:.4g} > {tol}"
    assert len(tokens) == N_GEN, f"{label}: {len(tokens)} tokens"
    stop = next((i for i, (a, b) in enumerate(zip(tokens, ref_tokens))
                 if a != b), None)
    assert stop is None or margins[stop] < tp.TIE_FACTOR * tol * sd, (
        f"{label}: token {stop} is {tokens[stop]}, llama.cpp "
        f"{ref_tokens[stop]} with margin {margins[stop]:.4g} (no near-tie)\n"
        f"  got      {tokens}\n  expected {ref_tokens}")


class _KeyOverride:
    """A GGUFWriter whose add_<name> calls write the given value instead
    (a file llama.cpp's converter would not write, for the error paths)."""

    def __init__(self, w, overrides):
        self._w, self._overrides = w, overrides

    def __getattr__(self, name):
        if name in self._overrides:
            value = self._overrides[name]
            return lambda *_a, **_k: getattr(self._w, name)(value)
        return getattr(self._w, name)


@pytest.mark.parametrize("source,model_type,overrides,message", [
    ("dsv3-f32", "deepseek_v3",
     {"add_expert_gating_func": gguf.ExpertGatingFuncType.SOFTMAX},
     "'deepseek2.expert_gating_func' 1 (softmax) is not supported"),
    ("glm4moe-f32", "glm4_moe",
     {"add_nextn_predict_layers": 4},
     "'glm4moe.nextn_predict_layers' must be a count below block_count"),
], ids=["deepseek2-softmax", "glm4moe-nextn"])
def test_grouped_moe_gguf_bad_keys(spindle_bin, source, model_type,  # noqa: F811
                                   overrides, message, monkeypatch,
                                   tmp_path):
    import dataclasses
    import gguf_writer as gw
    arch = gw.ARCHS[model_type]
    monkeypatch.setitem(gw.ARCHS, model_type, dataclasses.replace(
        arch, keys=lambda w, *a: arch.keys(_KeyOverride(w, overrides), *a)))
    gen, env = SOURCES[source]
    src = tp.ensure_models(Path(os.environ.get(env, gen.DEFAULT_OUT)), gen)
    path = gw.write_gguf(str(src / source), str(tmp_path / "bad.gguf"))
    r = subprocess.run([str(tp.SPINDLE_BIN), "run", "-m", path,
                        "--prompt-tokens", "1,2", "-n", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr

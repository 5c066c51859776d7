"""Oracle parity for Gemma 4 text: Spindle against mlx-lm's gemma4_text.

Models and references come from make_gemma4_models.py (mlx / mlx-lm's own
code, in the subset of gemma4_text configs Spindle supports); the checks
are test_parity.py's (parity_common.py):
  (a) greedy tokens identical to the reference up to a near-tie;
  (b) last-prompt-position logits within a relative tolerance (max abs error
      / std of the reference logits): TOL_F32_REL against the float32
      upcast, and a multiple of mlx's own native-vs-f32 gap against the
      stored dtype (bf16, 4-bit).
Gemma 4's norms scale by w, so unlike Gemma 3 the float32 reference needs
no norm rounding; mlx-lm applies the final logit softcap itself.

The "-hf" models hold the MoE experts in transformers' layout (fused
experts.gate_up_proj, experts.down_proj; "-hf-mm" under
"model.language_model." of a Gemma4ForConditionalGeneration checkpoint),
read in place.

Bad configs (a global KV head count that does not divide the heads; a MoE
block without its sizes) and Hugging Face expert tensors of a wrong shape
must fail at load with a one-line error naming the key or tensor.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS,
SPINDLE_GEMMA4_PARITY_DIR (default tests/.work/parity-gemma4).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_gemma4_models as gm  # noqa: E402  (cheap: no mlx at import)
import parity_common as tp  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_GEMMA4_PARITY_DIR", gm.DEFAULT_OUT))
gemma4_models, case = tp.parity_fixtures(gm, OUT, "gemma4_models")
CASES, IDS = tp.parity_cases(gm)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_gemma4_greedy_tokens(case, gemma4_models, model, prompt):
    ref, entry, out, _ = case
    tp.assert_greedy_tokens(out, ref, entry)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_gemma4_last_logits(case, gemma4_models, model, prompt):
    ref, entry, _, dump = case
    tp.assert_last_logits(dump, gemma4_models / model, ref, entry,
                          f"{model}/{prompt}")


def _with_config(src, dst, edit):
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix in (".safetensors", ".json"):
            (dst / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((src / "config.json").read_text())
    edit(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _run(spindle_bin, d, *args):  # noqa: F811
    return subprocess.run([str(spindle_bin), *args, "-m", str(d)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("key,value,needle", [
    # mlx-lm's default (256) switches per-layer inputs on: their weights
    # are then missing.
    ("hidden_size_per_layer_input", None, "embed_tokens_per_layer"),
    ("num_kv_shared_layers", 5, "num_kv_shared_layers"),
    ("enable_moe_block", True, "num_experts"),
    ("global_head_dim", 33, "global_head_dim"),
    ("rope_parameters", {"full_attention": {"rope_type": "yarn"}},
     "rope_parameters.full_attention.rope_type"),
    ("rope_parameters", {"full_attention": {"rope_type": "proportional",
                                            "partial_rotary_factor": 2}},
     "partial_rotary_factor"),
    ("head_dim", None, "head_dim"),
    ("final_logit_softcapping", -1, "final_logit_softcapping"),
])
def test_gemma4_refused_config(spindle_bin, gemma4_models,  # noqa: F811
                               tmp_path, key, value, needle,
                               model="gemma4-f32"):
    def edit(cfg):
        if value is None:
            cfg.pop(key)
        else:
            cfg[key] = value
    d = _with_config(gemma4_models / model, tmp_path / "m", edit)
    r = _run(spindle_bin, d, "run", "--prompt-tokens", "1,2", "-n", "1")
    assert r.returncode != 0, "an unsupported config was accepted"
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, \
        r.stderr


def test_gemma4_per_layer_vocab(spindle_bin, gemma4_models,  # noqa: F811
                                tmp_path):
    """A per-layer table smaller than the vocabulary is refused."""
    test_gemma4_refused_config(spindle_bin, gemma4_models, tmp_path,
                               "vocab_size_per_layer_input", 100,
                               "vocab_size_per_layer_input",
                               model="gemma4-per-layer-f32")


def test_gemma4_global_kv_heads(spindle_bin, gemma4_models,  # noqa: F811
                                tmp_path):
    """A global KV head count that does not divide the heads is refused."""
    test_gemma4_refused_config(spindle_bin, gemma4_models, tmp_path,
                               "num_global_key_value_heads", 3,
                               "num_global_key_value_heads",
                               model="gemma4-k-eq-v-f32")


def test_gemma4_info(spindle_bin, gemma4_models):  # noqa: F811
    """`spindle info` describes the model: the family, its layer kinds and
    the full-attention layers' proportional rope."""
    r = _run(spindle_bin, gemma4_models / "gemma4-wide-q4g64", "info",
             "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    text = json.dumps(info)
    assert "gemma4_text" in text, text
    assert info.get("rope_scaling") == "proportional" or \
        "proportional" in text, text


def test_gemma4_moe_info(spindle_bin, gemma4_models):  # noqa: F811
    """`spindle info` counts the MoE block's experts: every layer has 8, 2
    read per token, so a token reads fewer parameters than the model has."""
    r = _run(spindle_bin, gemma4_models / "gemma4-moe-q4g64", "info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["experts"] == {"count": 8, "used_per_token": 2,
                               "intermediate_size": 64, "moe_layers": 5}, info
    assert info["active_parameters"] < info["parameters"], info



@pytest.mark.parametrize("model,tensor,edit", [
    # transposed: [E, hidden, 2 inter] instead of [E, 2 inter, hidden]
    ("gemma4-moe-hf-f32", "model.layers.1.experts.gate_up_proj",
     lambda w: w.transpose(0, 2, 1)),
    # one expert short
    ("gemma4-moe-hf-f32", "model.layers.3.experts.down_proj",
     lambda w: w[1:]),
    # only the gate half
    ("gemma4-moe-hf-mm-bf16",
     "model.language_model.layers.0.experts.gate_up_proj",
     lambda w: w[:, : w.shape[1] // 2]),
], ids=["gate-up-transposed", "down-one-expert-short", "mm-gate-up-half"])
def test_gemma4_hf_bad_expert_shape(spindle_bin, gemma4_models,  # noqa: F811
                                    tmp_path, model, tensor, edit):
    """A Hugging Face expert tensor of the wrong shape fails at load with
    one line naming it."""
    import mlx.core as mx
    d = _with_config(gemma4_models / model, tmp_path / "m", lambda c: None)
    weights = mx.load(str(d / "model.safetensors"))
    weights[tensor] = mx.contiguous(edit(weights[tensor]))
    mx.save_safetensors(str(d / "model.safetensors"), weights)
    r = _run(spindle_bin, d, "run", "--prompt-tokens", "1,2", "-n", "1")
    assert r.returncode > 0, "a malformed expert tensor was accepted"
    assert f"'{tensor}'" in r.stderr and \
        len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_gemma4_hf_moe_info(spindle_bin, gemma4_models):  # noqa: F811
    """The multimodal Hugging Face checkpoint is described as the text
    model it holds, its experts counted."""
    r = _run(spindle_bin, gemma4_models / "gemma4-moe-hf-mm-bf16", "info",
             "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["model_type"] == "gemma4_text", info
    assert info["experts"] == {"count": 8, "used_per_token": 2,
                               "intermediate_size": 96, "moe_layers": 5}, info

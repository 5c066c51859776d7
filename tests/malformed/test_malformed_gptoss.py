"""`spindle info -m DIR` on broken gpt-oss models (config and tensors).

A tiny gpt_oss directory in mlx-lm's layout (2 layers, 4 experts, 2 per
token, stacked mlp.experts with biases, self_attn.sinks, the experts in
MLX's mxfp4 mode: U32 codes and U8 exponents, config.json's quantization
block naming them) is written by hand with numpy and
test_malformed_models.py's safetensors layout; each case breaks one thing:
the expert counts, sinks of the wrong size, a missing expert bias, a bad
layer_types entry, mxfp4 tensors of the wrong shape, and scales whose
dtype contradicts the mode the config gives the module. The same model in
the Hugging Face checkpoint layout (hf_tensors: gate_up_proj_blocks with
interleaved rows, _scales, _bias; quantization_config {"quant_method":
"mxfp4"}) is accepted, and broken in its own ways (blocks of the wrong
shape or dtype, missing scales, an unknown quant_method). Spindle must exit
non-zero without a signal and print exactly one line on stderr naming the
key or tensor at fault.
"""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import test_malformed_models as tm  # noqa: E402
from test_malformed_moe import _drop, _replace, config_with, run_info  # noqa: E402

pytestmark = tm.pytestmark

HIDDEN, LAYERS, HEADS, KV, HEAD_DIM, VOCAB = 64, 2, 2, 1, 32, 64
EXPERTS, USED, INTER = 4, 2, 64
EXPERT_PROJS = {"gate_proj": (INTER, HIDDEN), "up_proj": (INTER, HIDDEN),
                "down_proj": (HIDDEN, INTER)}
MXFP4 = {"group_size": 32, "bits": 4, "mode": "mxfp4"}

CONFIG = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
    "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS, "num_key_value_heads": KV,
    "head_dim": HEAD_DIM, "intermediate_size": INTER, "vocab_size": VOCAB,
    "num_local_experts": EXPERTS, "num_experts_per_tok": USED,
    "sliding_window": 8, "layer_types": ["sliding_attention",
                                         "full_attention"],
    "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
    "rope_theta": 150000.0, "max_position_embeddings": 256,
    "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
    "quantization": {"group_size": 64, "bits": 8, "mode": "affine", **{
        f"model.layers.{l}.mlp.experts.{p}": MXFP4
        for l in range(LAYERS) for p in EXPERT_PROJS}},
}


def tensors():
    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    t = {"model.embed_tokens.weight": w(VOCAB, HIDDEN),
         "lm_head.weight": w(VOCAB, HIDDEN),
         "model.norm.weight": np.ones(HIDDEN, np.float32)}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        t[p + "input_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        for name, rows in (("q_proj", HEADS * HEAD_DIM), ("k_proj", KV * HEAD_DIM),
                           ("v_proj", KV * HEAD_DIM)):
            t[p + f"self_attn.{name}.weight"] = w(rows, HIDDEN)
            t[p + f"self_attn.{name}.bias"] = w(rows)
        t[p + "self_attn.o_proj.weight"] = w(HIDDEN, HEADS * HEAD_DIM)
        t[p + "self_attn.o_proj.bias"] = w(HIDDEN)
        t[p + "self_attn.sinks"] = w(HEADS)
        t[p + "mlp.router.weight"] = w(EXPERTS, HIDDEN)
        t[p + "mlp.router.bias"] = w(EXPERTS)
        for proj, (rows, cols) in EXPERT_PROJS.items():
            e = p + f"mlp.experts.{proj}."
            t[e + "weight"] = rng.integers(0, 1 << 32, (EXPERTS, rows, cols // 8),
                                           dtype=np.uint32)
            t[e + "scales"] = np.full((EXPERTS, rows, cols // 32), 120, np.uint8)
            t[e + "bias"] = w(EXPERTS, rows)
    return t


def write(d: Path, t, cfg):
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    (d / "model.safetensors").write_bytes(tm.safetensors_bytes(t))
    return d


def test_valid_gptoss_model_is_accepted(tmp_path):
    proc = run_info(write(tmp_path / "m", tensors(), CONFIG))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["model_type"] == "gpt_oss"
    assert info["weight_types"]["MLX mxfp4"] == LAYERS * EXPERTS * 3


def _affine_mode(cfg):
    cfg["quantization"]["model.layers.1.mlp.experts.up_proj"] = {
        "group_size": 32, "bits": 4, "mode": "affine"}


L1 = "model.layers.1."
# (id, config changes or edit, tensor edit, what the line must name)
CASES = [
    ("no_num_local_experts", {"num_local_experts": None}, None,
     "num_local_experts"),
    ("top_k_above_experts", {"num_experts_per_tok": EXPERTS + 1}, None,
     "num_experts_per_tok"),
    ("experts_fewer_than_tensors", {"num_local_experts": 2}, None,
     "mlp.router.weight"),
    ("sinks_size", {}, _replace(L1 + "self_attn.sinks",
                                np.zeros(HEADS + 1, np.float32)),
     L1 + "self_attn.sinks"),
    ("no_sinks", {}, _drop(L1 + "self_attn.sinks"), "self_attn.sinks"),
    ("no_expert_bias", {}, _drop(L1 + "mlp.experts.down_proj.bias"),
     L1 + "mlp.experts.down_proj.bias"),
    ("layer_type", {"layer_types": ["sliding_attention", "global"]}, None,
     "layer_types"),
    ("mxfp4_codes_shape", {}, _replace(
        L1 + "mlp.experts.gate_proj.weight",
        np.zeros((EXPERTS, INTER, HIDDEN // 4), np.uint32)),
     L1 + "mlp.experts.gate_proj.weight"),
    ("mxfp4_scales_shape", {}, _replace(
        L1 + "mlp.experts.down_proj.scales",
        np.zeros((EXPERTS, HIDDEN, INTER // 64), np.uint8)),
     L1 + "mlp.experts.down_proj.scales"),
    ("affine_mode_on_u8_scales", _affine_mode, None,
     L1 + "mlp.experts.up_proj.scales"),
]


@pytest.mark.parametrize("changes,edit,needle", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_malformed_gptoss(tmp_path, changes, edit, needle):
    t = tensors()
    if edit:
        edit(t)
    if callable(changes):
        cfg = config_with(CONFIG)
        changes(cfg)
    else:
        cfg = config_with(CONFIG, **changes)
    proc = run_info(write(tmp_path / "m", t, cfg))
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}"
    assert proc.returncode > 0, f"accepted; stdout: {proc.stdout[:300]!r}"
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"want one stderr line, got: {proc.stderr!r}"
    assert needle in lines[0], f"does not name {needle}: {lines[0]}"


HF_CONFIG = {k: v for k, v in CONFIG.items() if k != "quantization"}
HF_CONFIG["quantization_config"] = {"quant_method": "mxfp4"}


def hf_tensors():
    """tensors() in the Hugging Face layout (the codes' values do not
    matter to these checks, only names, shapes and dtypes)."""
    t = tensors()
    for layer in range(LAYERS):
        e = f"model.layers.{layer}.mlp.experts."
        gate = {k: t.pop(e + "gate_proj." + k) for k in ("weight", "scales", "bias")}
        up = {k: t.pop(e + "up_proj." + k) for k in ("weight", "scales", "bias")}
        both = {k: np.concatenate([gate[k], up[k]], axis=1) for k in gate}
        for stem, parts in (("gate_up_proj", both), ("down_proj", {
                k: t.pop(e + "down_proj." + k) for k in ("weight", "scales", "bias")})):
            codes = parts["weight"].view(np.uint8)
            t[e + stem + "_blocks"] = codes.reshape(*codes.shape[:-1], -1, 16)
            t[e + stem + "_scales"] = parts["scales"]
            t[e + stem + "_bias"] = parts["bias"]
    return t


def test_valid_hf_gptoss_model_is_accepted(tmp_path):
    proc = run_info(write(tmp_path / "m", hf_tensors(), HF_CONFIG))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["weight_types"]["MLX mxfp4"] == LAYERS * EXPERTS * 2


HF_GU = L1 + "mlp.experts.gate_up_proj"
HF_CASES = [
    ("blocks_shape", {}, _replace(HF_GU + "_blocks", np.zeros(
        (EXPERTS, INTER, HIDDEN // 32, 16), np.uint8)), HF_GU + "_blocks"),
    ("blocks_dtype", {}, _replace(HF_GU + "_blocks", np.zeros(
        (EXPERTS, 2 * INTER, HIDDEN // 32, 16), np.float16)), HF_GU + "_blocks"),
    ("no_scales", {}, _drop(HF_GU + "_scales"), HF_GU + "_scales"),
    ("no_bias", {}, _drop(HF_GU + "_bias"), HF_GU),
    ("quant_method", {"quantization_config": {"quant_method": "gptq"}}, None,
     "gptq"),
]


@pytest.mark.parametrize("changes,edit,needle", [c[1:] for c in HF_CASES],
                         ids=[c[0] for c in HF_CASES])
def test_malformed_hf_gptoss(tmp_path, changes, edit, needle):
    t = hf_tensors()
    if edit:
        edit(t)
    proc = run_info(write(tmp_path / "m", t, config_with(HF_CONFIG, **changes)))
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}"
    assert proc.returncode > 0, f"accepted; stdout: {proc.stdout[:300]!r}"
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"want one stderr line, got: {proc.stderr!r}"
    assert needle in lines[0], f"does not name {needle}: {lines[0]}"

"""`spindle convert --merge-lora`: the merged model against mlx-lm's fuse
(LoRALinear.fuse / QLoRA's fuse(dequantize=True), what `mlx_lm fuse` runs)
tensor by tensor, and its logits and greedy tokens against mlx-lm's
generation with the adapter applied (make_lora_models.py's reference) and
against Spindle's own unmerged run. Bases: f32, bf16 with biases, 4-bit
quantized (its merged projections become bf16, marked float in the
config's quantization), and a Llama GGUF with a llama.cpp LoRA GGUF
(converted to a Hugging Face directory first, q/k rows back in order).
PEFT's merge_and_unload needs torch (too heavy for CI); the PEFT form of
each adapter holds the same matrices (make_lora_models.py) and is merged
here against the same fuse; a one-time run against merge_and_unload itself
(tests/parity/check_lora_refs_torch.py, recorded there) agreed to 1e-6 of
each tensor's std.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import make_lora_models as gen  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

MODELS = ["qwen3-f32", "qwen2-bf16", "llama-q4g64"]
# mlx-lm's fuse runs on the model upcast to f32 (its own fuse rounds the
# delta to bf16 before adding it, a double rounding), so each merged
# element must be that exact sum rounded once to the output type: within
# half an ulp, |err| <= REL * |want| (+ a hair for summation order).
FUSE_REL = {"qwen3-f32": 1e-6, "qwen2-bf16": 2.0 ** -8, "llama-q4g64": 2.0 ** -8}


@pytest.fixture(scope="module")
def lora_models(spindle_bin):  # noqa: F811
    return pc.ensure_models(gen.DEFAULT_OUT, gen)


def merge(bin_path, model, adapter, out, *extra):
    cmd = [str(bin_path), "convert", "-i", str(model), "--merge-lora",
           str(adapter), "-o", str(out), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr[-3000:]}"
    return out


def mlx_fused(model_dir, adapter_dir):
    """{name: float32 array} of mlx-lm's fused model, fused in f32."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.tuner.utils import load_adapters
    from mlx_lm.utils import load_model
    model, _ = load_model(Path(model_dir))
    model.set_dtype(mx.float32)
    load_adapters(model, str(adapter_dir))
    fused = [(n, m.fuse(dequantize=True)) for n, m in model.named_modules()
             if hasattr(m, "fuse")]
    model.update_modules(tree_unflatten(fused))
    return {k: np.array(v.astype(mx.float32))
            for k, v in tree_flatten(model.parameters())}


def load_st(path):
    """{name: array} of a safetensors file: floats as float32, other
    types as their raw bytes (uint8)."""
    import struct
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = np.frombuffer(raw[8 + n + a:8 + n + b], np.uint8)
        dt = info["dtype"]
        if dt == "BF16":
            v = (buf.view("<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt in ("F16", "F32"):
            v = buf.view("<f2" if dt == "F16" else "<f4").astype(np.float32)
        else:
            out[name] = buf
            continue
        out[name] = v.reshape(info["shape"])
    return out


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("layout", ["mlx", "peft"])
def test_merged_matches_mlx_fuse(spindle_bin, lora_models, tmp_path, model,  # noqa: F811
                                 layout):
    d = lora_models / model
    adapter = d / ("all8" if layout == "mlx" else "all8-peft")
    out = merge(spindle_bin, d, adapter, tmp_path / "merged")
    ours = load_st(out / "model.safetensors")
    want = mlx_fused(d, d / "all8")
    merged = [k for k in want if any(p in k for p in (
        "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
        "gate_proj.weight", "up_proj.weight", "down_proj.weight"))]
    cfg = json.loads((d / "config.json").read_text())
    assert len(merged) == 7 * cfg["num_hidden_layers"]
    for k in merged:
        bound = FUSE_REL[model] * np.abs(want[k]) + 1e-6 * np.std(want[k])
        over = np.abs(ours[k] - want[k]) / bound
        assert over.max() <= 1, (f"{k}: off mlx-lm's fuse by {over.max():.3g}"
                                 " times the rounding bound")
    src = {}
    for f in d.glob("model*.safetensors"):
        src.update(load_st(f))
    for k, v in src.items():           # everything else as it was
        if k in ours and k not in merged:
            assert np.array_equal(ours[k], v), k
    cfg = json.loads((out / "config.json").read_text())
    q = cfg.get("quantization")
    if q:   # the merged projections are float now, the rest still 4-bit
        assert all(q.get(k.removesuffix(".weight")) is False for k in merged)
        assert not any(k.removesuffix(".weight") + ".scales" in ours
                       for k in merged)
        assert "model.embed_tokens.scales" in ours


def run(bin_path, model, prompt, dump, *extra):
    cmd = [str(bin_path), "run", "-m", str(model), "--prompt-tokens",
           ",".join(map(str, prompt)), "-n", str(gen.MAX_TOKENS), "--json",
           "--dump-logits", str(dump), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr[-3000:]}"
    return json.loads(r.stdout)


@pytest.mark.parametrize("model", MODELS)
def test_merged_logits(spindle_bin, lora_models, tmp_path, model):  # noqa: F811
    """Merged in f32, the model generates what mlx-lm does with the adapter
    (both references) and what Spindle does with the adapter unmerged;
    merged in the base's own type (bf16 for the 4-bit one), what mlx-lm
    does natively, within the reference's native tolerance."""
    d = lora_models / model
    ref = json.loads((d / "reference.json").read_text())
    aref = dict(ref, **ref["adapters"]["all8"])
    entry = aref["prompts"]["len40"]
    ids = entry["prompt_tokens"]
    out32 = merge(spindle_bin, d, d / "all8", tmp_path / "merged32",
                  "--dtype", "f32")
    got = run(spindle_bin, out32, ids, tmp_path / "m32.npy")
    pc.assert_greedy_tokens(got, aref, entry)
    pc.assert_last_logits(tmp_path / "m32.npy", d, aref, entry,
                          f"{model} merged in f32")
    run(spindle_bin, d, ids, tmp_path / "u.npy", "--lora", str(d / "all8"))
    a, b = np.load(tmp_path / "m32.npy"), np.load(tmp_path / "u.npy")
    err = float(np.max(np.abs(a - b)) / np.std(b))
    assert err <= 1e-4, f"merged (f32) off the unmerged run by {err:.3g}"

    out = merge(spindle_bin, d, d / "all8", tmp_path / "merged")
    run(spindle_bin, out, ids, tmp_path / "m.npy")
    want = np.load(d / entry["native"]["logits_file"])
    err = float(np.max(np.abs(np.load(tmp_path / "m.npy") - want)) / np.std(want))
    print(f"  {model} merged in its own type vs mlx native: {err:.3g}")
    assert err <= pc.native_tol(aref), f"merged off mlx native by {err:.3g}"


def test_merge_gguf_base_and_adapter(spindle_bin, lora_models, tmp_path):  # noqa: F811
    """A Llama GGUF (permuted q/k rows) with a llama.cpp LoRA GGUF: the
    merged directory generates what mlx-lm does with the adapter."""
    import gguf_writer
    d = lora_models / "llama-f32"
    base = gguf_writer.write_gguf(str(d), str(tmp_path / "m.gguf"), "f32")
    adapter = gguf_writer.write_lora_gguf(str(d), str(d / "all8-peft"),
                                          str(tmp_path / "a.gguf"))
    out = merge(spindle_bin, base, adapter, tmp_path / "merged", "--dtype", "f32")
    assert not (tmp_path / "merged.gguf-base").exists()
    ref = json.loads((d / "reference.json").read_text())
    aref = dict(ref, **ref["adapters"]["all8"])
    entry = aref["prompts"]["len40"]
    got = run(spindle_bin, out, entry["prompt_tokens"], tmp_path / "m.npy")
    pc.assert_greedy_tokens(got, aref, entry)
    pc.assert_last_logits(tmp_path / "m.npy", d, aref, entry, "gguf merged")


def test_merge_bad_adapter_one_line(spindle_bin, lora_models, tmp_path):  # noqa: F811
    d = lora_models / "qwen3-f32"
    r = subprocess.run([str(spindle_bin), "convert", "-i", str(d),
                        "--merge-lora", str(tmp_path / "none"), "-o",
                        str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no such adapter directory or GGUF file" in lines[0]
    assert not (tmp_path / "out").exists()

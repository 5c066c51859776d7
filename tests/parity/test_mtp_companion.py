"""MTP companion directories (spindle_mtp_head_load, `--mtp DIR`,
`--spec mtp --draft-model DIR`): make_mtp_models.py's tiny Qwen3.5 split
into a target without its mtp.* tensors and a companion directory holding
them, as mlx-lm publishes heads (config.json model_type "qwen3_5_mtp",
text_config, block_size; the tensors under mlx-lm's qwen3_5_mtp Model
names, "fc.weight", "layers.0.*", ..., or Hugging Face's "mtp."-prefixed
ones with (1 + w) norms stored as w, which mlx-lm's sanitize tells apart
the same way):

  * the companion's head gives the in-checkpoint head's hidden taps and
    logits (teacher-forced and recursive), bit for bit in mlx-lm's layout
    (within TOL_F32_REL in Hugging Face's, whose norms are stored less
    one), and its drafter the reference's drafts;
  * an MLX-quantized companion (8-bit affine, mlx's own mx.quantize) gives
    what a dense companion holding mx.dequantize's weights gives;
  * generation with it is lossless, drafts what the in-checkpoint head
    drafts (the same drafted / accepted counts), and K defaults to its
    block_size;
  * malformed companions (another hidden size, a missing or misshapen
    tensor, another model_type, a block_size that is no draft depth, no
    weights) are refused with one line.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_mtp_models as gen  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)
from test_mtp import MODEL, harness, mtp_models  # noqa: E402,F401

BLOCK_SIZE = 3


def save(tensors, path, fmt="mlx"):
    from safetensors.numpy import save_file
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, path / "model.safetensors", metadata={"format": fmt})


def companion_config(src, **extra):
    cfg = json.loads((src / "config.json").read_text())
    return dict(model_type="qwen3_5_mtp", text_config=cfg["text_config"],
                block_size=BLOCK_SIZE, **extra)


def write_companion(dst, src, tensors, **extra):
    save(tensors, dst)
    (dst / "config.json").write_text(json.dumps(companion_config(src, **extra)))
    return dst


def quantized(head):
    """(8-bit affine tensors as mlx.nn.quantize writes them, the dense
    weights mx.dequantize gives back) of the head's matrices."""
    import mlx.core as mx
    q, dense = {}, {}
    for k, v in head.items():
        if v.ndim == 2 and k.endswith(".weight"):
            w, s, b = mx.quantize(mx.array(v), group_size=64, bits=8)
            base = k[: -len(".weight")]
            q[k], q[base + ".scales"], q[base + ".biases"] = (
                np.array(w), np.array(s), np.array(b))
            dense[k] = np.array(mx.dequantize(w, s, b, group_size=64, bits=8))
        else:
            q[k] = dense[k] = v
    return q, dense


@pytest.fixture(scope="session")
def split(mtp_models, tmp_path_factory):  # noqa: F811
    """{name: dir}: "target" (the checkpoint without model-mtp.safetensors),
    companions "mlx" (mlx-lm's names), "hf" (mtp.* names, norms - 1),
    "q8" and "q8_dense" (its dequantized twin)."""
    from safetensors.numpy import load_file
    src = mtp_models / MODEL
    root = tmp_path_factory.mktemp("mtp-companion")
    target = root / "target"
    target.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(src / f, target / f)
    heads = load_file(src / "model-mtp.safetensors")
    mlx = {k[len("mtp."):]: v for k, v in heads.items()}
    hf = {k: (v - 1 if v.ndim == 1 and "norm" in k else v)
          for k, v in heads.items()}
    q8, q8_dense = quantized(mlx)
    return {
        "target": target,
        "mlx": write_companion(root / "mlx", src, mlx),
        "hf": write_companion(root / "hf", src, hf),
        "q8": write_companion(root / "q8", src, q8,
                              quantization={"group_size": 64, "bits": 8}),
        "q8_dense": write_companion(root / "q8_dense", src, q8_dense),
        "heads": mlx,
    }


def head_out(spindle_bin, model, tokens, prompt_len, out, *extra):  # noqa: F811
    r = subprocess.run(
        [str(harness(spindle_bin)), str(model), "--tokens",
         ",".join(map(str, tokens)), "--prompt-len", str(prompt_len),
         "--out", str(out), *extra], capture_output=True, text=True,
        timeout=120)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, np.float32)


def reference(mtp_models, prompt):  # noqa: F811
    entry = json.loads((mtp_models / MODEL / "reference.json").read_text())
    return entry["prompts"][prompt]


@pytest.mark.parametrize("layout", ["mlx", "hf"])
@pytest.mark.parametrize("prompt", list(gen.PROMPTS))
def test_companion_equals_in_checkpoint_head(spindle_bin, mtp_models,  # noqa: F811
                                             split, tmp_path, layout, prompt):
    e = reference(mtp_models, prompt)
    P, tokens = e["prompt_len"], e["tokens"]
    inside = head_out(spindle_bin, mtp_models / MODEL, tokens, P,
                      tmp_path / "inside.f32")
    apart = head_out(spindle_bin, split["target"], tokens, P,
                     tmp_path / "apart.f32", "--companion", str(split[layout]))
    if layout == "mlx":
        assert np.array_equal(inside, apart)
    else:   # the norms' (w - 1) + 1 rounds in float32
        err = float(np.abs(inside - apart).max() / inside.std())
        assert err < pc.TOL_F32_REL, err
    r = subprocess.run(
        [str(harness(spindle_bin)), str(split["target"]), "--tokens",
         ",".join(map(str, tokens)), "--prompt-len", str(P), "--propose",
         str(len(tokens) - P - 1), "--companion", str(split[layout])],
        capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["drafts"] == tokens[P + 1:]


def test_quantized_companion(spindle_bin, mtp_models, split, tmp_path):  # noqa: F811
    e = reference(mtp_models, "len40")
    P, tokens = e["prompt_len"], e["tokens"]
    q8 = head_out(spindle_bin, split["target"], tokens, P, tmp_path / "q8.f32",
                  "--companion", str(split["q8"]))
    dense = head_out(spindle_bin, split["target"], tokens, P,
                     tmp_path / "dense.f32", "--companion",
                     str(split["q8_dense"]))
    err = float(np.abs(q8 - dense).max() / dense.std())
    assert err < pc.TOL_F32_REL, err


def cli(*args):
    return subprocess.run([str(pc.SPINDLE_BIN), "run", *args],
                          capture_output=True, text=True, timeout=120)


def run_json(*args):
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_companion_generation(mtp_models, split):  # noqa: F811
    """Lossless; the in-checkpoint head's drafts (equal counts at a fixed
    K); K is the companion's block_size by default."""
    base = ["--prompt-tokens", "5,6,7,8,9,10,11", "-n", "24",
            "--ignore-eos", "--json"]
    target = str(split["target"])
    plain = run_json("-m", target, *base)
    inside = run_json("-m", str(mtp_models / MODEL), *base, "--spec", "mtp",
                      "--num-draft-tokens", str(BLOCK_SIZE), "--spec-fixed-k")
    for how in (["--mtp", str(split["mlx"])],
                ["--spec", "mtp", "--draft-model", str(split["mlx"])]):
        out = run_json("-m", target, *base, *how, "--spec-fixed-k")
        assert out["tokens"] == plain["tokens"] == inside["tokens"]
        s, t = out["stats"]["spec"], inside["stats"]["spec"]
        assert s["drafted"] > 0
        assert (s["drafted"], s["accepted"]) == (t["drafted"], t["accepted"])
        assert len(s["acceptance_by_position"]) == BLOCK_SIZE


def test_target_without_head_needs_a_companion(split):
    r = cli("-m", str(split["target"]), "--prompt-tokens", "5,6", "-n", "2",
            "--spec", "mtp")
    assert r.returncode != 0 and "--mtp DIR" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def malformed(split, root, name):
    """A broken copy of the mlx companion: (dir, what the error says)."""
    d = root / name
    heads = dict(split["heads"])
    cfg = json.loads((split["mlx"] / "config.json").read_text())
    said = {"hidden": "split from a different checkpoint?",
            "missing": "layers.0.mlp.down_proj.weight",
            "misshapen": "fc",
            "type": "qwen3_5_mtp",
            "block": "block_size",
            "empty": "model.safetensors"}[name]
    if name == "hidden":
        cfg["text_config"]["hidden_size"] //= 2
    elif name == "missing":
        del heads["layers.0.mlp.down_proj.weight"]
    elif name == "misshapen":
        heads["fc.weight"] = heads["fc.weight"][:, : heads["fc.weight"].shape[1] // 2]
    elif name == "type":
        cfg["model_type"] = "qwen3_5"
    elif name == "block":
        cfg["block_size"] = 2.5
    if name == "empty":
        d.mkdir()
    else:
        save(heads, d)
    (d / "config.json").write_text(json.dumps(cfg))
    return d, said


@pytest.mark.parametrize("name", ["hidden", "missing", "misshapen", "type",
                                  "block", "empty"])
def test_malformed_companion(split, tmp_path, name):
    d, said = malformed(split, tmp_path, name)
    r = cli("-m", str(split["target"]), "--prompt-tokens", "5,6", "-n", "2",
            "--mtp", str(d))
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], r.stderr


def test_resume_keys_the_head_state_by_companion(split, tmp_path):
    """A checkpoint's MTP state is under the companion's content
    fingerprint: the same companion continues it (no line logged), another
    one (the same head in the other layout: other files) ignores it with
    one line, and both resumes continue the tokens."""
    target, ck = str(split["target"]), tmp_path / "mtp.ckpt"
    base = ["--prompt-tokens", "5,6,7,8,9,10,11", "--ignore-eos", "--json"]
    full = run_json("-m", target, *base, "-n", "30", "--mtp", str(split["mlx"]))
    run_json("-m", target, *base, "-n", "30", "--mtp", str(split["mlx"]),
             "--checkpoint", str(ck), "--checkpoint-every", "12")
    for companion, logged in (("mlx", 0), ("hf", 1)):
        r = cli("-m", target, "--resume", str(ck), "--mtp",
                str(split[companion]), "--json")
        assert r.returncode == 0, r.stderr
        lines = [ln for ln in r.stderr.splitlines() if "drafter state" in ln]
        assert len(lines) == logged, r.stderr
        if logged:
            assert lines[0].count("mtp-head-v1:") == 2, lines[0]
        rest = json.loads(r.stdout)["tokens"]
        assert 0 < len(rest) < 30 and full["tokens"][-len(rest):] == rest

"""A decoder embedding model in Qwen3-Embedding's layout: a tiny random
qwen3 built and saved by mlx-lm's own code (ModelArgs, Model, save_model,
save_config), with sentence-transformers' modules.json, a last-token
Pooling and Normalize. The reference is mlx-lm's Qwen3Model (the final
norm's hidden states) reloaded from disk, pooled at the last token and
L2-normalized in numpy; Matryoshka `dimensions` truncates, then
renormalizes. Token-id inputs (`spindle embed --ids`): the random model has
no tokenizer."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SPINDLE_BIN = Path(os.environ.get("SPINDLE_BIN", ROOT / "build" / "spindle"))
HIDDEN = 64
INPUTS = [[5], [17, 3, 99, 200, 7], [int(i * 37 % 250) for i in range(90)],
          [1, 2, 3, 4, 5, 6, 7, 8]]


def write_st_files(d, pooling="pooling_mode_lasttoken"):
    (d / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "",
         "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}]))
    (d / "1_Pooling").mkdir(exist_ok=True)
    (d / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": HIDDEN, pooling: True,
         "include_prompt": True}))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    mx = pytest.importorskip("mlx.core")
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.models import qwen3
    from mlx_lm.utils import load_model, save_config, save_model
    cfg = dict(model_type="qwen3", hidden_size=HIDDEN, num_hidden_layers=2,
               intermediate_size=128, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
               vocab_size=256, max_position_embeddings=512,
               rope_theta=10000.0, tie_word_embeddings=True)
    mx.random.seed(7)
    m = qwen3.Model(qwen3.ModelArgs(**cfg))
    # Norm weights away from 1, so a missing final norm shows.
    params = [(k, v + 0.3 * mx.random.normal(v.shape) if "norm" in k else v)
              for k, v in tree_flatten(m.parameters())]
    m.update(tree_unflatten(params))
    d = tmp_path_factory.mktemp("qwen3-embed")
    save_model(d, m)
    save_config(dict(cfg, architectures=["Qwen3ForCausalLM"]), d / "config.json")
    write_st_files(d)
    loaded, _ = load_model(d)

    def reference(ids):
        h = loaded.model(mx.array([ids]))[0, -1]
        return np.array(h.astype(mx.float32), dtype=np.float64)
    return d, reference


def spindle_embed(d, inputs, *args):
    r = subprocess.run([str(SPINDLE_BIN), "embed", "-m", str(d), "--ids",
                        "--threads", "2", *args],
                       input="".join(",".join(map(str, i)) + "\n"
                                     for i in inputs),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return np.array([json.loads(l)["embedding"] for l in r.stdout.splitlines()])


def unit(v):
    return v / np.linalg.norm(v)


def test_last_token_pooling_matches_mlx(model):
    d, reference = model
    got = spindle_embed(d, INPUTS)
    assert got.shape == (len(INPUTS), HIDDEN)
    for ids, row in zip(INPUTS, got):
        np.testing.assert_allclose(row, unit(reference(ids)), atol=2e-5)


def test_dimensions_truncate_then_renormalize(model):
    d, reference = model
    got = spindle_embed(d, INPUTS, "--dimensions", "16")
    for ids, row in zip(INPUTS, got):
        np.testing.assert_allclose(row, unit(reference(ids)[:16]), atol=2e-5)


def test_max_tokens_keeps_the_head(model):
    d, reference = model
    got = spindle_embed(d, INPUTS[2:3], "--max-tokens", "40")
    np.testing.assert_allclose(got[0], unit(reference(INPUTS[2][:40])),
                               atol=2e-5)

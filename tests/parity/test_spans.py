"""Prompts made of spans (spindle_request.spans): token ids and blocks of
input embeddings, through the step engine (tests/tools/engine_harness) on
the tiny mlx-lm parity models.

  * tokens + a random embeddings span + tokens, prefilled in chunks that cut
    the span, then greedy decoding: every step's logits against mlx-lm's
    model called with `input_embeddings` (the table's rows with the span's
    rows put in), fed Spindle's tokens;
  * the prefix index keys an embeddings span by its digest: the same
    placeholder ids with other embeddings share no block (cached_tokens 0),
    the same embeddings again do, and neither the bare placeholder ids nor
    the same embeddings attended both ways share anything with them (in
    memory, and in the on-disk prompt cache across processes);
  * a bidirectional span: its rows attend to each other both ways, as
    mlx-lm computes with an explicit mask (causal, with the span's square
    opened), and it is never cut across prompt chunks;
  * checkpoints record the span digests: a resume with the same spans
    continues the generation, one with other embeddings is refused;
  * Gemma 4's per-layer token input at a span's rows: none with
    SPINDLE_SPAN_NO_PER_LAYER_INPUT, the placeholders' otherwise, as mlx-lm
    computes with per_layer_inputs given.
"""

import numpy as np
import pytest

import parity_common as pc
from parity_common import spindle_bin  # noqa: F401  (fixture)
from test_engine import models_dir, run  # noqa: F401

HEAD = [(i * 37 + 11) % 500 for i in range(20)]
TAIL = [(i * 53 + 5) % 500 for i in range(13)]
PLACEHOLDER = 7
N_EMB = 40


def hidden_of(mdir):
    import json
    return json.loads((mdir / "config.json").read_text())["hidden_size"]


def embeddings(tmp_path, mdir, seed, n=N_EMB):
    rows = np.random.default_rng(seed).standard_normal(
        (n, hidden_of(mdir))).astype(np.float32)
    path = tmp_path / f"emb-{seed}-{n}.f32"
    rows.tofile(path)
    return rows, str(path)


def span_request(path, source, n=N_EMB, head=HEAD, tail=TAIL, **kw):
    spans = [dict(tokens=head),
             dict(tokens=[PLACEHOLDER] * n, embeddings_file=path,
                  source=source, **kw)]
    if tail:
        spans.append(dict(tokens=tail))
    return spans


def reference(mdir, prompt_ids, rows, start, generated, mask=None,
              no_per_layer_input=False):
    """mlx-lm's f32 logits after the prompt (ids, with rows in place of
    positions start..) fed through input_embeddings, then after each
    generated id but the last. mask: an explicit [T, T] additive mask for
    the prompt. no_per_layer_input: Gemma 4's per-layer token input zero at
    the rows' positions (its multimodal model's padding id)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.utils import load_model
    model, _ = load_model(mdir)
    model.set_dtype(mx.float32)
    inner = model.model
    ids = mx.array([prompt_ids])
    h = inner.embed_tokens(ids)
    kw = {}
    if hasattr(inner, "_get_per_layer_inputs"):   # Gemma 4
        per_layer = inner._get_per_layer_inputs(ids)
        if no_per_layer_input:
            per_layer[0, start:start + len(rows)] = 0
        kw["per_layer_inputs"] = per_layer
    if len(rows):
        # Gemma 4 scales what it is given; Spindle's rows enter as they are.
        scale = getattr(inner, "embed_scale", 1.0)
        h[0, start:start + len(rows)] = mx.array(rows) / scale
    cache = make_prompt_cache(model)
    if mask is None:
        out = model(ids, cache=cache, input_embeddings=h, **kw)
    else:
        out = masked_call(model, h, cache, mask)
    want = [np.array(out[0, -1].astype(mx.float32))]
    for tok in generated[:-1]:
        out = model(mx.array([[tok]]), cache=cache)
        want.append(np.array(out[0, -1].astype(mx.float32)))
    return want


def masked_call(model, h, cache, mask):
    """model(...) with an explicit additive attention mask [T, T] for the
    prompt (mlx-lm's layers take the mask the model would build)."""
    import mlx.core as mx
    inner = model.model
    m = mx.array(mask)
    for layer, c in zip(inner.layers, cache):
        h = layer(h, m, c)
    h = inner.norm(h)
    if model.args.tie_word_embeddings:
        return inner.embed_tokens.as_linear(h)
    return model.lm_head(h)


def assert_logits_close(got, want, label):
    assert len(got) == len(want), label
    for i, (g, w) in enumerate(zip(got, want)):
        err = float(np.max(np.abs(g - w)) / np.std(w))
        assert err <= pc.TOL_F32_REL, \
            f"{label} step {i}: max|err|/std {err:.3g} > {pc.TOL_F32_REL}"


@pytest.mark.parametrize("model", ["qwen3-f32", "llama-f32"])
def test_embeddings_span_matches_mlx_input_embeddings(models_dir, tmp_path,
                                                      model):
    mdir = models_dir / model
    rows, path = embeddings(tmp_path, mdir, 1)
    req = dict(spans=span_request(path, "image-1"), max_tokens=6,
               ignore_eos=True, logits=True)
    # A budget of 16 rows: the span is cut across three prompt chunks.
    got = run(mdir, tmp_path, "step", [req], max_seqs=2,
              max_batch_tokens=16)[0]
    assert got["status"] == "ok", got
    prompt = HEAD + [PLACEHOLDER] * N_EMB + TAIL
    want = reference(mdir, prompt, rows, len(HEAD), got["tokens"])
    assert_logits_close(list(got["logits"]), want, model)
    # The placeholders' own table rows give something else: the rows are
    # really read from the span.
    plain = reference(mdir, prompt, [], 0, got["tokens"][:1])
    assert np.max(np.abs(plain[0] - want[0])) > 100 * pc.TOL_F32_REL * \
        np.std(want[0])


def test_prefix_index_keys_embeddings_by_digest(models_dir, tmp_path):
    mdir = models_dir / "qwen3-f32"
    _, path1 = embeddings(tmp_path, mdir, 1, 50)
    _, path2 = embeddings(tmp_path, mdir, 2, 50)

    def q(spans=None, prompt=None, **kw):
        r = dict(max_tokens=4, ignore_eos=True, logits=True, **kw)
        if spans:
            r["spans"] = spans
        else:
            r["prompt"] = prompt
        return r
    reqs = [
        q(span_request(path1, "image-1", 50, tail=HEAD)),
        # The same placeholder ids, other embeddings.
        q(span_request(path2, "image-2", 50, tail=HEAD), after=0),
        # The first image again: its blocks are found.
        q(span_request(path1, "image-1", 50, tail=HEAD), after=1),
        # The bare placeholder ids.
        q(prompt=HEAD + [PLACEHOLDER] * 50 + HEAD, after=2),
        # The first image attended both ways: other keys and values.
        q(span_request(path1, "image-1", 50, tail=HEAD, bidirectional=True),
          after=3),
    ]
    out = run(mdir, tmp_path, "step", reqs, max_seqs=2, max_batch_tokens=64)
    cached = [r["stats"]["cached_tokens"] for r in out]
    assert cached == [0, 0, 64, 0, 0], cached
    # Reusing the cached blocks changes nothing but the work.
    assert out[2]["tokens"] == out[0]["tokens"]
    assert np.allclose(out[2]["logits"], out[0]["logits"], rtol=0,
                       atol=1e-4 * np.std(out[0]["logits"]))
    assert not np.allclose(out[1]["logits"][0], out[0]["logits"][0])



def test_disk_prompt_cache_keys_embeddings_by_digest(models_dir, tmp_path):
    """The same across processes: each request runs in a fresh process
    over one prompt cache directory."""
    mdir = models_dir / "qwen3-f32"
    _, path1 = embeddings(tmp_path, mdir, 1, 50)
    _, path2 = embeddings(tmp_path, mdir, 2, 50)
    cache = tmp_path / "prompt-cache"
    cache.mkdir()

    def once(path, source):
        req = dict(spans=span_request(path, source, 50, tail=HEAD),
                   max_tokens=2, ignore_eos=True, logits=True)
        return run(mdir, tmp_path, "step", [req], max_seqs=1,
                   prompt_cache_dir=str(cache))[0]
    first = once(path1, "image-1")
    other = once(path2, "image-2")
    again = once(path1, "image-1")
    cached = [r["stats"]["cached_tokens"] for r in (first, other, again)]
    assert cached == [0, 0, 64], cached
    assert again["tokens"] == first["tokens"]
    assert np.allclose(again["logits"], first["logits"], rtol=0,
                       atol=1e-4 * np.std(first["logits"]))

def test_checkpoint_records_the_span_digests(models_dir, tmp_path):
    mdir = models_dir / "qwen3-f32"
    _, path1 = embeddings(tmp_path, mdir, 1)
    _, path2 = embeddings(tmp_path, mdir, 2)
    ck = str(tmp_path / "spans.ckpt")

    def q(**kw):
        return dict(max_tokens=8, ignore_eos=True, **kw)
    reqs = [
        q(spans=span_request(path1, "image-1"), checkpoint_file=ck,
          checkpoint_every=3),
        q(spans=span_request(path1, "image-1"), resume_file=ck, after=0),
        q(spans=span_request(path2, "image-2"), resume_file=ck, after=1),
        q(prompt=HEAD + [PLACEHOLDER] * N_EMB + TAIL, resume_file=ck,
          after=1),
    ]
    out = run(mdir, tmp_path, "step", reqs, max_seqs=2, max_batch_tokens=32)
    full, resumed = out[0]["tokens"], out[1]["tokens"]
    assert len(full) == 8 and 0 < len(resumed) < 8, out[:2]
    assert resumed == full[8 - len(resumed):]
    for r in out[2:]:
        assert "submit_status" in r, r
        assert "embeddings differ" in r["submit_error"], r["submit_error"]


def bidirectional_mask(n, start, length):
    """Causal [n, n] additive mask with the span's square opened."""
    allowed = np.tril(np.ones((n, n), bool))
    allowed[start:start + length, start:start + length] = True
    return np.where(allowed, 0.0, -np.inf).astype(np.float32)


@pytest.mark.parametrize("budget", [16, 128])
def test_bidirectional_span_attends_both_ways(models_dir, tmp_path, budget):
    """With a budget of 16 rows the span (40) must still be computed in
    one chunk: cut, its first rows could not see its last ones."""
    mdir = models_dir / "qwen3-f32"
    rows, path = embeddings(tmp_path, mdir, 3)
    req = dict(spans=span_request(path, "image-3", bidirectional=True),
               max_tokens=5, ignore_eos=True, logits=True)
    got = run(mdir, tmp_path, "step", [req], max_seqs=2,
              max_batch_tokens=budget)[0]
    assert got["status"] == "ok", got
    prompt = HEAD + [PLACEHOLDER] * N_EMB + TAIL
    mask = bidirectional_mask(len(prompt), len(HEAD), N_EMB)
    want = reference(mdir, prompt, rows, len(HEAD), got["tokens"], mask)
    assert_logits_close(list(got["logits"]), want, f"budget {budget}")
    causal = reference(mdir, prompt, rows, len(HEAD), got["tokens"][:1])
    assert np.max(np.abs(causal[0] - want[0])) > 100 * pc.TOL_F32_REL * \
        np.std(want[0]), "the span's flag changed nothing"


@pytest.fixture(scope="session")
def gemma4_models(spindle_bin):  # noqa: F811
    import make_gemma4_models as mg4
    return pc.ensure_models(mg4.DEFAULT_OUT, mg4)


@pytest.mark.parametrize("no_per_layer_input", [True, False])
def test_gemma4_per_layer_input_follows_the_span_flag(gemma4_models, tmp_path,
                                                      no_per_layer_input):
    mdir = gemma4_models / "gemma4-per-layer-f32"
    rows, path = embeddings(tmp_path, mdir, 4)
    req = dict(spans=span_request(path, "image-4",
                                  no_per_layer_input=no_per_layer_input),
               max_tokens=5, ignore_eos=True, logits=True)
    got = run(mdir, tmp_path, "step", [req], max_seqs=2,
              max_batch_tokens=16)[0]
    assert got["status"] == "ok", got
    prompt = HEAD + [PLACEHOLDER] * N_EMB + TAIL
    want = reference(mdir, prompt, rows, len(HEAD), got["tokens"],
                     no_per_layer_input=no_per_layer_input)
    assert_logits_close(list(got["logits"]), want,
                        f"no_per_layer_input={no_per_layer_input}")
    other = reference(mdir, prompt, rows, len(HEAD), got["tokens"][:1],
                      no_per_layer_input=not no_per_layer_input)
    assert np.max(np.abs(other[0] - want[0])) > 100 * pc.TOL_F32_REL * \
        np.std(want[0]), "the flag changed nothing"


def test_bad_spans_refused_at_submit(models_dir, tmp_path):
    mdir = models_dir / "qwen3-f32"
    _, path = embeddings(tmp_path, mdir, 1, 2)
    reqs = [dict(spans=[dict(tokens=HEAD), dict(tokens=[768])]),
            dict(spans=[dict(tokens=[])]),
            dict(spans=[dict(tokens=[PLACEHOLDER, 800], embeddings_file=path,
                             source="x")])]
    out = run(mdir, tmp_path, "step", reqs, max_seqs=2)
    want = ["prompt span 1: token id 768 is outside the vocabulary (768)",
            "prompt span 0: no positions or no ids",
            "prompt span 0: token id 800 is outside the vocabulary (768)"]
    for r, w in zip(out, want):
        assert r.get("submit_status") == "invalid argument", r
        assert r["submit_error"] == w

"""Lossless speculative decoding in the step engine, on the tiny
mlx-lm parity models, through tests/tools/engine_harness.

  * greedy equality: with --spec ngram (K 1, 4, 10), with a draft model
    and with the checkpoint's own MTP head (make_mtp_models.py),
    greedy tokens equal plain greedy decoding's on 60 prompts (a third of
    them highly repetitive), speculating and plain requests mixed in the
    same batches, on a dense model and a qwen3_5 hybrid (recurrent layers);
    they may only part where the plain logits are a near-tie (the parity
    rule of test_engine.py);
  * sampling equality: at temperature 1.0 the per-position token marginals
    of speculative and plain sampling agree by a chi-square test
    (p > 0.01), for the n-gram drafter and the draft model, and the same
    test rejects a deliberately wrong acceptance rule (every draft
    accepted) — the check shows it can fail;
  * sampled drafts (the draft model and the MTP head at temperature > 0
    sample their drafts with a clone of the request's sampler on the
    uniforms the verify rows draw): the output is token for token plain
    sampling's with the same seed (the request's random stream is never
    advanced by drafting, also as the durable checkpoint records it), and
    a drafter whose q is p (the target itself; an MTP head computing what
    its target computes, mtp_informed) is accepted nearly always, far more
    than greedy drafts;
  * rollback: after a speculative run the sequence (full KV, sliding
    window KV, recurrent state) gives the same next-token logits as after
    plain decoding of the same tokens.
"""

import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_gemma3_models as gm  # noqa: E402
import make_hybrid_models as hm  # noqa: E402
import make_models as mm  # noqa: E402
import make_mtp_models as mtpm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)
from test_engine import HARNESS, assert_same_tokens, run  # noqa: E402

OUT = Path(os.environ.get("SPINDLE_PARITY_DIR", mm.DEFAULT_OUT))
HYBRID_OUT = Path(os.environ.get("SPINDLE_HYBRID_DIR", hm.DEFAULT_OUT))
GEMMA_OUT = Path(os.environ.get("SPINDLE_GEMMA3_DIR", gm.DEFAULT_OUT))
MTP_OUT = Path(os.environ.get("SPINDLE_MTP_PARITY_DIR", mtpm.DEFAULT_OUT))


def prompts(vocab, n=60):
    """n prompts: every third one a repeated phrase (what prompt lookup
    feeds on), the others pseudo-random ids of lengths 1..40."""
    out = []
    for i in range(n):
        if i % 3 == 0:
            phrase = [(i * 37 + j * 11) % vocab for j in range(2 + i % 5)]
            out.append((phrase * 12)[: 8 + i % 30])
        else:
            out.append([(i * 7919 + j * 104729 + 13) % vocab
                        for j in range(1 + (i * 13) % 40)])
    return out


def need_harness():
    if not HARNESS.is_file():
        pytest.skip(f"engine harness not found at {HARNESS}")


@pytest.fixture(scope="session")
def dense_dir(spindle_bin):  # noqa: F811
    need_harness()
    return pc.ensure_models(OUT, mm)


@pytest.fixture(scope="session")
def hybrid_dir(spindle_bin):  # noqa: F811
    need_harness()
    return pc.ensure_models(HYBRID_OUT, hm)


@pytest.fixture(scope="session")
def gemma_dir(spindle_bin):  # noqa: F811
    need_harness()
    return pc.ensure_models(GEMMA_OUT, gm)


@pytest.fixture(scope="session")
def mtp_dir(spindle_bin):  # noqa: F811
    need_harness()
    return pc.ensure_models(MTP_OUT, mtpm)


@pytest.fixture(scope="session")
def near_copy(dense_dir, tmp_path_factory):
    """qwen3-f32 with every matrix perturbed by 1% of its spread: a draft
    model whose q is close to the target's p, not equal (the parity set's
    other qwen3 models are unrelated random models, accepted ~never)."""
    import shutil
    from safetensors.numpy import load_file, save_file
    src, dst = dense_dir / "qwen3-f32", tmp_path_factory.mktemp("near-copy")
    rng = np.random.default_rng(5)
    w = {k: v + rng.normal(0, 0.01 * v.std(), v.shape).astype(v.dtype)
         if v.ndim == 2 else v
         for k, v in load_file(src / "model.safetensors").items()}
    save_file(w, dst / "model.safetensors", metadata={"format": "pt"})
    for f in ("config.json", "model.safetensors.index.json"):
        shutil.copy(src / f, dst / f)
    return dst


# the scale of the informed MTP targets' context (mtp_informed): none
# (q == p) and some (q close to p)
MTP_EPS = {"mtp_exact": 0.0, "mtp_near": 0.03}


def informed_mtp(src, dst, eps):
    """src's MTP checkpoint made into a target whose next token depends on
    the token just seen alone, through layer 0's MLP (attention and the
    other layers' outputs scaled by eps: at eps 0 its last hidden state is
    e + mlp(e)), and a head that computes the same: fc = [I | 0] takes the
    normed embedding alone, its layer's attention adds nothing (o_proj 0)
    and its MLP is the target's layer 0's, mtp.norm the target's final
    norm. The embedding rows get unit rms (so that the head's RMSNorm
    returns them: its eps, 1e-6, is negligible beside their mean square,
    3e-3 in the original), the kept MLP's output x20 (so that it still
    dominates e as it did the original's 0.05-rms rows: tied embeddings
    favour the token just seen where e dominates) and the final norm
    x0.03, for a p(argmax) of ~0.2-0.35 under SAMPLERS."""
    import shutil
    from safetensors.numpy import load_file, save_file
    dst.mkdir(parents=True, exist_ok=True)
    w = load_file(src / "model.safetensors")
    pre, kept = "language_model.model.", "layers.0.mlp.down_proj.weight"
    for k in w:
        if k == pre + kept:
            w[k] = w[k] * np.float32(20)
        elif k.endswith(("out_proj.weight", "o_proj.weight",
                         "down_proj.weight")):
            w[k] = w[k] * np.float32(eps)
    emb = w[pre + "embed_tokens.weight"]
    w[pre + "embed_tokens.weight"] = emb / np.sqrt((emb ** 2).mean(
        1, keepdims=True))
    w[pre + "norm.weight"] = w[pre + "norm.weight"] * np.float32(0.03)
    h = load_file(src / "model-mtp.safetensors")
    d = emb.shape[1]
    h["mtp.fc.weight"] = np.hstack([np.eye(d), np.zeros((d, d))]).astype(
        np.float32)
    h["mtp.pre_fc_norm_embedding.weight"] = np.ones(d, np.float32)
    h["mtp.norm.weight"] = w[pre + "norm.weight"]
    o_proj = "mtp.layers.0.self_attn.o_proj.weight"
    h[o_proj] = np.zeros_like(h[o_proj])
    for k in ("mlp.gate_proj.weight", "mlp.up_proj.weight",
              "mlp.down_proj.weight", "post_attention_layernorm.weight"):
        h["mtp.layers.0." + k] = w[pre + "layers.0." + k]
    save_file(w, dst / "model.safetensors", metadata={"format": "mlx"})
    save_file(h, dst / "model-mtp.safetensors", metadata={"format": "mlx"})
    for f in ("config.json", "model.safetensors.index.json"):
        shutil.copy(src / f, dst / f)
    return dst


@pytest.fixture(scope="session")
def mtp_informed(mtp_dir, tmp_path_factory):
    """{name: model dir} of MTP_EPS: MTP checkpoints whose head is
    informative. The checkpoint's random head predicts nothing of its
    random target (acceptance ~0, sampled or greedy), and no one-layer head
    follows a random four-layer hybrid, so the target is changed instead
    (informed_mtp)."""
    src = mtp_dir / mtpm.SPECS[0]["name"]
    root = tmp_path_factory.mktemp("mtp-informed")
    return {name: informed_mtp(src, root / name, eps)
            for name, eps in MTP_EPS.items()}


def drafting(request, name, k=4):
    """(target, request spec fields, engine options) of a drafting set-up:
    the draft model for qwen3-f32, the target itself ("itself", q == p) or
    near_copy; an MTP head, the checkpoint's random one ("mtp") or an
    informed one (MTP_EPS)."""
    mtp = name.startswith("mtp")
    spec = dict(spec="mtp" if mtp else "draft", num_draft_tokens=k,
                fixed_k=True)
    if name == "mtp":
        return request.getfixturevalue("mtp_dir") / mtpm.SPECS[0]["name"], \
            spec, {}
    if mtp:
        return request.getfixturevalue("mtp_informed")[name], spec, {}
    model = request.getfixturevalue("dense_dir") / "qwen3-f32"
    draft = model if name == "itself" else request.getfixturevalue("near_copy")
    return model, spec, dict(draft_model=str(draft))


def vocab_of(model_dir):
    import json
    return json.loads((model_dir / "config.json").read_text())["vocab_size"]


def check_greedy(model_dir, tmp_path, spec, draft=None, max_tokens=24):
    ps = prompts(vocab_of(model_dir))
    base = dict(max_tokens=max_tokens, ignore_eos=True)
    plain = run(model_dir, tmp_path, "step",
                [dict(base, prompt=p, logits=True) for p in ps], max_seqs=12)
    # every other request speculates: mixed batches of both kinds
    reqs = [dict(base, prompt=p, **(spec if i % 2 == 0 else {}))
            for i, p in enumerate(ps)]
    opts = {"draft_model": str(draft)} if draft else {}
    got = run(model_dir, tmp_path, "step", reqs, max_seqs=12, **opts)
    drafted = accepted = 0
    for i, (g, want) in enumerate(zip(got, plain)):
        assert g["status"] == "ok", g["error"]
        assert_same_tokens(g, want, f"{model_dir.name} {spec} prompt {i}")
        drafted += g["stats"]["drafted"]
        accepted += g["stats"]["accepted"]
    print(f"  {model_dir.name} {spec}: drafted {drafted}, accepted {accepted}")
    assert drafted > 0, "speculation never ran"
    return drafted, accepted


@pytest.mark.parametrize("k", [1, 4, 10])
def test_greedy_ngram_dense(dense_dir, tmp_path, k):
    check_greedy(dense_dir / "qwen3-f32", tmp_path,
                 dict(spec="ngram", num_draft_tokens=k, fixed_k=True))


def test_greedy_ngram_adaptive(dense_dir, tmp_path):
    check_greedy(dense_dir / "llama-q4g64", tmp_path,
                 dict(spec="ngram", ngram_max=4, ngram_min=2))


def test_min_draft_tokens_is_a_floor(dense_dir, tmp_path):
    """min_draft_tokens (the server's speculative.n_min): a round verifies
    no draft or at least 3 tokens, so draft positions 0..2 are verified
    equally often, and greedy output stays plain greedy's. The same count
    without the floor shows shorter rounds (the check can fail)."""
    model = dense_dir / "llama-q4g64"
    ps = prompts(vocab_of(model))
    base = dict(max_tokens=24, ignore_eos=True, spec="ngram", num_draft_tokens=6,
                fixed_k=True)
    floored = run(model, tmp_path, "step",
                  [dict(base, prompt=p, min_draft_tokens=3) for p in ps], max_seqs=12)
    free = run(model, tmp_path, "step", [dict(base, prompt=p) for p in ps], max_seqs=12)
    plain = run(model, tmp_path, "step",
                [dict(max_tokens=24, ignore_eos=True, prompt=p, logits=True) for p in ps],
                max_seqs=12)
    short_rounds = 0
    for i, (f, g, want) in enumerate(zip(floored, free, plain)):
        assert f["status"] == "ok", f["error"]
        assert_same_tokens(f, want, f"min_draft_tokens 3, prompt {i}")
        at = f["stats"]["drafted_at"]
        assert not at or (len(at) >= 3 and at[0] == at[1] == at[2]), (i, at)
        at = g["stats"]["drafted_at"]
        short_rounds += at[0] - at[2] if len(at) >= 3 else at[0] if at else 0
    assert sum(f["stats"]["drafted"] for f in floored) > 0, "speculation never ran"
    assert short_rounds > 0, "no round drafted fewer than 3 even without the floor"


@pytest.mark.parametrize("k", [1, 4, 10])
def test_greedy_ngram_hybrid(hybrid_dir, tmp_path, k):
    check_greedy(hybrid_dir / "qwen3_5-f32", tmp_path,
                 dict(spec="ngram", num_draft_tokens=k, fixed_k=True))


@pytest.mark.parametrize("k", [1, 4, 10])
def test_greedy_draft_model(dense_dir, tmp_path, k):
    # the target drafting for itself accepts (nearly) everything: the
    # all-accepted rewind; another random model of the same vocabulary
    # accepts little: the rejection rewind
    drafted, accepted = check_greedy(
        dense_dir / "qwen3-f32", tmp_path,
        dict(spec="draft", num_draft_tokens=k, fixed_k=True),
        draft=dense_dir / "qwen3-f32")
    assert accepted > drafted * 0.9
    drafted, accepted = check_greedy(
        dense_dir / "qwen3-f32", tmp_path,
        dict(spec="draft", num_draft_tokens=k, fixed_k=True),
        draft=dense_dir / "qwen3-q8g64")
    assert accepted < drafted / 2


def test_slow_draft_model_turns_itself_off(dense_dir, tmp_path):
    """The adaptive rule prices a draft model's steps by their measured
    time: the target drafting for itself (acceptance ~1, so only the price
    can stop it) with every draft step made 20 ms slower drafts its first
    round, which measures it, and then decodes plain (measured slower per
    token than a decode step, it is not probed again); priced as free, it
    drafts every round."""
    model = dense_dir / "qwen3-f32"
    reqs = [dict(max_tokens=48, ignore_eos=True, prompt=p, spec="draft",
                 num_draft_tokens=4) for p in prompts(vocab_of(model))[:2]]
    got = run(model, tmp_path, "step", reqs, max_seqs=4,
              draft_model=str(model), draft_delay_ms=20)
    for g in got:
        assert g["status"] == "ok", g["error"]
        st = g["stats"]
        assert st["accepted"] >= 0.9 * st["drafted"], st
        # the first round's drafts (2 here); drafting every round: ~30
        assert 0 < st["drafted"] <= 20, st


@pytest.mark.parametrize("draft", ["qwen3_5-f32", "qwen3_next-f32"])
def test_greedy_draft_model_hybrid(hybrid_dir, tmp_path, draft):
    # itself (all accepted) and another hybrid (rejections: the draft's
    # recurrent state rewinds too)
    check_greedy(hybrid_dir / "qwen3_5-f32", tmp_path,
                 dict(spec="draft", num_draft_tokens=4, fixed_k=True),
                 draft=hybrid_dir / draft)


@pytest.mark.parametrize("k", [1, 4, 10])
def test_greedy_mtp_hybrid(mtp_dir, tmp_path, k):
    # the checkpoint's own MTP head (random: it accepts little, so the
    # rejection path and the head's rewind run often)
    check_greedy(mtp_dir / mtpm.SPECS[0]["name"], tmp_path,
                 dict(spec="mtp", num_draft_tokens=k, fixed_k=True))


def test_mtp_needs_a_head(hybrid_dir, tmp_path):
    got = run(hybrid_dir / "qwen3_5-f32", tmp_path, "step",
              [dict(prompt=[1, 2, 3], max_tokens=4, spec="mtp")])
    assert got[0]["submit_status"] == "unsupported"
    assert "multi-token-prediction head" in got[0]["submit_error"]


def test_processors_and_logprobs_at_target_positions(dense_dir, tmp_path):
    """Penalties apply over prompt ++ accepted tokens, and the reported
    logprobs and top alternatives are plain decoding's."""
    model = dense_dir / "qwen3-f32"
    ps = prompts(vocab_of(model), 24)
    base = dict(max_tokens=24, ignore_eos=True, repetition_penalty=1.3,
                top_logprobs=5)
    plain = run(model, tmp_path, "step",
                [dict(base, prompt=p, logits=True) for p in ps], max_seqs=8)
    spec = dict(spec="ngram", num_draft_tokens=4, fixed_k=True)
    got = run(model, tmp_path, "step", [dict(base, prompt=p, **spec) for p in ps],
              max_seqs=8)
    accepted = 0
    for i, (g, want) in enumerate(zip(got, plain)):
        assert_same_tokens(g, want, f"penalized prompt {i}")
        accepted += g["stats"]["accepted"]
        n = next((j for j, (a, b) in enumerate(zip(g["tokens"], want["tokens"]))
                  if a != b), len(g["tokens"]))
        np.testing.assert_allclose(g["logprobs"][:n], want["logprobs"][:n],
                                   atol=1e-3)
        for a, b in zip(g["top"][:n], want["top"][:n]):
            assert [t for t, _ in a] == [t for t, _ in b] or \
                np.allclose([v for _, v in a], [v for _, v in b], atol=1e-3)
    assert accepted > 0


# ------------------------------------------------------------ sampling


def chi2_sf(x, dof):
    """P(chi2_dof >= x): the regularized upper incomplete gamma
    Q(dof/2, x/2) (series below a + 1, Lentz's continued fraction above)."""
    a, z = dof / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    lead = math.exp(-z + a * math.log(z) - math.lgamma(a))
    if z < a + 1:
        term = total = 1.0 / a
        n = a
        while term > total * 1e-15:
            n += 1
            term *= z / n
            total += term
        return 1.0 - lead * total
    b, c, d = z + 1 - a, 1e300, 1.0 / (z + 1 - a)
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        d = 1.0 / (an * d + b)
        c = b + an / c
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return lead * h


def homogeneity_p(xs, ys):
    """Chi-square test that two samples of tokens share one distribution;
    categories expected fewer than 5 times are pooled."""
    cx, cy = Counter(xs), Counter(ys)
    n, m = len(xs), len(ys)
    cats, other = [], (0, 0)
    for t in set(cx) | set(cy):
        if (cx[t] + cy[t]) * min(n, m) / (n + m) >= 5:
            cats.append((cx[t], cy[t]))
        else:
            other = (other[0] + cx[t], other[1] + cy[t])
    if sum(other):
        cats.append(other)
    if len(cats) < 2:
        return 1.0
    stat = 0.0
    for a, b in cats:
        tot = a + b
        for obs, size in ((a, n), (b, m)):
            exp = tot * size / (n + m)
            stat += (obs - exp) ** 2 / exp
    return chi2_sf(stat, len(cats) - 1)


N_SAMPLES = 400
POSITIONS = 4
SEED_PROMPT = [5, 6, 7, 8, 9, 10] * 3


def sample_runs(model_dir, tmp_path, prompt, spec, n=N_SAMPLES, seed=1000,
                **opts):
    reqs = [dict(prompt=prompt, max_tokens=POSITIONS + 1, ignore_eos=True,
                 temperature=1.0, top_k=4, seed=seed + s, **spec)
            for s in range(n)]
    out = run(model_dir, tmp_path, "step", reqs, max_seqs=16, **opts)
    return [q["tokens"] for q in out], sum(q["stats"]["accepted"] for q in out)


# slow: 1,200 sampled requests per drafter; run by the release suite (not
# under the sanitizers, where it took a minute)
@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["ngram", "draft", "mtp_near"])
def test_sampling_matches_plain(request, dense_dir, tmp_path, drafter):
    if drafter == "ngram":
        model, spec, opts = dense_dir / "qwen3-f32", {}, {}
    else:
        model, spec, opts = drafting(request, "near_copy" if drafter == "draft"
                                     else drafter)
    # a prompt holding typical continuations, so that prompt lookup drafts
    # (and is accepted) often
    typical, _ = sample_runs(model, tmp_path, SEED_PROMPT, {}, n=12)
    prompt = SEED_PROMPT + [t for toks in typical for t in toks]
    # disjoint seeds: two independent samples, not the same random streams
    # (drafting never draws from the request's stream: one draw per
    # emitted token, as plain does)
    plain, _ = sample_runs(model, tmp_path, prompt, {}, seed=90000)
    spec = dict(spec=drafter, num_draft_tokens=4, fixed_k=True) \
        if drafter == "ngram" else spec
    # the draft model (a perturbed copy of the target) and the informed MTP
    # head draft close to the target's p: drafts sampled on the verify
    # rows' uniforms, some rejected. Always accepting such coupled drafts is
    # barely wrong (they are mostly the target's own draws), so the wrong
    # rule gets greedy drafts, whose output it skews toward the drafter's
    # argmax.
    got, accepted = sample_runs(model, tmp_path, prompt, spec, **opts)
    wrong, _ = sample_runs(model, tmp_path, prompt, spec, always_accept=True,
                           greedy_drafts=drafter != "ngram", **opts)
    assert accepted > N_SAMPLES / 5, "too few drafts accepted to test anything"
    ps_good = [homogeneity_p([t[i] for t in got], [t[i] for t in plain])
               for i in range(1, POSITIONS + 1)]
    ps_bad = [homogeneity_p([t[i] for t in wrong], [t[i] for t in plain])
              for i in range(1, POSITIONS + 1)]
    print(f"  p speculative vs plain {ps_good}\n  p always-accept {ps_bad}")
    # Bonferroni over the positions
    assert min(ps_good) > 0.01 / POSITIONS, f"speculative sampling differs: {ps_good}"
    assert min(ps_bad) < 0.01 / POSITIONS, \
        f"the test cannot see a wrong acceptance rule: {ps_bad}"


# ------------------------------------------------------------ sampled drafts

# the request's sampler: temperature 1 alone, with top_p and top_k, and
# with min_p and XTC (its coin flip, one more draw per token)
SAMPLERS = {
    "t1": dict(temperature=1.0),
    "top_p_k": dict(temperature=1.0, top_p=0.9, top_k=12),
    "min_p_xtc": dict(temperature=1.0, min_p=0.05, xtc_probability=0.5,
                      xtc_threshold=0.005),
}
SEEDS = (11, 2024, 777)


def sampled_requests(model, sampler, spec, n_prompts=8, max_tokens=24):
    return [dict(prompt=p, max_tokens=max_tokens, ignore_eos=True, seed=seed,
                 **SAMPLERS[sampler], **spec)
            for p in prompts(vocab_of(model), n_prompts) for seed in SEEDS]


def acceptance(out):
    drafted = sum(q["stats"]["drafted"] for q in out)
    return sum(q["stats"]["accepted"] for q in out) / max(drafted, 1), drafted


@pytest.mark.parametrize("draft", ["itself", "near_copy", "mtp", "mtp_near"])
@pytest.mark.parametrize("sampler", ["t1", "top_p_k"])
def test_sampled_drafts_equal_plain(request, tmp_path, sampler, draft):
    """With the same seed, speculative sampling emits plain sampling's very
    tokens (not only its distribution): every emitted token is drawn by the
    target from the request's stream, which drafting never advances.
    Every other request speculates: mixed batches. The target drafting for
    itself accepts (nearly) every draft, the near copy and the near MTP
    head reject some, the random MTP head nearly all."""
    model, spec, opts = drafting(request, draft)
    plain = run(model, tmp_path, "step", sampled_requests(model, sampler, {}),
                max_seqs=12)
    reqs = [dict(q, **spec) if i % 2 == 0 else q
            for i, q in enumerate(sampled_requests(model, sampler, {}))]
    got = run(model, tmp_path, "step", reqs, max_seqs=12, **opts)
    for i, (g, want) in enumerate(zip(got, plain)):
        assert g["status"] == "ok", g["error"]
        assert g["tokens"] == want["tokens"], \
            f"{sampler} {draft} request {i}: speculation changed the sample"
    rate, drafted = acceptance(got)
    print(f"  {sampler} draft {draft}: drafted {drafted}, "
          f"accepted {rate:.3f}")
    assert drafted > 0, "speculation never ran"


# per drafter: (set-up, least sampled acceptance, least lead of sampled
# over greedy drafts); None: only reported (the random MTP head)
LEADS = {"draft": (("itself", 0.95, 0.3), ("near_copy", None, 0.15)),
         "mtp": (("mtp_exact", 0.95, 0.3), ("mtp_near", None, 0.15),
                 ("mtp", None, None))}


# slow: acceptance statistics; run by the release suite (not under the
# sanitizers)
@pytest.mark.slow
@pytest.mark.parametrize("drafter", list(LEADS))
@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_sampled_drafts_accepted_more_than_greedy(request, tmp_path, sampler,
                                                  drafter):
    """A drafter whose q is p (the target itself; the exact informed MTP
    head): drafts sampled on the uniforms of the verify rows are the
    target's own tokens (up to rounding), so they are accepted nearly
    always, greedy drafts only with probability p(argmax). q close to p
    (the near copy, the near MTP head): sampled drafts still win clearly.
    Every run keeps plain sampling's tokens."""
    plain = {}
    for name, least, lead in LEADS[drafter]:
        model, spec, opts = drafting(request, name)
        if model not in plain:
            plain[model] = run(model, tmp_path, "step",
                               sampled_requests(model, sampler, {}),
                               max_seqs=12)
        rates = {}
        for greedy in (False, True):
            got = run(model, tmp_path, "step",
                      sampled_requests(model, sampler, spec), max_seqs=12,
                      greedy_drafts=greedy, **opts)
            assert [g["tokens"] for g in got] == \
                [w["tokens"] for w in plain[model]]
            rates[greedy] = acceptance(got)
        (sampled, n_s), (greedy, n_g) = rates[False], rates[True]
        print(f"  {sampler}, draft {name}: acceptance sampled drafts "
              f"{sampled:.3f} ({n_s} drafted), greedy drafts {greedy:.3f} "
              f"({n_g} drafted)")
        if least is not None:
            assert sampled > least, f"sampled drafts of {name} rejected"
        if lead is not None:
            assert greedy < sampled - lead, name


def checkpoint_meta(path):
    """(n_generated, rng state) from a checkpoint file's META section
    (checkpoint_file.c: 16-byte head, 16-byte section headers; META holds
    the 32-byte fingerprint, i32 n_prompt, n_generated, max_tokens,
    prefill_chunk, u32 flags, reserved, then u64 rng[4])."""
    import struct
    data = Path(path).read_bytes()
    at = 16
    while data[at:at + 4] != b"META":
        at += 16 + struct.unpack_from("<Q", data, at + 8)[0]
    meta = at + 16
    return (struct.unpack_from("<i", data, meta + 36)[0],
            struct.unpack_from("<4Q", data, meta + 56))


@pytest.mark.parametrize("draft", ["itself", "mtp_near"])
def test_sampled_drafts_leave_rng_alone(request, tmp_path, draft):
    """The durable checkpoint after a speculative round records the random
    stream plain sampling has after as many tokens, and a plain resume
    from it continues plain sampling's run."""
    target, fields, opts = drafting(request, draft)
    model = str(target)
    n = 24
    base = ["-m", model, "--prompt-tokens", "5,6,7,8,9,10,11", "--ignore-eos",
            "--temp", "1", "--top-k", "12", "--seed", "4242"]
    spec = ["--spec", fields["spec"], "--num-draft-tokens", "4",
            "--spec-fixed-k"]
    if opts:
        spec += ["--draft-model", opts["draft_model"]]

    def ids(*args):
        r = cli(*base, *args)
        assert r.returncode == 0, r.stderr
        return [int(t) for t in r.stdout.split()]

    full = ids("-n", str(n))
    ck_spec = tmp_path / "spec.ckpt"
    assert ids("-n", str(n), *spec, "--checkpoint", str(ck_spec),
               "--checkpoint-every", "1") == full
    k, rng_spec = checkpoint_meta(ck_spec)
    assert 0 < k < n
    # plain: its last checkpoint is after token k (none after the last)
    ck_plain = tmp_path / "plain.ckpt"
    ids("-n", str(k + 1), "--checkpoint", str(ck_plain),
        "--checkpoint-every", "1")
    assert checkpoint_meta(ck_plain) == (k, rng_spec)
    r = subprocess.run([str(pc.SPINDLE_BIN), "run", "-m", model, "--resume",
                        str(ck_spec)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert full[:k] + [int(t) for t in r.stdout.split()] == full


# ------------------------------------------------------------ rollback


@pytest.mark.parametrize("family,name", [("dense", "qwen3-f32"),
                                         ("gemma", "gemma3-f32"),
                                         ("hybrid", "qwen3_5-f32")])
def test_rollback_next_logits(dense_dir, gemma_dir, hybrid_dir, tmp_path,
                              family, name):
    model = {"dense": dense_dir, "gemma": gemma_dir,
             "hybrid": hybrid_dir}[family] / name
    ps = prompts(vocab_of(model), 12)
    base = dict(max_tokens=20, ignore_eos=True, own_seq=True, next_logits=True)
    plain = run(model, tmp_path, "step", [dict(base, prompt=p) for p in ps])
    spec = dict(spec="ngram", num_draft_tokens=6, fixed_k=True)
    got = run(model, tmp_path, "step", [dict(base, prompt=p, **spec) for p in ps])
    rejected = compared = 0
    for i, (g, want) in enumerate(zip(got, plain)):
        rejected += g["stats"]["drafted"] - g["stats"]["accepted"]
        if g["tokens"] != want["tokens"]:
            continue   # a near-tie parted them (test_greedy_* checks that)
        compared += 1
        assert g["seq_length"] == want["seq_length"]
        a = np.fromfile(g["next_logits_file"], np.float32)
        b = np.fromfile(want["next_logits_file"], np.float32)
        err = float(np.max(np.abs(a - b)) / np.std(b))
        assert err <= pc.TOL_F32_REL, f"{name} prompt {i}: next logits off by {err:.3g}"
    assert rejected > 0, "no draft was rejected: nothing rolled back"
    assert compared >= len(ps) // 2, f"only {compared} runs kept plain's tokens"


# ------------------------------------------------------------ CLI


def cli(*args):
    import subprocess
    return subprocess.run([str(pc.SPINDLE_BIN), "run", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_run_json(dense_dir):
    import json
    model = str(dense_dir / "qwen3-f32")
    ids = ",".join(str(t) for t in [5, 6, 7, 8, 9] * 5)
    base = ["-m", model, "--prompt-tokens", ids, "-n", "30", "--ignore-eos",
            "--json"]
    plain = json.loads(cli(*base).stdout)
    for extra in (["--spec", "ngram", "--num-draft-tokens", "4",
                   "--ngram-max", "2"],
                  ["--spec", "draft", "--draft-model", model]):
        r = cli(*base, *extra)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["tokens"] == plain["tokens"]
        s = out["stats"]["spec"]
        assert s["mode"] == extra[1] and s["drafted"] > 0
        assert s["acceptance_rate"] == pytest.approx(s["accepted"] / s["drafted"])
        assert s["tokens_per_target_forward"] > 1
        assert 0 < len(s["acceptance_by_position"]) <= 10
    for bad, msg in ((["--spec", "eagle"], "--spec expects"),
                     (["--spec", "mtp"], "multi-token-prediction head"),
                     (["--spec", "draft"], "needs --draft-model"),
                     (["--spec", "ngram", "--num-draft-tokens", "0"], "")):
        r = cli(*base, *bad)
        assert r.returncode != 0 and msg in r.stderr and \
            len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_cli_run_json_mtp(mtp_dir):
    import json
    model = str(mtp_dir / mtpm.SPECS[0]["name"])
    base = ["-m", model, "--prompt-tokens", "5,6,7,8,9,10,11", "-n", "24",
            "--ignore-eos", "--json"]
    plain = json.loads(cli(*base).stdout)
    r = cli(*base, "--spec", "mtp", "--num-draft-tokens", "3", "--spec-fixed-k")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["tokens"] == plain["tokens"]
    s = out["stats"]["spec"]
    assert s["mode"] == "mtp" and s["drafted"] > 0
    assert s["acceptance_rate"] == pytest.approx(s["accepted"] / s["drafted"])
    assert 0 < len(s["acceptance_by_position"]) <= 3


# ------------------------------------------------------------ n-gram drafter


def reference_prompt_lookup(ids, ngram_min, ngram_max, num_output):
    """A numpy transcription of Hugging Face transformers'
    PromptLookupCandidateGenerator.get_candidates (the Prompt Lookup
    Decoding policy; without its logits-processor filter, which Spindle's
    round replaces by verification): the longest trailing n-gram first,
    its first match scanning left to right that has a continuation."""
    x = np.asarray(ids)
    L = len(x)
    for n in range(min(ngram_max, L - 1), ngram_min - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(x, n)
        matches = np.nonzero((windows == x[-n:]).all(axis=1))[0]
        for idx in matches:
            start, end = idx + n, min(idx + n + num_output, L)
            if start < end:
                return x[start:end].tolist()
    return []


@pytest.mark.parametrize("kmin,kmax,k", [(1, 3, 10), (2, 4, 4), (1, 1, 1)])
def test_ngram_drafter_matches_prompt_lookup(kmin, kmax, k):
    import subprocess
    tool = HARNESS.parent / "ngram_harness"
    if not tool.is_file():
        pytest.skip(f"ngram harness not found at {tool}")
    rng = np.random.default_rng(kmin * 100 + kmax * 10 + k)
    phrase = rng.integers(0, 30, size=7).tolist()
    ids = (rng.integers(0, 30, size=60).tolist() + phrase * 4 +
           rng.integers(0, 8, size=200).tolist() + phrase * 3)
    r = subprocess.run([str(tool), str(kmin), str(kmax), str(k)],
                       input=" ".join(map(str, ids)), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = [list(map(int, line.split())) for line in r.stdout.split("\n")[:len(ids)]]
    for n in range(1, len(ids) + 1):
        want = reference_prompt_lookup(ids[:n], kmin, kmax, k)
        assert got[n - 1] == want, f"history length {n}: {got[n - 1]} vs {want}"

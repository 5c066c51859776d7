"""Token masks equal llguidance's (the oracle) for the same grammar and the
Qwen3 vocabulary (151k tokens), at every state of random accepted paths:
each walk asks both matchers for the allowed tokens, compares them and
whether the end of sequence is allowed, then feeds both the same random
allowed token. The GBNF grammars of tests/grammar/gbnf reach llguidance
through its own GBNF reader, with its byte forcing off (see llg_gbnf).

Every walk is a new matcher on the same grammar, and a grammar's matchers
share its automaton and mask cache: walks after the first read states and
masks the earlier ones computed, so these comparisons cover the sharing."""
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

from grammar_common import (HARNESS, QWEN3, SCHEMAS, Harness, llg_allowed, llg_gbnf,
                            llg_tokenizer, require, solid_tokens)

GBNF = sorted((Path(__file__).resolve().parent / "gbnf").glob("*.gbnf"))
WALKS, STEPS = 8, 25


def walk(harness, matcher, hf, eos, rng, max_steps):
    """One random path; returns the number of states compared."""
    n_vocab = len(hf)
    for step in range(max_steps):
        accepting, ours = harness.mask()
        ours = ours[:n_vocab]
        theirs = llg_allowed(matcher, n_vocab)
        their_eos = bool(theirs[eos])
        theirs[eos] = False
        if not np.array_equal(ours, theirs):
            extra = [hf.decode([int(t)]) for t in np.nonzero(ours & ~theirs)[0][:8]]
            missing = [hf.decode([int(t)]) for t in np.nonzero(theirs & ~ours)[0][:8]]
            pytest.fail(f"step {step}: {ours.sum()} allowed vs llguidance's "
                        f"{theirs.sum()}; only ours: {extra!r}; only theirs: {missing!r}")
        assert accepting == their_eos, f"step {step}: end allowed {accepting} vs {their_eos}"
        cand = np.nonzero(ours)[0]
        if len(cand) == 0:
            return step + 1
        # Mostly tokens that are not pure whitespace, so that walks get deep.
        solid = np.nonzero(ours & solid_tokens(hf))[0]
        pool = solid if len(solid) and rng.random() < 0.85 else cand
        t = int(pool[rng.randrange(len(pool))])
        assert harness.accept(t), f"step {step}: our matcher rejects its own token {t}"
        assert matcher.consume_token(t), matcher.get_error()
    return max_steps


def compare_walks(kind, path, llg_grammar, extra=()):
    require(QWEN3)
    llg = pytest.importorskip("llguidance")
    tok, hf = llg_tokenizer(QWEN3)
    h = Harness(QWEN3, kind, path, extra)
    compared = 0
    try:
        for seed in range(WALKS):
            matcher = llg.LLMatcher(tok, llg_grammar)
            assert not matcher.is_error(), matcher.get_error()
            h.reset()
            compared += walk(h, matcher, hf, tok.eos_token, random.Random(seed), STEPS)
    finally:
        h.close()
    return compared


@pytest.mark.parametrize("path", GBNF, ids=lambda p: p.stem)
def test_gbnf_masks_equal_llguidance(path):
    compared = compare_walks("gbnf", path, llg_gbnf(path.read_text()))
    assert compared >= WALKS


# With 3 cache slots instead of 256 the shared cache evicts all the time
# (whole masks and the band parts of capped states): a mask recomputed
# after its slot went to another state, or a band part served from a slot
# that was reused, must still equal llguidance's.
EVICTING = ["gbnf/json.gbnf", "schemas/github_issue.json", "schemas/petstore_pet.json"]


@pytest.mark.parametrize("case", EVICTING, ids=lambda c: Path(c).stem)
def test_masks_equal_llguidance_with_evicting_cache(case, tmp_path):
    path = SCHEMAS.parent / case
    if path.suffix == ".json":
        require(HARNESS)
        p = subprocess.run([str(HARNESS), str(QWEN3), "json_schema", str(path), "--print"],
                           capture_output=True, text=True, timeout=120, check=True)
        path = tmp_path / "g.gbnf"
        path.write_text(p.stdout)
    compared = compare_walks("gbnf", path, llg_gbnf(path.read_text()), ("--mask-slots", "3"))
    assert compared >= WALKS

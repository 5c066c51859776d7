"""Token masks equal llguidance's (the oracle) for the same grammar and the
Qwen3 vocabulary (151k tokens), at every state of random accepted paths:
each walk asks both matchers for the allowed tokens, compares them and
whether the end of sequence is allowed, then feeds both the same random
allowed token. The GBNF grammars of tests/grammar/gbnf reach llguidance
through its own GBNF reader, with its byte forcing off (see llg_gbnf)."""
import random
from pathlib import Path

import numpy as np
import pytest

from grammar_common import (QWEN3, Harness, llg_allowed, llg_gbnf, llg_tokenizer, require,
                            solid_tokens)

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


def compare_walks(kind, path, llg_grammar):
    require(QWEN3)
    llg = pytest.importorskip("llguidance")
    tok, hf = llg_tokenizer(QWEN3)
    h = Harness(QWEN3, kind, path)
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

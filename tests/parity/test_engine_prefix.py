"""The KV block pool and the prefix index, through the step engine
(tests/tools/engine_harness on the tiny mlx-lm parity models).

  * the same requests with and without the prefix index: identical greedy
    tokens (the parity near-tie rule) and logits within the f32 tolerance,
    and the mlx-lm reference tokens where the prompt has one;
  * cached_tokens exact: whole 32-token blocks of the longest published
    prefix, never the last prompt token, 0 without the index;
  * copy-on-write through the engine: a sequence truncated into a block it
    shares, then continued, leaves the other requests' results unchanged;
  * a pool too small for two requests runs them one after the other (one
    waits in the queue) with the results of a large pool; a request that
    can never fit gets SPINDLE_ERR_LIMIT at submit;
  * a property test over random schedules (arrivals, cancellations,
    continuations after a truncation, a tight pool, shared prefixes)
    against each request run alone, with every block accounted for.
"""

import random

import numpy as np
import pytest

from test_engine import (LONG, P, assert_close_logits, assert_same_tokens,
                         check_finished_once, models_dir, run,  # noqa: F401
                         run_scenario)
from parity_common import spindle_bin  # noqa: F401  (fixture)

BLOCK = 32   # SP_KV_BLOCK_TOKENS
SHARED = LONG[:75]  # two full blocks and a part


def cached_expected(prompt, published):
    """Whole blocks of `prompt` (its last token excluded) that start with
    the longest published token history."""
    best = 0
    for hist in published:
        n = 0
        while n < len(prompt) - 1 and n < len(hist) and prompt[n] == hist[n]:
            n += 1
        best = max(best, n)
    return min(best, len(prompt) - 1) // BLOCK * BLOCK


def assert_pool_accounted(answer, label):
    for key in ("pool_end", "pool_final"):
        p = answer[key]
        assert p["block_tokens"] == BLOCK, label
        assert p["used"] + p["cached"] + p["free"] == p["blocks"], \
            f"{label}: {key} {p}"
    assert answer["pool_final"]["used"] == 0, \
        f"{label}: blocks still referenced after every sequence was freed " \
        f"{answer['pool_final']}"


def prefix_requests():
    def q(prompt, **kw):
        return dict(prompt=prompt, max_tokens=12, logits=True,
                    ignore_eos=True, **kw)
    return [
        q(SHARED + [5, 6, 7]),
        q(SHARED + [9], after=0),            # two blocks from request 0
        q(SHARED + [5, 6, 7], after=1),      # the same prompt again
        q(LONG[:64] + [1], after=2),         # exactly two blocks + 1
        q(LONG[:64], after=3),               # its last token is computed
        q(P["len40"], after=4),              # nothing shared
        q(P["len40"][:33] + LONG[:40], after=5),  # one block of request 5
    ]


@pytest.mark.parametrize("model", ["qwen3-f32", "llama-q4g64", "qwen2-bf16"])
def test_prefix_index_changes_nothing_but_the_work(models_dir, tmp_path,
                                                   model):
    mdir = models_dir / model
    reqs = prefix_requests()
    on = run_scenario(mdir, tmp_path, "step", reqs, max_seqs=4,
                      max_batch_tokens=16)
    off = run_scenario(mdir, tmp_path, "step", reqs, max_seqs=4,
                       max_batch_tokens=16, no_prefix_cache=True)
    check_finished_once(on["requests"])
    published = []
    for i, (got, want) in enumerate(zip(on["requests"], off["requests"])):
        label = f"{model} request {i}"
        assert want["stats"]["cached_tokens"] == 0, label
        assert got["stats"]["cached_tokens"] == \
            cached_expected(reqs[i]["prompt"], published), label
        # what the sequence held at its end: prompt and every generated
        # token but the last
        published.append(reqs[i]["prompt"] + got["tokens"][:-1])
        assert_same_tokens(got, want, label)
        assert_close_logits(got, want, label)
    assert sum(q["stats"]["cached_tokens"] for q in on["requests"]) > 0
    assert_pool_accounted(on, model)
    assert_pool_accounted(off, model)


def test_copy_on_write_through_truncation(models_dir, tmp_path):
    """Request 1 maps request 0's blocks; request 2 continues request 0's
    sequence truncated into the middle of its second (published, shared)
    block. The blocks must be copied: request 3 (request 1's prompt again)
    and request 2 itself give what they give alone."""
    mdir = models_dir / "qwen3-f32"

    def q(prompt, **kw):
        return dict(prompt=prompt, max_tokens=10, logits=True,
                    ignore_eos=True, **kw)
    reqs = [
        q(SHARED, own_seq=True),
        q(SHARED[:70] + [3], after=0),
        q([11, 12, 13], after=1, seq_of=0, truncate_to=40),
        q(SHARED[:70] + [3], after=2),
    ]
    ans = run_scenario(mdir, tmp_path, "step", reqs, max_seqs=4,
                       max_batch_tokens=16)
    out = ans["requests"]
    check_finished_once(out)
    assert [q["stats"]["cached_tokens"] for q in out] == [0, 64, 0, 64]
    alone = run(mdir, tmp_path, "step", [
        q(SHARED[:70] + [3]),
        q(SHARED[:40] + [11, 12, 13]),
    ], max_seqs=1, no_prefix_cache=True)
    for got, want, label in ((out[1], alone[0], "mapped"),
                             (out[3], alone[0], "mapped after the write"),
                             (out[2], alone[1], "truncated and continued")):
        assert_same_tokens(got, want, label)
        assert_close_logits(got, want, label)
    assert_pool_accounted(ans, "copy-on-write")


def test_full_pool_queues_and_never_fit_fails(models_dir, tmp_path):
    mdir = models_dir / "qwen3-f32"

    def q(prompt, max_tokens=40):
        return dict(prompt=prompt, max_tokens=max_tokens, ignore_eos=True,
                    logits=True)
    # each needs blocks_for(40 + 39) = 3 blocks; 4 hold one at a time
    reqs = [q(P["len40"]), q(LONG[:40]), q(LONG[50:90])]
    small = run_scenario(mdir, tmp_path, "step", reqs, max_seqs=4,
                         kv_blocks=4, no_prefix_cache=True)
    big = run(mdir, tmp_path, "step", reqs, max_seqs=4,
              no_prefix_cache=True)
    assert small["max_running"] == 1 and small["max_queued"] == 2, small
    for i, (got, want) in enumerate(zip(small["requests"], big)):
        assert got["status"] == "ok" and got["stop_reason"] == "length", got
        assert got["tokens"] == want["tokens"], f"request {i}"
        assert_close_logits(got, want, f"request {i}")
    assert_pool_accounted(small, "small pool")
    never = run_scenario(mdir, tmp_path, "step",
                         [q(P["len7"], max_tokens=200), q(P["len7"])],
                         kv_blocks=4)
    first, second = never["requests"]
    assert first["submit_status"] == "limit exceeded", first
    assert "KV blocks" in first["submit_error"], first
    assert second["status"] == "ok", second


def random_schedule(rng):
    """12 requests: prompts from three shared stems, staggered arrivals,
    two cancellations, two continuations of a kept sequence after a
    truncation."""
    stems = [LONG[:70], P["len40"] + LONG[:30], LONG[20:60]]
    reqs = []
    for i in range(12):
        stem = rng.choice(stems)
        cut = rng.randrange(1, len(stem) + 1)
        tail = [rng.randrange(500) for _ in range(rng.randrange(0, 6))]
        reqs.append(dict(prompt=stem[:cut] + tail,
                         max_tokens=rng.randrange(1, 14), ignore_eos=True,
                         logits=True, submit_at=rng.randrange(0, 30)))
    for i in rng.sample(range(12), 2):
        reqs[i]["cancel_at"] = reqs[i]["submit_at"] + rng.randrange(0, 6)
    keep = [i for i in range(12) if "cancel_at" not in reqs[i]][:2]
    for parent in keep:
        reqs[parent]["own_seq"] = True
        reqs.append(dict(prompt=[rng.randrange(500) for _ in range(4)],
                         max_tokens=6, ignore_eos=True, logits=True,
                         after=parent, seq_of=parent,
                         truncate_to=rng.randrange(1, len(reqs[parent]["prompt"]) + 1)))
    return reqs


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_schedules_against_solo_runs(models_dir, tmp_path, seed):
    rng = random.Random(seed)
    mdir = models_dir / "qwen3-f32"
    reqs = random_schedule(rng)
    ans = run_scenario(mdir, tmp_path, "step", reqs, max_seqs=5,
                       max_batch_tokens=24, kv_blocks=12)
    out = ans["requests"]
    check_finished_once(out)
    assert ans["max_queued"] > 0, "the schedule never filled the pool"
    # each request alone, fresh sequence, no prefix index, a large pool
    solo_reqs = []
    for i, r in enumerate(reqs):
        prompt = r["prompt"]
        if "seq_of" in r:
            parent = r["seq_of"]
            history = reqs[parent]["prompt"] + out[parent]["tokens"][:-1]
            prompt = history[:r["truncate_to"]] + prompt
        solo_reqs.append(dict(prompt=prompt, max_tokens=r["max_tokens"],
                              ignore_eos=True, logits=True))
    alone = run(mdir, tmp_path, "step", solo_reqs, max_seqs=1,
                no_prefix_cache=True)
    hits = 0
    for i, (got, want) in enumerate(zip(out, alone)):
        label = f"seed {seed} request {i}"
        assert got["status"] == "ok", f"{label}: {got['error']}"
        hits += got["stats"]["cached_tokens"]
        if got["stop_reason"] == "cancelled":
            assert got["tokens"] == want["tokens"][:len(got["tokens"])], label
            continue
        assert_same_tokens(got, want, label)
        assert_close_logits(got, want, label)
    assert hits > 0, "the schedule had no prefix hit"
    assert_pool_accounted(ans, f"seed {seed}")

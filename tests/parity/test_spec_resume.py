"""A resumed generation drafts warm: the drafter's state (the "drafter"
extension of the durable checkpoint, src/generation/drafter_state.c)
continues the n-gram drafter, the draft model and the MTP head where the
interrupted run left them, through tests/tools/engine_harness.

The adaptive rule's step times are fixed (the harness's fixed_costs), so
that its choices depend on the acceptance counts alone and two runs draft
alike. Per drafter: a run stopped after its first checkpoint (at token k)
leaves the checkpoint; the uninterrupted run counts its drafted and
accepted tokens and target forwards; a run stopped at token k counts those
of its first k tokens; the resumed run's counts must be the difference, its
tokens the rest of the uninterrupted run's, and its next checkpoint's
drafter record (acceptance counts; the MTP head's KV and pending hidden
states) byte for byte the uninterrupted run's. A drafter restarting cold
drafts differently in its first rounds (a prior acceptance of 1/2, and an
MTP head fed zeros for the whole history), and these counts differ.
"""

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_mtp_models as mtpm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)
from test_engine import run  # noqa: E402
from test_spec import (checkpoint_meta, dense_dir, mtp_dir,  # noqa: E402,F401
                       mtp_informed, near_copy)

N_TOKENS, EVERY = 56, 20
REPEATED = [5, 6, 7, 8, 9] * 5


def extension(path, name):
    """The bytes of a checkpoint file's extension `name` (checkpoint_file.c:
    16-byte head, sections of tag, u32 0, u64 length; EXTN holds u8 name
    length, name, bytes), or None."""
    data = Path(path).read_bytes()
    at, end = 16, len(data) - 16
    while at < end:
        tag = data[at:at + 4]
        n = struct.unpack_from("<Q", data, at + 8)[0]
        body = data[at + 16:at + 16 + n]
        if tag == b"EXTN" and body[1:1 + body[0]] == name.encode():
            return body[1 + body[0]:]
        at += 16 + n
    return None


def setup(request, name):
    """(target, the request's speculation fields, engine options)."""
    if name == "ngram":
        return (request.getfixturevalue("dense_dir") / "qwen3-f32",
                dict(spec="ngram", num_draft_tokens=10), {})
    if name == "draft":
        return (request.getfixturevalue("dense_dir") / "qwen3-f32",
                dict(spec="draft", num_draft_tokens=6),
                dict(draft_model=str(request.getfixturevalue("near_copy"))))
    if name == "mtp_near":   # an informed head: the adaptive rule's counts
        return (request.getfixturevalue("mtp_informed")["mtp_near"],
                dict(spec="mtp", num_draft_tokens=6), {})
    # the checkpoint's random head at a fixed K: its drafts depend on its
    # KV and on the target's hidden states it is fed
    return (request.getfixturevalue("mtp_dir") / mtpm.SPECS[0]["name"],
            dict(spec="mtp", num_draft_tokens=3, fixed_k=True), {})


COUNTS = ("drafted", "accepted", "target_forwards")


@pytest.mark.parametrize("name", ["ngram", "draft", "mtp_near", "mtp"])
def test_resume_drafts_warm(request, tmp_path, name):
    model, spec, opts = setup(request, name)
    opts = dict(opts, fixed_costs=True)
    base = dict(prompt=REPEATED, max_tokens=N_TOKENS, ignore_eos=True, **spec)

    def go(tag, **extra):
        (tmp_path / tag).mkdir()
        q = run(model, tmp_path / tag, "step", [dict(base, **extra)], **opts)[0]
        assert q["status"] == "ok", q["error"]
        return q

    first, full_ck, resumed_ck = (tmp_path / f for f in
                                  ("first.ckpt", "full.ckpt", "resumed.ckpt"))
    go("first", checkpoint_every=EVERY, checkpoint_file=str(first),
       stop_after=EVERY + 10)
    k = checkpoint_meta(first)[0]
    assert EVERY <= k < EVERY + 10
    assert extension(first, "drafter"), "the checkpoint has no drafter record"
    full = go("full", checkpoint_every=EVERY, checkpoint_file=str(full_ck))
    upto = go("upto", stop_after=k)
    resumed = go("resumed", resume_file=str(first), checkpoint_every=EVERY,
                 checkpoint_file=str(resumed_ck))
    assert upto["tokens"] + resumed["tokens"] == full["tokens"]
    assert full["stats"]["drafted"] > upto["stats"]["drafted"] > 0
    got = {c: resumed["stats"][c] for c in COUNTS}
    want = {c: full["stats"][c] - upto["stats"][c] for c in COUNTS}
    print(f"  {name}: after token {k}, resumed {got}, uninterrupted {want}")
    assert got == want, f"{name}: the resumed run drafted as a cold drafter"
    assert checkpoint_meta(resumed_ck)[0] == checkpoint_meta(full_ck)[0]
    assert extension(resumed_ck, "drafter") == extension(full_ck, "drafter")


def cli(*args):
    return subprocess.run([str(pc.SPINDLE_BIN), "run", *args],
                          capture_output=True, text=True, timeout=120)


def test_other_policy_ignores_the_record(dense_dir, tmp_path):  # noqa: F811
    """A record for another lookup policy is ignored with one logged line,
    and the resume goes on (cold) with the same tokens."""
    model = str(dense_dir / "qwen3-f32")
    ck = tmp_path / "ngram.ckpt"
    ids = ",".join(map(str, REPEATED))
    base = ["-m", model, "--prompt-tokens", ids, "--ignore-eos", "--json"]
    full = cli(*base, "-n", "40", "--spec", "ngram")
    assert full.returncode == 0, full.stderr
    assert cli(*base, "-n", "40", "--spec", "ngram", "--checkpoint", str(ck),
               "--checkpoint-every", "16").returncode == 0
    k = checkpoint_meta(ck)[0]
    r = cli("-m", model, "--resume", str(ck), "--spec", "ngram",
            "--ngram-max", "2", "--json")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "drafter state" in ln]
    assert len(lines) == 1 and "ngram-history-v1:3:1" in lines[0] and \
        "ngram-history-v1:2:1" in lines[0], r.stderr
    assert json.loads(full.stdout)["tokens"][k:] == \
        json.loads(r.stdout)["tokens"]

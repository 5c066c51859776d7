"""Every Unicode scalar value through Spindle and HF `tokenizers`.

Spindle's Unicode data comes from utf8proc and PCRE2, HF's from the Rust
crates it is built with; the versions differ (see
src/tokenizer/tok_unicode_tables.c). HF is the reference: each code point
must be classified and normalized the same way.

Code points are batched: one line holds CHUNK of them, each inside a small
context that makes its class visible (next to a letter, a digit, a space).
A line whose ids differ is re-run one code point at a time so that the
failure names the code points.

Two groups:
- probes: a byte-level BPE without merges (ids = the bytes of the text)
  behind one normalizer, or behind a Split(regex, "removed") pre-tokenizer,
  so the ids are the normalized text, or the text without the characters
  the class matches;
- the six real tokenizers of test_tokenizer_parity.py (slow).
"""
import json
import os

import pytest

from tok_common import run
from test_tokenizer_parity import NAMES, model_dir

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers  # noqa: E402

CHUNK = 64
# U+0000 cannot travel through Spindle's JSON line input (C strings).
CODE_POINTS = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]

NORMALIZERS = {
    "NFC": normalizers.NFC,
    "NFD": normalizers.NFD,
    "NFKC": normalizers.NFKC,
    "NFKD": normalizers.NFKD,
    "Lowercase": normalizers.Lowercase,
}
CLASSES = [r"\s", r"\S", r"\p{L}", r"\p{N}", r"\p{P}", r"\p{S}", r"\p{M}",
           r"\p{Lu}", r"\p{Ll}", r"\p{Lt}", r"\p{Lm}", r"\p{Lo}", r"\p{Nd}",
           r"\p{Z}", r"\p{C}", r"\w", r"\d",
           # negations and class syntax of the rewrite
           r"[^\s\p{L}\p{N}]", r"[\P{L}\d]", r"\p{^N}"]


def probe(normalizer=None, regex=None):
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    t = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    if normalizer:
        t.normalizer = normalizer
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    t.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), "removed"), byte_level])
                       if regex else byte_level)
    return t


def chunks(segment, cps):
    return ["".join(segment(chr(c)) for c in cps[i:i + CHUNK])
            for i in range(0, len(cps), CHUNK)]


def spindle_ids(model, texts):
    return [o["ids"] for o in run(["tokenize", "-m", str(model), "--jsonl"],
                                  [json.dumps(t) for t in texts])]


def compare(hf, model, segment, code_points=CODE_POINTS):
    """Code points (as U+XXXX strings) whose segment encodes differently."""
    texts = chunks(segment, code_points)
    want = [e.ids for e in hf.encode_batch(texts)]
    got = spindle_ids(model, texts)
    bad_lines = [i for i in range(len(texts)) if want[i] != got[i]]
    cps = [c for i in bad_lines for c in code_points[i * CHUNK:(i + 1) * CHUNK]]
    singles = [segment(chr(c)) for c in cps]
    want = [e.ids for e in hf.encode_batch(singles)]
    got = spindle_ids(model, singles) if singles else []
    bad = [f"U+{cps[i]:04X}" for i in range(len(cps)) if want[i] != got[i]]
    # a line can only differ through one of its code points
    assert bad or not bad_lines, f"lines {bad_lines[:5]} differ but no single code point does"
    return bad


def check_probe(hf, tmp_path, segment):
    hf.save(str(tmp_path / "tokenizer.json"))
    hf = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))  # what Spindle reads
    bad = compare(hf, tmp_path, segment)
    assert not bad, f"{len(bad)} code points differ: {' '.join(bad[:40])}"


@pytest.mark.parametrize("name", sorted(NORMALIZERS))
def test_normalizer_every_code_point(name, tmp_path):
    # "|" separates: a starter that composes with nothing
    check_probe(probe(normalizer=NORMALIZERS[name]()), tmp_path, lambda c: c + "|")


@pytest.mark.parametrize("regex", CLASSES)
def test_regex_class_every_code_point(regex, tmp_path):
    check_probe(probe(regex=regex), tmp_path, lambda c: c)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_real_tokenizer_every_code_point(name):
    d = model_dir(name)
    hf = Tokenizer.from_file(str(d / "tokenizer.json"))
    # CI's pass (time) scans every other code point, the odd ones for half
    # the tokenizers and the even ones for the rest; make test-full all
    cps = CODE_POINTS
    if not os.environ.get("SPINDLE_TEST_FULL"):
        cps = CODE_POINTS[NAMES.index(name) % 2::2]
    # next to a letter, a digit and a space: the pre-tokenizer regex and the
    # merges see which class the code point is in
    bad = compare(hf, d, lambda c: f"a{c}1{c} {c}\n", cps)
    assert not bad, f"{name}: {len(bad)} code points differ: {' '.join(bad[:40])}"

"""A BERT GGUF takes text (`spindle embed`, `spindle tokenize` and the
server's /v1/embeddings): its WordPiece tokenizer is built from the GGUF
metadata (tokenizer.ggml.model "bert", llama.cpp's phantom-space tokens,
token types, [CLS]/[SEP]/[UNK] ids) on the GGUF minilm_gguf.py writes from
all-MiniLM-L6-v2.

Checks: `spindle tokenize` on the GGUF gives HF tokenizers' ids of the same
model's tokenizer.json (lowercase, accent strip, CJK split, punctuation
split, words over max_input_chars_per_word, unknown and control characters,
special tokens in the text); `spindle embed` of text on the GGUF equals the
safetensors model's (itself held to the float64 reference by
test_bert_parity.py), from the CLI and from POST /v1/embeddings; and
llama.cpp (llama-cpp-python) tokenizes the same
texts the same way, except where llama.cpp's WPM departs from HF: Hangul
(HF's NFD splits syllables into jamo, llama.cpp's does not) and words over
max_input_chars_per_word (llama.cpp has no such limit)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_bert_llama_cpp import gguf_file  # noqa: F401  (fixture)
from test_bert_parity import (COS_MIN, CORPUS, MAX_SEQ, MODEL, SPINDLE_BIN,  # noqa: F401
                              hf_tokenizer, spindle_embed)

EXTRA = [
    "naïve café résumé Ångström",
    "x" * 150,                          # > max_input_chars_per_word: [UNK]
    "a" + "é" * 120,                    # over the limit once accents go
    "b" * 100,                          # exactly the limit: split, not [UNK]
    "ctrl\u0007chars\u0001\u200bzero\ufeffbom\ufffd",
    "控制 [SEP] inside [CLS] text [MASK]",
    "[sep] lowercase is no special token",
    "hello,world!!(ok)... $100 + 5% = #tag @user ^~`|",
    "😀😀 ☃ \U0001F9EA \U000E0041 unknown",
    "ﬁ ligature ①② ½ Ǆ ǅ İstanbul",
    "tab\tnew\nline\r\n end",
    "don't can't I'm",
    "안녕하세요",
]
TEXTS = [t for t in CORPUS if "\n" not in t] + EXTRA
# llama.cpp's WPM departs from HF on these (see the module docstring)
LLAMA_CPP_DIFFERS = {"x" * 150, "a" + "é" * 120, "안녕하세요",
                     "안녕하세요, 만나서 반갑습니다."}


def spindle_ids(model, lines):
    r = subprocess.run([str(SPINDLE_BIN), "tokenize", "-m", str(model),
                        "--jsonl"],
                       input="".join(json.dumps(l) + "\n" for l in lines),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [json.loads(l)["ids"] for l in r.stdout.splitlines()]


def test_gguf_ids_match_hf(gguf_file, hf_tokenizer):  # noqa: F811
    ours = spindle_ids(gguf_file, TEXTS)
    assert len(ours) == len(TEXTS)
    for text, ids in zip(TEXTS, ours):
        assert ids == hf_tokenizer.encode(text).ids, text[:60]


def test_gguf_text_embeddings_match_safetensors(gguf_file):  # noqa: F811
    """Text in, both forms. The GGUF records no max_seq_length (its limit
    is the context length, 512), so it is given sentence-transformers' 256:
    the over-long text is then truncated alike, [CLS]/[SEP] kept."""
    lines = [t for t in TEXTS if "\n" not in t and "\r" not in t]
    a = spindle_embed(lines, "--max-tokens", str(MAX_SEQ), model=gguf_file)
    b = spindle_embed(lines)
    worst = min(float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))
                for x, y in zip(a, b))
    print(f"worst cosine GGUF text vs safetensors text {worst:.7f}")
    assert worst >= COS_MIN


def test_gguf_ids_match_llama_cpp(gguf_file):  # noqa: F811
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(str(gguf_file), vocab_only=True, verbose=False)
    texts = [t for t in TEXTS if t and t not in LLAMA_CPP_DIFFERS]
    ours = spindle_ids(gguf_file, texts)
    for text, ids in zip(texts, ours):
        assert ids == llm.tokenize(text.encode(), special=True), text[:60]


def test_server_embeds_text_on_gguf(gguf_file, hf_tokenizer):  # noqa: F811
    """POST /v1/embeddings with strings on a BERT GGUF (the server used to
    refuse to start: no tokenizer): the safetensors model's vectors, HF's
    token counts."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
    from server_common import Server, post_json
    texts = [t for t in TEXTS if len(hf_tokenizer.encode(t).ids) <= MAX_SEQ]
    s = Server(gguf_file, "--alias", "minilm-gguf")
    try:
        status, _, body = post_json(s.port, "/v1/embeddings",
                                    {"model": "minilm-gguf", "input": texts})
    finally:
        s.stop_cleanly()
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] == sum(
        len(hf_tokenizer.encode(t).ids) for t in texts)
    ref = spindle_embed([t for t in texts if "\n" not in t and "\r" not in t])
    got = [np.array(d["embedding"]) for d, t in zip(body["data"], texts)
           if "\n" not in t and "\r" not in t]
    assert len(got) == len(ref)
    for x, y in zip(got, ref):
        assert float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)) >= COS_MIN


def test_gguf_decode_matches_llama_cpp(gguf_file, hf_tokenizer):  # noqa: F811
    """Decoding a BERT GGUF's ids is llama_detokenize's (phantom spaces
    back to spaces, clean_spaces), with and without specials."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tokenizer"))
    llama_cpp = pytest.importorskip("llama_cpp")
    from test_gguf_tokenizer_parity import ref_detok
    llm = llama_cpp.Llama(str(gguf_file), vocab_only=True, verbose=False)
    ids = [hf_tokenizer.encode(t).ids for t in TEXTS if t]
    for flag, remove, unparse in [([], False, True), (["--skip-special"], True, False)]:
        r = subprocess.run([str(SPINDLE_BIN), "detokenize", "-m", str(gguf_file),
                            "--jsonl", *flag],
                           input="".join(json.dumps(i) + "\n" for i in ids),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        got = [json.loads(l)["text"] for l in r.stdout.splitlines()]
        assert got == [ref_detok(llm, i, remove, unparse) for i in ids], flag


def every_code_point_lines():
    """Every Unicode scalar value, 32 to a line, alone and inside a word."""
    cps = [c for c in range(1, 0x110000) if not 0xD800 <= c < 0xE000]
    lines = []
    for i in range(0, len(cps), 32):
        chunk = cps[i:i + 32]
        lines.append(" ".join(chr(c) for c in chunk))
        lines.append("".join("A" + chr(c) for c in chunk) + "z")
    return lines


@pytest.mark.slow  # every code point, about half a minute
def test_gguf_every_code_point_matches_tokenizer_json(gguf_file):  # noqa: F811
    """The GGUF's phantom-space vocabulary gives the tokenizer.json model's
    ids on every code point (both share the BERT normalizer and
    pre-tokenizer; this pins the vocabulary lookup, [UNK] and specials)."""
    lines = every_code_point_lines()
    assert spindle_ids(gguf_file, lines) == spindle_ids(MODEL, lines)


@pytest.mark.slow
def test_gguf_every_code_point_matches_hf(gguf_file, hf_tokenizer):  # noqa: F811
    """Every code point against HF: BERT's punctuation, nonspacing marks and
    controls are its crate's older Unicode (tok_unicode_tables.c, measured
    on HF), not utf8proc's (which differed on ~570 code points)."""
    lines = every_code_point_lines()
    ours = spindle_ids(gguf_file, lines)
    refs = [e.ids for e in hf_tokenizer.encode_batch(lines)]
    bad = [l for l, a, b in zip(lines, ours, refs) if a != b]
    assert not bad, (len(bad), [hex(ord(c)) for c in bad[0][:8]])

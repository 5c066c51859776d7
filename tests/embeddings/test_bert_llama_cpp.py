"""all-MiniLM-L6-v2 through llama.cpp's embedding mode (llama-cpp-python,
embedding=True, mean pooling, normalized) on the GGUF that minilm_gguf.py
writes from the same weights: Spindle, fed llama.cpp's own token ids
(`spindle embed --ids`), must agree with cosine >= 0.9999 on the
multilingual corpus of test_bert_parity.py (truncated to 256 tokens). A
second reference, independent of the numpy one. Spindle also loads that
GGUF itself (`spindle embed -m FILE.gguf`, llama.cpp's bert architecture,
its pooling_type, normalized as llama-embedding does): against llama.cpp
on it and against the safetensors model on the same ids."""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from minilm_gguf import write_gguf
from test_bert_parity import (COS_MIN, CORPUS, MAX_SEQ, MODEL, SPINDLE_BIN,  # noqa: F401
                              hf_tokenizer)


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    if not (MODEL / "model.safetensors").exists():
        pytest.skip(f"{MODEL} missing (run scripts/setup.sh)")
    pytest.importorskip("gguf")
    path = tmp_path_factory.mktemp("gguf") / "minilm-f32.gguf"
    write_gguf(MODEL, path)
    return path


@pytest.fixture(scope="module")
def llama(gguf_file):
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(str(gguf_file), embedding=True, n_ctx=512,
                           n_batch=512, n_ubatch=512, n_seq_max=1,
                           n_threads=2, verbose=False)


def spindle_embed_ids(model, ids):
    r = subprocess.run([str(SPINDLE_BIN), "embed", "-m", str(model), "--ids",
                        "--threads", "2"],
                       input="".join(",".join(map(str, i)) + "\n" for i in ids),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [np.array(json.loads(l)["embedding"]) for l in r.stdout.splitlines()]


def cosine(a, b):
    return float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.slow  # llama.cpp in-process, about a minute
@pytest.mark.parametrize("form", ["safetensors", "gguf"])
def test_matches_llama_cpp(llama, gguf_file, form):
    """llama.embed tokenizes the text itself; Spindle gets those ids. The
    over-long text is left to test_bert_parity.py (llama.cpp truncates to
    its batch, not to max_seq_length)."""
    texts, ids = [], []
    for t in CORPUS:
        tok = llama.tokenize(t.encode()) if t else []
        if 2 < len(tok) <= MAX_SEQ:   # llama.cpp cannot embed ""
            texts.append(t)
            ids.append(tok)
    assert len(texts) >= len(CORPUS) - 3
    ours = spindle_embed_ids(MODEL if form == "safetensors" else gguf_file, ids)
    worst = 1.0
    for text, row in zip(texts, ours):
        ref = np.array(llama.embed(text, normalize=True))
        cos = float(np.dot(row, ref) / np.linalg.norm(row) / np.linalg.norm(ref))
        worst = min(worst, cos)
        assert cos >= COS_MIN, (text[:50], cos)
    print(f"{form}: worst cosine vs llama.cpp {worst:.7f} over {len(texts)} texts")


def test_gguf_matches_safetensors(gguf_file, hf_tokenizer):  # noqa: F811
    """The GGUF and the safetensors directory (itself held to the float64
    reference by test_bert_parity.py) on the tokenizer's ids of the
    corpus."""
    ids = [hf_tokenizer.encode(t).ids[:MAX_SEQ] for t in CORPUS]
    a = spindle_embed_ids(gguf_file, ids)
    b = spindle_embed_ids(MODEL, ids)
    assert len(a) == len(b) == len(CORPUS)
    worst = min(cosine(x, y) for x, y in zip(a, b))
    print(f"worst cosine GGUF vs safetensors {worst:.7f}")
    assert worst >= COS_MIN
    # both normalized (the GGUF by llama-embedding's default)
    assert all(abs(np.linalg.norm(x) - 1) < 1e-5 for x in a + b)

"""all-MiniLM-L6-v2 through llama.cpp's embedding mode (llama-cpp-python,
embedding=True, mean pooling, normalized) on the GGUF that minilm_gguf.py
writes from the same weights: Spindle, fed llama.cpp's own token ids
(`spindle embed --ids`), must agree with cosine >= 0.9999 on the
multilingual corpus of test_bert_parity.py (truncated to 256 tokens). A
second reference, independent of the numpy one."""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from minilm_gguf import write_gguf
from test_bert_parity import COS_MIN, CORPUS, MAX_SEQ, MODEL, SPINDLE_BIN


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    if not (MODEL / "model.safetensors").exists():
        pytest.skip(f"{MODEL} missing (run scripts/setup.sh)")
    pytest.importorskip("gguf")
    llama_cpp = pytest.importorskip("llama_cpp")
    path = tmp_path_factory.mktemp("gguf") / "minilm-f32.gguf"
    write_gguf(MODEL, path)
    return llama_cpp.Llama(str(path), embedding=True, n_ctx=512, n_batch=512,
                           n_ubatch=512, n_seq_max=1, n_threads=2,
                           verbose=False)


@pytest.mark.slow  # llama.cpp in-process, about a minute
def test_matches_llama_cpp(llama):
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
    r = subprocess.run([str(SPINDLE_BIN), "embed", "-m", str(MODEL), "--ids",
                        "--threads", "2"],
                       input="".join(",".join(map(str, i)) + "\n" for i in ids),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ours = [json.loads(l)["embedding"] for l in r.stdout.splitlines()]
    worst = 1.0
    for text, row in zip(texts, ours):
        ref = np.array(llama.embed(text, normalize=True))
        cos = float(np.dot(row, ref) / np.linalg.norm(row) / np.linalg.norm(ref))
        worst = min(worst, cos)
        assert cos >= COS_MIN, (text[:50], cos)
    print(f"worst cosine vs llama.cpp {worst:.7f} over {len(texts)} texts")

"""`spindle embed` on a chat model's GGUF (SmolLM2-135M-Instruct), which
records no pooling ({arch}.pooling_type): refused with one line naming
--pooling unless --pooling says how to pool; with it, the embedding is
llama.cpp's with the same pooling (llama-cpp-python, embedding=True,
normalized, in llama_cpp_ref's f32 configuration), fed llama.cpp's own
token ids."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
import llama_cpp_ref  # noqa: E402
from real_files import smollm2_gguf  # noqa: E402
SPINDLE_BIN = Path(os.environ.get("SPINDLE_BIN", REPO / "build" / "spindle"))
TEXTS = ["The cat sat on the mat.", "Embeddings map text to vectors."]


@pytest.fixture(scope="module")
def model():
    if not SPINDLE_BIN.is_file():
        pytest.skip(f"spindle binary not found at {SPINDLE_BIN}")
    return smollm2_gguf()


def embed(model, *args, stdin=None):
    # Precision fast quantizes activations as llama.cpp's kernels do (its Q4_1
    # dot products), so the comparison measures the pooling, not that.
    return subprocess.run([str(SPINDLE_BIN), "embed", "-m", str(model), "--threads", "2", *args],
                          input=stdin, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SPINDLE_PRECISION": "fast"})


def test_no_pooling_metadata_is_refused(model):
    p = embed(model, "--text", "hello")
    assert p.returncode == 1 and not p.stdout
    assert p.stderr.count("\n") == 1 and "--pooling" in p.stderr, p.stderr


@pytest.mark.parametrize("bad", ["none", "max", ""])
def test_bad_pooling_is_a_usage_error(model, bad):
    p = embed(model, "--text", "hello", "--pooling", bad)
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "--pooling expects mean, cls or last" in p.stderr


@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_pooling_matches_llama_cpp(model, pooling):
    llama_cpp = pytest.importorskip("llama_cpp")
    kind = {"mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN, "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS,
            "last": llama_cpp.LLAMA_POOLING_TYPE_LAST}[pooling]
    # llama.cpp in its f32 configuration (f32 KV cache, no repacked weights).
    llm = llama_cpp_ref.f32_llama(llama_cpp, model, 256, 2, embedding=True, pooling_type=kind)
    ids = [llm.tokenize(t.encode(), add_bos=True, special=False) for t in TEXTS]
    want = [np.array(llm.embed(t, normalize=True)) for t in TEXTS]
    p = embed(model, "--ids", "--pooling", pooling,
              stdin="".join(",".join(map(str, i)) + "\n" for i in ids))
    assert p.returncode == 0, p.stderr
    got = [np.array(json.loads(line)["embedding"]) for line in p.stdout.splitlines()]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert float(np.dot(g, w) / np.linalg.norm(g) / np.linalg.norm(w)) >= 0.999


def test_server_embeddings_need_pooling_too(model):
    """/v1/embeddings on the same file: a 400 naming --pooling, and with
    `serve --pooling last` the embedding `embed --pooling last` gives."""
    openai = pytest.importorskip("openai")
    sys.path.insert(0, str(REPO / "tests" / "server"))
    from server_common import Server
    want = embed(model, "--text", TEXTS[0], "--pooling", "last")
    assert want.returncode == 0, want.stderr
    want = json.loads(want.stdout)["embedding"]
    for args in ([], ["--pooling", "last"]):
        server = Server(model, "--alias", "m", *args, env={"SPINDLE_PRECISION": "fast"})
        try:
            client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x",
                                   max_retries=0)
            if not args:
                with pytest.raises(openai.BadRequestError) as e:
                    client.embeddings.create(model="m", input=TEXTS[0])
                assert "--pooling" in str(e.value)
            else:
                got = client.embeddings.create(model="m", input=TEXTS[0]).data[0].embedding
                assert np.allclose(got, want, atol=1e-6)
        finally:
            server.stop_cleanly()

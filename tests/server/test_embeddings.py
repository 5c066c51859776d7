"""POST /v1/embeddings on all-MiniLM-L6-v2 (tests/.work, scripts/setup.sh)
through the OpenAI SDK's embeddings.create and raw HTTP, against the
float64 numpy BERT of tests/embeddings/bert_numpy_ref.py on ids from HF
`tokenizers` (sentence-transformers' truncation to 256 tokens).

Also: token-id inputs, encoding_format float vs the SDK's base64 decoding,
Matryoshka `dimensions`, usage, concurrent clients, a request of many and of
over-long inputs (split into passes and truncated: 200, never 500), the
400s of malformed bodies, generation on an encoder, and embeddings on a
generation model."""
import base64
import concurrent.futures
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "embeddings"))
from bert_numpy_ref import BertReference  # noqa: E402  (sets BLAS threads)

import numpy as np  # noqa: E402
from server_common import Server, post_json  # noqa: E402

MODEL = Path(__file__).resolve().parents[1] / ".work" / "all-MiniLM-L6-v2"
TEXTS = ["Hello world", "Der Hund bellt.", "我们去公园。", "naïve café résumé",
         "¿Qué tal?"]
LONG = " ".join(f"token{i}" for i in range(400))
COS_MIN = 0.9999


@pytest.fixture(scope="module")
def embed_server():
    if not (MODEL / "model.safetensors").exists():
        pytest.skip(f"{MODEL} missing (run scripts/setup.sh)")
    s = Server(MODEL, "--alias", "minilm")
    try:
        yield s
    finally:
        s.stop_cleanly()


@pytest.fixture(scope="module")
def sdk(embed_server):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=embed_server.base_url + "/v1", api_key="x",
                       timeout=120, max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def ref():
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(256)
    bert = BertReference(MODEL)
    return lambda text: (tok.encode(text).ids, bert.embed(tok.encode(text).ids))


def cosine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_sdk_create_matches_reference(sdk, ref):
    r = sdk.embeddings.create(model="minilm", input=TEXTS + [LONG])
    assert [d.index for d in r.data] == list(range(len(TEXTS) + 1))
    ids = [ref(t)[0] for t in TEXTS + [LONG]]
    assert r.usage.prompt_tokens == sum(map(len, ids)) == r.usage.total_tokens
    for text, d in zip(TEXTS + [LONG], r.data):
        assert len(d.embedding) == 384
        assert cosine(d.embedding, ref(text)[1]) >= COS_MIN, text[:40]


def test_float_equals_base64(sdk):
    """The SDK asks for base64 by itself and decodes it (default); asked
    explicitly, it hands the string over."""
    b64 = sdk.embeddings.create(model="minilm", input=TEXTS,
                                encoding_format="base64")
    flt = sdk.embeddings.create(model="minilm", input=TEXTS,
                                encoding_format="float")
    dflt = sdk.embeddings.create(model="minilm", input=TEXTS)
    for a, b, c in zip(b64.data, flt.data, dflt.data):
        raw = np.frombuffer(base64.b64decode(a.embedding), dtype="<f4")
        np.testing.assert_array_equal(raw, np.float32(b.embedding))
        np.testing.assert_array_equal(raw, np.float32(c.embedding))


def test_token_inputs_and_dimensions(sdk, ref):
    ids = [ref(t)[0] for t in TEXTS]
    r = sdk.embeddings.create(model="minilm", input=ids, dimensions=96)
    for text, d in zip(TEXTS, r.data):
        want = ref(text)[1][:96]
        assert len(d.embedding) == 96
        assert abs(np.linalg.norm(d.embedding) - 1) < 1e-5
        assert cosine(d.embedding, want) >= COS_MIN
    one = sdk.embeddings.create(model="minilm", input=ids[0])
    assert cosine(one.data[0].embedding, ref(TEXTS[0])[1]) >= COS_MIN


def test_concurrent_clients(sdk):
    want = {t: sdk.embeddings.create(model="minilm", input=t).data[0].embedding
            for t in TEXTS}

    def run(i):
        t = TEXTS[i % len(TEXTS)]
        return t, sdk.embeddings.create(model="minilm", input=[t]).data[0].embedding

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for t, e in pool.map(run, range(24)):
            np.testing.assert_allclose(e, want[t], atol=2e-6)


@pytest.mark.slow  # hundreds of inputs: minutes under the sanitizers
def test_many_and_long_inputs_are_split_not_refused(embed_server):
    status, _, body = post_json(embed_server.port, "/v1/embeddings",
                             {"input": [LONG] * 24 + TEXTS * 40})
    assert status == 200, body
    assert len(body["data"]) == 24 + 5 * 40


@pytest.mark.parametrize("body,param", [
    ({}, "input"),
    ({"input": []}, "input"),
    ({"input": 3}, "input"),
    ({"input": [["a"]]}, "input"),
    ({"input": [[]]}, "input"),
    ({"input": [1.5]}, "input"),
    ({"input": [40000]}, "input"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "x", "dimensions": 0}, "dimensions"),
    ({"input": "x", "dimensions": 385}, "dimensions"),
    ({"input": "x", "prompt_name": "nope"}, "input"),
    ({"input": "x", "model": 7}, "model"),
])
def test_malformed_requests_are_400(embed_server, body, param):
    status, _, reply = post_json(embed_server.port, "/v1/embeddings", body)
    assert status == 400, reply
    err = reply["error"]
    assert err["param"] == param and "\n" not in err["message"], err


def test_generation_on_an_encoder_is_400(embed_server):
    status, _, reply = post_json(embed_server.port, "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and "embedding" in reply["error"]["message"]


def test_embeddings_on_a_generation_model_is_400(server):
    status, _, reply = post_json(server.port, "/v1/embeddings", {"input": "hi"})
    assert status == 400, reply
    assert "not an embedding model" in reply["error"]["message"]

"""POST /v1/rerank and /rerank through an HTTP client (requests), in the
shape llama-server, vLLM, Jina and Cohere clients send: `query`,
`documents` as strings, `top_n`, `return_documents`; the answer's
`results` [{index, relevance_score, document: {text}}] best first and
`usage`.

Scores against independent references on the tiny random rerankers of
tests/embeddings/rerank_models.py: the cross-encoder against the float64
numpy BERT with its classification head (sigmoid of the logit), the yes/no
decoder (served under --rerank) against mlx-lm's logits. Also: the 400s
of malformed bodies, a decoder without --rerank, and an embedding model
with no classification head."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "embeddings"))
from bert_numpy_ref import BertReference  # noqa: E402  (sets BLAS threads)

import numpy as np  # noqa: E402
import rerank_models as rm  # noqa: E402
from rerank_models import (DOCS, QUERY, SCORE_TOL, decoder_ids,  # noqa: E402
                           pair_tokenizer, sigmoid)
from server_common import Server, assert_api_error  # noqa: E402

requests = pytest.importorskip("requests")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    if not (rm.MINILM / "model.safetensors").exists() or \
            not (rm.QWEN3 / "model.safetensors").exists():
        pytest.skip("tests/.work models missing (run scripts/setup.sh)")
    pytest.importorskip("transformers")
    d = tmp_path_factory.mktemp("rerank-server")
    return {"cross": rm.write_cross_encoder(d / "cross"),
            "decoder": rm.write_yes_no_decoder(d / "decoder")}


@pytest.fixture(scope="module")
def cross_server(models):
    s = Server(models["cross"], "--alias", "tiny-reranker")
    try:
        yield s
    finally:
        s.stop_cleanly()


def rerank(server, body, path="/v1/rerank"):
    return requests.post(server.base_url + path, json=body, timeout=120)


def numpy_scores(model_dir, query, docs):
    ref = BertReference(model_dir)
    tok = pair_tokenizer(model_dir)
    out, tokens = [], 0
    for d in docs:
        e = tok.encode(query, d)
        out.append(float(sigmoid(ref.classify(e.ids, e.type_ids)[0])))
        tokens += len(e.ids)
    return np.array(out), tokens


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank"])
def test_cross_encoder_ranks_like_reference(models, cross_server, path):
    want, tokens = numpy_scores(models["cross"], QUERY, DOCS)
    r = rerank(cross_server, {"model": "tiny-reranker", "query": QUERY,
                              "documents": DOCS, "top_n": 3,
                              "return_documents": True}, path)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "tiny-reranker"
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    order = list(np.argsort(-want, kind="stable")[:3])
    assert [x["index"] for x in body["results"]] == order
    for x in body["results"]:
        assert abs(x["relevance_score"] - want[x["index"]]) <= SCORE_TOL
        assert x["document"] == {"text": DOCS[x["index"]]}


def test_defaults_every_document_without_text(models, cross_server):
    """No top_n: every document; no return_documents: no document field."""
    want, _ = numpy_scores(models["cross"], QUERY, DOCS)
    r = rerank(cross_server, {"query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert sorted(x["index"] for x in results) == list(range(len(DOCS)))
    scores = [x["relevance_score"] for x in results]
    assert scores == sorted(scores, reverse=True)
    assert all("document" not in x for x in results)
    np.testing.assert_allclose([want[x["index"]] for x in results], scores,
                               atol=SCORE_TOL, rtol=0)


@pytest.mark.parametrize("body,param", [
    ({"documents": ["a"]}, "query"),
    ({"query": 1, "documents": ["a"]}, "query"),
    ({"query": "q"}, "documents"),
    ({"query": "q", "documents": []}, "documents"),
    ({"query": "q", "documents": "a"}, "documents"),
    ({"query": "q", "documents": ["a", 2]}, "documents"),
    ({"query": "q", "documents": [{"text": "a"}]}, "documents"),
    ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": 1.5}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": "2"}, "top_n"),
    ({"query": "q", "documents": ["a"], "return_documents": 1}, "return_documents"),
    ({"query": "q", "documents": ["a"], "model": 5}, "model"),
    ({"query": "q", "documents": ["a"] * 2049}, "documents"),
])
def test_malformed_requests_get_400(cross_server, body, param):
    r = rerank(cross_server, body)
    assert_api_error(r.status_code, r.json(), 400, param=param)


def test_not_json_gets_400_unknown_model_404(cross_server):
    r = requests.post(cross_server.base_url + "/v1/rerank", data=b"[1, 2",
                      timeout=60)
    assert_api_error(r.status_code, r.json(), 400)
    r = rerank(cross_server, {"model": "other", "query": "q", "documents": ["a"]})
    assert_api_error(r.status_code, r.json(), 404, param="model",
                     code="model_not_found")


def test_cross_encoder_gguf_serves_rerank_only(models, tmp_path):
    """llama.cpp's GGUF of the cross-encoder (rank pooling) serves
    /v1/rerank with the reference's scores, and answers 400 on
    /v1/embeddings (it pools for ranking, not for vectors)."""
    pytest.importorskip("gguf")
    from minilm_gguf import write_gguf
    path = write_gguf(models["cross"], tmp_path / "cross.gguf") or \
        tmp_path / "cross.gguf"
    want, _ = numpy_scores(models["cross"], QUERY, DOCS)
    s = Server(path)
    try:
        r = rerank(s, {"query": QUERY, "documents": DOCS})
        assert r.status_code == 200, r.text
        for x in r.json()["results"]:
            assert abs(x["relevance_score"] - want[x["index"]]) <= SCORE_TOL
        r = requests.post(s.base_url + "/v1/embeddings",
                          json={"input": "x"}, timeout=60)
        assert_api_error(r.status_code, r.json(), 400, param="model")
    finally:
        s.stop_cleanly()


def test_embedding_model_is_not_a_reranker():
    """An encoder without a classification head answers 400 naming why."""
    s = Server(rm.MINILM)
    try:
        r = rerank(s, {"query": "q", "documents": ["d"]})
        assert_api_error(r.status_code, r.json(), 400, param="model")
        assert "no classification head" in r.json()["error"]["message"]
    finally:
        s.stop_cleanly()


def test_decoder_needs_rerank_flag_then_matches_mlx_lm(models):
    """A decoder serves /v1/rerank only under --rerank; then its scores are
    mlx-lm's softmax over the "yes" / "no" logits at the last position."""
    s = Server(models["decoder"])
    try:
        r = rerank(s, {"query": "q", "documents": ["d"]})
        assert_api_error(r.status_code, r.json(), 400, param="model")
        assert "--rerank" in r.json()["error"]["message"]
    finally:
        s.stop_cleanly()
    mlx_lm = pytest.importorskip("mlx_lm")
    import mlx.core as mx
    model, _ = mlx_lm.load(str(models["decoder"]))
    yes, no = rm.yes_no_ids(models["decoder"])
    want, tokens = [], 0
    for d in DOCS:
        ids = decoder_ids(models["decoder"], QUERY, d)
        last = model(mx.array([ids]))[0, -1].astype(mx.float32)
        want.append(float(sigmoid(last[yes].item() - last[no].item())))
        tokens += len(ids)
    s = Server(models["decoder"], "--rerank")
    try:
        r = rerank(s, {"query": QUERY, "documents": DOCS})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["usage"]["prompt_tokens"] == tokens
        for x in body["results"]:
            assert abs(x["relevance_score"] - want[x["index"]]) <= 2e-6
    finally:
        s.stop_cleanly()

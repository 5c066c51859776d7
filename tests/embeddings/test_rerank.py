"""`spindle rerank` against independent references, on tiny random
rerankers (rerank_models.py):

* the cross-encoder (BertForSequenceClassification, one label) against
  the float64 numpy BERT with its pooler and classifier
  (bert_numpy_ref.py), on transformers' tokenizer's pair encoding
  ([CLS] q [SEP] d [SEP], token types 0 then 1), with and without
  longest_first truncation; Spindle returns sigmoid(logit), as
  sentence-transformers' CrossEncoder does;
* the same head through llama.cpp's rank pooling (llama-cpp-python,
  pooling_type RANK) on the GGUF minilm_gguf.py writes, which reports the
  logit itself; Spindle on that GGUF and on the safetensors directory;
* the yes/no decoder (Qwen3-Reranker's prompt) against llama.cpp's rank
  pooling on the Qwen3 GGUF with cls.output = the "yes" / "no" rows (its
  softmax gives p(yes) first) and against mlx-lm's logits.

References get transformers' token ids; Spindle tokenizes the text itself,
so its tokenizer and pair template are checked too."""
import json
import os
import subprocess
from pathlib import Path

from bert_numpy_ref import BertReference  # first: it sets numpy's threads

import numpy as np
import pytest

import rerank_models as rm
from rerank_models import (DOCS, QUERY, SCORE_TOL, decoder_ids, pair_tokenizer,
                           sigmoid)

ROOT = Path(__file__).resolve().parents[2]
SPINDLE_BIN = Path(os.environ.get("SPINDLE_BIN", ROOT / "build" / "spindle"))


def need(path):
    if not Path(path).exists():
        pytest.skip(f"{path} missing (run scripts/setup.sh)")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    need(rm.MINILM / "tokenizer.json")
    need(rm.QWEN3 / "model.safetensors")
    pytest.importorskip("transformers")
    d = tmp_path_factory.mktemp("rerank")
    return {"cross": rm.write_cross_encoder(d / "cross"),
            "same": rm.write_cross_encoder(d / "same", same_types=True),
            "xlmr": rm.write_cross_encoder(d / "xlmr", xlm_roberta=True),
            "decoder": rm.write_yes_no_decoder(d / "decoder"), "dir": d}


def spindle_rerank(model, query, docs, *extra):
    r = subprocess.run([str(SPINDLE_BIN), "rerank", "-m", str(model), "-q", query,
                        "--threads", "2", *extra],
                       input="".join(d + "\n" for d in docs),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["index"] for row in rows] == list(range(len(rows)))
    return np.array([row["relevance_score"] for row in rows])


# stdin drops empty lines: the empty document goes as an argument only in
# the server tests; here the non-empty ones.
TEXT_DOCS = [d for d in DOCS if d]


LONG_QUERY = ("which city has been the capital of china for most of the "
              "last eight centuries, and how many people live there today?")


@pytest.mark.parametrize("kind", ["cross", "xlmr"])
@pytest.mark.parametrize("query,max_tokens", [(QUERY, None), (QUERY, 24),
                                              (LONG_QUERY, 24)])
def test_cross_encoder_matches_numpy(models, kind, query, max_tokens):
    """Scores of the random cross-encoders (BERT; XLM-RoBERTa with its
    position offset, classification head and <s> A </s></s> B </s> pairs)
    = sigmoid of the numpy reference's logit on transformers' pair ids,
    also under longest_first truncation to max_tokens: a short query keeps
    its tokens and the long document is cut; a long query and a long
    document are both cut to half the room (the document, second, getting
    the odd token)."""
    ref = BertReference(models[kind])
    # Spindle's default: the positions the model has (128 for both).
    tok = pair_tokenizer(models[kind], max_tokens or 128)
    want = []
    for d in TEXT_DOCS:
        e = tok.encode(query, d)
        want.append(sigmoid(ref.classify(e.ids, e.type_ids)[0]))
    extra = ["--max-tokens", str(max_tokens)] if max_tokens else []
    got = spindle_rerank(models[kind], query, TEXT_DOCS, *extra)
    np.testing.assert_allclose(got, want, atol=SCORE_TOL, rtol=0)
    assert np.ptp(got) > 0.05   # the documents are told apart


def test_rank_needs_a_head(models):
    """An encoder without a classification head (the sentence embedder) is
    refused in one line naming why."""
    need(rm.MINILM / "model.safetensors")
    r = subprocess.run([str(SPINDLE_BIN), "rerank", "-m", str(rm.MINILM), "-q",
                        "q", "d"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "not a cross-encoder (no classification head)" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def llama_rank(llm, ids):
    """llama.cpp's rank output (n_cls_out floats) for one token sequence."""
    import llama_cpp
    llm._batch.reset()
    llm._batch.add_sequence(ids, 0, True)
    llm._ctx.kv_cache_clear()
    llm._ctx.decode(llm._batch)
    n = llama_cpp.llama_model_n_cls_out(llm._model.model)
    p = llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0)
    return [p[i] for i in range(n)]


def llama_ranker(path):
    llama_cpp = pytest.importorskip("llama_cpp")
    # f32 keys and values: llama.cpp's default f16 cache would be the
    # difference measured.
    return llama_cpp.Llama(str(path), embedding=True,
                           pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK,
                           n_ctx=1024, n_batch=1024, n_ubatch=1024, n_threads=2,
                           type_k=0, type_v=0, verbose=False)


@pytest.mark.parametrize("form", ["safetensors", "gguf"])
def test_cross_encoder_matches_llama_cpp(models, form):
    """llama.cpp's rank pooling on the GGUF (pooler as cls, classifier as
    cls.output) reports the logit; Spindle's score is its sigmoid. The model
    has equal token-type rows, since llama.cpp gives every token type 0."""
    pytest.importorskip("gguf")
    from minilm_gguf import write_gguf
    path = models["dir"] / "same.gguf"
    if not path.exists():
        write_gguf(models["same"], path)
    llm = llama_ranker(path)
    tok = pair_tokenizer(models["same"])
    want = sigmoid([llama_rank(llm, tok.encode(QUERY, d).ids)[0]
                    for d in TEXT_DOCS])
    got = spindle_rerank(models["same"] if form == "safetensors" else path,
                         QUERY, TEXT_DOCS)
    # llama.cpp's GELU is a table of f16 values: ~1e-3 on a logit.
    print("worst vs llama.cpp", np.abs(got - want).max())
    np.testing.assert_allclose(got, want, atol=1e-3, rtol=0)


def test_yes_no_matches_llama_cpp(models):
    """The decoder reranker: llama.cpp's rank pooling on the Qwen3 GGUF
    (cls.output = the "yes" and "no" rows, softmaxed: p(yes) first) on the
    model card's prompt, as transformers' tokenizer encodes it."""
    pytest.importorskip("gguf")
    path = models["dir"] / "decoder.gguf"
    if not path.exists():
        rm.yes_no_gguf(models["decoder"], path)
    llm = llama_ranker(path)
    want = [llama_rank(llm, decoder_ids(models["decoder"], QUERY, d))[0]
            for d in TEXT_DOCS]
    got = spindle_rerank(models["decoder"], QUERY, TEXT_DOCS)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=0)
    assert np.ptp(got) > 1e-3


def test_yes_no_gguf_matches_llama_cpp(models):
    """Spindle on the reranker GGUF itself: the "yes" / "no" rows from
    cls.output (its tokenizer is the writer's byte-level stand-in, which has
    no such words), the prompt tokenized from the GGUF's vocabulary; against
    llama.cpp's rank pooling on the ids its own tokenizer gives each part."""
    pytest.importorskip("gguf")
    path = models["dir"] / "decoder.gguf"
    if not path.exists():
        rm.yes_no_gguf(models["decoder"], path)
    llm = llama_ranker(path)

    def ids(doc):
        body = f"<Instruct>: {rm.INSTRUCTION}\n<Query>: {QUERY}\n<Document>: {doc}"
        return sum((llm.tokenize(t.encode(), add_bos=False, special=True)
                    for t in (rm.PREFIX, body, rm.SUFFIX)), [])
    want = [llama_rank(llm, ids(d))[0] for d in TEXT_DOCS]
    got = spindle_rerank(path, QUERY, TEXT_DOCS)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=0)
    assert np.ptp(got) > 1e-3


def test_yes_no_matches_mlx_lm(models):
    """The same scores from mlx-lm's logits at the last position:
    softmax over ("yes", "no")."""
    mlx_lm = pytest.importorskip("mlx_lm")
    import mlx.core as mx
    model, _ = mlx_lm.load(str(models["decoder"]))
    yes, no = rm.yes_no_ids(models["decoder"])
    want = []
    for d in TEXT_DOCS:
        logits = model(mx.array([decoder_ids(models["decoder"], QUERY, d)]))
        last = logits[0, -1].astype(mx.float32)
        want.append(float(sigmoid(last[yes].item() - last[no].item())))
    got = spindle_rerank(models["decoder"], QUERY, TEXT_DOCS)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=0)

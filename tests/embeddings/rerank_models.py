"""Tiny random rerankers for the rerank tests, written without torch.

* write_cross_encoder: a BertForSequenceClassification (one label) from
  transformers' BertConfig, its weights random numpy arrays saved with
  safetensors under transformers' names ("bert." encoder, pooler,
  classifier), and all-MiniLM-L6-v2's WordPiece tokenizer files.
  `same_types` makes both token_type_embeddings rows equal: llama.cpp's
  BERT graph adds row 0 to every token (it has no token types), so only
  such a model lets it agree with transformers on a pair.
* write_xlm_roberta_cross_encoder: an XLMRobertaForSequenceClassification
  the same way ("roberta." encoder, classifier.dense / out_proj, one token
  type, positions from pad_token_id + 1), with a Unigram tokenizer trained
  by `tokenizers` and XLM-R's templates (<s> A </s>, <s> A </s></s> B </s>).
* write_yes_no_decoder: the random Qwen3 parity model (tests/.work/parity/
  qwen3-f32, 768 tokens) with a byte-level BPE tokenizer trained to that
  size by `tokenizers`, holding Qwen's chat specials and "yes" / "no" as
  single tokens, so the Qwen3-Reranker prompt encodes as it would.
* yes_no_gguf: that decoder as a Qwen3 GGUF (tests/gguf_writer.py) with
  what llama.cpp's converter adds for a Qwen3 reranker: rank pooling and
  cls.output = the lm_head rows of "yes" and "no", in that order.

Also what the rerank tests share: the query and documents, the
references' token ids (pair_tokenizer, decoder_ids) and sigmoid.
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parents[1]
WORK = TESTS / ".work"
MINILM = WORK / "all-MiniLM-L6-v2"
QWEN3 = WORK / "parity" / "qwen3-f32"
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json"]


def write_cross_encoder(out, seed=0, same_types=False, xlm_roberta=False):
    from safetensors.numpy import save_file
    from transformers import BertConfig, XLMRobertaConfig
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if xlm_roberta:
        vocab = write_unigram_tokenizer(out)
        cfg = XLMRobertaConfig(
            vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=130, type_vocab_size=1, num_labels=1,
            pad_token_id=1, architectures=["XLMRobertaForSequenceClassification"])
    else:
        cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=64,
                         max_position_embeddings=128, num_labels=1,
                         architectures=["BertForSequenceClassification"])
    cfg.save_pretrained(out)
    enc = "roberta." if xlm_roberta else "bert."
    rng = np.random.default_rng(seed)
    d, ff = cfg.hidden_size, cfg.intermediate_size

    def r(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def norm(name):
        return {f"{name}.weight": (1 + r(d, scale=0.1)),
                f"{name}.bias": r(d, scale=0.1)}
    types = r(cfg.type_vocab_size, d)
    if same_types:
        types[1] = types[0]
    w = {enc + "embeddings.word_embeddings.weight": r(cfg.vocab_size, d),
         enc + "embeddings.position_embeddings.weight":
             r(cfg.max_position_embeddings, d),
         enc + "embeddings.token_type_embeddings.weight": types,
         **norm(enc + "embeddings.LayerNorm")}
    for i in range(cfg.num_hidden_layers):
        p = f"{enc}encoder.layer.{i}."
        for name, rows, cols in [("attention.self.query", d, d),
                                 ("attention.self.key", d, d),
                                 ("attention.self.value", d, d),
                                 ("attention.output.dense", d, d),
                                 ("intermediate.dense", ff, d),
                                 ("output.dense", d, ff)]:
            w[p + name + ".weight"] = r(rows, cols, scale=cols ** -0.5)
            w[p + name + ".bias"] = r(rows, scale=0.1)
        w.update(norm(p + "attention.output.LayerNorm"))
        w.update(norm(p + "output.LayerNorm"))
    dense, head = (("classifier.dense", "classifier.out_proj") if xlm_roberta
                   else ("bert.pooler.dense", "classifier"))
    w[dense + ".weight"] = r(d, d, scale=d ** -0.5)
    w[dense + ".bias"] = r(d, scale=0.1)
    w[head + ".weight"] = r(1, d, scale=1.0)
    w[head + ".bias"] = r(1, scale=0.1)
    save_file(w, str(out / "model.safetensors"), metadata={"format": "pt"})
    if not xlm_roberta:
        for f in TOKENIZER_FILES:
            shutil.copy(MINILM / f, out / f)
    return out


def write_unigram_tokenizer(out):
    """XLM-R's tokenizer pipeline (NFKC, Metaspace, Unigram, its
    templates) trained small; returns the vocabulary size."""
    from tokenizers import (Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers)
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581",
                                                 prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
        unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(CORPUS * 20 + [QUERY] + DOCS, trainer)
    ids = {t: tok.token_to_id(t) for t in ("<s>", "</s>")}
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=list(ids.items()))
    tok.save(str(Path(out) / "tokenizer.json"))
    (Path(out) / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "XLMRobertaTokenizer", "bos_token": "<s>",
        "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
        "pad_token": "<pad>", "unk_token": "<unk>", "model_max_length": 128}))
    return tok.get_vocab_size()


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>",
            "</think>"]
# Text the BPE is trained on: the reranker prompt's words, and "yes" /
# "no" often enough to be merged whole.
CORPUS = ["Judge whether the Document meets the requirements based on the "
          "Query and the Instruct provided. Note that the answer can only be "
          '"yes" or "no".', "<Instruct>: Given a web search query, retrieve "
          "relevant passages that answer the query", "<Query>: <Document>: "
          "system user assistant", "yes no " * 50,
          "What is the capital of China? The capital of China is Beijing. "
          "Gravity is a force that attracts two bodies towards each other."]


def write_yes_no_decoder(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((QWEN3 / "config.json").read_text())
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg["vocab_size"], special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer)
    assert tok.get_vocab_size() <= cfg["vocab_size"], tok.get_vocab_size()
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))
    shutil.copy(QWEN3 / "config.json", out / "config.json")
    for f in QWEN3.glob("model.safetensors*"):
        if f.suffix == ".xxh3":   # a checksum sidecar, not the model
            continue
        shutil.copy(f, out / f.name)
    return out


def yes_no_ids(model_dir):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    yes, no = (tok.encode(w, add_special_tokens=False).ids for w in ("yes", "no"))
    assert len(yes) == 1 and len(no) == 1, (yes, no)
    return yes[0], no[0]


def yes_no_gguf(model_dir, out):
    import gguf
    from safetensors.numpy import load_file
    sys.path.insert(0, str(TESTS))
    from gguf_writer import write_gguf
    yes, no = yes_no_ids(model_dir)
    w = load_file(str(Path(model_dir) / "model.safetensors"))
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])

    def rank(wr):
        wr.add_pooling_type(gguf.PoolingType.RANK)
        wr.add_classifier_output_labels(["yes", "no"])
        wr.add_tensor("cls.output.weight",
                      np.ascontiguousarray(head[[yes, no]].astype(np.float32)))
    return write_gguf(str(model_dir), str(out), "f32", extra=rank)


# ------------------------------------------------- what the tests share

QUERY = "what is the capital of china?"
DOCS = ["Beijing is the capital of China.",
        "Gravity is a force that attracts two bodies towards each other.",
        "北京是中华人民共和国的首都。",
        "The capital of France is Paris; the capital of China is Beijing, "
        "a city of over twenty million people in the north of the country, "
        "which has been the seat of government for most of the last eight "
        "centuries.",
        "",
        "naïve café résumé — déjà vu"]
# f64 numpy vs f32 Spindle: a tiny model's scores agree to ~1e-7.
SCORE_TOL = 2e-6
INSTRUCTION = ("Given a web search query, retrieve relevant passages that "
               "answer the query")
PREFIX = ("<|im_start|>system\nJudge whether the Document meets the "
          "requirements based on the Query and the Instruct provided. Note "
          "that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
          "<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def pair_tokenizer(model_dir, max_length=None):
    """transformers' tokenizer of the cross-encoder (HF `tokenizers`):
    unpadded, with longest_first truncation to max_length if given."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    tok.no_padding()
    if max_length:
        tok.enable_truncation(max_length, strategy="longest_first")
    else:
        tok.no_truncation()
    return tok


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def decoder_ids(model_dir, query, doc):
    """The model card's input: prefix, instruction/query/document and
    suffix, each encoded alone without special tokens."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    body = f"<Instruct>: {INSTRUCTION}\n<Query>: {query}\n<Document>: {doc}"
    return sum((tok.encode(t, add_special_tokens=False).ids
                for t in (PREFIX, body, SUFFIX)), [])

"""A float64 numpy BERT sentence encoder, written from transformers'
modeling_bert (BertEmbeddings, BertSelfAttention with an all-ones mask,
BertSelfOutput, BertIntermediate with hidden_act "gelu" = erf GELU,
BertOutput) and sentence-transformers' Pooling (mean over the attention
mask) and Normalize (F.normalize), reading the model's safetensors; and
BertForSequenceClassification's head (BertPooler: dense + tanh of the
first token; the classifier) for cross-encoder rerankers, whose pair
inputs carry token_type_ids. XLM-RoBERTa (modeling_xlm_roberta) is the
same encoder with positions from padding_idx + 1
(create_position_ids_from_input_ids, no padding) and
XLMRobertaClassificationHead (dense + tanh, out_proj) on the first token.

It shares no code with Spindle; token ids come from HF `tokenizers` with
sentence-transformers' truncation (max_seq_length, special tokens kept)."""
import json
import math
import os
from pathlib import Path

# Small products: one BLAS thread is faster than many on a shared machine
# (effective only when numpy is first imported here).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


class BertReference:
    def __init__(self, model_dir):
        d = Path(model_dir)
        self.cfg = json.loads((d / "config.json").read_text())
        # BertFor* checkpoints keep the encoder under "bert.", XLM-RoBERTa's
        # classes under "roberta."
        self.w = {k.removeprefix("bert.").removeprefix("roberta."):
                  v.astype(np.float64) for k, v in
                  load_file(str(d / "model.safetensors")).items()
                  if v.dtype != np.int64}
        self.first_position = 0
        if self.cfg["model_type"] == "xlm-roberta":
            self.first_position = self.cfg.get("pad_token_id", 1) + 1
        self.pooling, self.normalize = "mean", False
        if (d / "modules.json").exists():
            pool = json.loads((d / "1_Pooling" / "config.json").read_text())
            self.pooling = "cls" if pool.get("pooling_mode_cls_token") else "mean"
            modules = json.loads((d / "modules.json").read_text())
            self.normalize = any(m["type"].endswith("Normalize") for m in modules)

    def hidden(self, ids, types=None):
        w, c = self.w, self.cfg
        eps = c.get("layer_norm_eps", 1e-12)
        n = len(ids)
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][
                 self.first_position:self.first_position + n]
             + w["embeddings.token_type_embeddings.weight"][
                 np.zeros(n, dtype=int) if types is None else np.array(types)])
        x = layer_norm(x, w["embeddings.LayerNorm.weight"],
                       w["embeddings.LayerNorm.bias"], eps)
        H = c["num_attention_heads"]
        hd = c["hidden_size"] // H
        for i in range(c["num_hidden_layers"]):
            p = f"encoder.layer.{i}."

            def lin(name, v):
                return v @ w[p + name + ".weight"].T + w[p + name + ".bias"]
            q = lin("attention.self.query", x).reshape(n, H, hd).transpose(1, 0, 2)
            k = lin("attention.self.key", x).reshape(n, H, hd).transpose(1, 0, 2)
            v = lin("attention.self.value", x).reshape(n, H, hd).transpose(1, 0, 2)
            s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(1, 0, 2).reshape(n, H * hd)
            x = layer_norm(x + lin("attention.output.dense", ctx),
                           w[p + "attention.output.LayerNorm.weight"],
                           w[p + "attention.output.LayerNorm.bias"], eps)
            h = gelu(lin("intermediate.dense", x))
            x = layer_norm(x + lin("output.dense", h),
                           w[p + "output.LayerNorm.weight"],
                           w[p + "output.LayerNorm.bias"], eps)
        return x

    def embed(self, ids):
        h = self.hidden(ids)
        e = h[0] if self.pooling == "cls" else h.mean(0)
        if self.normalize:
            e = e / max(np.linalg.norm(e), 1e-12)
        return e

    def classify(self, ids, types):
        """The sequence-classification logits: BertForSequenceClassification's
        pooler (dense + tanh) on the first token's row, then the classifier;
        XLM-RoBERTa's classifier.dense + tanh, then classifier.out_proj."""
        w = self.w
        h = self.hidden(ids, types)[0]
        dense, out = (("classifier.dense", "classifier.out_proj")
                      if "classifier.out_proj.weight" in w
                      else ("pooler.dense", "classifier"))
        pooled = np.tanh(h @ w[dense + ".weight"].T + w[dense + ".bias"])
        return pooled @ w[out + ".weight"].T + w[out + ".bias"]

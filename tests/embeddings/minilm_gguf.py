"""all-MiniLM-L6-v2 as a llama.cpp BERT GGUF (f32), written with gguf-py in
the layout llama.cpp's convert_hf_to_gguf.py gives a BERT (that script
needs torch): HF tensor names mapped to llama.cpp's, WordPiece tokens with
the phantom space ("##x" -> "x", "x" -> "\u2581x", [..] kept), causal
attention off, mean pooling. A cross-encoder (BertForSequenceClassification)
gets llama.cpp's rank pooling and its head as the converter names it: the
pooler as cls, the classifier as cls.output. Used by test_bert_llama_cpp.py,
test_rerank.py and bench/embed_compare.py."""
import json
from pathlib import Path

import numpy as np

LAYER = {"attention.self.query": "attn_q", "attention.self.key": "attn_k",
         "attention.self.value": "attn_v", "attention.output.dense": "attn_output",
         "attention.output.LayerNorm": "attn_output_norm",
         "intermediate.dense": "ffn_up", "output.dense": "ffn_down",
         "output.LayerNorm": "layer_output_norm"}
TOP = {"embeddings.word_embeddings": "token_embd",
       "embeddings.position_embeddings": "position_embd",
       "embeddings.token_type_embeddings": "token_types",
       "embeddings.LayerNorm": "token_embd_norm",
       "pooler.dense": "cls", "classifier": "cls.output"}


def gguf_name(hf):
    base, _, kind = hf.removeprefix("bert.").rpartition(".")
    if base in TOP:
        return f"{TOP[base]}.{kind}"
    if base.startswith("encoder.layer."):
        n, _, rest = base[len("encoder.layer."):].partition(".")
        return f"blk.{n}.{LAYER[rest]}.{kind}"
    return None


def write_gguf(model_dir, out):
    """Write model_dir's weights and tokenizer to the GGUF file `out`."""
    MODEL, GGUF = Path(model_dir), Path(out)
    import gguf
    from safetensors.numpy import load_file
    cfg = json.loads((MODEL / "config.json").read_text())
    tok = json.loads((MODEL / "tokenizer.json").read_text())
    w = gguf.GGUFWriter(str(GGUF), "bert")
    w.add_name("all-MiniLM-L6-v2")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_layer_norm_eps(cfg["layer_norm_eps"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_causal_attention(False)
    rank = any(a.endswith("ForSequenceClassification")
               for a in cfg.get("architectures", []))
    w.add_pooling_type(gguf.PoolingType.RANK if rank else gguf.PoolingType.MEAN)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])

    def phantom(t):
        if t.startswith("[") and t.endswith("]"):
            return t
        return t[2:] if t.startswith("##") else "\u2581" + t
    w.add_tokenizer_model("bert")
    w.add_token_list([phantom(t) for t, _ in vocab])
    special = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    w.add_token_types([gguf.TokenType.CONTROL if t in special
                       else gguf.TokenType.NORMAL for t, _ in vocab])
    w.add_token_type_count(cfg["type_vocab_size"])
    ids = dict(vocab)
    w.add_unk_token_id(ids["[UNK]"])
    w.add_sep_token_id(ids["[SEP]"])
    w.add_pad_token_id(ids["[PAD]"])
    w.add_bos_token_id(ids["[CLS]"])
    w.add_uint32("tokenizer.ggml.cls_token_id", ids["[CLS]"])
    w.add_mask_token_id(ids["[MASK]"])
    for name, t in load_file(str(MODEL / "model.safetensors")).items():
        g = gguf_name(name)
        if g:
            w.add_tensor(g, np.ascontiguousarray(t.astype(np.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()



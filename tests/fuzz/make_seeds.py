#!/usr/bin/env python3
"""Writes the generated seed inputs of the fuzz harnesses into
tests/fuzz/corpus/<harness>/seed-* (Python standard library only; run from
anywhere). The files are committed; rerun after changing this script.

Seeds are small valid inputs that reach deep into each parser: GGUF and
safetensors files written here by the formats' specifications, config and
index JSON, tokenizer.json files of every model type, templates, and
conversations from tests/templates/conversations.py. Reproducers of bugs
(regress-*) are not generated: they are the fuzzer's own findings.
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def put(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def js(obj):
    return json.dumps(obj, ensure_ascii=False)


# ------------------------------------------------------------------- GGUF

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
          F32: "<f", BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gvalue(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gvalue(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def gguf(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, ggml_type, dims, bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + gvalue(t, v)
    offset, infos, blobs = 0, b"", []
    for name, gt, dims, blob in tensors:
        offset = (offset + alignment - 1) // alignment * alignment
        infos += gstr(name) + struct.pack("<I", len(dims))
        infos += b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", gt, offset)
        blobs.append((offset, blob))
        offset += len(blob)
    out += infos
    out += b"\0" * ((alignment - len(out) % alignment) % alignment)
    data = bytearray(offset)
    for off, blob in blobs:
        data[off:off + len(blob)] = blob
    return out + bytes(data)


def f32s(n, scale=0.01):
    return b"".join(struct.pack("<f", ((i * 7) % 13 - 6) * scale) for i in range(n))


def q8_0_rows(rows, cols):
    block = struct.pack("<e", 0.01) + bytes(((i * 5) % 255) - 127 & 0xFF for i in range(32))
    return block * (rows * cols // 32)


def f16s(n):
    return b"".join(struct.pack("<e", ((i * 5) % 11 - 5) * 0.01) for i in range(n))


def q4_0_rows(rows, cols):
    block = struct.pack("<e", 0.01) + bytes((i * 37) & 0xFF for i in range(16))
    return block * (rows * cols // 32)


def gemma4_gguf(tokens, merges, layers, hd=16, gd=32, rotated=4, h=32, heads=2,
                kv=1, ff=32, shared=0, ff_array=False, global_kv=0, k_eq_v=False,
                per_layer=0, experts=0, top_k=0, moe_ff=32, mat_type=GGML_Q4_0):
    """llama.cpp's converter's Gemma 4 form (tests/gguf_writer_gemma4.py,
    as src/models/gemma4_gguf.c reads it) at tiny sizes: `layers` the
    sliding flags, full layers with global_head_dim gd (rope_freqs: the
    first `rotated` pairs rotate), the last `shared` layers attending an
    earlier layer's KV (no attn_k / attn_v; twice the MLP when ff_array),
    K = V full layers (no attn_v) with global_kv heads of their own,
    per-layer inputs of width per_layer, and routed experts beside the
    MLP (expert tensors Q4_0). Every row length is a multiple of 32 (the
    matrices mat_type; Q4_0 keeps the files small)."""
    n, n_vocab = len(layers), len(tokens)
    first = n - shared
    ffs = [ff * (2 if l >= first and ff_array else 1) for l in range(n)]
    kvs_l = [global_kv if global_kv and not s else kv for s in layers]
    A = "gemma4."
    kvs = [
        ("general.architecture", STR, "gemma4"),
        ("general.name", STR, "fuzz seed"),
        (A + "block_count", U32, n),
        (A + "context_length", U32, 256),
        (A + "embedding_length", U32, h),
        (A + "feed_forward_length", ARR, (I32, ffs)) if ff_array else
        (A + "feed_forward_length", U32, ff),
        (A + "attention.head_count", U32, heads),
        (A + "attention.head_count_kv", ARR, (I32, kvs_l)) if global_kv else
        (A + "attention.head_count_kv", U32, kv),
        (A + "rope.freq_base", F32, 1000000.0),
        (A + "rope.freq_base_swa", F32, 10000.0),
        (A + "attention.layer_norm_rms_epsilon", F32, 1e-6),
    ]
    if experts:
        kvs += [(A + "expert_count", U32, experts),
                (A + "expert_used_count", U32, top_k),
                (A + "expert_feed_forward_length", U32, moe_ff)]
    kvs += [
        (A + "attention.key_length", U32, gd),
        (A + "attention.value_length", U32, gd),
        (A + "attention.key_length_swa", U32, hd),
        (A + "attention.value_length_swa", U32, hd),
        (A + "final_logit_softcapping", F32, 30.0),
        (A + "attention.sliding_window", U32, 8),
        (A + "attention.shared_kv_layers", U32, shared),
        (A + "embedding_length_per_layer_input", U32, per_layer),
        (A + "attention.sliding_window_pattern", ARR, (BOOL, layers)),
        (A + "rope.dimension_count", U32, gd),
        (A + "rope.dimension_count_swa", U32, hd),
        ("tokenizer.ggml.model", STR, "gpt2"),
        ("tokenizer.ggml.pre", STR, "default"),
        ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
        ("tokenizer.ggml.token_type", ARR, (I32, [3 if t.startswith("<") and len(t) > 1 else 1
                                                  for t in tokens])),
        ("tokenizer.ggml.merges", ARR, (STR, merges)),
        ("tokenizer.ggml.bos_token_id", U32, 2),
        ("tokenizer.ggml.eos_token_id", U32, 1),
        ("tokenizer.ggml.add_bos_token", BOOL, True),
    ]
    mat = {GGML_F16: lambda r, c: f16s(r * c), GGML_Q4_0: q4_0_rows,
           GGML_Q8_0: q8_0_rows}[mat_type]
    norm = lambda k: f32s(k, 1.0)
    tensors = [("token_embd.weight", mat_type, [h, n_vocab], mat(n_vocab, h)),
               ("output_norm.weight", GGML_F32, [h], norm(h)),
               ("rope_freqs.weight", GGML_F32, [gd // 2],
                struct.pack("<f", 1.0) * rotated + struct.pack("<f", 1e30) * (gd // 2 - rotated))]
    if per_layer:
        w = n * per_layer
        tensors += [("per_layer_token_embd.weight", mat_type, [w, n_vocab], mat(n_vocab, w)),
                    ("per_layer_model_proj.weight", mat_type, [h, w], mat(w, h)),
                    ("per_layer_proj_norm.weight", GGML_F32, [per_layer], norm(per_layer))]
    for l, sliding in enumerate(layers):
        d, k = (hd if sliding else gd), kvs_l[l]
        b = f"blk.{l}."
        t = [(b + "attn_norm.weight", GGML_F32, [h], norm(h)),
             (b + "attn_q.weight", mat_type, [h, heads * d], mat(heads * d, h)),
             (b + "attn_q_norm.weight", GGML_F32, [d], norm(d))]
        if l < first:
            t += [(b + "attn_k.weight", mat_type, [h, k * d], mat(k * d, h)),
                  (b + "attn_k_norm.weight", GGML_F32, [d], norm(d))]
            if sliding or not k_eq_v:
                t.append((b + "attn_v.weight", mat_type, [h, k * d], mat(k * d, h)))
        f = ffs[l]
        t += [(b + "attn_output.weight", mat_type, [heads * d, h], mat(h, heads * d)),
              (b + "post_attention_norm.weight", GGML_F32, [h], norm(h)),
              (b + "ffn_norm.weight", GGML_F32, [h], norm(h)),
              (b + "ffn_gate.weight", mat_type, [h, f], mat(f, h)),
              (b + "ffn_up.weight", mat_type, [h, f], mat(f, h)),
              (b + "ffn_down.weight", mat_type, [f, h], mat(h, f)),
              (b + "post_ffw_norm.weight", GGML_F32, [h], norm(h)),
              (b + "layer_output_scale.weight", GGML_F32, [1], struct.pack("<f", 0.5))]
        if per_layer:
            t += [(b + "inp_gate.weight", mat_type, [h, per_layer], mat(per_layer, h)),
                  (b + "proj.weight", mat_type, [per_layer, h], mat(h, per_layer)),
                  (b + "post_norm.weight", GGML_F32, [h], norm(h))]
        if experts:
            t += [(b + "ffn_gate_inp.weight", GGML_F32, [h, experts], f32s(h * experts)),
                  (b + "ffn_gate_inp.scale", GGML_F32, [h], norm(h)),
                  (b + "ffn_gate_up_exps.weight", GGML_Q4_0, [h, 2 * moe_ff, experts],
                   q4_0_rows(2 * moe_ff * experts, h)),
                  (b + "ffn_down_exps.weight", GGML_Q4_0, [moe_ff, h, experts],
                   q4_0_rows(h * experts, moe_ff)),
                  (b + "ffn_down_exps.scale", GGML_F32, [experts], norm(experts)),
                  (b + "post_ffw_norm_1.weight", GGML_F32, [h], norm(h)),
                  (b + "pre_ffw_norm_2.weight", GGML_F32, [h], norm(h)),
                  (b + "post_ffw_norm_2.weight", GGML_F32, [h], norm(h))]
        tensors += t
    return gguf(kvs, tensors)


def llama_gguf(arch, vocab_model, tokens, merges=None, quant=False):
    h, ff, heads, kv = 64, 128, 4, 2
    n_vocab = len(tokens)
    kvs = [
        ("general.architecture", STR, arch),
        ("general.name", STR, "fuzz seed"),
        ("general.alignment", U32, 32),
        (f"{arch}.block_count", U32, 1),
        (f"{arch}.context_length", U32, 256),
        (f"{arch}.embedding_length", U32, h),
        (f"{arch}.feed_forward_length", U32, ff),
        (f"{arch}.attention.head_count", U32, heads),
        (f"{arch}.attention.head_count_kv", U32, kv),
        (f"{arch}.rope.freq_base", F32, 10000.0),
        (f"{arch}.attention.layer_norm_rms_epsilon", F32, 1e-6),
        ("tokenizer.ggml.model", STR, vocab_model),
        ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
        ("tokenizer.ggml.scores", ARR, (F32, [float(-i) for i in range(n_vocab)])),
        ("tokenizer.ggml.token_type", ARR, (I32, [3 if t.startswith("<") and t.endswith(">") and len(t) > 2 and not t.startswith("<0x") else 6 if t.startswith("<0x") else 1 for t in tokens])),
        ("tokenizer.ggml.bos_token_id", U32, 1),
        ("tokenizer.ggml.eos_token_id", U32, 2),
        ("tokenizer.ggml.add_bos_token", BOOL, True),
    ]
    if merges is not None:
        kvs.append(("tokenizer.ggml.merges", ARR, (STR, merges)))
        kvs.append(("tokenizer.ggml.pre", STR, "llama-bpe" if arch == "llama" else "qwen2"))
    kvs.append(("tokenizer.chat_template", STR,
                "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"))
    wt = GGML_Q8_0 if quant else GGML_F32
    mat = (lambda r, c: q8_0_rows(r, c)) if quant else (lambda r, c: f32s(r * c))
    hd = h // heads
    tensors = [
        ("token_embd.weight", GGML_F32, [h, n_vocab], f32s(h * n_vocab)),
        ("blk.0.attn_norm.weight", GGML_F32, [h], f32s(h, 1.0)),
        ("blk.0.attn_q.weight", wt, [h, h], mat(h, h)),
        ("blk.0.attn_k.weight", wt, [h, kv * hd], mat(kv * hd, h)),
        ("blk.0.attn_v.weight", wt, [h, kv * hd], mat(kv * hd, h)),
        ("blk.0.attn_output.weight", wt, [h, h], mat(h, h)),
        ("blk.0.ffn_norm.weight", GGML_F32, [h], f32s(h, 1.0)),
        ("blk.0.ffn_gate.weight", wt, [h, ff], mat(ff, h)),
        ("blk.0.ffn_up.weight", wt, [h, ff], mat(ff, h)),
        ("blk.0.ffn_down.weight", wt, [ff, h], mat(h, ff)),
        ("output_norm.weight", GGML_F32, [h], f32s(h, 1.0)),
    ]
    if arch == "qwen3":
        tensors += [("blk.0.attn_q_norm.weight", GGML_F32, [hd], f32s(hd, 1.0)),
                    ("blk.0.attn_k_norm.weight", GGML_F32, [hd], f32s(hd, 1.0))]
    return gguf(kvs, tensors)


def gguf_seeds():
    spm = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + \
          ["\u2581", "\u2581H", "ello", "\u2581world", "\u2581Hello", "l", "o", "e", "H", "w", "r", "d", "!"]
    put("fuzz_gguf", "llama-spm", llama_gguf("llama", "llama", spm))
    byte_chars = [chr(c) for c in range(33, 127)] + ["\u0120", "\u010a"]
    bpe = ["<unk>", "<|begin_of_text|>", "<|end_of_text|>"] + byte_chars + ["\u0120w", "or", "\u0120wor", "ld", "He", "ll"]
    merges = ["\u0120 w", "o r", "\u0120w or", "l d", "H e", "l l"]
    put("fuzz_gguf", "llama-bpe", llama_gguf("llama", "gpt2", bpe, merges))
    put("fuzz_gguf", "qwen3-q8_0", llama_gguf("qwen3", "gpt2", bpe, merges, quant=True))
    every_type = [
        ("general.architecture", STR, "llama"),
        ("u8", U8, 200), ("i8", I8, -5), ("u16", U16, 60000), ("i16", I16, -300),
        ("u32", U32, 4000000000), ("i32", I32, -70000), ("f32", F32, 0.5),
        ("bool", BOOL, False), ("u64", U64, 1 << 40), ("i64", I64, -(1 << 40)),
        ("f64", F64, 1e-300), ("str", STR, "caf\u00e9"),
        ("arr.u8", ARR, (U8, [1, 2, 3])), ("arr.str", ARR, (STR, ["a", "", "bc"])),
        ("arr.nested", ARR, (ARR, [(I32, [1, -1]), (STR, ["x"])])),
        ("arr.empty", ARR, (F64, [])),
    ]
    put("fuzz_gguf", "every-type", gguf(every_type, [("t", GGML_F16, [4, 2], b"\0\x3c" * 8)], version=2))
    put("fuzz_gguf", "empty", gguf([], []))
    # llama.cpp's BERT WordPiece: phantom-space tokens, [CLS] ... [SEP]
    wpm = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "\u2581hello", "\u2581world", "ing", "\u2581,",
           "\u2581\u4e16", "\u2581cafe", "s", "\u2581!"]
    put("fuzz_gguf", "bert-wpm", gguf([
        ("general.architecture", STR, "bert"),
        ("tokenizer.ggml.model", STR, "bert"),
        ("tokenizer.ggml.tokens", ARR, (STR, wpm)),
        ("tokenizer.ggml.token_type", ARR, (I32, [3 if t.startswith("[") else 1 for t in wpm])),
        ("tokenizer.ggml.unknown_token_id", U32, 1),
        ("tokenizer.ggml.bos_token_id", U32, 2),
        ("tokenizer.ggml.seperator_token_id", U32, 3),
        ("tokenizer.ggml.padding_token_id", U32, 0)], []))
    # Gemma 4 in llama.cpp's converter's form (gemma4_gguf.c's config
    # hook): sliding and full layers, each variant the hook turns into
    # gemma4.c's config.
    g4 = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"] + byte_chars + \
         ["\u0120w", "or", "\u0120wor", "ld", "He", "ll"]
    put("fuzz_gguf", "gemma4-dense", gemma4_gguf(g4, merges, [True, False, True]))
    put("fuzz_gguf", "gemma4-per-layer", gemma4_gguf(g4, merges, [True, False], gd=16,
                                                     per_layer=32))
    put("fuzz_gguf", "gemma4-shared-kv", gemma4_gguf(g4, merges, [True, False, True],
                                                     shared=1, ff_array=True))
    put("fuzz_gguf", "gemma4-k-eq-v", gemma4_gguf(g4, merges, [True, False, True],
                                                  kv=1, global_kv=2, k_eq_v=True,
                                                  mat_type=GGML_Q8_0))
    put("fuzz_gguf", "gemma4-moe", gemma4_gguf(g4, merges, [True, False], gd=16,
                                               experts=3, top_k=2))
    # llama.cpp's LoRA GGUF (convert_lora_to_gguf.py): adapter keys and
    # blk.N.<module>.weight.lora_a [in, r] / .lora_b [r, out] tensors.
    lora_kvs = [("general.architecture", STR, "llama"),
                ("general.type", STR, "adapter"), ("adapter.type", STR, "lora"),
                ("adapter.lora.alpha", F32, 16.0)]
    put("fuzz_gguf", "lora-adapter", gguf(lora_kvs, [
        ("blk.0.attn_q.weight.lora_a", GGML_F32, [64, 2], f32s(128)),
        ("blk.0.attn_q.weight.lora_b", GGML_F32, [2, 64], f32s(128)),
        ("blk.0.ffn_down.weight.lora_a", GGML_F16, [128, 2], b"\0\x3c" * 256),
        ("blk.0.ffn_down.weight.lora_b", GGML_F16, [2, 64], b"\0\x3c" * 128)]))


# ------------------------------------------------------------ safetensors

def safetensors(entries, metadata=None, align=8):
    """entries: [(name, dtype, shape, bytes)]"""
    header, blob = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header).encode()
    h += b" " * ((align - len(h) % align) % align)
    return struct.pack("<Q", len(h)) + h + blob


def safetensors_seeds():
    put("fuzz_safetensors", "dtypes", safetensors([
        ("a.f32", "F32", [2, 2], f32s(4)), ("b.bf16", "BF16", [3], b"\x80\x3f" * 3),
        ("c.f16", "F16", [1, 2], b"\x00\x3c" * 2), ("d.u8", "U8", [4], b"\x01\x02\x03\x04"),
        ("e.i32", "I32", [1], b"\xff\xff\xff\xff"), ("f.scalar", "F32", [], f32s(1)),
        ("g.empty", "F32", [0, 3], b""),
    ], {"format": "pt", "note": "caf\u00e9"}))
    put("fuzz_safetensors", "mlx-quantized", safetensors([
        ("model.layers.0.mlp.up_proj.weight", "U32", [4, 2], bytes(range(32))),
        ("model.layers.0.mlp.up_proj.scales", "F16", [4, 1], b"\x00\x3c" * 4),
        ("model.layers.0.mlp.up_proj.biases", "F16", [4, 1], b"\x00\x00" * 4),
    ], {"format": "mlx"}))
    put("fuzz_safetensors", "no-tensors", safetensors([], {}))


# ------------------------------------------------------- config / index

def config_seeds():
    llama = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
             "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
             "vocab_size": 300, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
             "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
             "bos_token_id": 1, "eos_token_id": [2, 3],
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    put("fuzz_config", "llama", js(llama) + "\0" + js({"eos_token_id": [2, 4], "do_sample": True}))
    qwen3 = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 1,
             "intermediate_size": 96, "num_attention_heads": 2, "num_key_value_heads": 1,
             "head_dim": 64, "vocab_size": 500, "attention_bias": False,
             "eos_token_id": 151645, "dtype": "float16",
             "rope_scaling": {"type": "yarn", "factor": 4.0, "beta_fast": 32, "beta_slow": 1,
                              "original_max_position_embeddings": 32768},
             "quantization": {"group_size": 64, "bits": 4, "lm_head": False,
                              "model.layers.0.self_attn.q_proj": {"bits": 8, "group_size": 32}}}
    put("fuzz_config", "qwen3-mlx", js(qwen3))
    gemma = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
             "text_config": {"model_type": "gemma3_text", "hidden_size": 64, "num_hidden_layers": 2,
                             "intermediate_size": 128, "num_attention_heads": 4,
                             "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 262144,
                             "rope_scaling": {"rope_type": "linear", "factor": 8.0},
                             "sliding_window": 512, "partial_rotary_factor": 0.5},
             "quantization_config": {"bits": 4, "group_size": 64}, "eos_token_id": [1, 106]}
    put("fuzz_config", "gemma3-text-config", js(gemma))


def index_seeds():
    a, b = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    put("fuzz_st_index", "valid", js({"metadata": {"total_size": 26}, "weight_map": {
        "model.embed_tokens.weight": a, "model.norm.weight": a, "lm_head.weight": b}}))
    put("fuzz_st_index", "one-shard", js({"weight_map": {"lm_head.weight": b}}))
    put("fuzz_st_index", "traversal", js({"weight_map": {"lm_head.weight": "../" + b}}))


def st_modules_seeds():
    """fuzz_st_modules: parser byte (0 modules.json, 1 Pooling config,
    2 sentence_bert_config.json, 3 config_sentence_transformers.json)."""
    st = "sentence_transformers.models."
    put("fuzz_st_modules", "modules", b"\0" + js([
        {"idx": 0, "name": "0", "path": "", "type": st + "Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": st + "Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": st + "Normalize"}]).encode())
    put("fuzz_st_modules", "modules-dense", b"\0" + js([
        {"path": "", "type": st + "Transformer"},
        {"path": "../x", "type": st + "Pooling"},
        {"path": "2_Dense", "type": st + "Dense"}]).encode())
    put("fuzz_st_modules", "modules-escape", b"\0" + js([
        {"path": "", "type": st + "Transformer"},
        {"path": "../1_Pooling", "type": st + "Pooling"}]).encode())
    put("fuzz_st_modules", "pooling", b"\1" + js({
        "word_embedding_dimension": 384, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_lasttoken": False, "include_prompt": True}).encode())
    put("fuzz_st_modules", "sbert", b"\2" + js({"max_seq_length": 256,
                                                 "do_lower_case": False}).encode())
    put("fuzz_st_modules", "prompts", b"\3" + js({
        "prompts": {"query": "Instruct: find\nQuery:", "document": ""},
        "default_prompt_name": "query"}).encode())


# ------------------------------------------------------------- tokenizers

BYTES_TO_UNICODE = None


def byte_level_alphabet():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def tokenizer_seeds():
    alphabet = byte_level_alphabet()
    vocab = {c: i for i, c in enumerate(alphabet)}
    merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("i", "n"), ("\u0120", "w")]
    for l, r in merges:
        vocab.setdefault(l + r, len(vocab))
    added = [{"id": len(vocab), "content": "<|endoftext|>", "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True},
             {"id": len(vocab) + 1, "content": "<think>", "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": True, "special": False}]
    byte_bpe = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": [f"{l} {r}" for l, r in merges]}}
    config = {"bos_token": None, "eos_token": "<|endoftext|>", "add_bos_token": False,
              "chat_template": "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"}
    put("fuzz_tokenizer_load", "byte-bpe", js(byte_bpe) + "\0" + js(config))

    spm_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        spm_vocab[f"<0x{b:02X}>"] = len(spm_vocab)
    pieces = ["\u2581", "a", "b", "c", "\u2581a", "ab", "\u2581ab", "H", "\u2581H", "i"]
    for p in pieces:
        spm_vocab[p] = len(spm_vocab)
    spm = {
        "version": "1.0", "added_tokens": [
            {"id": 0, "content": "<unk>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": 1, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": 2, "content": "</s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": spm_vocab, "merges": [["\u2581", "a"], ["a", "b"], ["\u2581a", "b"], ["\u2581", "H"]]}}
    put("fuzz_tokenizer_load", "spm-bpe", js(spm) + "\0" + js({"bos_token": {"content": "<s>"}, "eos_token": "</s>"}))

    unigram = {
        "version": "1.0", "added_tokens": [],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
                       {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "post_processor": None,
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": False,
                  "vocab": [["<unk>", 0.0], ["\u2581", -2.0], ["\u2581he", -3.0], ["llo", -3.5], ["h", -5.0],
                            ["e", -5.0], ["l", -5.0], ["o", -5.0], ["\u2581w", -4.0], ["orld", -4.0]]}}
    put("fuzz_tokenizer_load", "unigram", js(unigram))

    wordpiece = {
        "version": "1.0", "added_tokens": [
            {"id": 0, "content": "[PAD]", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": 1, "content": "[UNK]", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": 2, "content": "[CLS]", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": 3, "content": "[SEP]", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100,
                  "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5,
                            "##s": 6, "!": 7, "un": 8, "##aff": 9, "##able": 10}}}
    put("fuzz_tokenizer_load", "wordpiece", js(wordpiece))


def encode_seeds():
    texts = ["Hello, world!", "  leading spaces and\ttabs\n\nnew lines ",
             "caf\u00e9 cafe\u0301 \u4f60\u597d \U0001F600 \u0645\u0631\u062d\u0628\u0627",
             "<|endoftext|><s></s><think>x</think><|im_start|>user", "don't I'll we've 12345 3.14"]
    for which in range(6):
        for i, t in enumerate(texts):
            put("fuzz_tokenizer_encode", f"t{which}-{i}", bytes([which]) + t.encode())
        put("fuzz_tokenizer_encode", f"t{which}-ids", bytes([0x80 | which]) + bytes(range(0, 64)))
    put("fuzz_tokenizer_encode", "invalid-utf8", b"\x00ab\xff\xc3(\xe2\x82 \xf0\x9f\x98")


def chat_seeds():
    sys.path.insert(0, os.path.join(ROOT, "tests", "templates"))
    import conversations
    for i, case in enumerate(conversations.CASES[:12]):
        data = bytes([(0x80 if case.get("add_generation_prompt") else 0) | (i % 5)])
        data += js(case["messages"]).encode()
        if case.get("tools") or case.get("extra"):
            data += b"\0" + (js(case["tools"]).encode() if case.get("tools") else b"null")
        if case.get("extra"):
            data += b"\0" + js(case["extra"]).encode()
        put("fuzz_chat", case["id"], data)


def jinja_seeds():
    feats = os.path.join(ROOT, "tests", "templates", "features")
    for name in sorted(os.listdir(feats)):
        with open(os.path.join(feats, name), "rb") as f:
            put("fuzz_jinja", name, f.read())
    small = {
        "loop": "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }} {{ m.role|upper }}{% if not loop.last %},{% endif %}{% else %}none{% endfor %}",
        "macro": "{% macro f(a, b=2) %}{{ a ~ b }}{{ caller() if caller }}{% endmacro %}{% call f(1) %}c{% endcall %}{{ f(3, b=4) }}",
        "ns": "{% set ns = namespace(x=0) %}{% for i in range(5) %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}",
        "filters": "{{ messages|map(attribute='role')|join(', ') }} {{ tools|tojson(indent=2) }} {{ s.split(',')|reverse|list }} {{ '%s-%d'|format('a', 3) }} {{ f|round(1) }} {{ none is none }}",
        "strings": "{{ 'Hello'[1:3] }}{{ s.strip().startswith('a') }}{{ 'x'.join(['a','b']) }}{{ \"q\"|replace('q','r') }}{{ ' a '.lstrip() }}{{ 'A'.lower() * 3 }}",
        "dict": "{% set d = {'a': 1, 'b': [1, 2]} %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.get('c', 'dflt') }}{{ d|length }}",
        "whitespace": "  {%- if true -%}  x  {%- endif -%}  \n{# comment #}{% raw %}{{ raw }}{% endraw %}",
        "ctx": "{{ a.b[0] }}{{ c }}\0{\"a\": {\"b\": [1.5]}, \"c\": \"\\u00e9\"}",
        "errors": "{{ raise_exception('bad') if n > 2 }}{{ strftime_now('%Y-%m-%d') }}",
    }
    for k, v in small.items():
        put("fuzz_jinja", k, v)


def server_seeds():
    """fuzz_server_request: route byte (0 chat, 1 completions, 2 tokenize,
    3 detokenize, 4 apply-template, 5 embeddings, 6 load_lora_adapter,
    7 unload_lora_adapter; 0x08 with 0 / 1: Anthropic's messages and
    count_tokens, with 5: rerank) + body; fuzz_server_stop: stop strings
    (NUL-ended), 0x01, text pieces split at 0x02."""
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                         {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
            {"role": "tool", "content": "42", "tool_call_id": "c1"}]
    chat = {"model": "tiny", "messages": msgs, "stream": True,
            "stream_options": {"include_usage": True}, "max_completion_tokens": 8,
            "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 3,
            "stop": ["\n\n", "END"], "logprobs": True, "top_logprobs": 5,
            "presence_penalty": 0.5, "frequency_penalty": -0.5,
            "repetition_penalty": 1.1, "repetition_context_size": 32,
            "logit_bias": {"5": -100, "17": 2.5}, "xtc_probability": 0.5,
            "xtc_threshold": 0.1, "n": 1, "tools": [{"type": "function",
            "function": {"name": "f", "parameters": {"type": "object"}}}],
            "chat_template_kwargs": {"enable_thinking": False}, "unknown": [1]}
    put("fuzz_server_request", "chat", b"\0" + js(chat).encode())
    put("fuzz_server_request", "chat-minimal", b"\0" + js({"messages": [
        {"role": "user", "content": "x"}]}).encode())
    # Values at the bounds, one mutation away from out of range.
    put("fuzz_server_request", "chat-bounds", b"\0" + js({
        "messages": [{"role": "user", "content": "x"}], "logit_bias": {"999": 100},
        "top_logprobs": 20, "logprobs": True, "max_tokens": 16777216,
        "stop": ["a", "b", "c", "d"], "top_p": 1, "n": 16}).encode())
    put("fuzz_server_request", "completion-text", b"\1" + js({
        "model": "/models/tiny", "prompt": ["Once"], "max_tokens": 4, "logprobs": 2,
        "stop": "\n", "echo": False, "best_of": 1}).encode())
    put("fuzz_server_request", "completion-ids", b"\1" + js({
        "prompt": [1, 2, 999], "stream": False, "seed": -7}).encode())
    put("fuzz_server_request", "tokenize", b"\2" + js({
        "content": "héllo <|im_end|>", "add_special": True, "with_pieces": True}).encode())
    put("fuzz_server_request", "detokenize", b"\3" + js({"tokens": [0, 5, 999]}).encode())
    put("fuzz_server_request", "apply-template", b"\4" + js({
        "messages": msgs, "chat_template_kwargs": {"a": 1}}).encode())
    put("fuzz_server_request", "embeddings-texts", b"\5" + js({
        "model": "tiny", "input": ["héllo", ""], "encoding_format": "base64",
        "dimensions": 3, "prompt_name": "query"}).encode())
    put("fuzz_server_request", "embeddings-ids", b"\5" + js({
        "input": [[1, 2, 999], [0]], "encoding_format": "float"}).encode())
    put("fuzz_server_request", "rerank", b"\x0d" + js({
        "model": "tiny", "query": "capital of China?", "documents": [
            "Beijing", "", "héllo"], "top_n": 2, "return_documents": True}).encode())
    put("fuzz_server_request", "rerank-minimal", b"\x0d" + js({
        "query": "", "documents": ["x"]}).encode())
    put("fuzz_server_request", "lora-load", b"\6" + js({
        "lora_name": "sql", "lora_path": "/adapters/sql"}).encode())
    put("fuzz_server_request", "lora-unload", b"\7" + js({"lora_name": "sql"}).encode())
    claude = [{"role": "user", "content": "Weather?"},
              {"role": "assistant", "content": [
                  {"type": "text", "text": "Looking."},
                  {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]},
              {"role": "user", "content": [
                  {"type": "tool_result", "tool_use_id": "t1",
                   "content": [{"type": "text", "text": "42"}]},
                  {"type": "text", "text": "And?"}]}]
    put("fuzz_server_request", "anthropic-messages", b"\x08" + js({
        "model": "tiny", "max_tokens": 8, "system": [{"type": "text", "text": "Be brief."}],
        "messages": claude, "stop_sequences": ["a"], "temperature": 1, "top_k": 4,
        "stream": True, "metadata": {"user_id": "u"},
        "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": True}}).encode())
    put("fuzz_server_request", "anthropic-count-tokens", b"\x09" + js({
        "model": "tiny", "system": "Be brief.", "messages": claude,
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any"}}).encode())
    put("fuzz_server_request", "responses", b"\x0a" + js({
        "model": "tiny", "instructions": "Be brief.", "previous_response_id": "resp_kept",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                  {"type": "function_call", "call_id": "c1", "name": "f",
                   "arguments": "{\"x\": 1}"},
                  {"type": "function_call_output", "call_id": "c1", "output": "42"},
                  {"type": "message", "role": "developer", "content": "And?"}],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "tool_choice": {"type": "function", "name": "f"}, "max_output_tokens": 8,
        "temperature": 0.5, "top_p": 0.9, "stream": True, "store": False,
        "reasoning": {"effort": "low"}, "metadata": {"k": "v"}}).encode())
    put("fuzz_server_request", "responses-schema", b"\x0a" + js({
        "input": "x", "text": {"format": {"type": "json_schema", "name": "w", "strict": True,
                                          "schema": {"type": "object"}}}}).encode())
    png = "iVBORw0KGgoAAAANSUhEUg=="   # a PNG's signature and IHDR tag
    put("fuzz_server_request", "chat-image", b"\0" + js({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "x"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png}}]}]}).encode())
    put("fuzz_server_request", "anthropic-image", b"\x08" + js({
        "max_tokens": 4, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "x"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
            {"type": "image", "source": {"type": "url", "url": "https://example.org/a.png"}}]}]}).encode())
    put("fuzz_server_request", "responses-image", b"\x0a" + js({
        "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "x"},
            {"type": "input_image", "image_url": "data:image/png;base64," + png,
             "detail": "auto"}]}]}).encode())
    put("fuzz_server_request", "chat-lora", b"\0" + js({
        "messages": [{"role": "user", "content": "x"}], "adapters": "/a",
        "lora": [{"id": 0, "scale": 0}, {"id": 3, "scale": 0.5}]}).encode())
    put("fuzz_server_stop", "across", b"ab\0\n\n\0\1xa\2b\2cd\n\2\ne")
    put("fuzz_server_stop", "prefix-held", b"abcd\0bc\0\1a\2b\2c\2x")
    put("fuzz_server_stop", "none", b"\1hello\2 world")


def reply_seeds():
    """fuzz_reply_parse: an options byte (format = byte % 5; 8 tools, 16
    reasoning, 32 starts in reasoning, 64 a single call), then the reply
    with its piece breaks as 0x02. Replies shaped as the chat templates
    write them (tests/server/test_tool_call_parsers.py renders the real
    ones)."""
    S = "\2"
    seeds = {
        "hermes": (0 | 8 | 16, "<think>\nR" + S + "eason\n</thi" + S + "nk>\n\nHi " + S
                   + "<tool_" + S + 'call>\n{"name": "f", "argu' + S
                   + 'ments": {"a": [1, "x\\"}"]}}\n</tool_' + S + "call>\n"
                   + '<tool_call>{"name":"g","arguments":{}}</tool_call>'),
        "llama3": (1 | 8, '{"name": "get' + S + '_weather", "parameters": {"city": "Pa' + S
                   + 'ris"}}'),
        "llama3_tag": (1 | 8, '<|python_tag|>{"name": "f", "parameters": {}}<|eom_id|>'),
        "mistral_array": (2 | 8, "[TOOL_CALLS]" + S + '[{"name": "f", "arguments": {"x": 1}, '
                          '"id": "abcDEF123"}, {"name": "g", "arguments": {}}]'),
        "mistral_args": (2 | 8, '[TOOL_CALLS]f[CALL_ID]abcDEF123[ARGS]{"x": 1}'
                         "[TOOL_CALLS]g[ARGS]" + S + "{}"),
        "harmony": (3 | 8 | 16, "<|channel|>analysis<|message|>Think" + S + "ing.<|end|>"
                    "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>"
                    '{"a"' + S + ": 1}"),
        "harmony_final": (3 | 16, "<|channel|>analysis<|message|>T<|end|><|start|>assistant"
                          "<|channel|>final<|message|>Ans" + S + "wer"),
        "gemma": (4 | 8 | 16, "<|channel>thought\nhm<channel|><|tool_call>call:f{a:<|\"|>x,y"
                  "<|\"|>,b:[1,2.5,true],c:{d:None}}<tool_" + S + "call|><|tool_response>"),
        "broken": (0 | 8 | 64, '<tool_call>{"name": "f" x</tool_call> <tool_call>nope'),
    }
    for name, (options, text) in seeds.items():
        put("fuzz_reply_parse", name, bytes([options]) + text.encode())


def tool_grammar_seeds():
    """fuzz_tool_grammar: an options byte (1: Llama 3 JSON, 2: in <think>),
    then a chat body with tools and a forced tool_choice."""
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                         "days": {"type": "integer", "minimum": 1}},
        "required": ["city"]}}}
    tree = {"type": "function", "function": {"name": "tree", "parameters": {
        "$defs": {"node": {"type": "object", "properties": {
            "v": {"enum": [1, "a", None]},
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}}}},
        "$ref": "#/$defs/node"}}}
    bare = {"type": "function", "function": {"name": "now"}}
    user = [{"role": "user", "content": "x"}]
    seeds = {
        "required-one": (0, {"messages": user, "tools": [weather], "tool_choice": "required"}),
        "required-many": (0, {"messages": user, "tools": [weather, tree, bare],
                              "tool_choice": "required", "parallel_tool_calls": False}),
        "named-llama3": (1, {"messages": user, "tools": [weather, tree], "tool_choice": {
            "type": "function", "function": {"name": "tree"}}}),
        "named-think": (2, {"messages": user, "tools": [bare, weather], "tool_choice": {
            "type": "function", "function": {"name": "now"}}}),
        "required-llama3-think": (3, {"messages": user, "tools": [tree, bare],
                                      "tool_choice": "required"}),
    }
    for name, (options, body) in seeds.items():
        put("fuzz_tool_grammar", name, bytes([options]) + js(body).encode())


def data_url_seeds():
    """fuzz_data_url: an image_url part's URL, one per accepted media type,
    and the near misses the parser names (padding, media type, parameters)."""
    import base64
    heads = {"png": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "jpeg": b"\xff\xd8\xff\xe0\0\x10JFIF",
             "webp": b"RIFF\x1a\0\0\0WEBPVP8L", "gif": b"GIF89a\x01\0\x01\0\x80\0\0"}
    for kind, head in heads.items():
        put("fuzz_data_url", kind, f"data:image/{kind};base64,".encode() + base64.b64encode(head))
    put("fuzz_data_url", "unpadded", b"data:image/gif;base64," + base64.b64encode(heads["gif"] + b"x").rstrip(b"="))
    put("fuzz_data_url", "params", b"DATA:Image/PNG;name=a.png;base64," + base64.b64encode(heads["png"]))
    put("fuzz_data_url", "wrong-mime", b"data:image/png;base64," + base64.b64encode(heads["jpeg"]))
    put("fuzz_data_url", "not-base64", b"data:image/png,%89PNG")


def main():
    data_url_seeds()
    tool_grammar_seeds()
    reply_seeds()
    server_seeds()
    gguf_seeds()
    safetensors_seeds()
    config_seeds()
    index_seeds()
    st_modules_seeds()
    tokenizer_seeds()
    encode_seeds()
    chat_seeds()
    jinja_seeds()


if __name__ == "__main__":
    main()

"""A tiny LLaDA GGUF with random weights, written with llama.cpp's own gguf
writer (the `gguf` package) the way its converter (LLaDAModel in
convert_hf_to_gguf.py) spells the architecture: general.architecture
"llada", llama.cpp's common tensor names, tokenizer.ggml.mask_token_id and
diffusion.shift_logits false. arch "dream" writes the same shape as its
converter's DreamModel does (Qwen2's q/k/v biases, no shift_logits key:
llama.cpp then shifts), arch "llama" the LLaDA weights as an
autoregressive model. Both llama-diffusion-cli and Spindle read
this one file, and diffusion_ref.py reads its weights back for the numpy
reference forward.

The q/k rows are random, so they need no permutation: whatever llama.cpp's
converter would have stored, both engines apply llama.cpp's interleaved
("normal") RoPE to the rows as stored, and so does the reference.

The file is cached in tests/.work/diffusion (rebuilt when this script
changes: its hash is part of the name).

usage: python tests/diffusion/llada_gguf.py [OUT_DIR]   prints the path
"""
import hashlib
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import gguf  # noqa: E402
from gguf_writer import add_tokenizer  # noqa: E402

ROOT = HERE.parents[1]
WORK = ROOT / "tests" / ".work" / "diffusion"

VOCAB = 320
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
FFN = 128
CTX = 128
ROPE_THETA = 10000.0
RMS_EPS = 1e-5
BOS, EOS, MASK = 300, 301, 310
SPECIALS = {BOS: "<|startoftext|>", EOS: "<|endoftext|>",
            MASK: "<|mdm_mask|>"}
# llama-diffusion-cli always renders the prompt through the chat template
# (the chatml fallback when the file has none); this one renders the user
# text alone, so that both engines see the same tokens for `-p TEXT`.
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
# Logits of a random model are flat; this scale on the output matrix makes
# them spread over a few units, as a trained model's are, so that the
# remasking algorithms' confidences differ from position to position.
HEAD_SCALE = 4.0


def weights(arch="llada", seed=37):
    """{gguf name: float32 array in row-major (out, in) order}."""
    rng = np.random.default_rng(seed)

    def mat(rows, cols, scale=1.0):
        return (rng.standard_normal((rows, cols)) * scale
                / np.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"token_embd.weight": rng.standard_normal((VOCAB, HIDDEN))
         .astype(np.float32)}
    for i in range(LAYERS):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = norm(HIDDEN)
        w[p + "attn_q.weight"] = mat(HEADS * HEAD_DIM, HIDDEN)
        w[p + "attn_k.weight"] = mat(KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "attn_v.weight"] = mat(KV_HEADS * HEAD_DIM, HIDDEN)
        if arch == "dream":
            for x, n in (("q", HEADS), ("k", KV_HEADS), ("v", KV_HEADS)):
                w[p + f"attn_{x}.bias"] = (0.3 * rng.standard_normal(
                    n * HEAD_DIM)).astype(np.float32)
        w[p + "attn_output.weight"] = mat(HIDDEN, HEADS * HEAD_DIM)
        w[p + "ffn_norm.weight"] = norm(HIDDEN)
        w[p + "ffn_gate.weight"] = mat(FFN, HIDDEN)
        w[p + "ffn_up.weight"] = mat(FFN, HIDDEN)
        w[p + "ffn_down.weight"] = mat(HIDDEN, FFN)
    w["output_norm.weight"] = norm(HIDDEN)
    w["output.weight"] = mat(VOCAB, HIDDEN, HEAD_SCALE)
    return w


def write(path, arch="llada"):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("llada-tiny-random")
    w.add_context_length(CTX)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if arch != "dream":
        w.add_diffusion_shift_logits(False)
    add_tokenizer(w, VOCAB, BOS, EOS, SPECIALS)
    w.add_mask_token_id(MASK)
    w.add_chat_template(CHAT_TEMPLATE)
    for name, arr in weights(arch).items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def ensure(out_dir=WORK, arch="llada"):
    """The cached file's path, writing it first when missing; arch "llama"
    gives the same weights as an autoregressive model (the tests' model
    that is not a diffusion model)."""
    stamp = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    out = Path(out_dir) / f"{arch}-tiny-{stamp}.gguf"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        write(tmp, arch)
        os.replace(tmp, out)
    return out


if __name__ == "__main__":
    print(ensure(Path(sys.argv[1]) if len(sys.argv) > 1 else WORK))

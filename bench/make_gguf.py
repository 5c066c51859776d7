"""Convert bench/make_model.py's bf16 safetensors dir to a GGUF for llama.cpp.

usage: python bench/make_gguf.py SRC_DIR OUT.gguf --type f32|f16|bf16|q8_0|q4_0

Used by bench/compare so that Spindle and llama.cpp run the SAME random
weights. The writer is tests/gguf_writer.py (llama.cpp's tensor names and
metadata per architecture, a synthetic gpt2 vocabulary); here it writes
the qwen3, qwen3_moe (every layer MoE: llama.cpp's qwen3moe has no dense
layers) or qwen3_5 hybrid model (llama.cpp's qwen35) with Qwen's three special tokens at their real ids.
Quantization uses gguf-py's numpy ports of ggml's reference quantizers.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests"))
import gguf_writer  # noqa: E402

QWEN_SPECIALS = {151643: "<|endoftext|>", 151644: "<|im_start|>",
                 151645: "<|im_end|>"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--type", choices=["f32", "f16", "bf16", "q8_0", "q4_0"],
                    required=True)
    a = ap.parse_args()
    with open(os.path.join(a.src, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") not in ("qwen3", "qwen3_moe", "qwen3_5") or \
            "quantization" in cfg:
        sys.exit("make_gguf: expects an unquantized qwen3, qwen3_moe or "
                 "qwen3_5 model dir")
    try:
        gguf_writer.write_gguf(a.src, a.out, a.type,
                               name=f"spindle-bench-{cfg['model_type']}-random",
                               specials=QWEN_SPECIALS, bos_id=151643,
                               context_length=cfg.get(
                                   "max_position_embeddings", 40960))
    except gguf_writer.WriterError as e:
        sys.exit(f"make_gguf: {e}")
    print(a.out)


if __name__ == "__main__":
    main()

"""Write a small random-weight Qwen3 with the real Qwen3 vocabulary and
tokenizer (151,936 ids) for the constrained-decode benchmark: its step is
short enough (~13 ms on 2 cores) that a grammar mask over the full
vocabulary is not lost in it.

usage: .venv/bin/python bench/make_qwen3_small.py OUT_DIR

Hidden 512, 8 layers, 8 query / 2 KV heads of 64, SwiGLU 1536, f32, tied
head; written by the parity suite's model maker (mlx-lm's own qwen3 code)
with the server suite's Qwen3 tokenizer files."""
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests/parity"))
sys.path.insert(0, str(ROOT / "tests/server"))
import make_models as mm  # noqa: E402
import make_server_model as sm  # noqa: E402


def main():
    out = Path(sys.argv[1])
    mm._imports()
    mm.mx.set_default_device(mm.mx.cpu)
    spec = mm._spec("qwen3-small", "qwen3", "float32", tied=True, cfg={
        "hidden_size": 512, "num_hidden_layers": 8, "intermediate_size": 1536,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
        "vocab_size": 151936, "max_position_embeddings": 4096})
    mm.fresh_dir(out)
    mm.build_model(spec, out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(sm.TOKENIZER / name, out / name)
    print(out)


if __name__ == "__main__":
    main()

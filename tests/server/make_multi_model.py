#!/usr/bin/env python3
"""A second server model for the several-models tests
(test_multi_model.py): make_server_model.py's tiny random-weight Qwen3 with
one layer and an untied head, so its greedy answers differ from the first
model's, with the same real tokenizer and mlx-lm's greedy references
(make_server_model.build).

Usage: python tests/server/make_multi_model.py [--out DIR]
"""

import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "parity"))
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402
import make_server_model as base  # noqa: E402

REPO = HERE.parents[1]
DEFAULT_OUT = REPO / "tests" / ".work" / "server-multi"
SPECS = [mm._spec("qwen3-chat-b", "qwen3", "float32", tied=False, cfg={
    "hidden_size": 64, "num_hidden_layers": 1, "intermediate_size": 96,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
    "vocab_size": 151936, "max_position_embeddings": base.CONTEXT})]
STAMP_FILE = mm.STAMP_FILE
build = base.build


def source_hash():
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(base.source_hash().encode())
    return h.hexdigest()


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build, source_hash)


if __name__ == "__main__":
    main()

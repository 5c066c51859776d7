"""Grammars no generation can complete are refused when they are compiled,
never found out in the middle of a generation (where the server could
only answer 500): a grammar whose language is empty, and one whose text no
token of the vocabulary can begin. And where only some alternatives can
never complete, the masks never let a token into one of them: on every
walk, each state is complete or some token goes on.

llguidance is no oracle here: it lets tokens into such alternatives (its
mask for `"ab" | "cd" x` with x ::= "e" x allows "c"), so these are checks
of the property itself."""
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

from grammar_common import HARNESS, QWEN3, Harness, require

ROOT = Path(__file__).resolve().parents[2]
# A WordPiece vocabulary without byte fallback: some text has no token.
MINILM = ROOT / "tests" / ".work" / "all-MiniLM-L6-v2"


def compile_error(tokenizer, kind, text, tmp_path):
    require(HARNESS)
    require(tokenizer)
    path = tmp_path / "grammar"
    path.write_text(text)
    p = subprocess.run([str(HARNESS), str(tokenizer), kind, str(path), "--print"],
                       capture_output=True, text=True, timeout=120)
    return p.stdout.strip() if p.returncode == 2 else None


@pytest.mark.parametrize("kind,text,needle", [
    ("gbnf", 'root ::= "a" root\n', "grammar matches no text"),
    ("gbnf", 'root ::= "x" item\nitem ::= "y" item | [^\\x00-\\U0010FFFF]\n',
     "rule 'item' matches nothing"),
    ("json_schema", '{"type": "string", "pattern": "^[^\\\\s\\\\S]$"}', "no JSON text"),
    ("json_schema", '{"type": "array", "items": {"$ref": "#"}, "minItems": 1}', "no JSON text"),
])
def test_empty_language_is_refused(kind, text, needle, tmp_path):
    err = compile_error(QWEN3, kind, text, tmp_path)
    assert err and err.startswith("error:") and needle in err, err


def test_text_no_token_can_begin_is_refused(tmp_path):
    # U+0001 is in no token of all-MiniLM-L6-v2's vocabulary.
    err = compile_error(MINILM, "gbnf", 'root ::= "\\x01" "a"\n', tmp_path)
    assert err and "no token of the vocabulary can begin" in err, err


DEAD_ALTERNATIVES = """\
root ::= item ("," item){0,3}
item ::= "cat" | "ca" never | "dog" tail | number
never ::= "t" never
tail ::= "!" | "?" [^\\x00-\\U0010FFFF]
number ::= [0-9]{1,3} | [0-9] "." [^\\x00-\\U0010FFFF]
"""


def test_masks_never_enter_a_dead_end(tmp_path):
    require(QWEN3)
    path = tmp_path / "g.gbnf"
    path.write_text(DEAD_ALTERNATIVES)
    h = Harness(QWEN3, "gbnf", path)
    try:
        for seed in range(20):
            rng = random.Random(seed)
            h.reset()
            for step in range(40):
                accepting, allowed = h.mask()
                ids = np.nonzero(allowed)[0]
                assert accepting or len(ids), f"seed {seed} step {step}: a dead end"
                if not len(ids) or (accepting and rng.random() < 0.1):
                    break
                assert h.accept(int(ids[rng.randrange(len(ids))]))
    finally:
        h.close()

"""Grammar-constrained decoding with speculation and jump-forward, through
`spindle run --json` on the tiny model (real Qwen3 tokenizer):

  * jump-forward (a span where the grammar allows exactly one token at
    each position fed in one multi-token forward): greedy tokens equal
    those without it, in fewer target forward passes;
  * speculative decoding (prompt lookup) with a grammar: the tokens equal
    non-speculative constrained greedy decoding token for token, the text
    is in the grammar's language (Python's re on the same language), the
    grammar's forced spans are offered as drafts, and drafted tokens the
    grammar rejects are dropped before verification.
"""
import json
import os
import re
import subprocess

import pytest

from server_common import SPINDLE_BIN

# After a letter only "。" may follow, and "。" is one token with no longer
# token starting "。<letter>" in the vocabulary: a forced token every other
# position. The key/value shape gives free choices between them.
GBNF = r'''root ::= "{" pair ("," pair){2,5} "}"
pair ::= "\"" [a-z]{1,3} "\"" ":" ([a-z] "。"){1,3}
'''
LANGUAGE = re.compile(r'\{"[a-z]{1,3}":(?:[a-z]。){1,3}(?:,"[a-z]{1,3}":(?:[a-z]。){1,3}){2,5}\}')
# Text the prompt lookup will draft from: much of it outside the grammar.
PROMPT = ('{"ab":x。y。,"c":z。} {"ab":x。y。,"c":z。} ab, cd; "ab":x。y。,"c":z。 '
          'x。y。 x,y, {"ab":"x"} ' * 3)


def run(model, tmp_path, *args, n=120, temp=0, env=None):
    g = tmp_path / "g.gbnf"
    g.write_text(GBNF)
    p = subprocess.run([str(SPINDLE_BIN), "run", "-m", str(model), "-p", PROMPT,
                        "--grammar", str(g), "-n", str(n), "--temp", str(temp), "--json",
                        "-t", "2", *map(str, args)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, **env} if env else None)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def plain(server_model, tmp_path_factory):
    out = run(server_model, tmp_path_factory.mktemp("plain"), "--jump-forward", "off")
    assert LANGUAGE.fullmatch(out["text"]), out["text"]
    assert out["stats"]["stop_reason"] == "eos", out["stats"]
    return out


def test_jump_forward_same_greedy_tokens_fewer_forwards(server_model, tmp_path, plain):
    jf = run(server_model, tmp_path, "--jump-forward", "on")
    assert jf["tokens"] == plain["tokens"]
    spec = jf["stats"]["spec"]
    assert spec["forced"] > 0, spec
    # One forward per round (the first token came from the prompt's).
    assert 1 + spec["target_forwards"] + spec["forced"] == len(jf["tokens"]), spec
    # auto (the default) is on at temperature 0
    assert run(server_model, tmp_path)["stats"]["spec"]["forced"] == spec["forced"]


def test_jump_forward_auto_is_off_when_sampling(server_model, tmp_path):
    out = run(server_model, tmp_path, "--seed", 3, temp=0.8)
    assert "spec" not in out["stats"]
    assert LANGUAGE.fullmatch(out["text"]), out["text"]


@pytest.mark.parametrize("k", [1, 4, 10])
def test_speculative_with_grammar_equals_plain(server_model, tmp_path, plain, k):
    out = run(server_model, tmp_path, "--spec", "ngram", "--num-draft-tokens", k,
              "--spec-fixed-k", "--jump-forward", "off")
    assert out["tokens"] == plain["tokens"]
    assert LANGUAGE.fullmatch(out["text"]), out["text"]
    spec = out["stats"]["spec"]
    assert spec["forced"] > 0, spec   # the constraint drafter
    # The prompt's text outside the grammar is drafted and cut.
    assert spec["grammar_cut"] > 0, spec


def test_speculative_sampling_with_grammar_stays_in_language(server_model, tmp_path):
    for seed in (1, 2, 3):
        out = run(server_model, tmp_path, "--spec", "ngram", "--spec-fixed-k", "--seed", seed,
                  temp=1.0)
        assert LANGUAGE.fullmatch(out["text"]), out["text"]

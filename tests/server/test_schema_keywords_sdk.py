"""JSON Schema keywords past llama.cpp's subset through the openai SDK's
structured outputs: a schema with llguidance's formats (ipv4, ipv6), an
allOf merge, a property whose schema is false and an annotation keyword
is followed (every reply validates with jsonschema, format checks on;
the keywords whose values have no length bound, such as hostname or
patternProperties, are left to tests/grammar, as the test model rarely
ends them), combinations compiled exactly (a pattern cut by maxLength,
multipleOf with bounds, min/maxProperties, allOf over non-objects) are
followed too, and a format that has no rule is a
400 (BadRequestError) naming the keyword and its place."""
import json

import pytest

from server_common import ALIAS

SCHEMA = {
    "type": "object",
    "allOf": [
        {"type": "object", "properties": {"ip": {"type": "string", "format": "ipv4"}},
         "required": ["ip"]},
        {"type": "object", "properties": {"ip6": {"type": "string", "format": "ipv6"},
                                          "legacy": False},
         "required": ["ip6"]},
    ],
    "markdownDescription": "An **address** (an annotation: validators ignore it).",
}


@pytest.mark.parametrize("seed", [1, 2])
def test_sdk_schema_with_new_keywords_validates(client, seed):
    jsonschema = pytest.importorskip("jsonschema")
    r = client.chat.completions.create(
        model=ALIAS, messages=[{"role": "user", "content": "Give two addresses."}],
        max_tokens=800, temperature=0.8, seed=seed,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "addresses", "schema": SCHEMA}})
    choice = r.choices[0]
    if choice.finish_reason == "length":
        pytest.skip("ran out of tokens before the value ended")
    jsonschema.validate(json.loads(choice.message.content), SCHEMA,
                        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def test_sdk_format_without_a_rule_is_a_400(client):
    openai = pytest.importorskip("openai")
    schema = {"type": "object", "properties": {"link": {"type": "string", "format": "uri-reference"}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=ALIAS, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert "/properties/link" in str(e.value) and "format 'uri-reference'" in str(e.value), e.value


# Keyword combinations past llguidance's level of exactness (a pattern
# cut by maxLength, multipleOf with bounds, maxProperties counted, allOf
# over non-objects): every value bounded, so the test model ends it.
COUNTED = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]+$", "maxLength": 4},
        "qty": {"type": "integer", "minimum": 0, "maximum": 96, "multipleOf": 8},
        "unit": {"allOf": [{"enum": ["kg", "g", 3]}, {"type": "string"}]},
        "note": {"type": "string", "maxLength": 5},
    },
    "required": ["code"],
    "additionalProperties": False,
    "minProperties": 2,
    "maxProperties": 3,
}


@pytest.mark.parametrize("seed", [3, 4])
def test_sdk_counted_and_merged_keywords_validate(client, seed):
    jsonschema = pytest.importorskip("jsonschema")
    r = client.chat.completions.create(
        model=ALIAS, messages=[{"role": "user", "content": "An order line."}],
        max_tokens=300, temperature=0.8, seed=seed,
        response_format={"type": "json_schema", "json_schema": {"name": "line", "schema": COUNTED}})
    choice = r.choices[0]
    if choice.finish_reason == "length":
        pytest.skip("ran out of tokens before the value ended")
    jsonschema.validate(json.loads(choice.message.content), COUNTED)

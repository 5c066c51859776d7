"""Keywords and combinations compiled exactly where llguidance compiles
them: for each schema, the grammar accepts a candidate JSON text iff
Python's `jsonschema` (the reference validator) validates it. Candidates
are written compactly, so each decides by its value alone.

- `pattern` with anchors on each top-level alternative (`^in$|^out$`,
  `^lin|vms`), named groups, and with `minLength` / `maxLength` where
  the pattern's lengths already meet them or one repeated part takes the
  cut."""
import json
import re
from decimal import Decimal

import pytest

from grammar_common import QWEN3, Harness, llg_tokenizer, require
from test_schema_bounds import accepts, harness_accepts_all

WORDS = ["", "a", "in", "out", "inn", "xin", "outx", "lin", "linux", "xlnx", "lnx", "alnx",
         "vms", "avms", "vmsz", "@", "a@b", "ab", "abc", "a_1", "A1", "1a", "a-b", "abcdefgh",
         "abcdefghi", "1.2.3", "1.02.3", "0.0.0", "10.20.30", "1.2", "x@y z", "${a}", "$", "${",
         "./x.png", "./a/b.png", "x.png", "", "ab1", "a12345678"]

CASES = {
    "anchors_per_alternative": ({"type": "string", "pattern": "^in$|^out$"}, WORDS),
    "anchors_mixed": ({"type": "string", "pattern": "^lin|^lnx$|vms"}, WORDS),
    "anchors_empty_alternative": ({"type": "string", "pattern": "^$|^\\./[a-z/]+\\.png$"}, WORDS),
    "named_groups": ({"type": "string", "pattern": "^(?<major>0|[1-9]\\d*)\\.(?<minor>0|[1-9]\\d*)"
                                                   "\\.(?<patch>\\d+)$"}, WORDS),
    "pattern_max_length_cut": ({"type": "string", "pattern": "^[\\w@-]*$", "maxLength": 3}, WORDS),
    "pattern_min_max_cut": ({"type": "string", "pattern": "^a[a-z0-9_]+$", "minLength": 3,
                             "maxLength": 8}, WORDS),
    "pattern_lengths_implied": ({"type": "string", "pattern": "^.*@[^ ]+.*$", "minLength": 1}, WORDS),
    "pattern_lengths_implied_unanchored": ({"type": "string", "pattern": "\\$\\{?", "minLength": 1},
                                           WORDS),
}

# Objects over the keys a, b, c, d in order (listed ones first), values
# of each kind. Spindle writes required properties first, then the
# optional ones in the order listed (llama.cpp's layout): the schemas
# below list their required ones first, so the order is the schema's.
OBJECTS = [{}]
for keys in ["a", "b", "c", "ab", "ac", "bc", "abc", "abcd", "ad", "d", "de", "cd", "bcd", "abcde"]:
    for v in [1, "s", True, {"x": 1}, {"y": "t"}, {"x": 2, "y": "u"}]:
        OBJECTS.append({k: v for k in keys})
OBJECTS += [{"a": 1, "b": "s"}, {"a": 1, "b": "s", "c": True}, {"b": "s", "c": True},
            {"a": {"x": 1, "y": "t"}, "b": "s"}, {"a": {"y": "t"}}, {"a": {"x": 1}}]

ABC = {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}}
CASES.update({
    "min_properties_one": ({"type": "object", "properties": ABC, "additionalProperties": False,
                            "minProperties": 1}, OBJECTS),
    "min_max_properties": ({"type": "object", "properties": ABC, "additionalProperties": False,
                            "minProperties": 2, "maxProperties": 2}, OBJECTS),
    "max_properties_with_required": ({"type": "object", "properties": ABC, "required": ["a"],
                                      "additionalProperties": False, "maxProperties": 2}, OBJECTS),
    "max_properties_map": ({"type": "object", "patternProperties": {"^[a-d]$": {"type": "integer"}},
                            "additionalProperties": False, "minProperties": 1, "maxProperties": 3},
                           OBJECTS),
    "min_properties_additional": ({"type": "object", "properties": {"a": {"type": "integer"}},
                                   "additionalProperties": {"type": "integer"},
                                   "minProperties": 3}, OBJECTS),
    "min_properties_any_object": ({"type": "object", "minProperties": 2, "maxProperties": 3},
                                  OBJECTS),
    "allof_nested_and_required_only": ({"allOf": [
        {"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {"type": "string"}}}]},
        {"type": "object", "required": ["a"]},
        {"properties": {"a": {"description": "annotated again"}, "b": {}}},
        {"additionalProperties": False, "properties": {"a": {}, "b": {}}}]}, OBJECTS),
    "allof_property_in_two_members": ({"allOf": [
        {"properties": {"a": {"type": "object", "properties": {"x": {"type": "integer"}}}},
         "additionalProperties": False},
        {"properties": {"a": {"properties": {"y": {"type": "string"}}, "required": ["x"]}},
         "required": ["a"]}]}, OBJECTS),
    "allof_closed_member_drops_optional": ({"allOf": [
        {"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]},
        {"properties": {"a": {}, "c": {"type": "boolean"}}, "additionalProperties": False}]}, OBJECTS),
    "allof_min_properties": ({"allOf": [{"properties": ABC, "additionalProperties": False},
                                        {"minProperties": 2}]}, OBJECTS),
})

LONG = ["a" * n for n in [0, 1, 999, 1000, 1001, 1999, 2000, 2001, 2499, 2500, 2501, 3001]]
MANY = [[1] * n for n in [0, 1, 999, 1000, 1001, 1002, 2000, 2001, 2002]] + [[1] * 1000 + ["x"]]
CASES.update({
    "max_length_past_1000": ({"type": "string", "minLength": 1000, "maxLength": 2500}, LONG),
    "min_length_past_1000": ({"type": "string", "minLength": 2001}, LONG),
    "max_items_past_1000": ({"type": "array", "items": {"type": "integer"}, "minItems": 1,
                             "maxItems": 2001}, MANY),
    "tuple_min_items_past_1000": ({"type": "array", "prefixItems": [{"type": "integer"}],
                                   "items": {"type": "integer"}, "minItems": 1001}, MANY),
})

INTEGERS = [0, 1, -1, 7, -7, 14, 16, -16, 21, 28, -2032, -2033, -2016, 2016, 2031, 2032, 2048, 100,
            -14, -21, 3, 5, 10, 35]
CASES.update({
    "multiple_of_with_bounds": ({"type": "integer", "minimum": -2032, "maximum": 2031,
                                 "multipleOf": 16}, INTEGERS),
    "multiple_of_exclusive_bounds": ({"type": "integer", "exclusiveMinimum": -14,
                                      "exclusiveMaximum": 28, "multipleOf": 7}, INTEGERS),
})

SCALARS = ["a", "b", "c", "abc", "abcdef", "xyz", 1, 2, 3, 2.5, -4, True, None, [], {}]
CASES.update({
    "allof_enum_and_const": ({"$defs": {"kind": {"type": "string", "enum": ["a", "b", 1]}},
                              "allOf": [{"$ref": "#/$defs/kind"}, {"const": "b"}]}, SCALARS),
    "allof_types_and_bounds": ({"allOf": [{"type": ["integer", "string"]},
                                          {"type": "number", "minimum": 2}]}, SCALARS),
    "allof_string_keywords": ({"type": "string", "allOf": [{"minLength": 2}, {"maxLength": 3},
                                                           {"description": "a note"}]}, SCALARS),
    "allof_items_merged": ({"allOf": [{"type": "array", "items": {"type": "integer"}},
                                      {"items": {"minimum": 2}}, {"items": {"maximum": 5}}]},
                           [[], [2], [5], [1], [6], [2, 3, 4], [2, 9], [2.5], ["a"], 3]),
    "allof_enums_intersected": ({"allOf": [{"enum": ["a", "b", 1, 2]}, {"enum": [2, "b", "c"]},
                                           {"type": "integer"}]}, SCALARS),
})

TREES = [{"v": 1}, {"v": 1, "kids": []}, {"v": 1, "kids": [{"v": 2}]}, {"v": 1, "kids": [{"w": 2}]},
         {"v": 1, "kids": [{"v": 2, "kids": [{"v": "x"}]}]}, {"v": 1, "next": {"v": 2}},
         {"v": 1, "next": {"next": {"v": "y"}}}, {"kids": []}, [1, 2], [0], [3, -1], []]
CASES.update({
    "dynamic_ref": ({"$schema": "https://json-schema.org/draft/2020-12/schema",
                     "$dynamicAnchor": "node", "type": "object",
                     "properties": {"v": {"type": "integer"},
                                    "kids": {"type": "array", "items": {"$dynamicRef": "#node"}}},
                     "required": ["v"], "additionalProperties": False}, TREES),
    "recursive_ref": ({"$schema": "https://json-schema.org/draft/2019-09/schema",
                       "$recursiveAnchor": True, "type": "object",
                       "properties": {"v": {"type": "integer"}, "next": {"$recursiveRef": "#"}},
                       "additionalProperties": False},
                      TREES),
    "ref_to_anchor": ({"$defs": {"x": {"$anchor": "pos", "type": "integer", "minimum": 1}},
                       "type": "array", "items": {"$ref": "#pos"}}, TREES),
})


@pytest.mark.parametrize("name", sorted(CASES))
def test_accepts_exactly_what_jsonschema_validates(name, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema, values = CASES[name]
    # Python's re spells ECMA's named group (?<name>...) as (?P<name>...).
    oracle = json.loads(json.dumps(schema).replace("(?<", "(?P<"))
    validator = jsonschema.validators.validator_for(oracle)(oracle)
    got = harness_accepts_all(schema, values, tmp_path, raw=True)
    wrong = [(t, ok) for t, ok in got.items() if ok != validator.is_valid(json.loads(t))]
    assert not wrong, f"(text, Spindle accepts) where jsonschema disagrees: {wrong[:8]}"


NUMBER = re.compile(r"-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,16})?")
NUMBER_TEXTS = ["0", "-0", "1", "-1", "0.1", "0.3", "-0.3", "0.30", "0.35", "1.25", "12.5", "12.50",
                "12.5000000000000001", "0.0000000000000001", "7", "10", "15", "25.0", "25.00", "25.5",
                "-35", "35.0000", "0.01", "0.011", "3.14", "1e1", "2.0E1", "100.1", "99.99"]


@pytest.mark.parametrize("k", ["0.1", "0.01", "5", "1"])
def test_number_multiple_of_exact(k, tmp_path):
    """multipleOf on a number: the exponent-free number texts whose
    decimal value is a multiple of k."""
    require(QWEN3)
    _, hf = llg_tokenizer(QWEN3)
    f = tmp_path / "n.json"
    f.write_text(json.dumps({"type": "number", "multipleOf": json.loads(k)}))
    h = Harness(QWEN3, "json_schema", f)
    try:
        wrong = [(t, want) for t in NUMBER_TEXTS
                 for want in [bool(NUMBER.fullmatch(t)) and Decimal(t) % Decimal(k) == 0]
                 if accepts(h, hf, t) != want]
    finally:
        h.close()
    assert not wrong, f"(text, a multiple) decided wrongly: {wrong[:8]}"

"""Keywords and combinations compiled exactly where llguidance compiles
them: for each schema, the grammar accepts a candidate JSON text iff
Python's `jsonschema` (the reference validator) validates it. Candidates
are written compactly, so each decides by its value alone.

- `pattern` with anchors on each top-level alternative (`^in$|^out$`,
  `^lin|vms`), named groups, and with `minLength` / `maxLength` where
  the pattern's lengths already meet them or one repeated part takes the
  cut."""
import json

import pytest

from test_schema_bounds import harness_accepts_all

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

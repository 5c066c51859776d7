"""String formats compiled as llguidance compiles them (its own regexes,
parser/src/json/formats.rs): hostname, ipv4, ipv6, uri, duration.

- masks on random walks equal llguidance's for the same schema (its
  `%json` embedding of the schema, followed by our whitespace rule, since
  Spindle's value may end with the space rule and llguidance's top-level
  value may not);
- on texts near each format's edges (octets past 255, leading zeros,
  too many groups, labels past 63 characters, ...), Spindle accepts a
  string iff llguidance's compilation of the schema does;
- complete random walks through Spindle's masks validate with Python's
  jsonschema, its format checker on (ipaddress, fqdn, rfc3986-validator,
  isoduration check these formats);
- formats JSON Schema defines and neither compiles (uri-reference, ...)
  are refused by name."""
import json
import random
import subprocess

import pytest

from grammar_common import HARNESS, QWEN3, Harness, llg_tokenizer, require
from test_masks import compare_walks
from test_schemas import complete_walk

FORMATS = ["hostname", "ipv4", "ipv6", "uri", "duration"]

TEXTS = {
    "hostname": ["example.com", "a", "a-b.c", "-a.com", "a-.com", "a..b", "a.", "xn--p1ai",
                 "a" * 63 + ".com", "a" * 64 + ".com", "under_score.com", "1.2.3.4", "a.b-",
                 "UPPER.Case", ""],
    "ipv4": ["1.2.3.4", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3",
             "1.2.3.4.5", "199.249.250.251", "1.2.3.04", "a.b.c.d", ""],
    "ipv6": ["::", "::1", "1::", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "1::2::3",
             "fe80::1:2", "12345::", "1:2:3:4:5:6:7::", "::1:2:3:4:5:6:7", "::ffff:1.2.3.4",
             "ABCD:ef01::", ":1", "1:", ""],
    "uri": ["http://example.com", "https://a.b/c?d=e#f", "mailto:a@b.c", "urn:isbn:0451450523",
            "a:", "1a:b", "http://[::1]:80/", "http://[v1.x]/", "http://1.2.3.4/",
            "http://a b", "http://%zz", "http://a/%20", "ftp://u:p@h:21/p", "no-scheme",
            "//host/path", "http://a/<b>", "x:/a//b", "HTTP://EXAMPLE.COM", ""],
    "duration": ["P1Y", "P1M", "P1D", "P1W", "PT1H", "PT1M", "PT1S", "P1Y2M3DT4H5M6S",
                 "P", "PT", "P1", "P1Y1W", "P1.5Y", "PT1H1S", "P1DT", "p1y", "P10000D", ""],
}


def schema_text(fmt):
    return json.dumps({"type": "string", "format": fmt})


def llg_lark(fmt):
    """llguidance's compilation of the schema, then Spindle's space rule."""
    llg = pytest.importorskip("llguidance")
    return llg.LLMatcher.grammar_from_lark(
        '%llguidance { "no_forcing": true }\n'
        "start: value SPACE?\n"
        f"value: %json {schema_text(fmt)}\n"
        'SPACE: / |\\n{1,2}[ \\t]{0,20}/\n')


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_masks_equal_llguidance(fmt, tmp_path):
    f = tmp_path / "s.json"
    f.write_text(schema_text(fmt))
    assert compare_walks("json_schema", f, llg_lark(fmt)) >= 8


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_texts_agree_with_llguidance(fmt, tmp_path):
    llg = pytest.importorskip("llguidance")
    require(QWEN3)
    tok, hf = llg_tokenizer(QWEN3)
    f = tmp_path / "s.json"
    f.write_text(schema_text(fmt))
    grammar = llg.LLMatcher.grammar_from_json_schema(schema_text(fmt))
    h = Harness(QWEN3, "json_schema", f)
    wrong = []
    try:
        for text in TEXTS[fmt]:
            ids = hf.encode(json.dumps(text))
            h.reset()
            ours = all(h.accept(t) for t in ids) and h.mask()[0]
            m = llg.LLMatcher(tok, grammar, log_level=0)
            theirs = all(m.consume_token(t) for t in ids) and m.is_accepting()
            if ours != theirs:
                wrong.append((text, ours, theirs))
    finally:
        h.close()
    assert not wrong, f"(text, Spindle accepts, llguidance accepts): {wrong}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_walks_validate(fmt, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    if fmt not in checker.checkers:
        pytest.skip(f"jsonschema checks '{fmt}' only with its optional package installed")
    require(QWEN3)
    _, hf = llg_tokenizer(QWEN3)
    f = tmp_path / "s.json"
    f.write_text(schema_text(fmt))
    h = Harness(QWEN3, "json_schema", f)
    done = 0
    try:
        for seed in range(12):
            text = complete_walk(h, hf, random.Random(seed), max_steps=60)
            if text is None:
                continue
            jsonschema.validate(json.loads(text), json.loads(schema_text(fmt)),
                                format_checker=checker)
            done += 1
    finally:
        h.close()
    assert done >= 4, f"{done} walks completed"


@pytest.mark.parametrize("fmt", ["uri-reference", "iri", "idn-hostname", "json-pointer", "regex"])
def test_formats_without_a_rule_are_refused(fmt, tmp_path):
    require(HARNESS)
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "string", "format": fmt}}}))
    p = subprocess.run([str(HARNESS), str(QWEN3), "json_schema", str(f)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stdout.strip().startswith(f"error: json schema at '/properties/a': format '{fmt}'"), p.stdout

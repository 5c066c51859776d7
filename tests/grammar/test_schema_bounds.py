"""Number bounds compiled exactly: for `minimum` / `maximum` /
`exclusiveMinimum` / `exclusiveMaximum` on a number, the grammar accepts a
number text iff it is in the unbounded number rule's format without an
exponent (llama.cpp's integral-part and decimal-part; llguidance writes
bounded numbers without an exponent too) and its exact decimal value
(Python's Decimal, the oracle) lies in the bounds. Candidates are the
bounds themselves, texts a digit away at every decimal place on either
side, trailing zeros, -0, exponent forms and random decimals; llguidance's
own compilation of the same schema agrees on every candidate in its
format (it does not write -0, and it refuses some in-bounds texts with
trailing zeros: 7.0 for [7, 7] though it writes 1.50)."""
import json
import random
import re
from decimal import Decimal

import pytest

from grammar_common import QWEN3, Harness, llg_tokenizer, require

NUMBER = re.compile(r"-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,16})?")

# (minimum-style keyword: bound text, maximum-style keyword: bound text)
CASES = [
    {"minimum": "0", "exclusiveMaximum": "1e6"},          # a price
    {"minimum": "-273.15", "maximum": "1000"},            # a temperature
    {"exclusiveMinimum": "0", "maximum": "1"},            # a probability
    {"minimum": "-90", "maximum": "90"},                  # a latitude
    {"exclusiveMinimum": "-0.5", "exclusiveMaximum": "2.25"},
    {"minimum": "1.5e-3"},
    {"maximum": "-12.0625"},
    {"exclusiveMaximum": "0"},
    {"minimum": "123.456", "maximum": "123.457"},
    {"minimum": "7", "maximum": "7"},
    {"minimum": "-1e300", "maximum": "1e20"},
]


def schema_of(case):
    text = ", ".join(f'"{k}": {v}' for k, v in case.items())
    return '{"type": "number", ' + text + "}"


def in_bounds(case, text):
    v = Decimal(text)
    for k, b in case.items():
        b = Decimal(b)
        if ((k == "minimum" and v < b) or (k == "maximum" and v > b)
                or (k == "exclusiveMinimum" and v <= b) or (k == "exclusiveMaximum" and v >= b)):
            return False
    return True


def fmt(d):
    s = format(d, "f")
    return s if s != "-0" else "0"


def candidates(case, rng):
    out = {"0", "-0", "-0.0", "0.000", "1", "-1", "1e3", "-2.5E1", "1.0e-2", "5e5"}
    for b in case.values():
        b = Decimal(b)
        out |= {fmt(b), fmt(b) + ("0" if "." in fmt(b) else ".0"), fmt(b) + ".00"[("." in fmt(b)):]}
        for k in range(0, 17):
            step = Decimal(1).scaleb(-k)
            out |= {fmt(b + step), fmt(b - step)}
    for _ in range(300):
        ip = str(rng.choice([0, rng.randrange(10), rng.randrange(2000), rng.randrange(10**7)]))
        t = ("-" if rng.random() < 0.4 else "") + ip
        if rng.random() < 0.6:
            t += "." + "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 6)))
        out.add(t)
    return sorted(out)


def accepts(h, hf, text):
    h.reset()
    for t in hf.encode(text):
        if not h.accept(t):
            return False
    return h.mask()[0]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_number_bounds_exact(case, tmp_path):
    require(QWEN3)
    _, hf = llg_tokenizer(QWEN3)
    f = tmp_path / "s.json"
    f.write_text(schema_of(case))
    h = Harness(QWEN3, "json_schema", f)
    wrong = []
    try:
        for text in candidates(case, random.Random(0)):
            want = bool(NUMBER.fullmatch(text)) and in_bounds(case, text)
            if accepts(h, hf, text) != want:
                wrong.append((text, want))
    finally:
        h.close()
    assert not wrong, f"{len(wrong)} texts decided wrongly (text, in bounds): {wrong[:8]}"


def llg_accepts(llg, tok, hf, schema, text):
    m = llg.LLMatcher(tok, llg.LLMatcher.grammar_from_json_schema(
        schema, defaults={"whitespace_flexible": False}), log_level=0)
    return all(m.consume_token(t) for t in hf.encode(text)) and m.is_accepting()


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_number_bounds_agree_with_llguidance(case, tmp_path):
    if "1e300" in case.get("minimum", ""):
        pytest.skip("llguidance rejects -0.5 for minimum -1e300 (a bound past 16 digits)")
    llg = pytest.importorskip("llguidance")
    require(QWEN3)
    tok, hf = llg_tokenizer(QWEN3)
    schema = schema_of(case)
    f = tmp_path / "s.json"
    f.write_text(schema)
    h = Harness(QWEN3, "json_schema", f)
    wrong = []
    try:
        for text in candidates(case, random.Random(1)):
            if Decimal(text) == 0 and text.startswith("-"):
                continue  # llguidance never writes -0; the grammar does, as unbounded
            if not NUMBER.fullmatch(text) or ("." in text and text.endswith("0")):
                continue  # llguidance is inconsistent on trailing zeros: 1.50 but not 7.0 in [7, 7]
            ours, theirs = accepts(h, hf, text), llg_accepts(llg, tok, hf, schema, text)
            if ours != theirs:
                wrong.append((text, ours, theirs))
    finally:
        h.close()
    assert not wrong, f"(text, ours, llguidance's): {wrong[:8]}"


@pytest.mark.parametrize("schema", [
    '{"type": "number", "minimum": 1e20}',
    '{"type": "number", "minimum": 2, "exclusiveMaximum": 2}',
])
def test_number_bounds_beyond_the_format_are_refused(schema, tmp_path):
    """The number rule writes at most 16 integer digits: a minimum of 1e20
    leaves nothing, refused with a one-line error rather than compiled."""
    import subprocess
    from grammar_common import HARNESS
    require(HARNESS)
    f = tmp_path / "s.json"
    f.write_text(schema)
    p = subprocess.run([str(HARNESS), str(QWEN3), "json_schema", str(f)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "minimum/maximum" in p.stdout, p.stdout


# The email-string built-in's language (json_schema_rules.c), written
# independently as a Python regex: the oracle for length bounds.
EMAIL = re.compile(r"[a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9-]{1,63}(\.[a-zA-Z0-9-]{1,63}){1,4}")
TIME = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{3})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])")


def string_cases(rng):
    out = set()
    for _ in range(150):
        local = "".join(rng.choice("ab.c_%+-9") for _ in range(rng.choice([1, 2, 5, 20, 40, 63, 64, 65])))
        labels = ["".join(rng.choice("xy-7") for _ in range(rng.choice([1, 2, 3, 10, 30, 63, 64])))
                  for _ in range(rng.choice([1, 2, 3, 5, 6]))]
        out.add(local + "@" + ".".join(labels))
    for n in [*range(5, 14), *range(62, 70)]:  # each length around the bounds
        out |= {"a" * (n - 4) + "@b.c", "a@" + "b" * (n - 4) + ".c", "a@b." + "c" * (n - 4),
                "a" * (n - 6) + "@b.c.d"}
    out |= {"a@b.c", "ab@c.de", "abc@d.ef", "a.b@c.d.e", "a@b.c.d.e.f", "a@b.c.d.e.f.g", "@b.c", "a@.c"}
    for ms in ("", ".123"):
        for zone in ("Z", "+01:30", "-23:59", "+24:00"):
            out |= {"12:34:56" + ms + zone, "23:59:59" + ms + zone, "24:00:00" + ms + zone}
    return sorted(out)


def harness_accepts_all(schema, values, tmp_path, raw=False):
    """{JSON text: accepted} for each value (raw: JSON values, else
    strings), written compactly."""
    require(QWEN3)
    _, hf = llg_tokenizer(QWEN3)
    f = tmp_path / "s.json"
    f.write_text(json.dumps(schema))
    h = Harness(QWEN3, "json_schema", f)
    try:
        texts = [json.dumps(v, separators=(",", ":")) for v in values]
        got = {t: accepts(h, hf, t) for t in texts}
        return got if raw else {json.loads(t): ok for t, ok in got.items()}
    finally:
        h.close()


@pytest.mark.parametrize("fmt,lengths", [
    ("email", {"maxLength": 64}), ("email", {"minLength": 8, "maxLength": 12}),
    ("email", {"maxLength": 67, "minLength": 66}),
    ("time", {"maxLength": 13}), ("time", {"minLength": 10, "maxLength": 14}),
])
def test_format_with_lengths_exact(fmt, lengths, tmp_path):
    """A format with minLength / maxLength accepts exactly the format's
    strings whose length is within the bounds."""
    rx = EMAIL if fmt == "email" else TIME
    texts = string_cases(random.Random(2))
    got = harness_accepts_all({"type": "string", "format": fmt, **lengths}, texts, tmp_path)
    lo, hi = lengths.get("minLength", 0), lengths.get("maxLength", 10**9)
    wrong = [(t, ok) for t, ok in got.items() if ok != bool(rx.fullmatch(t) and lo <= len(t) <= hi)]
    assert not wrong, f"(text, accepted): {wrong[:6]}"
    assert any(got.values())


def test_date_format_is_a_calendar_date(tmp_path):
    """format: date accepts exactly what Python's date.fromisoformat (the
    check jsonschema's format checker runs) accepts: each month's days,
    February 29 in leap years only."""
    import datetime
    texts = [f"{y}-{m:02d}-{d:02d}" for y in ("2023", "2024", "1900", "2000", "0000", "0004", "0100")
             for m in (1, 2, 4, 12, 13) for d in (0, 1, 28, 29, 30, 31, 32)]
    got = harness_accepts_all({"type": "string", "format": "date", "minLength": 10}, texts, tmp_path)

    def valid(t):
        try:
            datetime.date.fromisoformat(t)
            return True
        except ValueError:
            return False
    wrong = [(t, ok) for t, ok in got.items() if ok != valid(t)]
    assert not wrong, f"(text, accepted): {wrong[:6]}"


@pytest.mark.parametrize("schema", [
    {"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": {"type": "boolean"},
     "minItems": 2, "maxItems": 4},
    {"prefixItems": [{"type": "string"}, {"type": "integer"}, {"type": "null"}],
     "items": False, "minItems": 1},
    {"prefixItems": [{"type": "number"}], "items": {"type": "string"}, "minItems": 3},
    {"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": {"type": "integer"},
     "minItems": 0, "maxItems": 1},
])
def test_prefix_items_with_items_and_counts_exact(schema, tmp_path):
    """prefixItems with items and minItems / maxItems: an array is
    accepted iff jsonschema validates it (with minItems given, the tuple's
    members are as optional as JSON Schema makes them)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = {"type": "array", **schema}
    rng = random.Random(3)
    pool = ["a", 7, True, None, 2.5, False, "b", -3]
    sample = {"string": "a", "integer": 7, "boolean": True, "null": None, "number": 2.5}

    def fitting(k):  # a value of the type the k-th member's schema names
        sub = schema["prefixItems"][k] if k < len(schema["prefixItems"]) else schema["items"]
        return sample[sub["type"]] if sub else "x"
    arrays = {json.dumps([rng.choice(pool) for _ in range(n)], separators=(",", ":"))
              for n in range(0, 7) for _ in range(40)}
    arrays |= {json.dumps([fitting(k) for k in range(n)]) for n in range(0, 8)}
    got = harness_accepts_all(schema, [json.loads(a) for a in sorted(arrays)], tmp_path, raw=True)
    wrong = [(t, ok) for t, ok in got.items()
             if ok != jsonschema.Draft202012Validator(schema).is_valid(json.loads(t))]
    assert not wrong, f"(array, accepted): {wrong[:6]}"
    assert any(got.values())


INTEGER = re.compile(r"-?(0|[1-9][0-9]{0,15})")


@pytest.mark.parametrize("k", [3, 7, 12, 100])
def test_integer_multiple_of_exact(k, tmp_path):
    """multipleOf k on an integer accepts exactly the integer rule's texts
    (up to 16 digits) whose value Python finds divisible by k."""
    rng = random.Random(k)
    texts = {"0", "-0", str(k), str(-k), str(k + 1), "00", str(k) + "0"}
    for digits in range(1, 18):
        for _ in range(6):
            v = rng.randrange(10 ** (digits - 1), 10 ** digits)
            texts |= {str(v), str(v - v % k), "-" + str(v - v % k)}
    require(QWEN3)
    _, hf = llg_tokenizer(QWEN3)
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"type": "integer", "multipleOf": k}))
    h = Harness(QWEN3, "json_schema", f)
    try:
        got = {t: accepts(h, hf, t) for t in sorted(texts)}
    finally:
        h.close()
    wrong = [(t, ok) for t, ok in got.items()
             if ok != bool(INTEGER.fullmatch(t) and int(t) % k == 0)]
    assert not wrong, f"(text, accepted): {wrong[:6]}"

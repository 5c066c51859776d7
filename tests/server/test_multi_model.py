"""Several models in one `spindle serve` (-m NAME=PATH, --model-dir): two
tiny Qwen3s (make_server_model.py's and make_multi_model.py's, whose greedy
answers differ) through the OpenAI Python SDK. Each model's answers equal
its mlx-lm greedy references, under concurrent requests to both; a memory
budget that fits one unloads the least recently used and reloads it with
the same answers; --pin keeps one loaded; an unknown model is OpenAI's
(and Anthropic's) 404; /v1/models lists both with their states; /metrics
labels each model's series."""
import concurrent.futures
import json
import re
import subprocess

import pytest

from server_common import SPINDLE_BIN, Server, load_reference, post_json, request

import make_multi_model  # noqa: E402
from parity_common import ensure_models  # noqa: E402

CHATS = ["hello", "system", "turns"]


@pytest.fixture(scope="module")
def models(server_model):
    other = ensure_models(make_multi_model.DEFAULT_OUT, make_multi_model)
    b = other / make_multi_model.SPECS[0]["name"]
    return {"a": (server_model, load_reference(server_model)),
            "b": (b, load_reference(b))}


def serve(models, *args):
    return Server(f"a={models['a'][0]}", "-m", f"b={models['b'][0]}", *args)


@pytest.fixture
def openai_client():
    openai = pytest.importorskip("openai")
    clients = []

    def make(server):
        c = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                          timeout=120, max_retries=0)
        clients.append(c)
        return c
    yield make
    for c in clients:
        c.close()


def ask(client, name, ref, ids=None):
    r = client.chat.completions.create(model=name, messages=ref["messages"],
                                       max_tokens=len(ref["tokens"]), temperature=0)
    assert r.model == name
    if ids is not None:
        ids.append(r.id)
    return r.choices[0].message.content


def states(server):
    status, _, body = request(server.port, "GET", "/v1/models")
    assert status == 200, body
    return {m["id"]: m["status"]["value"] for m in json.loads(body)["data"]}


def memory(server):
    body = json.loads(request(server.port, "GET", "/v1/models")[2])
    return {m["id"]: m["memory_bytes"] for m in body["data"]}


def test_models_listed_then_loaded_on_first_use(models, openai_client):
    s = serve(models)
    try:
        client = openai_client(s)
        assert states(s) == {"a": "unloaded", "b": "unloaded"}
        listed = client.models.list().data
        assert [m.id for m in listed] == ["a", "b"]
        ref = models["b"][1]["chats"]["hello"]
        assert ask(client, "b", ref) == ref["text"]
        assert states(s) == {"a": "unloaded", "b": "loaded"}
        one = client.models.retrieve("b")
        assert one.id == "b" and one.status["value"] == "loaded"
        assert one.meta["context_length"] == 4096
    finally:
        s.stop_cleanly()


def test_concurrent_requests_get_each_models_answers(models, openai_client):
    s = serve(models, "--parallel", 4)
    try:
        client = openai_client(s)
        jobs = [(name, chat) for chat in CHATS for name in ("a", "b")] * 2
        ids = []
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            got = list(pool.map(lambda j: ask(client, j[0], models[j[0]][1]["chats"][j[1]],
                                              ids), jobs))
        assert len(set(ids)) == len(jobs)   # response ids unique across the models
        for (name, chat), text in zip(jobs, got):
            assert text == models[name][1]["chats"][chat]["text"], (name, chat)
        # the two models' answers differ: each request went to its own
        assert models["a"][1]["chats"]["hello"]["text"] != models["b"][1]["chats"]["hello"]["text"]
        assert states(s) == {"a": "loaded", "b": "loaded"}
        metrics = request(s.port, "GET", "/metrics")[2].decode()
        for name in ("a", "b"):
            assert f'spindle_generations_total{{model_name="{name}"}} 6' in metrics
        # the Gateway API Inference Extension's gauges: once, summed
        assert len(re.findall(r"^vllm:num_requests_waiting", metrics, re.M)) == 1
        assert re.search(r"^vllm:num_requests_running 0$", metrics, re.M)
        assert metrics.count("# TYPE spindle_generations_total ") == 1
        blocks = sum(int(v) for v in re.findall(
            r'^spindle_kv_blocks\{model_name="[ab]",state="\w+"\} (\d+)$', metrics, re.M))
        assert re.search(rf'^vllm:cache_config_info\{{block_size="32",num_gpu_blocks="{blocks}"\}} 1$',
                         metrics, re.M), metrics
        # series without the label: the front's own requests alone
        unlabelled = {line.split("{")[0].split(" ")[0] for line in metrics.splitlines()
                      if line and not line.startswith("#") and "model_name=" not in line}
        assert unlabelled <= {"spindle_requests_total", "vllm:num_requests_waiting",
                              "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                              "vllm:gpu_cache_usage_perc", "vllm:cache_config_info"}, unlabelled
    finally:
        s.stop_cleanly()


def loaded_sizes(models, openai_client):
    """Each model's bytes under the budget (files + KV pool), as reported
    once loaded."""
    s = serve(models)
    try:
        client = openai_client(s)
        for name in ("a", "b"):
            ask(client, name, models[name][1]["chats"]["hello"])
        return memory(s)
    finally:
        s.stop_cleanly()


def test_memory_budget_unloads_lru_and_reloads(models, openai_client):
    size = loaded_sizes(models, openai_client)
    budget = max(size.values()) + min(size.values()) // 4   # fits one, not both
    s = serve(models, "--models-memory", budget)
    try:
        client = openai_client(s)
        a, b = (models[n][1]["chats"]["system"] for n in ("a", "b"))
        # a stream first: its job may still be ending when b's load unloads a
        chunks = client.chat.completions.create(model="a", messages=a["messages"],
                                                max_tokens=len(a["tokens"]),
                                                temperature=0, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) \
            == a["text"]
        assert states(s) == {"a": "loaded", "b": "unloaded"}
        assert ask(client, "b", b) == b["text"]
        assert states(s) == {"a": "unloaded", "b": "loaded"}
        assert ask(client, "a", a) == a["text"]   # reloaded, same answer
        assert states(s) == {"a": "loaded", "b": "unloaded"}
        assert s.stderr().count("unloading model a") == 1
        assert s.stderr().count("unloading model b") == 1
    finally:
        s.stop_cleanly()


def test_pin_keeps_a_model_loaded(models, openai_client):
    openai = pytest.importorskip("openai")
    size = loaded_sizes(models, openai_client)
    budget = max(size.values()) + min(size.values()) // 4
    s = serve(models, "--models-memory", budget, "--pin", "a")
    try:
        client = openai_client(s)
        assert states(s) == {"a": "loaded", "b": "unloaded"}   # loaded at start
        with pytest.raises(openai.APIStatusError) as e:
            ask(client, "b", models["b"][1]["chats"]["hello"])
        assert e.value.status_code == 503
        assert e.value.body["code"] == "models_memory_full"
        assert states(s) == {"a": "loaded", "b": "unloaded"}
        a = models["a"][1]["chats"]["hello"]
        assert ask(client, "a", a) == a["text"]
    finally:
        s.stop_cleanly()


def test_unknown_model_is_a_404(models, openai_client):
    openai = pytest.importorskip("openai")
    s = serve(models)
    try:
        client = openai_client(s)
        with pytest.raises(openai.NotFoundError) as e:
            client.chat.completions.create(model="c", max_tokens=2,
                                           messages=[{"role": "user", "content": "hi"}])
        assert e.value.body["code"] == "model_not_found"
        assert e.value.body["param"] == "model" and "'c'" in e.value.body["message"]
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("c")
        # Anthropic's shape on its route
        status, _, body = post_json(s.port, "/v1/messages", {
            "model": "c", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        assert status == 404
        assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
        # several models: a request must name one
        status, _, body = post_json(s.port, "/v1/chat/completions", {
            "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        assert status == 400 and body["error"]["param"] == "model"
        assert states(s) == {"a": "unloaded", "b": "unloaded"}
    finally:
        s.stop_cleanly()


def test_model_dir_and_bad_options(models, tmp_path):
    (tmp_path / "first").symlink_to(models["a"][0])
    (tmp_path / ".hidden").mkdir()
    s = Server(str(models["b"][0]), "--model-dir", tmp_path)
    try:
        # a plain -m beside them is named by its file name
        assert states(s) == {"qwen3-chat-b": "unloaded", "first": "unloaded"}
    finally:
        s.stop_cleanly()
    for args, why in [(["--pin", "nope"], "--pin nope: no model of that name"),
                      (["--alias", "x"], "--alias applies to one model")]:
        r = subprocess.run([str(SPINDLE_BIN), "serve", "-m", f"a={models['a'][0]}",
                            "--port", "0", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and why in r.stderr, r.stderr

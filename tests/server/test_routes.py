"""llama-server's /tokenize, /detokenize and /apply-template against the
reference tokenizer (transformers, as mlx-lm loads it), /metrics through
prometheus_client's own parser, /v1/models and the chat page at /."""
import json

import pytest

from server_common import ALIAS, post_json, request

TEXTS = ["Hello world! How are you today?", "Ünïcödé — naïve café, 日本語 🎉",
         "<|im_start|>user\nhi<|im_end|>\n"]


@pytest.fixture(scope="module")
def hf_tokenizer(server_model):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(server_model))


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_and_detokenize_equal_transformers(server, hf_tokenizer, text):
    status, _, body = post_json(server.port, "/tokenize", {"content": text})
    assert status == 200, body
    want = hf_tokenizer.encode(text, add_special_tokens=False)
    assert body == {"tokens": want}
    status, _, pieces = post_json(server.port, "/tokenize",
                                  {"content": text, "with_pieces": True})
    assert [p["id"] for p in pieces["tokens"]] == want
    assert all(isinstance(p["piece"], str) for p in pieces["tokens"])
    status, _, back = post_json(server.port, "/detokenize", {"tokens": want})
    assert status == 200 and back == {"content": hf_tokenizer.decode(want)}


def test_apply_template_equals_transformers(server, hf_tokenizer, reference):
    for ref in reference["chats"].values():
        status, _, body = post_json(server.port, "/apply-template",
                                    {"messages": ref["messages"]})
        assert status == 200, body
        want = hf_tokenizer.apply_chat_template(ref["messages"], tokenize=False,
                                                add_generation_prompt=True)
        assert body == {"prompt": want}
    # Text content parts are joined, as mlx_lm.server does.
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hello "},
                                          {"type": "text", "text": "there"}]}]
    _, _, body = post_json(server.port, "/apply-template", {"messages": parts})
    assert body["prompt"] == hf_tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hello there"}], tokenize=False,
        add_generation_prompt=True)
    # chat_template_kwargs reach the template (Qwen3's enable_thinking).
    msgs = [{"role": "user", "content": "hi"}]
    _, _, body = post_json(server.port, "/apply-template",
                           {"messages": msgs, "chat_template_kwargs": {"enable_thinking": False}})
    assert body["prompt"] == hf_tokenizer.apply_chat_template(
        msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert "<think>" in body["prompt"]


def test_metrics_parse_with_prometheus_client(server, client, reference):
    parser = pytest.importorskip("prometheus_client.parser")
    ref = reference["chats"]["hello"]
    r = client.chat.completions.create(model=ALIAS, messages=ref["messages"],
                                       max_tokens=3, temperature=0)
    assert r.usage.completion_tokens == 3
    request(server.port, "GET", "/v1/nothing")
    status, hdrs, data = request(server.port, "GET", "/metrics")
    assert status == 200 and hdrs["content-type"].startswith("text/plain")
    families = {f.name: f for f in parser.text_string_to_metric_families(data.decode())}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families.values() for s in f.samples}
    assert samples[("spindle_requests_total",
                    (("route", "/v1/chat/completions"), ("status", "200")))] >= 1
    assert samples[("spindle_requests_total", (("route", "other"), ("status", "404")))] >= 1
    assert samples[("spindle_prompt_tokens_total", ())] >= len(ref["prompt_tokens"])
    assert samples[("spindle_generation_tokens_total", ())] >= 3
    assert families["spindle_time_to_first_token_seconds"].type == "histogram"
    assert samples[("spindle_time_to_first_token_seconds_count", ())] >= 1
    for name in ("spindle_requests_waiting", "spindle_requests_running",
                 "vllm:num_requests_waiting", "vllm:num_requests_running"):
        assert families[name].type == "gauge" and samples[(name, ())] == 0
    # The inference extension's KV signals: utilization in [0, 1] (nothing
    # runs now, so no block is held) and the cache config info metric.
    for name in ("spindle_kv_cache_usage_ratio", "vllm:kv_cache_usage_perc",
                 "vllm:gpu_cache_usage_perc"):
        assert families[name].type == "gauge" and samples[(name, ())] == 0
    (labels, value), = [(dict(k[1]), v) for k, v in samples.items()
                        if k[0] == "vllm:cache_config_info"]
    assert value == 1 and int(labels["block_size"]) > 0
    assert int(labels["num_gpu_blocks"]) > 0
    # The pool's blocks by state add up to the pool; nothing is held now.
    states = {dict(k[1])["state"]: v for k, v in samples.items() if k[0] == "spindle_kv_blocks"}
    assert set(states) == {"used", "cached", "free"} and states["used"] == 0
    assert sum(states.values()) == int(labels["num_gpu_blocks"])
    assert samples[("spindle_prompt_cached_tokens_total", ())] >= 0
    # No on-disk prompt cache here: none of its series.
    assert not any(k[0].startswith("spindle_prompt_cache_disk") for k in samples)


def test_models_and_page(server, reference):
    status, _, body = request(server.port, "GET", "/v1/models")
    models = json.loads(body)
    assert status == 200 and models["object"] == "list"
    assert models["data"][0]["id"] == ALIAS
    assert models["data"][0]["meta"]["context_length"] == reference["context"]
    status, hdrs, page = request(server.port, "GET", "/")
    assert status == 200 and hdrs["content-type"].startswith("text/html")
    for needle in (b"/v1/chat/completions", b"stream: true", b'id="stop"',
                   b'id="temperature"', b'id="model"'):
        assert needle in page

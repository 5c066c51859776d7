"""`spindle serve --prompt-cache-dir`: a long prompt's full KV blocks are
kept on disk; after a restart the same prompt is answered from them
(usage.prompt_tokens_details.cached_tokens) with the text of a cold run,
and a corrupted block file is refused with a warning in the log. /metrics
counts the blocks loaded, written and refused, the files, and the cached
prompt tokens (read through prometheus_client's parser)."""

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server_common import Server, model_dir, post_json, request


@pytest.fixture(scope="module")
def model():
    return model_dir()


PROMPT = [(i * 37 + 11) % 400 + 5 for i in range(100)]   # 3 full blocks
BODY = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0,
        "ignore_eos": True}


def complete(srv):
    status, _, out = post_json(srv.port, "/v1/completions", BODY)
    assert status == 200, out
    return out["choices"][0]["text"], \
        out["usage"]["prompt_tokens_details"]["cached_tokens"]


def metrics(srv):
    """{(sample name, ((label, value), ...)): value} of GET /metrics."""
    status, _, data = request(srv.port, "GET", "/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(data.decode()) for s in f.samples}


def disk_blocks(m, event):
    return m[("spindle_prompt_cache_disk_blocks_total", (("event", event),))]


def test_prompt_cache_across_restart(model, tmp_path):
    cache = tmp_path / "cache"
    srv = Server(model)
    try:
        cold, cached = complete(srv)
        assert cached == 0
    finally:
        srv.stop_cleanly()
    srv = Server(model, "--prompt-cache-dir", cache)
    try:
        first, cached = complete(srv)
        assert first == cold and cached == 0
        for _ in range(100):       # the writer thread is asynchronous
            m = metrics(srv)
            if disk_blocks(m, "written") >= 3:
                break
            time.sleep(0.05)
        assert disk_blocks(m, "written") == 3 and disk_blocks(m, "loaded") == 0, m
        assert m[("spindle_prompt_cache_disk_budget_bytes", ())] > 0
    finally:
        srv.stop_cleanly()   # the writer finishes its queue before exit
    files = sorted(cache.glob("*.kvb"))
    assert len(files) == 3
    srv = Server(model, "--prompt-cache-dir", cache)
    try:
        assert "prompt cache" in srv.stderr() and "3 files" in srv.stderr()
        warm, cached = complete(srv)
        assert cached == 96 and warm == cold
        m = metrics(srv)
        assert disk_blocks(m, "loaded") == 3 and disk_blocks(m, "refused") == 0, m
        assert m[("spindle_prompt_cache_disk_files", ())] == 3
        assert m[("spindle_prompt_cache_disk_bytes", ())] == sum(
            f.stat().st_size for f in files)
        assert m[("spindle_prompt_cached_tokens_total", ())] == 96
    finally:
        srv.stop_cleanly()
    for f in files:            # a flipped byte in every block
        data = bytearray(f.read_bytes())
        data[-1] ^= 1
        f.write_bytes(bytes(data))
    srv = Server(model, "--prompt-cache-dir", cache)
    try:
        text, cached = complete(srv)
        assert cached == 0 and text == cold
        warnings = [ln for ln in srv.log if "prompt cache" in ln
                    and "checksum mismatch" in ln]
        assert len(warnings) == 1, srv.stderr()   # the first block stops it
        m = metrics(srv)
        assert disk_blocks(m, "refused") == 1 and disk_blocks(m, "loaded") == 0, m
        assert m[("spindle_prompt_cached_tokens_total", ())] == 0
    finally:
        srv.stop_cleanly()

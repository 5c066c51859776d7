"""`spindle serve --prompt-cache-dir`: a long prompt's full KV blocks are
kept on disk; after a restart the same prompt is answered from them
(usage.prompt_tokens_details.cached_tokens) with the text of a cold run,
and a corrupted block file is refused with a warning in the log."""

import pytest

from server_common import Server, model_dir, post_json


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
    finally:
        srv.stop_cleanly()   # the writer finishes its queue before exit
    files = sorted(cache.glob("*.kvb"))
    assert len(files) == 3
    srv = Server(model, "--prompt-cache-dir", cache)
    try:
        assert "prompt cache" in srv.stderr() and "3 blocks" in srv.stderr()
        warm, cached = complete(srv)
        assert cached == 96 and warm == cold
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
    finally:
        srv.stop_cleanly()

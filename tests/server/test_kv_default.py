"""The default KV pool of `spindle serve`: --parallel sequences at --ctx
tokens each (the model's context when --ctx is not given), in 32-token
blocks of f32 K and V for every layer, at most 90% of available memory;
--kv-budget overrides it. The expected sizes come from the GGUF's own
metadata, not from Spindle."""
import math
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_common import SPINDLE_BIN, Server  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from real_files import smollm2_gguf  # noqa: E402

BLOCK_TOKENS = 32


def smollm2():
    if not SPINDLE_BIN.is_file():
        pytest.skip(f"spindle binary not found at {SPINDLE_BIN}")
    return smollm2_gguf()


def model_config(path):
    gguf = pytest.importorskip("gguf")
    fields = gguf.GGUFReader(str(path)).fields
    get = lambda key: fields[f"llama.{key}"].contents()  # noqa: E731
    return {"layers": get("block_count"), "kv_heads": get("attention.head_count_kv"),
            "head_dim": get("embedding_length") // get("attention.head_count"),
            "context": get("context_length")}


def block_bytes(cfg):
    return 2 * cfg["layers"] * cfg["kv_heads"] * cfg["head_dim"] * 4 * BLOCK_TOKENS


def pool_line(server):
    m = re.search(r"KV pool ([\d.]+) MiB: (\d+) blocks of 32 tokens \((\d+) bytes each\)",
                  server.stderr())
    assert m, server.stderr()
    return float(m.group(1)), int(m.group(2)), int(m.group(3))


def available_bytes():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    pytest.skip("no MemAvailable in /proc/meminfo")


def rss_bytes(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("args, parallel, ctx", [([], 4, None),
                                                 (["--parallel", "2", "--ctx", "2048"], 2, 2048)])
def test_default_pool_is_parallel_contexts(args, parallel, ctx):
    openai = pytest.importorskip("openai")
    model = smollm2()
    cfg = model_config(model)
    ctx = ctx or cfg["context"]
    want_blocks = parallel * math.ceil(ctx / BLOCK_TOKENS)
    if want_blocks * block_bytes(cfg) > available_bytes() * 0.9:
        pytest.skip("this machine's memory caps the default pool")
    old_default = min(available_bytes() * 0.9,
                      16 * math.ceil(cfg["context"] / BLOCK_TOKENS) * block_bytes(cfg))
    server = Server(model, "--alias", "m", *args)
    try:
        mib, blocks, each = pool_line(server)
        assert each == block_bytes(cfg)
        assert blocks == want_blocks
        assert mib == pytest.approx(want_blocks * block_bytes(cfg) / 2**20, abs=0.05)
        assert f"--parallel {parallel} x --ctx {ctx} tokens" in server.stderr()
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
        for i in range(4):
            client.completions.create(model="m", prompt=f"Request {i}: " + "word " * 300,
                                      max_tokens=32, temperature=0)
        rss = rss_bytes(server.proc.pid)
        # Weights, buffers and the blocks those prompts touched: a fraction
        # of the pool, and far from the old default (16 contexts or 90% of
        # the available memory).
        assert rss < want_blocks * block_bytes(cfg) + (512 << 20)
        assert rss < old_default / 4
    finally:
        server.stop_cleanly()


def test_kv_budget_overrides_the_default():
    server = Server(smollm2(), "--kv-budget", "48M")
    try:
        mib, blocks, each = pool_line(server)
        assert mib == 48.0 and blocks == (48 << 20) // each
        assert "--parallel" not in server.stderr()
    finally:
        server.stop_cleanly()

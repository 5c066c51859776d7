"""`spindle serve --kv-events`: a subscriber that decodes the ZeroMQ stream
with vLLM's KV-event structs (re-declared below from vllm/distributed/
kv_events.py: msgspec, array form, tagged union) and applies it as llm-d's
indexer would rebuilds exactly the blocks the server holds:

- the stream starts at sequence 0 with AllBlocksCleared, every message's
  sequence number follows the last, and nothing is dropped;
- every stored block's hash is the documented chain (docs/deploy.md) of its
  token ids from the root /metrics gives, and its parent links to the
  previous block of the same prompt (null for a first block);
- under a small --kv-budget, before each request the blocks the subscriber
  holds predict exactly how many prompt tokens the server answers from its
  cache (usage.prompt_tokens_details.cached_tokens), and after it their
  count is /metrics' spindle_kv_prefix_blocks, evictions included;
- after a restart with --prompt-cache-dir, blocks read back from disk are
  announced as stored, under the same hashes.
"""

import json
import time
from typing import Any

import pytest

from server_common import Server, model_dir, post_json, request

zmq = pytest.importorskip("zmq")
msgspec = pytest.importorskip("msgspec")
msgpack = pytest.importorskip("msgpack")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


# ---- vLLM's event schema (vllm/distributed/kv_events.py), re-declared ----

class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False,
                   tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int | bytes]
    medium: str | None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


# ---- the block hash chain, as docs/deploy.md states it ----

MASK = (1 << 64) - 1
BLOCK = 32


def mix64(x):
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def block_hash(parent, tokens):
    h = mix64((parent + 0x9E3779B97F4A7C15) & MASK)
    for i, t in enumerate(tokens):
        h = mix64(h ^ ((t & 0xFFFFFFFF) + (i << 32)))
    return h


def chain(root, prompt):
    """The hashes of the prompt's full blocks."""
    hashes, parent = [], root
    for i in range(len(prompt) // BLOCK):
        parent = block_hash(parent, prompt[i * BLOCK:(i + 1) * BLOCK])
        hashes.append(parent)
    return hashes


# ---- the subscriber: an index of one replica's blocks ----

class Indexer:
    def __init__(self):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.decoder = msgspec.msgpack.Decoder(KVEventBatch)
        self.blocks = {}        # hash -> (parent or None, tokens)
        self.next_seq = 0
        self.received = 0       # events: one per block hash, one per clear
        self.removed = 0
        self.topics = set()

    def close(self):
        self.sock.close(linger=0)
        self.ctx.term()

    def apply(self, parts):
        assert len(parts) == 3, parts
        topic, seq, payload = parts
        self.topics.add(topic)
        assert len(seq) == 8 and int.from_bytes(seq, "big") == self.next_seq, \
            (int.from_bytes(seq, "big"), self.next_seq)
        self.next_seq += 1
        # vLLM's array form, which llm-d's Go decoder reads positionally:
        # [ts, [[tag, field, ...], ...], data_parallel_rank].
        raw = msgpack.unpackb(payload)
        assert isinstance(raw, list) and len(raw) == 3, raw
        assert all(isinstance(e, list) and isinstance(e[0], str) for e in raw[1]), raw
        batch = self.decoder.decode(payload)
        assert batch.data_parallel_rank == 0 and batch.ts > 1.6e9, batch
        for ev in batch.events:
            if isinstance(ev, AllBlocksCleared):
                self.blocks.clear()
                self.received += 1
            elif isinstance(ev, BlockStored):
                assert ev.block_size == BLOCK and ev.medium == "CPU", ev
                assert ev.lora_id is None and ev.lora_name is None, ev
                assert len(ev.token_ids) == BLOCK * len(ev.block_hashes), ev
                parent = ev.parent_block_hash
                for i, h in enumerate(ev.block_hashes):
                    assert h not in self.blocks, f"block {h:#x} stored twice"
                    if parent is not None:
                        assert parent in self.blocks, f"parent {parent:#x} unknown"
                    self.blocks[h] = (parent, ev.token_ids[i * BLOCK:(i + 1) * BLOCK])
                    parent = h
                self.received += len(ev.block_hashes)
            else:
                for h in ev.block_hashes:
                    assert h in self.blocks, f"removed block {h:#x} was never stored"
                    del self.blocks[h]
                self.removed += len(ev.block_hashes)
                self.received += len(ev.block_hashes)

    def sync(self, srv, timeout=30):
        """Apply messages until every event the server queued has arrived."""
        deadline = time.monotonic() + timeout
        while True:
            queued = metrics(srv)[("spindle_kv_events_total", (("outcome", "queued"),))]
            while self.received < queued:
                if not self.sock.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                    raise AssertionError(f"{self.received} of {queued} events arrived")
                self.apply(self.sock.recv_multipart())
            assert self.received == queued, (self.received, queued)
            return

    def cached_prefix(self, root, prompt):
        """Tokens of `prompt` the indexed blocks cover from its start, as a
        request would map them (never its last token)."""
        n = 0
        for h in chain(root, prompt[:len(prompt) - 1]):
            if h not in self.blocks:
                break
            n += BLOCK
        return n


def metrics(srv):
    status, _, data = request(srv.port, "GET", "/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(data.decode()) for s in f.samples}


def hash_root(srv):
    _, _, data = request(srv.port, "GET", "/metrics")
    for f in text_string_to_metric_families(data.decode()):
        for s in f.samples:
            if s.name == "spindle_kv_events_info":
                return int(s.labels["hash_root"], 16)
    raise AssertionError("no spindle_kv_events_info in /metrics")


def complete(srv, prompt):
    status, _, out = post_json(srv.port, "/v1/completions",
                               {"prompt": prompt, "max_tokens": 2, "temperature": 0})
    assert status == 200, out
    return out["usage"]["prompt_tokens_details"]["cached_tokens"]


def block_bytes(model):
    cfg = json.loads((model / "config.json").read_text())
    return (cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * BLOCK
            * cfg["head_dim"] * 4)


def prompt_of(seed, n=100, shared=None):
    p = [(seed * 131 + i * 37) % 5000 + 10 for i in range(n)]
    return shared + p[len(shared):] if shared else p


@pytest.fixture
def indexer():
    ix = Indexer()
    try:
        yield ix
    finally:
        ix.close()


def check_hashes(ix, root):
    """Every indexed block is the chain of its tokens under its parent."""
    for h, (parent, tokens) in ix.blocks.items():
        assert block_hash(root if parent is None else parent, tokens) == h


def test_events_rebuild_the_cache_with_evictions(indexer):
    model = model_dir()
    # Eight blocks: five prompts of three full blocks each cannot all stay.
    srv = Server(model, "--parallel", 1, "--kv-budget", 8 * block_bytes(model),
                 "--kv-events", indexer.endpoint, "--kv-events-topic", "kv@pod-a@tiny")
    try:
        indexer.sync(srv)
        assert indexer.next_seq == 1 and indexer.received == 1   # AllBlocksCleared
        root = hash_root(srv)
        base = prompt_of(1)
        prompts = [base, prompt_of(2), prompt_of(3, shared=base[:64]), prompt_of(4),
                   prompt_of(5), base, prompt_of(3, shared=base[:64]), prompt_of(2)]
        for prompt in prompts:
            expect = indexer.cached_prefix(root, prompt)
            assert complete(srv, prompt) == expect
            indexer.sync(srv)
            m = metrics(srv)
            assert len(indexer.blocks) == m[("spindle_kv_prefix_blocks", ())]
            assert m[("spindle_kv_blocks", (("state", "cached"),))] == len(indexer.blocks)
            assert set(chain(root, prompt)) <= set(indexer.blocks)
            check_hashes(indexer, root)
        assert indexer.removed > 0
        m = metrics(srv)
        assert m[("spindle_kv_events_total", (("outcome", "dropped"),))] == 0
        assert m[("spindle_kv_events_total", (("outcome", "sent"),))] == indexer.received
        assert indexer.topics == {b"kv@pod-a@tiny"}
    finally:
        srv.stop_cleanly()


def test_disk_tier_loads_are_announced(tmp_path, indexer):
    model = model_dir()
    cache = tmp_path / "cache"
    prompt = prompt_of(9)
    srv = Server(model, "--prompt-cache-dir", cache)
    try:
        assert complete(srv, prompt) == 0
    finally:
        srv.stop_cleanly()          # the writer empties its queue first
    assert len(list(cache.glob("*.kvb"))) == 3
    srv = Server(model, "--prompt-cache-dir", cache, "--kv-events", indexer.endpoint)
    try:
        indexer.sync(srv)
        assert indexer.blocks == {}
        assert complete(srv, prompt) == 96
        indexer.sync(srv)
        root = hash_root(srv)
        assert set(indexer.blocks) == set(chain(root, prompt))
        check_hashes(indexer, root)
        m = metrics(srv)
        assert m[("spindle_prompt_cache_disk_blocks_total", (("event", "loaded"),))] == 3
        assert m[("spindle_kv_prefix_blocks", ())] == 3
    finally:
        srv.stop_cleanly()


def test_bad_endpoint_is_refused_in_one_line():
    import subprocess
    from server_common import SPINDLE_BIN
    model = model_dir()
    out = subprocess.run([str(SPINDLE_BIN), "serve", "-m", str(model), "--port", "0",
                          "--kv-events", "tcp://nowhere"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    errors = [l for l in out.stderr.splitlines() if "--kv-events" in l]
    assert len(errors) == 1 and "tcp://nowhere" in errors[0], out.stderr


def test_draft_model_blocks_are_not_announced(indexer):
    """--spec draft: the draft model has its own pool (here over the same
    files, so the same hashes); only the served model's blocks are events."""
    model = model_dir()
    srv = Server(model, "--spec", "draft", "--draft-model", model,
                 "--kv-events", indexer.endpoint)
    try:
        indexer.sync(srv)
        prompt = prompt_of(11)
        assert complete(srv, prompt) == 0
        indexer.sync(srv)
        root = hash_root(srv)
        assert set(indexer.blocks) == set(chain(root, prompt))
        assert metrics(srv)[("spindle_kv_prefix_blocks", ())] == 3
    finally:
        srv.stop_cleanly()

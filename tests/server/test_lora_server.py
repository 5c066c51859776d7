"""LoRA adapters in `spindle serve`: adapters mounted with --lora NAME=PATH
and hot-loaded with vLLM's POST /v1/load_lora_adapter, listed by
GET /lora-adapters, picked by `model`, mlx_lm.server's `adapters` or
llama-server's `lora: [{id, scale}]`; answers equal mlx-lm's greedy
generation with that adapter (random adapters written by mlx-lm's tuner for
the server's tiny Qwen3, make_lora_models.write_mlx_adapter), base requests
equal mlx-lm without one; unload while requests run (bounded) leaves the
server answering and exiting cleanly.
"""

import json
import threading

import pytest

import server_common as sc
from server_common import Server, post_json, request

PROMPT = [11, 217, 344, 151, 80, 437, 492]
N = 12
ADAPTERS = {"one": dict(rank=8, scale=10.0, keys=None, num_layers=-1, rslora=False),
            "two": dict(rank=4, scale=4.0, num_layers=1, rslora=False,
                        keys=["self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"])}


@pytest.fixture(scope="module")
def lora_setup(tmp_path_factory):
    """(model dir, {name: adapter dir}, {name or None: reference text})."""
    model = sc.model_dir()
    import make_lora_models as lg
    import make_models as mm
    mm._imports()
    mm.mx.set_default_device(mm.mx.cpu)
    from mlx_lm.tuner.utils import load_adapters
    from mlx_lm.utils import load
    out = tmp_path_factory.mktemp("adapters")
    paths, texts = {}, {}
    for name, a in ADAPTERS.items():
        m, _ = mm.mlu.load_model(model)
        paths[name] = out / name
        lg.write_mlx_adapter(m, len(m.layers), name, a, paths[name])
    for name in [None, *ADAPTERS]:
        m, tok = load(str(model))
        if name:
            load_adapters(m, str(paths[name]))
        eos = set(tok.eos_token_ids)
        toks = []
        for t, _ in mm.generate_step(mm.mx.array(PROMPT), m, max_tokens=N):
            if t in eos:
                break
            toks.append(t)
        texts[name] = tok.decode(toks, skip_special_tokens=True)
    assert len(set(texts.values())) == 3, texts   # the adapters do something
    return model, paths, texts


def complete(port, model=None, **extra):
    body = dict(prompt=PROMPT, max_tokens=N, temperature=0, **extra)
    if model:
        body["model"] = model
    return post_json(port, "/v1/completions", body)


def test_adapters_select_and_match_mlx(lora_setup):
    model, paths, texts = lora_setup
    s = Server(model, "--alias", sc.ALIAS, "--lora", f"one={paths['one']}")
    try:
        st, _, body = complete(s.port, sc.ALIAS)
        assert st == 200 and body["choices"][0]["text"] == texts[None], body
        st, _, body = complete(s.port, "one")
        assert st == 200 and body["choices"][0]["text"] == texts["one"], body
        st, _, body = complete(s.port, adapters=str(paths["one"]))
        assert st == 200 and body["choices"][0]["text"] == texts["one"], body
        st, _, listed = request(s.port, "GET", "/lora-adapters")
        listed = json.loads(listed)
        assert st == 200 and [(e["id"], e["name"]) for e in listed] == [(0, "one")]
        st, _, body = complete(s.port, lora=[{"id": 0, "scale": 1.0}])
        assert st == 200 and body["choices"][0]["text"] == texts["one"], body
        st, _, body = complete(s.port, lora=[{"id": 0, "scale": 0}])
        assert st == 200 and body["choices"][0]["text"] == texts[None], body

        st, _, data = request(s.port, "POST", "/v1/load_lora_adapter",
                              {"lora_name": "two", "lora_path": str(paths["two"])})
        assert st == 200 and b"Success" in data, data
        st, _, body = complete(s.port, "two")
        assert st == 200 and body["choices"][0]["text"] == texts["two"], body
        st, _, models = request(s.port, "GET", "/v1/models")
        assert [(m["id"], m.get("parent")) for m in json.loads(models)["data"]] == \
            [(sc.ALIAS, None), ("one", sc.ALIAS), ("two", sc.ALIAS)]
        st, _, metrics = request(s.port, "GET", "/metrics")
        assert b'vllm:lora_requests_info{max_lora="4",running_lora_adapters="",' \
               b'waiting_lora_adapters=""}' in metrics, metrics[-600:]
        # errors: unknown model / adapter / id, duplicate, bad path, unload twice
        sc.assert_api_error(*complete(s.port, "nope")[::2], 404, "model", "model_not_found")
        sc.assert_api_error(*complete(s.port, adapters="/x")[::2], 404, "adapters")
        sc.assert_api_error(*complete(s.port, lora=[{"id": 7, "scale": 1}])[::2], 400, "lora")
        sc.assert_api_error(*complete(s.port, lora=[{"id": 0}, {"id": 1}])[::2], 400, "lora")
        st, _, b = post_json(s.port, "/v1/load_lora_adapter",
                             {"lora_name": "two", "lora_path": str(paths["two"])})
        sc.assert_api_error(st, b, 400, "lora_name")
        st, _, b = post_json(s.port, "/v1/load_lora_adapter",
                             {"lora_name": "x", "lora_path": "/no/such/dir"})
        assert "no such adapter directory" in sc.assert_api_error(st, b, 400)["message"]
        st, _, data = request(s.port, "POST", "/v1/unload_lora_adapter", {"lora_name": "two"})
        assert st == 200, data
        sc.assert_api_error(*complete(s.port, "two")[::2], 404, "model")
        st, _, b = post_json(s.port, "/v1/unload_lora_adapter", {"lora_name": "two"})
        sc.assert_api_error(st, b, 404, "lora_name")
    finally:
        s.stop_cleanly()


def test_unload_under_traffic(lora_setup):
    """Requests on adapter `two` and the base run while `two` is unloaded
    and loaded again, 6 rounds: each answer is the right text or a 404
    for `two` while it is unmounted; nothing else."""
    model, paths, texts = lora_setup
    s = Server(model, "--alias", sc.ALIAS, "--parallel", "4",
               "--lora", f"two={paths['two']}")
    bad = []
    stop = threading.Event()

    def client(name):
        for _ in range(40):
            if stop.is_set():
                return
            st, _, body = complete(s.port, name)
            want = texts["two" if name == "two" else None]
            if st == 200 and body["choices"][0]["text"] == want:
                continue
            if not (name == "two" and st == 404):
                bad.append((name, st, body))

    try:
        threads = [threading.Thread(target=client, args=(n,))
                   for n in ("two", "two", sc.ALIAS)]
        for t in threads:
            t.start()
        for _ in range(6):
            st, _, d = request(s.port, "POST", "/v1/unload_lora_adapter", {"lora_name": "two"})
            assert st == 200, d
            st, _, d = request(s.port, "POST", "/v1/load_lora_adapter",
                               {"lora_name": "two", "lora_path": str(paths["two"])})
            assert st == 200, d
        st, _, metrics = request(s.port, "GET", "/metrics")
        assert b"running_lora_adapters=" in metrics
        stop.set()
        for t in threads:
            t.join(sc.REQUEST_TIMEOUT)
        assert not bad, bad[:3]
    finally:
        stop.set()
        s.stop_cleanly()


def test_gguf_adapters(lora_setup, tmp_path):
    """The same adapters as llama.cpp LoRA GGUF files (PEFT layout first,
    then tests/gguf_writer.write_lora_gguf, as convert_lora_to_gguf.py
    writes them): mounted with --lora NAME=FILE.gguf and hot-loaded, they
    answer mlx-lm's text for the adapter."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import gguf_writer
    import make_lora_models as lg
    import make_models as mm
    model, paths, texts = lora_setup
    files = {}
    for name, a in ADAPTERS.items():
        weights = mm.mx.load(str(paths[name] / "adapters.safetensors"))
        lg.write_peft_adapter(weights, a, tmp_path / f"{name}-peft")
        files[name] = gguf_writer.write_lora_gguf(
            str(model), str(tmp_path / f"{name}-peft"), str(tmp_path / f"{name}.gguf"))
    s = Server(model, "--alias", sc.ALIAS, "--lora", f"g1={files['one']}")
    try:
        st, _, body = complete(s.port, "g1")
        assert st == 200 and body["choices"][0]["text"] == texts["one"], body
        st, _, data = request(s.port, "POST", "/v1/load_lora_adapter",
                              {"lora_name": "g2", "lora_path": files["two"]})
        assert st == 200 and b"Success" in data, data
        st, _, body = complete(s.port, "g2")
        assert st == 200 and body["choices"][0]["text"] == texts["two"], body
        st, _, body = complete(s.port, sc.ALIAS)
        assert st == 200 and body["choices"][0]["text"] == texts[None], body
        st, _, b = post_json(s.port, "/v1/load_lora_adapter",
                             {"lora_name": "g3", "lora_path": str(model / "config.json")})
        assert "not a GGUF file" in sc.assert_api_error(st, b, 400)["message"]
    finally:
        s.stop_cleanly()


def test_slot_state_kept_per_adapter(lora_setup, tmp_path):
    """A slot's state is reused only by a request under the adapter it was
    computed with: a base request extending the prompt of an adapter
    request on the same slot prefills it all and answers as the base model
    alone; a request under the same adapter reuses it (saving and restoring
    it: test_slot_file_under_adapter)."""
    model, paths, texts = lora_setup
    s = Server(model, "--alias", sc.ALIAS, "--lora", f"one={paths['one']}",
               "--slot-save-path", tmp_path)
    longer = PROMPT + [5, 6]

    def on_slot(model_name, prompt, max_tokens=N):
        body = dict(prompt=prompt, max_tokens=max_tokens, temperature=0, id_slot=0,
                    model=model_name)
        st, _, out = post_json(s.port, "/v1/completions", body)
        assert st == 200, out
        return out["choices"][0]["text"], out["usage"]["prompt_tokens_details"]["cached_tokens"]

    try:
        alone, _ = on_slot(sc.ALIAS, longer)
        assert on_slot(None, [1, 2, 3], 1)[1] == 0     # the slot now holds the base's state
        # max_tokens 1: the slot keeps the prompt's 7 positions
        assert on_slot("one", PROMPT, 1)[1] == 0
        text, cached = on_slot(sc.ALIAS, longer)
        assert cached == 0 and text == alone, (cached, text, alone)
        assert on_slot("one", PROMPT, 1)[1] == 0
        text_one, cached = on_slot("one", longer)
        assert cached == len(PROMPT), cached
    finally:
        s.stop_cleanly()


def test_slot_file_under_adapter(lora_setup, tmp_path):
    """A slot state computed under an adapter is saved with the adapter's
    content identity and the request's scale (its spindle_adapter_key).
    Restored in another server process that mounts the same adapter files
    (under another name: the content is what counts), a request under that
    adapter and scale reuses the saved tokens and answers as the adapter
    without any cache; a base-model request or another scale does not
    reuse them; a server without that adapter, or with different weights
    under the same name, refuses the restore (409 naming the identity and
    what is loaded) and its slot stays as it was."""
    model, paths, texts = lora_setup
    longer = PROMPT + [5, 6]

    def on_slot(s, prompt, max_tokens=N, **pick):
        body = dict(prompt=prompt, max_tokens=max_tokens, temperature=0, id_slot=0,
                    **pick)
        st, _, out = post_json(s.port, "/v1/completions", body)
        assert st == 200, out
        return out["choices"][0]["text"], out["usage"]["prompt_tokens_details"]["cached_tokens"]

    def slot(s, action, name="one.slot"):
        return post_json(s.port, f"/slots/0?action={action}", {"filename": name})

    s = Server(model, "--alias", sc.ALIAS, "--lora", f"one={paths['one']}",
               "--slot-save-path", tmp_path)
    try:
        # Uncached references: no slot, and a prompt shorter than a block.
        st, _, out = post_json(s.port, "/v1/completions",
                               dict(prompt=longer, max_tokens=N, temperature=0, model="one"))
        assert st == 200, out
        alone_one = out["choices"][0]["text"]
        st, _, out = post_json(s.port, "/v1/completions",
                               dict(prompt=longer, max_tokens=N, temperature=0,
                                    model=sc.ALIAS))
        alone_base = out["choices"][0]["text"]
        assert alone_one != alone_base
        assert on_slot(s, PROMPT, 1, model="one")[1] == 0   # the slot: 7 positions
        st, _, b = slot(s, "save")
        assert st == 200 and b["n_saved"] == len(PROMPT), b
    finally:
        s.stop_cleanly()

    s = Server(model, "--alias", sc.ALIAS, "--lora", f"renamed={paths['one']}",
               "--slot-save-path", tmp_path)
    try:
        st, _, b = slot(s, "restore")
        assert st == 200 and b["n_restored"] == len(PROMPT), b
        assert b["lora"] == {"name": "renamed", "scale": 1}, b
        text, cached = on_slot(s, longer, model="renamed")
        assert cached == len(PROMPT) and text == alone_one, (cached, text, alone_one)
        # The same adapter by llama-server's id at the same scale reuses it.
        assert slot(s, "restore")[0] == 200
        text, cached = on_slot(s, longer, lora=[{"id": 0, "scale": 1.0}])
        assert cached == len(PROMPT) and text == alone_one, (cached, text)
        # Another scale, or the base model: nothing reused.
        assert slot(s, "restore")[0] == 200
        assert on_slot(s, longer, 1, lora=[{"id": 0, "scale": 0.5}])[1] == 0
        assert slot(s, "restore")[0] == 200
        text, cached = on_slot(s, longer, model=sc.ALIAS)
        assert cached == 0 and text == alone_base, (cached, text, alone_base)
    finally:
        s.stop_cleanly()

    for mounts, loaded in (((), "loaded: none"),
                           (("--lora", f"one={paths['two']}"), "loaded: one (identity ")):
        s = Server(model, "--alias", sc.ALIAS, "--slot-save-path", tmp_path, *mounts)
        try:
            assert on_slot(s, PROMPT, 1, model=sc.ALIAS)[1] == 0
            st, _, b = slot(s, "restore")
            err = sc.assert_api_error(st, b, 409, "filename", "slot_adapter_not_loaded")
            assert "one.slot" in err["message"] and "identity" in err["message"] and \
                loaded in err["message"], err
            # The slot kept the base state it had.
            assert on_slot(s, longer, model=sc.ALIAS) == (alone_base, len(PROMPT))
        finally:
            s.stop_cleanly()

"""LoRA adapters in `spindle serve`: adapters mounted with --lora NAME=PATH
and hot-loaded with vLLM's POST /v1/load_lora_adapter (only from the
--lora-dir folder, and only with one), listed by GET /lora-adapters, picked
by `model`, mlx_lm.server's `adapters` (one, or a list that is stacked) or
llama-server's `lora: [{id, scale}]`; answers equal mlx-lm's greedy
generation with that adapter (random adapters written by mlx-lm's tuner for
the server's tiny Qwen3, make_lora_models.write_mlx_adapter), base requests
equal mlx-lm without one; unload while requests run (bounded) leaves the
server answering and exiting cleanly; vllm:lora_requests_info agrees with
vllm:num_requests_running / _waiting.
"""

import json
import os
import shutil
import threading
import time

import pytest

import server_common as sc
from server_common import Server, post_json, request

PROMPT = [11, 217, 344, 151, 80, 437, 492]
N = 12
ADAPTERS = {"one": dict(rank=8, scale=10.0, keys=None, num_layers=-1, rslora=False),
            "two": dict(rank=4, scale=4.0, num_layers=1, rslora=False,
                        keys=["self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"])}


def mlx_text(model, adapter=None):
    """mlx-lm's greedy text for PROMPT, under the adapter directory given."""
    import make_models as mm
    from mlx_lm.tuner.utils import load_adapters
    from mlx_lm.utils import load
    m, tok = load(str(model))
    if adapter:
        load_adapters(m, str(adapter))
    eos = set(tok.eos_token_ids)
    toks = []
    for t, _ in mm.generate_step(mm.mx.array(PROMPT), m, max_tokens=N):
        if t in eos:
            break
        toks.append(t)
    return tok.decode(toks, skip_special_tokens=True)


@pytest.fixture(scope="module")
def lora_setup(tmp_path_factory):
    """(model dir, {name: adapter dir}, {name or None: reference text});
    the adapters are the folder's only entries (the --lora-dir tests)."""
    model = sc.model_dir()
    import make_lora_models as lg
    import make_models as mm
    mm._imports()
    mm.mx.set_default_device(mm.mx.cpu)
    out = tmp_path_factory.mktemp("adapters")
    paths, texts = {}, {}
    for name, a in ADAPTERS.items():
        m, _ = mm.mlu.load_model(model)
        paths[name] = out / name
        lg.write_mlx_adapter(m, len(m.layers), name, a, paths[name])
    for name in [None, *ADAPTERS]:
        texts[name] = mlx_text(model, name and paths[name])
    assert len(set(texts.values())) == 3, texts   # the adapters do something
    return model, paths, texts


def complete(port, model=None, **extra):
    body = dict(prompt=PROMPT, max_tokens=N, temperature=0, **extra)
    if model:
        body["model"] = model
    return post_json(port, "/v1/completions", body)


def test_adapters_select_and_match_mlx(lora_setup):
    model, paths, texts = lora_setup
    s = Server(model, "--alias", sc.ALIAS, "--lora", f"one={paths['one']}",
               "--lora-dir", paths["one"].parent)
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
                              {"lora_name": "two", "lora_path": "two"})
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
                             {"lora_name": "two", "lora_path": "two"})
        sc.assert_api_error(st, b, 400, "lora_name")
        st, _, b = post_json(s.port, "/v1/load_lora_adapter",
                             {"lora_name": "x", "lora_path": "no-such-dir"})
        sc.assert_api_error(st, b, 404, "lora_path", "not_found")
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
               "--lora", f"two={paths['two']}", "--lora-dir", paths["two"].parent)
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
                               {"lora_name": "two", "lora_path": "two"})
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
    shutil.copy(model / "config.json", tmp_path / "config.json")
    s = Server(model, "--alias", sc.ALIAS, "--lora", f"g1={files['one']}",
               "--lora-dir", tmp_path)
    try:
        st, _, body = complete(s.port, "g1")
        assert st == 200 and body["choices"][0]["text"] == texts["one"], body
        st, _, data = request(s.port, "POST", "/v1/load_lora_adapter",
                              {"lora_name": "g2", "lora_path": "two.gguf"})
        assert st == 200 and b"Success" in data, data
        st, _, body = complete(s.port, "g2")
        assert st == 200 and body["choices"][0]["text"] == texts["two"], body
        st, _, body = complete(s.port, sc.ALIAS)
        assert st == 200 and body["choices"][0]["text"] == texts[None], body
        # A file in the folder that is no adapter: the loader's reason, with
        # the file named by its path in the folder.
        st, _, b = post_json(s.port, "/v1/load_lora_adapter",
                             {"lora_name": "g3", "lora_path": "config.json"})
        err = sc.assert_api_error(st, b, 400)
        assert "not a GGUF file" in err["message"] and str(tmp_path) not in err["message"]
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


def test_runtime_loading_needs_lora_dir_and_stays_inside(lora_setup, tmp_path):
    """Without --lora-dir the load and unload routes are off (404 whatever
    the path). With it, lora_path names an adapter inside the folder: an
    absolute path, '..', a missing entry, a link leading out of the folder
    (the adapter itself, or a file inside its directory) all get the same
    404, byte for byte, so the answers say nothing about files outside; a
    link that stays inside loads."""
    model, paths, texts = lora_setup
    s = Server(model, "--alias", sc.ALIAS)
    try:
        answers = {request(s.port, "POST", "/v1/load_lora_adapter",
                           {"lora_name": "x", "lora_path": p})[::2]
                   for p in (str(paths["two"]), "/no/such/dir", "/etc/passwd")}
        answers.add(request(s.port, "POST", "/v1/unload_lora_adapter", {"lora_name": "x"})[::2])
        assert len(answers) == 1, answers
        st, body = answers.pop()
        assert "--lora-dir" in sc.assert_api_error(st, json.loads(body), 404)["message"]
    finally:
        s.stop_cleanly()

    folder = tmp_path / "folder"
    folder.mkdir()
    shutil.copytree(paths["one"], folder / "good")
    os.symlink(folder / "good", folder / "alias")      # stays inside
    os.symlink(paths["two"], folder / "escape")        # leads out
    (folder / "inner").mkdir()                         # a file inside leads out
    shutil.copy(paths["two"] / "adapter_config.json", folder / "inner")
    os.symlink(paths["two"] / "adapters.safetensors", folder / "inner" / "adapters.safetensors")
    s = Server(model, "--alias", sc.ALIAS, "--lora-dir", folder)
    try:
        refused = set()
        for p in (str(paths["two"]), str(folder / "good"), "../" + paths["two"].parent.name,
                  f"../../{paths['two'].parent.parent.name}/{paths['two'].parent.name}/two",
                  "good/../good", "missing", "escape", "inner", "/etc/passwd", "/no/such"):
            st, _, b = request(s.port, "POST", "/v1/load_lora_adapter",
                               {"lora_name": "x", "lora_path": p})
            refused.add((st, b))
        assert len(refused) == 1, refused
        st, b = refused.pop()
        sc.assert_api_error(st, json.loads(b), 404, "lora_path", "not_found")
        for name in ("good", "alias"):
            st, _, d = request(s.port, "POST", "/v1/load_lora_adapter",
                               {"lora_name": name, "lora_path": name})
            assert st == 200, d
            st, _, body = complete(s.port, name)
            assert st == 200 and body["choices"][0]["text"] == texts["one"], body
        st, _, d = request(s.port, "POST", "/v1/unload_lora_adapter", {"lora_name": "alias"})
        assert st == 200, d
    finally:
        s.stop_cleanly()


def write_summed_adapter(paths, out):
    """One mlx-lm adapter equal to `one` and `two` applied together: the
    ranks side by side (A matrices concatenated, B scaled by each adapter's
    scale), scale 1; the reference for a request that stacks both."""
    import make_models as mm
    mx = mm.mx
    w = {n: mx.load(str(paths[n] / "adapters.safetensors")) for n in ADAPTERS}
    r2, s1, s2 = ADAPTERS["two"]["rank"], ADAPTERS["one"]["scale"], ADAPTERS["two"]["scale"]
    assert set(w["two"]) <= set(w["one"])
    summed = {}
    for key, a1 in w["one"].items():
        if not key.endswith(".lora_a"):
            continue
        b_key = key[:-len("lora_a")] + "lora_b"
        b1 = w["one"][b_key]
        a2 = w["two"].get(key, mx.zeros((a1.shape[0], r2), dtype=a1.dtype))
        b2 = w["two"].get(b_key, mx.zeros((r2, b1.shape[1]), dtype=b1.dtype))
        summed[key] = mx.concatenate([a1, a2], axis=1)
        summed[b_key] = mx.concatenate([s1 * b1, s2 * b2], axis=0)
    out.mkdir()
    mx.save_safetensors(str(out / "adapters.safetensors"), summed)
    config = json.loads((paths["one"] / "adapter_config.json").read_text())
    config["lora_parameters"].update(rank=ADAPTERS["one"]["rank"] + r2, scale=1.0)
    (out / "adapter_config.json").write_text(json.dumps(config))
    return out


def test_adapters_list_stacks(lora_setup, tmp_path):
    """mlx_lm.server's `adapters` as a list: one entry is that adapter, two
    are both at once (mlx-lm's text with the summed adapter), none is the
    base model, and an unknown entry is a 404 naming it."""
    model, paths, texts = lora_setup
    both = mlx_text(model, write_summed_adapter(paths, tmp_path / "summed"))
    assert both not in (texts["one"], texts["two"])
    s = Server(model, "--alias", sc.ALIAS, "--lora", f"one={paths['one']}",
               "--lora", f"two={paths['two']}")
    try:
        for adapters, want in ((["one"], texts["one"]), ([str(paths["two"])], texts["two"]),
                               (["one", "two"], both), ([], texts[None])):
            st, _, body = complete(s.port, adapters=adapters)
            assert st == 200 and body["choices"][0]["text"] == want, (adapters, body)
            # n > 1: every choice under the same adapter(s) (greedy: equal)
            st, _, body = complete(s.port, adapters=adapters, n=2)
            assert st == 200 and [c["text"] for c in body["choices"]] == [want, want], body
        err = sc.assert_api_error(*complete(s.port, adapters=["one", "nope"])[::2], 404,
                                  "adapters")
        assert "nope" in err["message"], err
        sc.assert_api_error(*complete(s.port, adapters=["one", 3])[::2], 400, "adapters")
    finally:
        s.stop_cleanly()


def lora_gauges(port):
    """(running adapters, waiting adapters, requests running, waiting) from
    /metrics through prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families
    st, _, text = request(port, "GET", "/metrics")
    assert st == 200
    samples = {s.name: s for f in text_string_to_metric_families(text.decode())
               for s in f.samples}
    info = samples["vllm:lora_requests_info"].labels
    split = lambda v: sorted(filter(None, v.split(",")))  # noqa: E731
    return (split(info["running_lora_adapters"]), split(info["waiting_lora_adapters"]),
            samples["vllm:num_requests_running"].value,
            samples["vllm:num_requests_waiting"].value)


def gauges_when(port, holds, timeout=10):
    """lora_gauges once holds(them) (the engine's counts are a snapshot
    taken after each step), or the last ones after `timeout`."""
    deadline = time.monotonic() + timeout
    while not holds(got := lora_gauges(port)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return got


def test_lora_requests_info_matches_the_engine(lora_setup):
    """With one sequence at a time, a long streamed request under `one` is
    running and a request under `two` behind it waits: the info series says
    so, as vllm:num_requests_running / _waiting count them."""
    openai = pytest.importorskip("openai")
    model, paths, texts = lora_setup
    eos = sc.load_reference(model)["eos_token_ids"]
    s = Server(model, "--alias", sc.ALIAS, "--parallel", "1", "--lora", f"one={paths['one']}",
               "--lora", f"two={paths['two']}")
    waiting = None
    try:
        with openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", timeout=120,
                           max_retries=0) as client:
            stream = client.completions.create(
                model="one", prompt=PROMPT, max_tokens=4000, stream=True, temperature=0,
                logit_bias={str(t): -100 for t in eos})
            next(iter(stream))   # generating now
            got = gauges_when(s.port, lambda g: g[2] == 1)
            assert got == (["one"], [], 1, 0)
            waiting = threading.Thread(target=complete, args=(s.port, "two"))
            waiting.start()
            got = gauges_when(s.port, lambda g: g[3] == 1)
            assert got == (["one"], ["two"], 1, 1)
            stream.close()       # cancels the long request
            waiting.join(sc.REQUEST_TIMEOUT)
            assert gauges_when(s.port, lambda g: g[2:] == (0, 0)) == ([], [], 0, 0)
    finally:
        if waiting:
            waiting.join(sc.REQUEST_TIMEOUT)
        s.stop_cleanly()

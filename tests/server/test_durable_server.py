"""`spindle serve --checkpoint-dir`: a request in flight survives kill -9.

  * uninterrupted stream vs (stream until killed) + (resume_id after a
    restart): the text joins up exactly, the resumed stream sends only what
    follows the checkpoint, keeps the request's id, and its usage counts the
    original prompt and every completion token; greedy, seeded T=0.8, and
    greedy under a grammar (the matcher's state carried over);
  * a finished request's checkpoint is gone (404 on a second resume);
  * a resume whose prompt's blocks are cached (the prefix index warmed by
    the same prompt after the restart, or the --prompt-cache-dir files the
    killed server wrote), through the OpenAI SDK, whole and streamed:
    greedy and seeded continue the uninterrupted run;
  * with --spec ngram the resumed request drafts (the server's draft
    counter grows during it);
  * resume_id errors: no --checkpoint-dir (400), a malformed id (400), no
    checkpoint (404), a corrupted or another model's checkpoint (409), one
    this server cannot continue (another --kv-type: 400 before any byte,
    streamed too, and the checkpoint stays).
"""

import http.client
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from server_common import (ALIAS, SPINDLE_BIN, Server, assert_api_error, model_dir, post_json,
                           request)

PAUSE_ENV = "SPINDLE_TEST_CHECKPOINT_PAUSE_MS"
BODY = {"prompt": "The quick brown fox", "max_tokens": 24, "stream": True,
        "stream_options": {"include_usage": True}, "ignore_eos": True}


@pytest.fixture(scope="module")
def model():
    return model_dir()


def stream(port, body, kill_after=None, proc=None, finish=None):
    """POST /v1/completions streaming; (id, text, usage). With kill_after,
    SIGKILL `proc` once that many text chunks have arrived. `finish` (a
    list) receives the finish reasons."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, r.read()
    rid, text, usage, chunks = None, "", None, 0
    try:
        while True:
            line = r.readline()
            if not line:
                break
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            rid = ev.get("id", rid)
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                if ch.get("text"):
                    text += ch["text"]
                    chunks += 1
                if ch.get("finish_reason") and finish is not None:
                    finish.append(ch["finish_reason"])
            if kill_after is not None and chunks >= kill_after:
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
                break
    except (OSError, http.client.HTTPException):
        pass
    finally:
        conn.close()
    return rid, text, usage


def whole(body, **extra):
    """body as a non-streaming request."""
    b = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    b.update(extra)
    return b


# Where the matcher stands matters: a resume whose grammar started over (or
# was dropped) would not write what the uninterrupted run writes.
GRAMMAR = 'root ::= ([a-z]{2,4} [0-9]{1,3} ";" " "?)*\n'


def body_for(sampling):
    b = dict(BODY)
    if sampling == "grammar":
        b.update(temperature=0, grammar=GRAMMAR)
    elif sampling == "seeded":
        b.update(temperature=0.8, seed=99)
    else:
        b.update(temperature=0)
    return b


def uninterrupted(model, body):
    """(text, usage) of body streamed by a fresh server."""
    ref = Server(model)
    try:
        _, full, usage = stream(ref.port, body)
    finally:
        ref.stop_cleanly()
    return full, usage


def killed_mid_stream(model, body, ckdir, args):
    """A server started with args streams body and is killed (-9) after 10
    text chunks, while writing its checkpoints slowly: (id, text printed);
    the request's checkpoint is in ckdir."""
    os.environ[PAUSE_ENV] = "300"
    try:
        first = Server(model, *args)
    finally:
        del os.environ[PAUSE_ENV]
    try:
        rid, printed, _ = stream(first.port, body, kill_after=10, proc=first.proc)
    finally:
        first.stop()
    assert first.proc.returncode == -signal.SIGKILL
    assert (ckdir / f"{rid}.ckpt").is_file(), list(ckdir.iterdir())
    return rid, printed


def assert_continues(full, printed, rest):
    """rest (a resume's text) is what follows a checkpoint within printed
    (the killed request's text) in full (the uninterrupted run's)."""
    assert full.startswith(printed) and full.endswith(rest), (full, printed, rest)
    assert len(full) - len(rest) <= len(printed) and rest, (full, printed, rest)


@pytest.mark.parametrize("sampling", ["greedy", "seeded", "grammar"])
def test_kill_then_resume(model, tmp_path, sampling):
    body = body_for(sampling)
    full, full_usage = uninterrupted(model, body)
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    args = ["--checkpoint-dir", ckdir, "--checkpoint-every", "4"]
    rid, printed = killed_mid_stream(model, body, ckdir, args)
    second = Server(model, *args)
    try:
        rid2, rest, usage = stream(second.port, dict(body, resume_id=rid))
        assert rid2 == rid, "the resumed request keeps its id"
        assert_continues(full, printed, rest)
        assert usage == full_usage, "usage counts the original request"
        assert not (ckdir / f"{rid}.ckpt").exists(), "a finished request keeps no checkpoint"
        status, _, err = post_json(second.port, "/v1/completions",
                                   whole(body, resume_id=rid))
        assert_api_error(status, err, 404, "resume_id", "checkpoint_not_found")
    finally:
        second.stop_cleanly()


# Three full KV blocks (32 tokens each) and a few more: what the prefix
# index and the disk prompt cache keep of a prompt.
LONG_PROMPT = [(i * 37 + 11) % 400 + 5 for i in range(100)]
SDK_FIELDS = ("prompt", "max_tokens", "temperature", "seed")


def sdk_completion(port, body, streamed):
    """(id, text) of body's completion through the OpenAI SDK; the fields
    OpenAI's API does not have (resume_id, ignore_eos) go in extra_body."""
    openai = pytest.importorskip("openai")
    kw = {k: v for k, v in body.items() if k in SDK_FIELDS}
    extra = {k: v for k, v in body.items()
             if k not in SDK_FIELDS and k not in ("stream", "stream_options")}
    with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                       timeout=120, max_retries=0) as client:
        if not streamed:
            out = client.completions.create(model=ALIAS, extra_body=extra, **kw)
            return out.id, out.choices[0].text
        rid, text = None, ""
        for chunk in client.completions.create(model=ALIAS, stream=True, extra_body=extra, **kw):
            rid = chunk.id
            text += "".join(c.text or "" for c in chunk.choices)
        return rid, text


@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
@pytest.mark.parametrize("cache", ["prefix-index", "prompt-cache-dir"])
def test_resume_with_cached_prompt(model, tmp_path, sampling, cache):
    """A real server has the prompt's blocks cached when a resume comes:
    in its prefix index (here the same prompt sent again after the
    restart) or in its disk prompt cache (which outlives the kill). The
    resume restores the checkpoint's state whatever is cached, whole and
    streamed (the checkpoint put back in between), through the SDK."""
    body = dict(body_for(sampling), prompt=LONG_PROMPT)
    full, _ = uninterrupted(model, body)
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    args = ["--alias", ALIAS, "--checkpoint-dir", ckdir, "--checkpoint-every", "4"]
    if cache == "prompt-cache-dir":
        args += ["--prompt-cache-dir", tmp_path / "pc"]
    rid, printed = killed_mid_stream(model, body, ckdir, args)
    ckpt = ckdir / f"{rid}.ckpt"
    saved = ckpt.read_bytes()
    srv = Server(model, *args)
    try:
        if cache == "prefix-index":
            warm = whole(body, max_tokens=1)
            post_json(srv.port, "/v1/completions", warm)
            status, _, out = post_json(srv.port, "/v1/completions", warm)
            assert out["usage"]["prompt_tokens_details"]["cached_tokens"] >= 32, out
        else:
            assert list((tmp_path / "pc").iterdir()), "the killed server cached nothing on disk"
        for streamed in (False, True):
            ckpt.write_bytes(saved)
            rid2, rest = sdk_completion(srv.port, whole(body, resume_id=rid), streamed)
            assert rid2 == rid, "the resumed request keeps its id"
            assert_continues(full, printed, rest)
            assert not ckpt.exists(), "a finished request keeps no checkpoint"
    finally:
        srv.stop_cleanly()


def drafted(port):
    metrics = request(port, "GET", "/metrics")[2].decode()
    name = "spindle_spec_draft_tokens_total"
    return float(metrics.split(f"\n{name} ", 1)[1].split("\n", 1)[0])


def test_resume_speculates(model, tmp_path):
    """With --spec ngram a resumed request drafts as any other does (the
    checkpoint does not hold the speculation settings; the server's apply),
    and still continues the uninterrupted (plain greedy) run."""
    body = dict(body_for("greedy"), prompt=LONG_PROMPT, max_tokens=48)
    full, _ = uninterrupted(model, body)
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    args = ["--alias", ALIAS, "--checkpoint-dir", ckdir, "--checkpoint-every", "4",
            "--spec", "ngram"]
    rid, printed = killed_mid_stream(model, body, ckdir, args)
    srv = Server(model, *args)
    try:
        before = drafted(srv.port)
        _, rest = sdk_completion(srv.port, whole(body, resume_id=rid), True)
        assert drafted(srv.port) > before, "the resumed request drafted nothing"
        assert_continues(full, printed, rest)
    finally:
        srv.stop_cleanly()


def test_stop_string_across_checkpoint(model, tmp_path):
    """A stop string that starts before the checkpoint the resume uses and
    ends after it: the resumed request must still see its first part (the
    stop matcher rebuilt from the checkpoint's tokens), stop there and never
    send it."""
    body = body_for("greedy")
    ref = Server(model)
    try:
        status, _, out = post_json(ref.port, "/v1/completions", whole(body, logprobs=1))
        assert status == 200, out
    finally:
        ref.stop_cleanly()
    full, pieces = out["choices"][0]["text"], out["choices"][0]["logprobs"]["tokens"]
    assert "".join(pieces[:9]) == full[:len("".join(pieces[:9]))]
    # From the last character of token 4 (the checkpoint the resume will
    # use) into token 9 (past the checkpoint at 8 that the kill interrupts).
    start = len("".join(pieces[:4])) - 1
    end = len("".join(pieces[:8])) + 1
    stop = full[start:end]
    assert full.find(stop) == start, "the stop string must first occur there"
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    args = ["--checkpoint-dir", ckdir, "--checkpoint-every", "4"]
    os.environ[PAUSE_ENV] = "1000"    # each checkpoint held 1 s before its rename
    try:
        first = Server(model, *args)
    finally:
        del os.environ[PAUSE_ENV]

    def kill_after_first_checkpoint():
        """Checkpoint 4 renamed: the kill comes long before 8's rename."""
        deadline = time.monotonic() + 60
        while not list(ckdir.glob("*.ckpt")) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        first.proc.send_signal(signal.SIGKILL)

    killer = threading.Thread(target=kill_after_first_checkpoint)
    killer.start()
    try:
        rid, printed, _ = stream(first.port, dict(body, stop=stop))
    finally:
        killer.join(70)
        first.stop()
    assert first.proc.returncode == -signal.SIGKILL
    second = Server(model, *args)
    try:
        finish = []
        _, rest, usage = stream(second.port, dict(body, stop=stop, resume_id=rid), finish=finish)
    finally:
        second.stop_cleanly()
    assert printed + rest == full[:start], (printed, rest, full[:start])
    assert finish == ["stop"] and usage["completion_tokens"] < body["max_tokens"]


def test_resume_errors(model, tmp_path):
    body = whole(BODY)
    plain = Server(model)
    try:
        status, _, err = post_json(plain.port, "/v1/completions", dict(body, resume_id="cmpl-1"))
        assert_api_error(status, err, 400, "resume_id")
    finally:
        plain.stop_cleanly()
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    # A checkpoint of this model (spindle run), then a damaged copy, and one
    # of another model under a request's name.
    good = ckdir / "cmpl-good.ckpt"
    subprocess.run([str(SPINDLE_BIN), "run", "-m", str(model), "--prompt-tokens", "5,6,7",
                    "-n", "12", "--checkpoint", str(good), "--checkpoint-every", "4"],
                   check=True, capture_output=True, timeout=120)
    blob = bytearray(good.read_bytes())
    blob[len(blob) // 2] ^= 0x10
    (ckdir / "cmpl-bad.ckpt").write_bytes(bytes(blob))
    (ckdir / "cmpl-short.ckpt").write_bytes(bytes(blob[:100]))
    srv = Server(model, "--checkpoint-dir", ckdir)
    try:
        for rid, want, code in [("../cmpl-good", 400, None), ("a b", 400, None),
                                ("cmpl-none", 404, "checkpoint_not_found"),
                                ("cmpl-bad", 409, "checkpoint_unusable"),
                                ("cmpl-short", 409, "checkpoint_unusable")]:
            status, _, err = post_json(srv.port, "/v1/completions", dict(body, resume_id=rid))
            e = assert_api_error(status, err, want, "resume_id", code)
            assert "\n" not in e["message"]
        status, _, err = post_json(srv.port, "/v1/completions", dict(body, resume_id=7))
        assert_api_error(status, err, 400, "resume_id")
        status, _, out = post_json(srv.port, "/v1/completions", dict(body, resume_id="cmpl-good"))
        assert status == 200, out
        assert out["usage"]["prompt_tokens"] == 3 and out["usage"]["completion_tokens"] == 12
    finally:
        srv.stop_cleanly()


def test_unusable_checkpoint_is_a_client_error(model, tmp_path):
    """A checkpoint this server cannot continue (made under another KV
    type): 400 naming resume_id, whole and streamed (before any byte of the
    stream), and the checkpoint stays for a server that can."""
    openai = pytest.importorskip("openai")
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    ckpt = ckdir / "cmpl-f32.ckpt"
    subprocess.run([str(SPINDLE_BIN), "run", "-m", str(model), "--prompt-tokens",
                    ",".join(map(str, LONG_PROMPT)), "-n", "12", "--checkpoint", str(ckpt),
                    "--checkpoint-every", "4"], check=True, capture_output=True, timeout=120)
    body = whole(BODY, resume_id="cmpl-f32")
    srv = Server(model, "--alias", ALIAS, "--checkpoint-dir", ckdir, "--kv-type", "f16")
    try:
        for streamed in (False, True):
            with pytest.raises(openai.BadRequestError) as refused:
                sdk_completion(srv.port, body, streamed)
            err = refused.value.body
            assert err["param"] == "resume_id" and "KV" in err["message"], err
            assert ckpt.is_file(), "a refused resume lost its checkpoint"
    finally:
        srv.stop_cleanly()
    srv = Server(model, "--alias", ALIAS, "--checkpoint-dir", ckdir)
    try:
        status, _, out = post_json(srv.port, "/v1/completions", body)
        assert status == 200 and out["usage"]["completion_tokens"] == 12, out
    finally:
        srv.stop_cleanly()


def test_foreign_checkpoint_refused(model, tmp_path):
    other = model.parents[1] / "parity" / "qwen3-f32"
    if not other.is_dir():
        pytest.skip("the dense parity models are not built")
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    subprocess.run([str(SPINDLE_BIN), "run", "-m", str(other), "--prompt-tokens", "5,6,7",
                    "-n", "12", "--checkpoint", str(ckdir / "cmpl-other.ckpt"),
                    "--checkpoint-every", "4"], check=True, capture_output=True, timeout=120)
    srv = Server(model, "--checkpoint-dir", ckdir)
    try:
        status, _, err = post_json(srv.port, "/v1/completions",
                                   whole(BODY, resume_id="cmpl-other"))
        e = assert_api_error(status, err, 409, "resume_id", "checkpoint_unusable")
        assert "another model" in e["message"]
    finally:
        srv.stop_cleanly()


def slot_post(port, slot, action, body=None):
    return post_json(port, f"/slots/{slot}?action={action}", body or {})


def test_slot_save_restore_across_restart(model, tmp_path):
    """A slot's prompt state saved, restored into another slot after a
    restart, and reused: the next request on that slot prefills only the
    rest (cached_tokens) and answers as a cold run of the whole prompt."""
    saves = tmp_path / "slots"
    saves.mkdir()
    prefix = [(i * 37 + 11) % 400 + 5 for i in range(24)]
    rest = [7, 8, 9, 10]
    greedy = {"temperature": 0, "ignore_eos": True}
    srv = Server(model, "--slot-save-path", saves, "--parallel", 2)
    try:
        status, _, out = post_json(srv.port, "/v1/completions",
                                   dict(greedy, prompt=prefix, max_tokens=1, id_slot=1))
        assert status == 200, out
        status, _, out = slot_post(srv.port, 1, "save", {"filename": "prefix.bin"})
        assert status == 200, out
        assert out["id_slot"] == 1 and out["filename"] == "prefix.bin"
        assert out["n_saved"] == len(prefix) and out["n_written"] > 0
        assert "save_ms" in out["timings"]
    finally:
        srv.stop_cleanly()
    srv = Server(model, "--slot-save-path", saves, "--parallel", 2)
    try:
        status, _, cold = post_json(srv.port, "/v1/completions",
                                    dict(greedy, prompt=prefix + rest, max_tokens=8))
        assert status == 200 and cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        status, _, out = slot_post(srv.port, 0, "restore", {"filename": "prefix.bin"})
        assert status == 200, out
        assert out["n_restored"] == len(prefix) and out["n_read"] > 0
        status, _, warm = post_json(srv.port, "/v1/completions",
                                    dict(greedy, prompt=prefix + rest, max_tokens=8, id_slot=0))
        assert status == 200, warm
        assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] == len(prefix)
        assert warm["usage"]["prompt_tokens"] == len(prefix) + len(rest)
        assert warm["choices"][0]["text"] == cold["choices"][0]["text"]
        status, _, out = slot_post(srv.port, 0, "erase")
        assert status == 200 and out == {"id_slot": 0, "n_erased": len(prefix + rest) + 7}
    finally:
        srv.stop_cleanly()


def test_slot_errors(model, tmp_path):
    saves = tmp_path / "slots"
    saves.mkdir()
    plain = Server(model)
    try:
        status, _, err = slot_post(plain.port, 0, "save", {"filename": "a.bin"})
        assert_api_error(status, err, 501)
    finally:
        plain.stop_cleanly()
    ckpt = saves / "generation.ckpt"
    subprocess.run([str(SPINDLE_BIN), "run", "-m", str(model), "--prompt-tokens", "5,6,7",
                    "-n", "12", "--checkpoint", str(ckpt), "--checkpoint-every", "4"],
                   check=True, capture_output=True, timeout=120)
    srv = Server(model, "--slot-save-path", saves, "--parallel", 2)
    try:
        status, _, out = post_json(srv.port, "/v1/completions",
                                   {"prompt": [5, 6, 7], "max_tokens": 2, "id_slot": 1})
        assert status == 200, out
        status, _, out = slot_post(srv.port, 1, "save", {"filename": "ok.bin"})
        assert status == 200, out
        blob = bytearray((saves / "ok.bin").read_bytes())
        blob[40] ^= 4
        (saves / "flipped.bin").write_bytes(bytes(blob))
        (saves / "short.bin").write_bytes(bytes(blob[:50]))
        cases = [
            (0, "save", {"filename": "empty.bin"}, 400, "slot_empty"),
            (0, "restore", {"filename": "missing.bin"}, 404, "slot_file_not_found"),
            (0, "restore", {"filename": "flipped.bin"}, 409, "slot_file_unusable"),
            (0, "restore", {"filename": "short.bin"}, 409, "slot_file_unusable"),
            (0, "restore", {"filename": "generation.ckpt"}, 409, "slot_file_unusable"),
            (0, "restore", {"filename": "../ok.bin"}, 400, None),
            (0, "restore", {}, 400, None),
            (0, "launch", {"filename": "ok.bin"}, 400, None),
            (2, "restore", {"filename": "ok.bin"}, 404, "not_found"),
            ("x", "restore", {"filename": "ok.bin"}, 404, "not_found"),
        ]
        for slot, action, body, want, code in cases:
            status, _, err = slot_post(srv.port, slot, action, body)
            e = assert_api_error(status, err, want, code=code)
            assert "\n" not in e["message"], e
        status, _, err = post_json(srv.port, "/v1/completions",
                                   {"prompt": [5], "max_tokens": 1, "id_slot": 5})
        assert_api_error(status, err, 400, "id_slot")
    finally:
        srv.stop_cleanly()

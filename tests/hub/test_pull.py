"""`spindle pull` and `-m hf://` against a local Hub (hub_mock.py), with
huggingface_hub itself as the judge of the cache it leaves:

  * a safetensors repository lands whole in an empty HF_HOME, laid out as
    huggingface_hub lays out the same download (blob names, snapshot
    symlinks, refs/main), and scan_cache_dir / hf_hub_download(
    local_files_only=True) find the same files;
  * `spindle run -m hf://...` generates the tokens the local path does;
  * GGUF repositories: the default quant (Q4_K_M), a tag matched ignoring
    case with every split part, the closest mmproj; an absent tag is a
    one-line error;
  * a transfer cut halfway resumes with a Range request;
  * a corrupted body is refused and nothing of it stays in the cache;
  * --offline / HF_HUB_OFFLINE=1 use the cache only, and fail cleanly
    when it is empty;
  * 401 without HF_TOKEN and success with it (the token never sent to the
    content host); 404 and 429 as one line;
    malformed repository names and quant tags as one line;
  * `serve -m hf://` names the model ORG/NAME and answers as mlx-lm does;
  * a progress bar on a terminal, nothing on a pipe.
"""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hub_mock import HubMock  # noqa: E402

SPINDLE_BIN = os.environ.get("SPINDLE_BIN", "/work/main/build/spindle")
WORK = Path(__file__).resolve().parents[1] / ".work"
SHARDED = WORK / "parity" / "llama-q4g64-sharded"
REPO = "tiny-org/llama-sharded"

pytestmark = pytest.mark.skipif(
    not (os.access(SPINDLE_BIN, os.X_OK) and SHARDED.is_dir()),
    reason="spindle binary or the parity models (scripts/setup.sh) missing")


def model_files():
    return {p.name: p.read_bytes() for p in sorted(SHARDED.iterdir())
            if p.suffix in (".json", ".safetensors") and p.name != "reference.json"}


GGUF_FILES = {
    "model-Q8_0.gguf": b"GGUF q8_0" * 50,
    "model-Q4_K_M.gguf": b"GGUF q4_k_m" * 50,
    "model-q5_k_m-00001-of-00002.gguf": b"GGUF part one" * 40,
    "model-q5_k_m-00002-of-00002.gguf": b"GGUF part two" * 40,
    "mmproj-model-f16.gguf": b"GGUF mmproj f16" * 30,
    "mmproj-model-Q8_0.gguf": b"GGUF mmproj q8" * 30,
    "README.md": b"# a GGUF repository\n",
}


@pytest.fixture
def hub():
    with HubMock() as h:
        h.add(REPO, model_files())
        h.add("tiny-org/model-GGUF", GGUF_FILES)
        h.add("tiny-org/gated", {"config.json": b'{"gated": true}\n',
                                 "model.safetensors": b"gated weights" * 10},
              token="hf_secret")
        h.rate_limited.add("tiny-org/busy")
        yield h


def env_for(hub, home, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HF_") and k != "HUGGING_FACE_HUB_TOKEN"}
    env.update(HF_HOME=str(home), HF_ENDPOINT=hub.url if hub else "http://127.0.0.1:9",
               HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1")
    env.update(extra)
    return env


def spindle(env, *args):
    return subprocess.run([SPINDLE_BIN, *args], capture_output=True, text=True,
                          env=env, timeout=120)


def one_line_error(p):
    assert p.returncode != 0, p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def cache_tree(home, repo):
    """blobs, snapshot links (name -> target) and refs/main of one repo."""
    root = Path(home) / "hub" / ("models--" + repo.replace("/", "--"))
    blobs = sorted(p.name for p in (root / "blobs").iterdir())
    links = {}
    for snap in (root / "snapshots").iterdir():
        for p in snap.rglob("*"):
            if p.is_symlink():
                links[str(p.relative_to(snap))] = os.readlink(p)
    return {"blobs": blobs, "links": links,
            "ref": (root / "refs" / "main").read_text().strip()}


def hf_python(env, code):
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_pull_matches_huggingface_hub_cache(hub, tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    p = spindle(env_for(hub, ours), "pull", REPO)
    assert p.returncode == 0, p.stderr
    snapshot = Path(p.stdout.strip())
    assert snapshot.is_dir() and snapshot.name == hub.repos[REPO].commit
    assert p.stderr == ""  # no progress bar when stderr is not a terminal

    # huggingface_hub downloads the same repository into its own HF_HOME
    hf_python(env_for(hub, theirs), f"""
import json, huggingface_hub as h
for f in {sorted(model_files())!r}:
    h.hf_hub_download({REPO!r}, f)
print(json.dumps(1))""")
    assert cache_tree(ours, REPO) == cache_tree(theirs, REPO)

    # and finds ours offline, file for file
    found = hf_python(env_for(None, ours, HF_HUB_OFFLINE="1"), f"""
import json, huggingface_hub as h
info = h.scan_cache_dir()
repo = [r for r in info.repos if r.repo_id == {REPO!r}][0]
files = sorted(f.file_name for rev in repo.revisions for f in rev.files)
paths = {{f: h.hf_hub_download({REPO!r}, f, local_files_only=True) for f in files}}
print(json.dumps({{"files": files, "warnings": [str(w) for w in info.warnings],
                   "paths": paths}}))""")
    assert found["files"] == sorted(model_files())
    assert found["warnings"] == []
    for name, data in model_files().items():
        assert Path(found["paths"][name]).read_bytes() == data
        assert Path(found["paths"][name]).parent == snapshot


def test_run_from_hub_generates_the_local_tokens(hub, tmp_path):
    args = ["--prompt-tokens", "11,23,5,7", "-n", "8", "--ignore-eos", "--json"]
    env = env_for(hub, tmp_path)
    local = spindle(env, "run", "-m", str(SHARDED), *args)
    remote = spindle(env, "run", "-m", "hf://" + REPO, *args)
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout)["tokens"] == json.loads(local.stdout)["tokens"]


def pulled_files(home, repo):
    return sorted(cache_tree(home, repo)["links"])


def test_gguf_quant_selection(hub, tmp_path):
    env = env_for(hub, tmp_path)
    p = spindle(env, "pull", "tiny-org/model-GGUF")
    assert p.returncode == 0, p.stderr
    assert Path(p.stdout.strip()).name == "model-Q4_K_M.gguf"
    # the mmproj closest to 4 bits: Q8_0 rather than f16
    assert pulled_files(tmp_path, "tiny-org/model-GGUF") == [
        "mmproj-model-Q8_0.gguf", "model-Q4_K_M.gguf"]

    p = spindle(env, "pull", "tiny-org/model-GGUF:Q5_K_M")
    assert p.returncode == 0, p.stderr
    assert Path(p.stdout.strip()).name == "model-q5_k_m-00001-of-00002.gguf"
    assert "model-q5_k_m-00002-of-00002.gguf" in pulled_files(tmp_path, "tiny-org/model-GGUF")
    assert Path(p.stdout.strip()).read_bytes() == GGUF_FILES["model-q5_k_m-00001-of-00002.gguf"]

    line = one_line_error(spindle(env, "pull", "tiny-org/model-GGUF:IQ2_XS"))
    assert "IQ2_XS" in line and "no GGUF file" in line
    line = one_line_error(spindle(env, "pull", REPO + ":Q4_K_M"))
    assert "no GGUF files" in line


def test_dropped_connection_resumes(hub, tmp_path):
    shard = "model-00002-of-00003.safetensors"
    hub.cut_once.add((REPO, shard))
    p = spindle(env_for(hub, tmp_path), "pull", REPO)
    assert p.returncode == 0, p.stderr
    sha = hashlib.sha256(model_files()[shard]).hexdigest()
    gets = [r for r in hub.requests if r[0] == "GET" and r[1] == "/cdn/" + sha]
    assert len(gets) == 2 and gets[0][2] is None
    assert gets[1][2] == "bytes=%d-" % (len(model_files()[shard]) // 2)
    assert (Path(p.stdout.strip()) / shard).read_bytes() == model_files()[shard]


def test_corrupted_body_is_refused(hub, tmp_path):
    shard = "model-00003-of-00003.safetensors"
    hub.corrupt.add((REPO, shard))
    line = one_line_error(spindle(env_for(hub, tmp_path), "pull", REPO))
    assert shard in line and "corrupted" in line and "SHA-256" in line
    blobs = Path(tmp_path) / "hub" / ("models--" + REPO.replace("/", "--")) / "blobs"
    sha = hashlib.sha256(model_files()[shard]).hexdigest()
    assert not any(p.name.startswith(sha) for p in blobs.iterdir())


def test_offline_uses_only_the_cache(hub, tmp_path):
    line = one_line_error(spindle(env_for(hub, tmp_path), "pull", "--offline", REPO))
    assert "not in the HF cache" in line
    assert not hub.requests
    online = spindle(env_for(hub, tmp_path), "pull", REPO)
    assert online.returncode == 0, online.stderr
    dead = env_for(None, tmp_path)  # the Hub's address answers nothing now
    assert spindle(dead, "pull", "--offline", REPO).stdout == online.stdout
    assert spindle(env_for(None, tmp_path, HF_HUB_OFFLINE="1"), "pull",
                   REPO).stdout == online.stdout
    run = spindle(dead, "run", "-m", "hf://" + REPO, "--offline",
                  "--prompt-tokens", "11", "-n", "2", "--ignore-eos", "--json")
    assert run.returncode == 0, run.stderr
    assert "connect" in one_line_error(spindle(dead, "pull", REPO)).lower()


def test_token_and_hub_errors(hub, tmp_path):
    line = one_line_error(spindle(env_for(hub, tmp_path), "pull", "tiny-org/gated"))
    assert "401" in line and "HF_TOKEN" in line
    line = one_line_error(spindle(env_for(hub, tmp_path, HF_TOKEN="wrong"), "pull",
                                  "tiny-org/gated"))
    assert "401" in line
    p = spindle(env_for(hub, tmp_path, HF_TOKEN="hf_secret"), "pull", "tiny-org/gated")
    assert p.returncode == 0, p.stderr
    assert (Path(p.stdout.strip()) / "config.json").read_bytes() == b'{"gated": true}\n'
    assert (Path(p.stdout.strip()) / "model.safetensors").read_bytes() == b"gated weights" * 10
    # the token goes to the Hub, never to the content host it redirects to
    hub_auth = {r[3] for r in hub.requests if not r[1].startswith("/cdn/")}
    cdn_auth = {r[3] for r in hub.requests if r[1].startswith("/cdn/")}
    assert "Bearer hf_secret" in hub_auth and cdn_auth == {None}
    assert "404" in one_line_error(spindle(env_for(hub, tmp_path), "pull", "tiny-org/none"))
    assert "429" in one_line_error(spindle(env_for(hub, tmp_path), "pull", "tiny-org/busy"))


@pytest.mark.parametrize("ref", ["noslash", "a/b/c", "-a/b", "a--b/c", "a/b..c",
                                 "a/b:", "a/b:Q4 K", "a/b:../x", "/b"])
def test_malformed_references(ref, tmp_path):
    line = one_line_error(spindle(env_for(None, tmp_path), "pull", ref))
    assert ref.split(":")[0] in line
    line = one_line_error(spindle(env_for(None, tmp_path), "info", "-m", "hf://" + ref))
    assert "Hub repository" in line or "quant tag" in line


CHAT = WORK / "server" / "qwen3-chat"


@pytest.mark.skipif(not (CHAT / "reference.json").is_file(),
                    reason="the server suite's chat model (scripts/setup.sh) missing")
def test_serve_from_hub_answers_as_mlx_lm(tmp_path):
    """`spindle serve -m hf://...` through the OpenAI SDK: the model is named
    ORG/NAME and its greedy reply is mlx-lm's for the same checkpoint."""
    openai = pytest.importorskip("openai")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
    from server_common import Server  # noqa: E402
    ref = json.loads((CHAT / "reference.json").read_text())["chats"]["hello"]
    files = {p.name: p.read_bytes() for p in CHAT.iterdir()
             if p.name.endswith((".json", ".safetensors")) and p.name != "reference.json"}
    with HubMock() as hub:
        hub.add("tiny-org/qwen3-chat", files)
        server = Server("hf://tiny-org/qwen3-chat", env=env_for(hub, tmp_path))
    try:
        with openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                           timeout=120, max_retries=0) as client:
            assert [m.id for m in client.models.list().data] == ["tiny-org/qwen3-chat"]
            reply = client.chat.completions.create(
                model="tiny-org/qwen3-chat", messages=ref["messages"],
                max_tokens=len(ref["tokens"]), temperature=0)
        assert reply.choices[0].message.content == ref["text"]
    finally:
        assert server.stop() == 0, server.stderr()


def test_progress_bar_only_on_a_terminal(hub, tmp_path):
    import pty
    master, slave = pty.openpty()
    try:
        p = subprocess.run([SPINDLE_BIN, "pull", REPO], stdout=subprocess.PIPE, stderr=slave,
                           env=env_for(hub, tmp_path), timeout=120)
        os.close(slave)
        drawn = b""
        try:
            while chunk := os.read(master, 65536):
                drawn += chunk
        except OSError:   # the terminal's other end is closed: all read
            pass
    finally:
        os.close(master)
    assert p.returncode == 0
    assert b"model-00001-of-00003.safetensors" in drawn and b"] " in drawn and b" MB" in drawn
    quiet = spindle(env_for(hub, tmp_path / "quiet"), "pull", REPO)
    assert quiet.returncode == 0 and quiet.stderr == ""

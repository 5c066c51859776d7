"""Malformed sentence-transformers files of a real model directory
(all-MiniLM-L6-v2 with its weights linked): `spindle embed` fails with
exit status 1 and one stderr line naming the file and what is wrong,
never a crash. Also the inputs the CLI gets wrong (bad ids)."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPINDLE_BIN = Path(os.environ.get("SPINDLE_BIN", ROOT / "build" / "spindle"))
MODEL = ROOT / "tests" / ".work" / "all-MiniLM-L6-v2"
ST = "sentence_transformers.models."
GOOD_MODULES = [{"idx": 0, "name": "0", "path": "", "type": ST + "Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": ST + "Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": ST + "Normalize"}]
GOOD_POOLING = {"word_embedding_dimension": 384, "pooling_mode_mean_tokens": True}


@pytest.fixture
def model(tmp_path):
    if not (MODEL / "model.safetensors").exists():
        pytest.skip(f"{MODEL} missing (run scripts/setup.sh)")
    d = tmp_path / "m"
    d.mkdir()
    for f in MODEL.iterdir():
        if f.is_file():
            (d / f.name).symlink_to(f)
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps(GOOD_POOLING))
    return d


def run(d, *args, text="hello"):
    return subprocess.run([str(SPINDLE_BIN), "embed", "-m", str(d), "--threads", "1",
                           "--text", text, *args],
                          capture_output=True, text=True, timeout=60)


def replace(path, content):
    if path.is_symlink() or path.exists():
        path.unlink()
    path.write_text(content if isinstance(content, str) else json.dumps(content))


def test_good_copy_embeds(model):
    r = run(model)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["embedding"]) == 384


CASES = [
    ("modules.json", "{not json", "modules.json: not valid JSON"),
    ("modules.json", {"a": 1}, "modules.json: not a JSON list"),
    ("modules.json", GOOD_MODULES[:1], "no Pooling module"),
    ("modules.json", [GOOD_MODULES[1], GOOD_MODULES[0]], "out of place"),
    ("modules.json", GOOD_MODULES + [{"path": "3", "type": ST + "Dense"}],
     "'sentence_transformers.models.Dense' is not supported"),
    ("modules.json", [GOOD_MODULES[0], dict(GOOD_MODULES[1], path="../x")],
     "leaves the model directory"),
    ("modules.json", [GOOD_MODULES[0], {"type": 5}], "string 'type'"),
    ("1_Pooling/config.json", {}, "no pooling mode is on"),
    ("1_Pooling/config.json", {"pooling_mode_max_tokens": True},
     "'pooling_mode_max_tokens' is not supported"),
    ("1_Pooling/config.json", {"pooling_mode_cls_token": True,
                               "pooling_mode_mean_tokens": True},
     "more than one pooling mode"),
    ("1_Pooling/config.json", {"pooling_mode_cls_token": "yes"}, "not a boolean"),
    ("1_Pooling/config.json", dict(GOOD_POOLING, word_embedding_dimension=768),
     "word_embedding_dimension"),
    ("sentence_bert_config.json", {"max_seq_length": -3}, "max_seq_length"),
    ("config_sentence_transformers.json", {"prompts": {"q": 1}}, "prompt 'q'"),
    ("config_sentence_transformers.json",
     {"prompts": {"q": "x"}, "default_prompt_name": "z"}, "default_prompt_name"),
]


@pytest.mark.parametrize("name,content,want", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_malformed_file_is_one_line(model, name, content, want):
    replace(model / name, content)
    r = run(model)
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and want in lines[0], r.stderr


def test_missing_pooling_config(model):
    shutil.rmtree(model / "1_Pooling")
    r = run(model)
    assert r.returncode == 1 and "Pooling module's config is missing" in r.stderr


def test_unknown_prompt_name_and_bad_dimensions(model):
    r = run(model, "--prompt-name", "nope")
    assert r.returncode == 1 and "unknown prompt name 'nope'" in r.stderr
    r = run(model, "--dimensions", "999")
    assert r.returncode == 1 and "exceeds the embedding width 384" in r.stderr
    r = run(model, "--ids", text="101,99999,102")
    assert r.returncode == 1 and "outside the vocabulary" in r.stderr

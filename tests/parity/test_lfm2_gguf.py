"""GGUF parity for LFM2: Spindle against llama.cpp (llama-cpp-python) on the
same tiny GGUF files, llama.cpp's "lfm2" architecture.

Each file is written by tests/gguf_writer.py from the float model of
make_lfm2_models.py in the form llama.cpp's converter (LFM2Model) gives it:
shortconv.{conv,in_proj,out_proj} with the conv as [channels, L] in F32,
the final norm as token_embd_norm, the conv layers marked by a KV head
count of 0 in the per-layer attention.head_count_kv, and the MLP width
already adjusted. Both engines run the file, llama.cpp in its f32
configuration; the checks are test_dense_gguf.py's
(parity_common.assert_gguf_parity): last-prompt logits within TOL of
llama.cpp on the exact F32 twin, greedy tokens up to a near-tie. (llama.cpp
has no conv biases: the "bias" models have no GGUF form.) Files whose
per-layer KV heads do not say which layers convolve fail with one line.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_lfm2_models as lm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_LFM2_PARITY_DIR", lm.DEFAULT_OUT))
THREADS = int(os.environ.get("SPINDLE_THREADS", "2"))
N_GEN = lm.MAX_TOKENS
N_CTX = 256
TOL = 1e-4
LOOSE = 0.5

# (model, GGUF type, bound against llama.cpp on the quantized file itself)
CASES = [("lfm2-f32", "f32", None), ("lfm2-f32", "q8_0", LOOSE)]


@pytest.fixture(scope="module")
def lfm2_models(spindle_bin):  # noqa: F811
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python is missing (pip install -r "
                    "tests/requirements.txt)")
    return pc.ensure_models(OUT, lm)


@pytest.fixture(scope="module", params=CASES,
                ids=[f"{m}-{q}" for m, q, _ in CASES])
def gguf_case(request, lfm2_models, tmp_path_factory):
    name, qtype, loose = request.param
    case = pc.open_gguf_case(lfm2_models / name, qtype,
                             tmp_path_factory.mktemp("gguf"), N_CTX, THREADS)
    case["loose"] = loose
    yield case
    pc.close_gguf_case(case)


@pytest.mark.parametrize("prompt", sorted(lm.PROMPTS))
def test_lfm2_gguf_parity(spindle_bin, gguf_case, prompt,  # noqa: F811
                          tmp_path):
    pc.assert_gguf_parity(spindle_bin, gguf_case, lm.PROMPTS[prompt], N_GEN,
                          THREADS, tmp_path, TOL, gguf_case["loose"])


@pytest.mark.parametrize("kv,needle", [
    (2, "'lfm2.attention.head_count_kv' must give each of the 6 layers"),
    ([0, 0, 2, 0, 0, 1], "'lfm2.attention.head_count_kv'[5]"),
    ([0, 0, 2, 0, 0], "'lfm2.attention.head_count_kv' must give each"),
])
def test_lfm2_gguf_bad_layer_kinds(spindle_bin, lfm2_models, tmp_path,  # noqa: F811
                                   monkeypatch, kv, needle):
    """A file whose per-layer KV heads do not say which layers convolve
    (a single count, another length, two attention head counts) fails
    with one line naming the key."""
    import gguf
    import gguf_writer
    real = gguf.GGUFWriter.add_head_count_kv
    monkeypatch.setattr(gguf.GGUFWriter, "add_head_count_kv",
                        lambda self, _: real(self, kv))
    path = gguf_writer.write_gguf(str(lfm2_models / "lfm2-f32"),
                                  str(tmp_path / "bad.gguf"))
    r = subprocess.run([str(spindle_bin), "run", "-m", path,
                        "--prompt-tokens", "1,2", "-n", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, "a malformed file was accepted"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr

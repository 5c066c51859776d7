"""Masked-diffusion generation against llama.cpp's own `llama-diffusion-cli`
(built from the llama-cpp-python sdist by `LLAMA_DIFFUSION=1
bench/build_llama.sh`, cached under bench/.work/compare) on the same tiny
GGUFs (llada_gguf.py: LLaDA, and Dream with its shifted logits): the
committed canvas is the same, token for token, for every remasking
algorithm and sampling setting below, with the block schedule and (Dream)
the timestep schedule of --diffusion-eps.

llama-diffusion-cli prints the canvas as text (common_detokenize without
special tokens); the fixture's vocabulary makes that text a function of
the ids (byte tokens are their byte, filler tokens "[tokN]", control
tokens nothing), so Spindle's token ids are rendered the same way here
and compared with llama.cpp's bytes, up to a NUL byte (token 0), where its
"%s" output ends.

Its sampler chain draws even at --temp 0 (a temperature of 0 only leaves
the logits unscaled), from a std::mt19937 seeded with --seed; Spindle
reproduces that stream (src/generation/diffusion_sample.c), so the seeded
runs compare as exactly as the greedy one (--top-k 1).

Layout: prompt "abc" (3 tokens) and -ub 32, so the canvas is 29 tokens;
llama.cpp's 32 / 8 = 4 blocks start after the prompt (8, 8, 8, 5), which is
Spindle's -n 29 --block-length 8; 16 steps, 4 per block. The eps schedule
runs the 16 steps over the whole canvas.

Slow to build (llama.cpp's common library and the tool, 15-20 minutes on 2
cores): the test command's pass runs this only where the binary exists;
`make test-full` (SPINDLE_TEST_FULL=1) builds it.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import llada_gguf

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from gguf_writer import gpt2_byte_symbols  # noqa: E402

THREADS = os.environ.get("SPINDLE_THREADS", "2")
BUILT = sorted((ROOT / "bench" / ".work" / "compare")
               .glob("llama-build-*/bin/llama-diffusion-cli"))
PROMPT = "abc"
UBATCH, BLOCK, STEPS, SEED = 32, 8, 16, 11
ALGORITHMS = ["origin", "entropy", "margin", "random", "confidence"]  # 0..4
SCHEDULES = {   # name: (arch, llama.cpp's options, spindle's options)
    "llada-blocks": ("llada", ["--diffusion-block-length", str(BLOCK)],
                     ["--block-length", str(BLOCK)]),
    "dream-blocks": ("dream", ["--diffusion-block-length", str(BLOCK)],
                     ["--block-length", str(BLOCK)]),
    "dream-eps": ("dream", ["--diffusion-eps", "0.001"],
                  ["--diffusion-eps", "0.001"]),
}
SAMPLING = {
    "temp0": ("0", "0", "1"),           # --temp 0: unscaled, still drawn
    "greedy": ("0", "1", "1"),          # top-k 1
    "filtered": ("0.7", "40", "0.9"),   # top-k, top-p and temperature
}


@pytest.fixture(scope="module")
def llama_diffusion():
    if not BUILT and not os.environ.get("SPINDLE_TEST_FULL"):
        pytest.skip("llama-diffusion-cli is not built (LLAMA_DIFFUSION=1 "
                    "bench/build_llama.sh; make test-full builds it)")
    r = subprocess.run(["bash", str(ROOT / "bench" / "build_llama.sh")],
                       env=dict(os.environ, LLAMA_DIFFUSION="1"),
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, f"building llama-diffusion-cli failed:\n{r.stderr[-3000:]}"
    return r.stdout.strip().splitlines()[-1]


def render(ids):
    """The bytes common_detokenize(special = false) gives for ids."""
    assert len(gpt2_byte_symbols()) == 256   # ids 0..255 are the bytes
    out = b""
    for t in ids:
        if t < 256:
            out += bytes([t])
        elif t == 256:
            out += b"  "
        elif t not in llada_gguf.SPECIALS:
            out += f"[tok{t}]".encode()
    return out


def llama_canvas(binary, model, schedule, algorithm, temp, top_k, top_p, n_bytes):
    """llama-diffusion-cli's canvas text, at least n_bytes of it. The tool
    logs from a thread that it does not join at exit (common_log_main leaks
    the logger on purpose), so a run's last lines are sometimes lost: such
    a run is repeated (its output is the same every time; only whether it
    reaches the pipe varies)."""
    for _ in range(10):
        r = subprocess.run(
            [binary, "-m", str(model), "-p", PROMPT, "-ub", str(UBATCH), "-b",
             str(UBATCH), "-c", "64", "--diffusion-steps", str(STEPS),
             *schedule, "--diffusion-algorithm",
             str(ALGORITHMS.index(algorithm)), "--temp", temp, "--top-k", top_k,
             "--top-p", top_p, "--seed", str(SEED), "-t", THREADS, "-fa", "off"],
            capture_output=True, timeout=300)
        assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
        # its last lines: "total time: ..., sampling time per step: Xms", an
        # empty line (after its log prefix "T.TT.TTT.TTT I " when it has
        # one), the canvas's text
        m = list(re.finditer(rb"sampling time per step: [0-9.]+ms\n(?:[0-9.]+ I )?\n",
                             r.stderr))
        if m and len(r.stderr) - m[-1].end() >= n_bytes:
            return r.stderr[m[-1].end():]
    pytest.fail("llama-diffusion-cli never printed its whole canvas in 10 runs:\n"
                + r.stderr.decode(errors="replace")[-1000:])


@pytest.mark.slow
@pytest.mark.parametrize("sampling", sorted(SAMPLING))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_committed_tokens_equal_llama_diffusion_cli(llama_diffusion, run_gguf,
                                                     schedule, algorithm,
                                                     sampling):
    temp, top_k, top_p = SAMPLING[sampling]
    arch, llama_opts, spindle_opts = SCHEDULES[schedule]
    model = llada_gguf.ensure(arch=arch)
    r = run_gguf(model, "-p", PROMPT, "-n", UBATCH - 3, "--diffusion-steps",
                 STEPS, *spindle_opts, "--remasking", algorithm, "--temp", temp,
                 "--top-k", top_k, "--top-p", top_p, "--seed", SEED, "--json")
    assert r.out["prompt_tokens"] == [97, 98, 99]
    # the tool prints the text with "%s\n": a NUL byte (token 0) ends it
    got = render(r.out["tokens"]).split(b"\0")[0] + b"\n"
    want = llama_canvas(llama_diffusion, model, llama_opts, algorithm, temp,
                        top_k, top_p, len(got))
    assert want[:len(got)] == got, (
        f"{schedule} {algorithm} {sampling}: canvas differs from "
        f"llama-diffusion-cli's\n"
        f"  spindle: {got!r}\n  llama:   {want[:len(got)]!r}")

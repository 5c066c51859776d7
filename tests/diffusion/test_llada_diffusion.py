"""Masked-diffusion generation (LLaDA, Dream) on the tiny random GGUFs,
without any other engine: the canvas forward's logits against the numpy
reference of diffusion_ref.py, the schedules' statistics, and the one-line
errors of malformed settings. Token-for-token parity with llama-diffusion-cli is
test_llama_diffusion.py's."""
import subprocess

import numpy as np
import pytest

import diffusion_ref
import llada_gguf


PROMPT = [97, 98, 99, 100, 101]
TOL = 1e-4          # max |spindle - reference| / std(reference); ~2e-6 seen


@pytest.mark.parametrize("arch", ["llada", "dream"])
@pytest.mark.parametrize("prompt", [PROMPT, [7], [120, 5, 250, 31, 9, 44, 3]])
def test_canvas_logits_are_bidirectional(run_gguf, arch, prompt, tmp_path):
    """The first step's logits at every canvas position equal the reference
    pass in which every position sees every other (Dream: the row before
    each position, its shifted logits); the same reference with a causal
    mask is far off, so a causal canvas cannot pass."""
    canvas = 12
    model = llada_gguf.ensure(arch=arch)
    dump = tmp_path / "logits.npy"
    run_gguf(model, "--prompt-tokens", ",".join(map(str, prompt)), "-n",
             canvas, "--diffusion-steps", canvas, "--dump-logits", dump, "--json")
    got = np.load(dump)
    ids = prompt + [llada_gguf.MASK] * canvas
    assert got.shape == (canvas, llada_gguf.VOCAB)
    cfg, w = diffusion_ref.load(model)
    rows = np.arange(len(prompt), len(ids)) - (arch == "dream")
    want = diffusion_ref.forward(cfg, w, ids)[rows]
    err = np.abs(got - want).max() / want.std()
    assert err <= TOL, f"canvas logits off the bidirectional reference by {err:.2e}"
    causal = diffusion_ref.forward(cfg, w, ids, causal=True)[rows]
    assert np.abs(got - causal).max() / causal.std() > 100 * TOL, \
        "the causal reference is as close: the test cannot tell the masks apart"


@pytest.mark.parametrize("remasking", ["confidence", "margin", "entropy",
                                       "origin", "random"])
def test_schedule_stats(run_llada, remasking):
    """29 tokens in blocks of 8 over 16 steps: 4 blocks, 4 steps each, one
    forward per step; the confidence-ordered algorithms commit
    get_num_transfer_tokens' share per step (8 masks over 4 steps: 2 each;
    the last block's 5: 2, 1, 1, 1), and every algorithm fills the canvas."""
    r = run_llada("--prompt-tokens", "97,98,99", "-n", 29, "--diffusion-steps",
                  16, "--block-length", 8, "--remasking", remasking,
                  "--temp", 0.8, "--seed", 5, "--json")
    d = r.out["stats"]["diffusion"]
    assert (d["blocks"], d["steps_per_block"], d["forwards"]) == (4, 4, 16)
    assert d["remasking"] == remasking
    assert len(r.out["tokens"]) == 29 and llada_gguf.MASK not in r.out["tokens"]
    if remasking != "origin":
        assert d["committed_per_step"] == [2] * 13 + [1] * 3
    assert sum(d["committed_per_step"]) <= 29


def test_timestep_schedule(run_gguf):
    """Dream's eps schedule over one block: (int)(masked * (1 - s / t)) per
    step, the last step the rest."""
    steps, canvas, eps = 8, 20, 0.001
    r = run_gguf(llada_gguf.ensure(arch="dream"), "--prompt-tokens", "97,98,99",
                 "-n", canvas, "--diffusion-steps", steps, "--diffusion-eps", eps,
                 "--json")
    want, masked = [], canvas
    f32 = np.float32
    for k in range(steps):
        t = f32(1) - f32(k) / f32(steps) * (f32(1) - f32(eps))
        s = f32(1) - f32(k + 1) / f32(steps) * (f32(1) - f32(eps))
        share = f32(1) - s / t if k < steps - 1 else f32(1)
        want.append(int(f32(masked) * share))
        masked -= want[-1]
    d = r.out["stats"]["diffusion"]
    assert d["committed_per_step"] == want and d["blocks"] == 1
    assert llada_gguf.MASK not in r.out["tokens"]


def test_seeded_runs_repeat(run_llada):
    args = ("--prompt-tokens", "97,98,99", "-n", 16, "--diffusion-steps", 8,
            "--temp", 1.5, "--json")
    a = run_llada(*args, "--seed", 1).out["tokens"]
    assert run_llada(*args, "--seed", 1).out["tokens"] == a
    assert any(run_llada(*args, "--seed", s).out["tokens"] != a for s in (2, 3, 4))


@pytest.mark.parametrize("args,message", [
    (["--diffusion-steps", "0"], "--diffusion-steps expects an integer"),
    (["--diffusion-steps", "7", "--block-length", "8"],
     "7 steps are not a multiple of the 2 blocks"),
    (["--block-length", "17"], "block length 17 is outside 0..16"),
    (["--remasking", "sideways"], "--remasking expects confidence"),
    (["--diffusion-eps", "0.01", "--block-length", "8"],
     "eps must be in [0, 1) and excludes a block length"),
    (["-n", "126"], "prompt (3) + canvas (126) tokens exceed the context of 128"),
    (["--json-schema", "SCHEMA"], "a grammar does not apply to a diffusion model"),
])
def test_malformed_settings(run_llada, args, message, tmp_path):
    schema = tmp_path / "schema.json"
    schema.write_text('{"type": "object"}')
    args = [str(schema) if a == "SCHEMA" else a for a in args]
    base = ["--prompt-tokens", "97,98,99", "-n", "16"]
    if args[0] == "-n":
        base = base[:2]
    r = run_llada(*base, *args, check=False)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_autoregressive_model_refuses_diffusion_options(spindle_bin):
    """The same weights as a Llama file: the diffusion options are refused
    by name, and without them it generates token by token."""
    model = llada_gguf.ensure(arch="llama")
    base = [str(spindle_bin), "run", "-m", str(model), "--prompt-tokens",
            "97,98,99", "-n", "4", "-t", "2"]
    r = subprocess.run(base + ["--remasking", "margin"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert r.stderr.strip() == ("spindle: --diffusion-steps, --block-length, "
                                "--diffusion-eps and --remasking need a "
                                "diffusion model")
    r = subprocess.run(base + ["--json"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr

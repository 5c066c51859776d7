"""A numpy reference of the LLaDA forward pass over prompt + canvas, read
straight from a GGUF file (gguf.GGUFReader): llama.cpp's llada graph
(src/models/llada.cpp) in float64: RMSNorm, q/k/v without bias, llama.cpp's
"normal" RoPE (consecutive pairs rotated, as the q/k rows are stored),
(Dream: Qwen2's rotate-half RoPE and q/k/v biases), grouped-query attention with a mask that is bidirectional (every position
sees every other) or, to show what a causal canvas would give instead,
causal; SwiGLU; the final norm and the output matrix.

Nothing of Spindle's code runs here: the test holds Spindle's canvas
logits to this."""
import numpy as np
import gguf


def _field(reader, key):
    f = reader.fields[key]
    return f.parts[f.data[0]].tolist()[0]


def load(path):
    """(config dict, {gguf name: float64 array in (rows, cols) order})."""
    r = gguf.GGUFReader(str(path))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    cfg = {k: _field(r, f"{arch}.{k}") for k in (
        "embedding_length", "block_count", "attention.head_count",
        "attention.head_count_kv", "rope.freq_base",
        "attention.layer_norm_rms_epsilon")}
    w = {t.name: np.array(t.data, dtype=np.float64).reshape(
        [int(x) for x in reversed(t.shape)]) for t in r.tensors}
    cfg["neox"] = arch == "dream"
    return cfg, w


def _proj(h, w, name):
    y = h @ w[name + ".weight"].T
    return y + w[name + ".bias"] if name + ".bias" in w else y


def _rms(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def _rope(x, base, neox):
    """x: [T][heads][d]; pair i, rotated by pos * base^(-2i/d), is (2i,
    2i + 1) ("normal") or (i, i + d/2) (neox, rotate-half)."""
    t, _, d = x.shape
    inv = base ** (-np.arange(0, d, 2) / d)
    ang = np.arange(t)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    ia, ib = (np.arange(d // 2), np.arange(d // 2) + d // 2) if neox else \
        (np.arange(0, d, 2), np.arange(1, d, 2))
    a, b = x[..., ia], x[..., ib]
    out = np.empty_like(x)
    out[..., ia] = a * cos - b * sin
    out[..., ib] = a * sin + b * cos
    return out


def forward(cfg, w, ids, causal=False):
    """Logits [len(ids)][vocab] of one pass over ids."""
    eps = cfg["attention.layer_norm_rms_epsilon"]
    nh, nkv = cfg["attention.head_count"], cfg["attention.head_count_kv"]
    hd = cfg["embedding_length"] // nh
    x = w["token_embd.weight"][np.asarray(ids)]
    t = len(ids)
    mask = np.triu(np.full((t, t), -np.inf), 1) if causal else np.zeros((t, t))
    for i in range(cfg["block_count"]):
        p = f"blk.{i}."
        h = _rms(x, w[p + "attn_norm.weight"], eps)
        base, neox = cfg["rope.freq_base"], cfg["neox"]
        q = _rope(_proj(h, w, p + "attn_q").reshape(t, nh, hd), base, neox)
        k = _rope(_proj(h, w, p + "attn_k").reshape(t, nkv, hd), base, neox)
        v = _proj(h, w, p + "attn_v").reshape(t, nkv, hd)
        k, v = (np.repeat(a, nh // nkv, axis=1) for a in (k, v))
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", s, v).reshape(t, nh * hd)
        x = x + o @ w[p + "attn_output.weight"].T
        h = _rms(x, w[p + "ffn_norm.weight"], eps)
        g = h @ w[p + "ffn_gate.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    x = _rms(x, w["output_norm.weight"], eps)
    return x @ w["output.weight"].T

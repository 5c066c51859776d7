"""A plain float64 numpy Gemma 3 text forward pass, written from the model's
definition (transformers' Gemma3 / mlx-lm's gemma3_text), for the one
feature mlx-lm's gemma3_text lacks: attn_logit_softcapping.  The test first
checks this model against mlx-lm's own logits without a cap, then uses it
as the reference with one.  Float32 checkpoints only.
"""

import json
from pathlib import Path

import numpy as np


def _bf16(x):
    """mlx's mx.array(x, bfloat16) value, as gemma3_text rounds sqrt(H)."""
    import mlx.core as mx
    return float(mx.array(x, dtype=mx.bfloat16).astype(mx.float32).item())


def _rope(x, pos, theta, factor):
    hd = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, hd, 2) / hd) / factor
    ang = pos[:, None, None] * inv[None, None, :]
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[..., :hd // 2], x[..., hd // 2:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def last_logits(model_dir, tokens):
    """Logits of the last position of `tokens`, all processed at once."""
    from safetensors.numpy import load_file
    d = Path(model_dir)
    cfg = json.loads((d / "config.json").read_text())
    W = {k: v.astype(np.float64)
         for k, v in load_file(str(d / "model.safetensors")).items()}
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    nh, nkv, hd = (cfg["num_attention_heads"], cfg["num_key_value_heads"],
                   cfg["head_dim"])
    eps, win = cfg["rms_norm_eps"], cfg["sliding_window"]
    pattern = cfg["sliding_window_pattern"]
    scale = cfg["query_pre_attn_scalar"] ** -0.5
    acap = cfg.get("attn_logit_softcapping")
    fcap = cfg.get("final_logit_softcapping")
    rs = cfg.get("rope_scaling") or {}
    gfactor = rs.get("factor", 1.0) if rs.get("rope_type", rs.get(
        "type")) == "linear" else 1.0

    def norm(x, w):
        return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * (1 + w)

    def lin(x, name):
        return x @ W[name + ".weight"].T

    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    emb = W["model.embed_tokens.weight"]
    x = emb[np.array(tokens)] * _bf16(H ** 0.5)
    for i in range(L):
        p = f"model.layers.{i}."
        local = (i + 1) % pattern != 0
        theta = cfg["rope_local_base_freq"] if local else cfg["rope_theta"]
        factor = 1.0 if local else gfactor
        h = norm(x, W[p + "input_layernorm.weight"])
        q = lin(h, p + "self_attn.q_proj").reshape(T, nh, hd)
        k = lin(h, p + "self_attn.k_proj").reshape(T, nkv, hd)
        v = lin(h, p + "self_attn.v_proj").reshape(T, nkv, hd)
        q = _rope(norm(q, W[p + "self_attn.q_norm.weight"]), pos, theta,
                  factor)
        k = _rope(norm(k, W[p + "self_attn.k_norm.weight"]), pos, theta,
                  factor)
        out = np.zeros((T, nh, hd))
        ii, jj = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
        allowed = jj <= ii
        if local:
            allowed &= jj > ii - win
        for hh in range(nh):
            kv = hh // (nh // nkv)
            s = (q[:, hh] @ k[:, kv].T) * scale
            if acap:
                s = acap * np.tanh(s / acap)
            s = np.where(allowed, s, -np.inf)
            pr = np.exp(s - s.max(-1, keepdims=True))
            out[:, hh] = (pr / pr.sum(-1, keepdims=True)) @ v[:, kv]
        a = lin(out.reshape(T, nh * hd), p + "self_attn.o_proj")
        x = x + norm(a, W[p + "post_attention_layernorm.weight"])
        h = norm(x, W[p + "pre_feedforward_layernorm.weight"])
        g = lin(h, p + "mlp.gate_proj")
        g = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g**3)))
        m = lin(g * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
        x = x + norm(m, W[p + "post_feedforward_layernorm.weight"])
    logits = norm(x[-1], W["model.norm.weight"]) @ emb.T
    if fcap:
        logits = fcap * np.tanh(logits / fcap)
    return logits

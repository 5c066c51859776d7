"""Reference of a Qwen3.5 multi-token-prediction (MTP) head, after vLLM's
qwen3_5_mtp.py / qwen3_next_mtp.py (read for the mechanism, not copied).

For target position j, with the target's last-layer hidden state h_j
BEFORE its final norm and the token t_{j+1} after it:
    x_j = fc(concat(rms(embed(t_{j+1})) * w_e, rms(h_j) * w_h))
          (the embedding half first: fc's first `hidden` input columns)
    g_j = mtp.layers.0(x_j)     a full-attention decoder layer, its own KV,
                                at position j
    logits_j = lm_head(rms(g_j) * w_norm)   (the target's lm_head)
logits_j predicts t_{j+2}. Rows 0..P-1 are teacher-forced over a prompt of
P tokens (t_P: the target's greedy next token); each further row takes the
previous row's g and its argmax draft, at the next position.

The fusion, the norms and the head run in float64 numpy; the target's
hidden states and the decoder layer come from mlx-lm's own qwen3_5 code
(float32), so that the layer's attention (gated queries, q/k norms,
partial RoPE) is the reference's, not a transcription of it.
"""

import numpy as np


def _rms(x, w, eps):
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def target_hidden(model, tokens):
    """[P][hidden] float64: mlx-lm's qwen3_5 layers without the final
    norm (its Qwen3_5TextModel.__call__ up to self.norm)."""
    import mlx.core as mx
    from mlx_lm.models import qwen3_5 as q35
    tm = model.language_model.model
    h = tm.embed_tokens(mx.array([tokens]))
    fa = q35.create_attention_mask(h, None)
    ssm = q35.create_ssm_mask(h, None)
    for layer in tm.layers:
        h = layer(h, mask=ssm if layer.is_linear else fa, cache=None)
    return np.array(h[0].astype(mx.float32), dtype=np.float64)


def _decoder_layer(model, heads):
    from mlx_lm.models import qwen3_5 as q35
    from mlx.utils import tree_unflatten
    args = model.language_model.args
    layer = q35.DecoderLayer(args, args.full_attention_interval - 1)
    prefix = "mtp.layers.0."
    layer.update(tree_unflatten([(k[len(prefix):], v) for k, v in heads.items()
                                 if k.startswith(prefix)]))
    return layer


def reference(model, heads, prompt, n_drafts, tokens=None, swap_concat=False):
    """{"hidden": [P][d], "logits": [P + n_drafts - 1... ][vocab] (one row per
    head step), "tokens": prompt + t_P + drafts fed}. tokens: feed these
    instead of this reference's own argmax picks (swap_concat: the
    deliberately wrong fusion, embedding and hidden halves exchanged)."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache
    args = model.language_model.args
    eps = args.rms_norm_eps
    f64 = lambda a: np.array(a.astype(mx.float32), dtype=np.float64)
    embed = f64(model.language_model.model.embed_tokens.weight)
    w = {k: f64(v) for k, v in heads.items() if not k.startswith("mtp.layers.")}
    P = len(prompt)
    hidden = target_hidden(model, prompt)
    if tokens is None:
        final = _rms(hidden[-1], f64(model.language_model.model.norm.weight), eps)
        tokens = list(prompt) + [int(np.argmax(embed @ final))]
    layer, cache = _decoder_layer(model, heads), KVCache()

    def step(toks, hid):
        e = _rms(embed[toks], w["mtp.pre_fc_norm_embedding.weight"], eps)
        h = _rms(hid, w["mtp.pre_fc_norm_hidden.weight"], eps)
        cat = np.concatenate([h, e] if swap_concat else [e, h], axis=-1)
        x = cat @ w["mtp.fc.weight"].T
        mask = "causal" if len(toks) > 1 else None
        g = layer(mx.array(x[None].astype(np.float32)), mask=mask, cache=cache)
        g = f64(g[0])
        return g, _rms(g, w["mtp.norm.weight"], eps) @ embed.T

    g, logits = step(tokens[1:P + 1], hidden)
    rows = [logits]
    tokens = list(tokens)
    for i in range(1, n_drafts):
        if len(tokens) <= P + i:
            tokens.append(int(np.argmax(rows[-1][-1])))
        g, logits = step(tokens[P + i:P + i + 1], g[-1:])
        rows.append(logits)
    return {"hidden": hidden, "logits": np.concatenate(rows), "tokens": tokens}

"""The linear-attention kernels against mlx-lm's own functions.

tests/tools/delta_harness runs one linear-attention layer's kernels
(conv1d + SiLU, normalize_qk and the gates, the gated delta rule, the gated
RMSNorm) on random inputs; the same inputs go through what mlx-lm's
GatedDeltaNet calls: mlx's depthwise Conv1d over conv state ++ rows and
nn.silu, gated_delta.normalize_qk, gated_delta.gated_delta_update (on the
CPU, its ops path: the recurrence token by token) and
qwen3_next.Qwen3NextRMSNormGated. Outputs, the final delta-rule state and
conv window, and the snapshots of the last positions (compared with mlx-lm
run on the matching prefix) must agree to f32 rounding, in every form of
the delta rule (the chunked one on runs longer than a chunk), in one call
or split into a prefill and a continuation.

The harness is $SPINDLE_BUILD_DIR/delta_harness (default build/).
"""
import os
import pathlib
import subprocess

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
nn = pytest.importorskip("mlx.nn")
gated_delta = pytest.importorskip("mlx_lm.models.gated_delta")
qwen3_next = pytest.importorskip("mlx_lm.models.qwen3_next")

ROOT = pathlib.Path(__file__).resolve().parents[2]
HARNESS = pathlib.Path(os.environ.get("SPINDLE_BUILD_DIR", ROOT / "build")) / "delta_harness"

# The states agree to a few f32 ulps of their O(1) entries. The outputs are
# compared after the gated RMSNorm, which divides each head by its RMS: the
# chunked form's rounding (V' = U - S W cancels) grows by that factor, so y
# gets a looser bound than the states (the recurrent form alone is 1e-5).
STATE_TOL = (2e-5, 2e-4)
Y_TOL = (3e-4, 3e-4)


class Inputs:
    def __init__(self, T, hk, hv, dk, dv, kernel, seed):
        rng = np.random.default_rng(seed)
        self.T, self.hk, self.hv, self.dk, self.dv, self.kernel = T, hk, hv, dk, dv, kernel
        self.C = 2 * hk * dk + hv * dv
        f = lambda *shape, lo=-1.0, hi=1.0: rng.uniform(lo, hi, shape).astype(np.float32)
        self.x = f(T, self.C, lo=-2, hi=2)
        self.w = f(self.C, kernel, lo=-0.8, hi=0.8)
        self.window = f(kernel - 1, self.C, lo=-2, hi=2)
        self.a = f(T, hv, lo=-4, hi=4)
        self.b = f(T, hv, lo=-4, hi=4)
        self.A_log = np.log(f(hv, lo=0.1, hi=16))
        self.dt_bias = f(hv, lo=0.5, hi=1.5)
        self.z = f(T, hv * dv, lo=-3, hi=3)
        self.norm_w = f(dv, lo=0.5, hi=1.5)
        self.state = f(hv, dv, dk, lo=-0.5, hi=0.5)

    def blob(self):
        parts = [self.x, self.w, self.window, self.a, self.b, self.A_log,
                 self.dt_bias, self.z, self.norm_w, self.state]
        return b"".join(np.ascontiguousarray(p, dtype="<f4").tobytes() for p in parts)


def mlx_layer(inp, n_tokens):
    """mlx-lm on the first n_tokens rows: (y, state, window)."""
    T, C, K = n_tokens, inp.C, inp.kernel
    conv = nn.Conv1d(C, C, K, groups=C, padding=0, bias=False)
    conv.weight = mx.array(inp.w.reshape(C, K, 1))
    conv_input = mx.concatenate([mx.array(inp.window)[None], mx.array(inp.x[:T])[None]], axis=1)
    conv_out = nn.silu(conv(conv_input))
    kd = inp.hk * inp.dk
    q, k, v = mx.split(conv_out, [kd, 2 * kd], -1)
    q = q.reshape(1, T, inp.hk, inp.dk)
    k = k.reshape(1, T, inp.hk, inp.dk)
    v = v.reshape(1, T, inp.hv, inp.dv)
    q, k = gated_delta.normalize_qk(q, k, inv_scale=inp.dk ** -0.5, eps=1e-6)
    out, state = gated_delta.gated_delta_update(
        q, k, v, mx.array(inp.a[:T])[None], mx.array(inp.b[:T])[None],
        mx.array(inp.A_log), mx.array(inp.dt_bias), mx.array(inp.state)[None],
        use_kernel=False)
    norm = qwen3_next.Qwen3NextRMSNormGated(inp.dv, eps=1e-6)
    norm.weight = mx.array(inp.norm_w)
    y = norm(out, mx.array(inp.z[:T]).reshape(1, T, inp.hv, inp.dv))
    window = conv_input[0, -(K - 1):] if K > 1 else mx.zeros((0, C))
    return (np.array(y).reshape(T, -1), np.array(state[0]), np.array(window))


def run_harness(inp, form, threads, split, n_snap, tmp_path):
    if not HARNESS.is_file():
        pytest.fail(f"{HARNESS} not built (cmake --build build)")
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(inp.blob())
    subprocess.run([str(HARNESS), str(inp.T), str(inp.hk), str(inp.hv), str(inp.dk),
                    str(inp.dv), str(inp.kernel), form, str(threads), str(split),
                    str(n_snap), str(src), str(dst)], check=True)
    out = np.fromfile(dst, dtype="<f4")
    sizes = [inp.T * inp.hv * inp.dv, inp.hv * inp.dv * inp.dk, (inp.kernel - 1) * inp.C,
             n_snap * inp.hv * inp.dv * inp.dk, n_snap * (inp.kernel - 1) * inp.C]
    assert out.size == sum(sizes)
    y, state, window, snaps, wsnaps = np.split(out, np.cumsum(sizes)[:-1])
    return (y.reshape(inp.T, -1), state.reshape(inp.hv, inp.dv, inp.dk),
            window.reshape(inp.kernel - 1, inp.C),
            snaps.reshape(n_snap, inp.hv, inp.dv, inp.dk),
            wsnaps.reshape(n_snap, inp.kernel - 1, inp.C))


def close(got, want, what, tol=STATE_TOL):
    atol, rtol = tol
    err = np.abs(got - want) - (atol + rtol * np.abs(want))
    assert np.all(err <= 0), (
        f"{what}: max |diff| {np.abs(got - want).max():.3g} at "
        f"{np.unravel_index(np.argmax(err), err.shape)}")


CASES = [
    # T, hk, hv, dk, dv, kernel, form, threads, split, n_snap
    (1, 2, 4, 32, 16, 4, "auto", 1, 0, 1),
    (9, 1, 2, 64, 64, 4, "auto", 2, 0, 3),
    (100, 2, 4, 32, 32, 4, "chunked", 2, 0, 0),
    (100, 2, 4, 32, 32, 4, "recurrent", 1, 0, 0),
    (150, 1, 2, 128, 128, 4, "auto", 2, 0, 4),
    (130, 2, 2, 128, 64, 4, "auto", 2, 70, 2),
    (67, 1, 3, 12, 10, 3, "chunked", 1, 66, 1),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "T{}_hk{}_hv{}_dk{}_dv{}_K{}_{}_th{}_split{}_snap{}".format(*c))
def test_layer_matches_mlx_lm(case, tmp_path):
    T, hk, hv, dk, dv, kernel, form, threads, split, n_snap = case
    inp = Inputs(T, hk, hv, dk, dv, kernel, seed=T * 1000 + dk + dv)
    y, state, window, snaps, wsnaps = run_harness(inp, form, threads, split, n_snap, tmp_path)
    y_ref, state_ref, window_ref = mlx_layer(inp, T)
    close(y, y_ref, "y", Y_TOL)
    close(state, state_ref, "state")
    np.testing.assert_array_equal(window, window_ref)
    for i in range(n_snap):
        _, s_ref, w_ref = mlx_layer(inp, T - n_snap + i + 1)
        close(snaps[i], s_ref, f"state snapshot {i}")
        np.testing.assert_array_equal(wsnaps[i], w_ref)

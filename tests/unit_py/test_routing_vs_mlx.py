"""Spindle's MoE routing (compute/routing.c) against mlx, computed as
mlx-lm's families compute it:
  * softmax_topk (qwen3_moe.py, qwen3_next.py): gates = softmax(logits,
    precise=True); inds = argpartition(gates, kth=-k)[..., -k:]; scores =
    gates[inds], divided by their sum when norm_topk_prob;
  * topk_softmax (gpt_oss.py): the same argpartition of the raw logits,
    then softmax(precise=True) of the k values.
The logits are float32 rows with many exact ties (values on a coarse grid,
so equal logits give equal softmax values and the selection among them is
decided by argpartition's index order alone) and plain random rows. The
chosen sets must be identical (mlx leaves their order within the k
unspecified) and the weights equal to float32 rounding.

tests/tools/routing_harness (built with the library) runs Spindle's side.
"""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

ROOT = Path(__file__).resolve().parents[2]
HARNESS = os.environ.get(
    "SPINDLE_ROUTING_HARNESS",
    str(Path(os.environ.get("SPINDLE_BUILD_DIR", ROOT / "build"))
        / "routing_harness"),
)

pytestmark = pytest.mark.skipif(
    not (os.path.isfile(HARNESS) and os.access(HARNESS, os.X_OK)),
    reason=f"routing harness not found at {HARNESS} "
           "(build it, or set SPINDLE_ROUTING_HARNESS)",
)

ROWS = 400


def logit_rows(n, seed):
    rng = np.random.default_rng(seed)
    tied = np.round(rng.standard_normal((ROWS, n)) * 2) / 2   # ties galore
    few = rng.integers(-1, 2, (ROWS // 4, n)).astype(np.float64)  # 3 values
    plain = rng.standard_normal((ROWS, n)) * 3
    return np.concatenate([tied, few, plain]).astype(np.float32)


def mlx_route(logits, k, mode, renorm):
    x = mx.array(logits)
    if mode == "softmax_topk":
        gates = mx.softmax(x, axis=-1, precise=True)
        inds = mx.argpartition(gates, kth=-k, axis=-1)[..., -k:]
        scores = mx.take_along_axis(gates, inds, axis=-1)
        if renorm:
            scores = scores / mx.sum(scores, axis=-1, keepdims=True)
    else:
        inds = mx.argpartition(x, kth=-k, axis=-1)[..., -k:]
        scores = mx.softmax(mx.take_along_axis(x, inds, axis=-1), axis=-1,
                            precise=True)
    return np.array(inds), np.array(scores)


def spindle_route(tmp_path, logits, k, mode, renorm):
    src, oi, ow = (tmp_path / f for f in ("in.bin", "idx.bin", "w.bin"))
    logits.tofile(src)
    subprocess.run([HARNESS, mode, str(int(renorm)), str(logits.shape[1]),
                    str(k), str(src), str(oi), str(ow)], check=True,
                   timeout=60)
    idx = np.fromfile(oi, dtype=np.int32).reshape(-1, k)
    w = np.fromfile(ow, dtype=np.float32).reshape(-1, k)
    assert idx.shape[0] == logits.shape[0]
    return idx, w


@pytest.mark.parametrize("mode,renorm", [("softmax_topk", True),
                                         ("softmax_topk", False),
                                         ("topk_softmax", False)])
@pytest.mark.parametrize("n,k", [(8, 2), (16, 1), (128, 8), (32, 4), (4, 4)])
def test_routing_matches_mlx(tmp_path, mode, renorm, n, k):
    logits = logit_rows(n, seed=n * 100 + k)
    want_i, want_w = mlx_route(logits, k, mode, renorm)
    got_i, got_w = spindle_route(tmp_path, logits, k, mode, renorm)
    for r in range(logits.shape[0]):
        order_w, order_g = np.argsort(want_i[r]), np.argsort(got_i[r])
        assert list(want_i[r][order_w]) == list(got_i[r][order_g]), \
            f"row {r}: experts {sorted(got_i[r])}, mlx {sorted(want_i[r])}" \
            f" for logits {logits[r].tolist()}"
        np.testing.assert_allclose(got_w[r][order_g], want_w[r][order_w],
                                   rtol=2e-6, atol=1e-7)
        # best first
        assert np.all(np.diff(got_w[r]) <= 0), "not best first"

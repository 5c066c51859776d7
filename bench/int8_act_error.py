"""Relative RMS error of one matrix product with int8 activations (precision
`fast`), per way of computing an MLX affine group's bias term, beside
llama.cpp's Q4_0 / Q8_0 x Q8_0 product of the same weights.

usage: .venv/bin/python bench/int8_act_error.py

A 3072 x 1024 product (Qwen3-0.6B's MLP shape) of Gaussian weights,
quantized as MLX does (per group of 64: s = (max - min) / (2^bits - 1),
b = min, q = round((w - b) / s)), with Gaussian activations. The exact
product of the dequantized weights is the reference; each variant rounds the
activations to int8 per block with S = max|x| / 127 (llama.cpp's Q8), or
with the power of two above it (`pow2`), and takes the group's bias term
b X_g either from the exact activations (`exact X_g`: the error is then
s sum q_j e_j) or from the quantized ones (`quantized X_g`: sum (s q_j + b)
e_j, the error of the dequantized weights, as llama.cpp's q8_1 blocks do).
Numpy only; 20 random activation vectors per row of the table.
"""
import numpy as np

R, C, G = 3072, 1024, 64
rng = np.random.default_rng(0)
W = rng.standard_normal((R, C)) * 0.02


def mlx_quantize(bits):
    wg = W.reshape(R, -1, G)
    lo, hi = wg.min(-1, keepdims=True), wg.max(-1, keepdims=True)
    s = (hi - lo) / (2 ** bits - 1)
    return np.round((wg - lo) / s), s, lo


def q8(x, block, pow2=False):
    xb = x.reshape(-1, block)
    amax = np.abs(xb).max(-1, keepdims=True)
    S = 2.0 ** np.ceil(np.log2(amax / 127)) if pow2 else amax / 127
    return (np.rint(xb / S) * S).reshape(-1)


def rel_rms(err, y):
    return np.sqrt(np.mean(err ** 2) / np.mean(y ** 2))


def main():
    xs = [rng.standard_normal(C) for _ in range(20)]
    for bits in (4, 8):
        q, s, b = mlx_quantize(bits)
        sq = (q * s).reshape(R, C)
        wd = sq + np.repeat(b[..., 0], G, axis=1)
        kernel_block = 128 if bits == 4 else 64   # the row kernels' blocks
        variants = [(f"rows: block {kernel_block}, exact X_g", kernel_block, False, False),
                    (f"rows: block {kernel_block}, quantized X_g", kernel_block, True, False),
                    ("GEMM: block 64, pow2 S, exact X_g", G, False, True),
                    ("GEMM: block 64, quantized X_g", G, True, False),
                    ("block 32, quantized X_g", 32, True, False)]
        print(f"MLX {bits}-bit g{G}, relative RMS error of the product:")
        for name, block, quant_sum, pow2 in variants:
            e = []
            for x in xs:
                xh = q8(x, block, pow2)
                xsum = (xh if quant_sum else x).reshape(-1, G).sum(-1)
                got = sq @ xh + (b[..., 0] * xsum).sum(-1)
                e.append(rel_rms(got - wd @ x, wd @ x))
            print(f"  {name:40s} {np.mean(e):.2e}")
        # llama.cpp: Q4_0 / Q8_0 of the same float weights, Q8_0 activations
        wb = W.reshape(R, -1, 32)
        if bits == 4:
            m = np.take_along_axis(wb, np.abs(wb).argmax(-1)[..., None], -1)
            d = m / -8
            wl = (np.clip(np.round(wb / d), -8, 7) * d).reshape(R, C)
        else:
            d = np.abs(wb).max(-1, keepdims=True) / 127
            wl = (np.round(wb / d) * d).reshape(R, C)
        e = [rel_rms(wl @ q8(x, 32) - wl @ x, wl @ x) for x in xs]
        print(f"  {'llama.cpp Q%d_0 x Q8_0 (block 32)' % bits:40s} {np.mean(e):.2e}")


if __name__ == "__main__":
    main()

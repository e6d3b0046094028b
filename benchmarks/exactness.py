"""Worst error of `sinusoidal_encoding` (float32, on device) against float64, beside naive float32.

    python benchmarks/exactness.py

Positions: 20,000 random ones below 2**24, the last 300 below 2**24, every 2**k - 1 and a few
digit boundaries (3,000 random for dim 4096). Reference: numpy float64 sin/cos of the float64
angle p * w_i, w_i = 10000**(-2i/dim). Naive: float32 sin/cos of the float32 product.
Second table: ``exact_cos_sin`` with positions bounded by a limit (the digits ``digit_plan``
sizes for it) against the int32 range's four 8-bit digits, on the same positions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import flax_posenc as fp


def positions(n_random: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.concatenate(
        [
            rng.integers(0, 2**24, n_random),
            np.arange(2**24 - 300, 2**24),
            2 ** np.arange(25) - 1,
            [0, 1, 255, 256, 65535, 65536],
        ]
    )


def interleave(sin: np.ndarray, cos: np.ndarray) -> np.ndarray:
    out = np.empty(sin.shape[:-1] + (2 * sin.shape[-1],), sin.dtype)
    out[..., 0::2], out[..., 1::2] = sin, cos
    return out


def main() -> None:
    print("| dim | positions | exact (ours) max abs error | naive float32 max abs error |")
    print("|---|---|---|---|")
    for dim in (64, 512, 768, 4096):
        p = positions(3000 if dim == 4096 else 20000)
        w = fp.sinusoidal_frequencies(dim)
        angle = p[:, None].astype(np.float64) * w
        ref = interleave(np.sin(angle), np.cos(angle))
        ours = np.asarray(jax.jit(lambda q: fp.sinusoidal_encoding(q, dim))(jnp.asarray(p, jnp.int32)), np.float64)
        a32 = p[:, None].astype(np.float32) * w.astype(np.float32)
        naive = interleave(np.sin(a32), np.cos(a32)).astype(np.float64)
        print(f"| {dim} | {len(p)} below 2**24 | {np.abs(ours - ref).max():.2e} | {np.abs(naive - ref).max():.2e} |")
    bounded()


def bounded() -> None:
    """Positions below a limit: digits sized by the limit (``digit_plan``) vs the int32 range's 4 x 8."""
    from flax_posenc.sinusoidal import digit_plan, exact_cos_sin

    print("\n| dim | limit | digits x bits | max abs error, digits by the limit | max abs error, 4 x 8 digits |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for dim in (64, 768):
        w = fp.sinusoidal_frequencies(dim)
        for limit in (1024, 2048, 2**16, 2**20, 2**24):
            p = np.unique(np.concatenate([rng.integers(0, limit, 20000), np.arange(limit - 300, limit)]))
            angle = p[:, None].astype(np.float64) * w
            ref = np.concatenate([np.cos(angle), np.sin(angle)], -1)
            q = jnp.asarray(p, jnp.int32)
            errs = []
            for bounds in ((0, limit - 1), (-(2**31), 2**31 - 1)):
                cos, sin = jax.jit(lambda x, b=bounds: exact_cos_sin(x, w, bounds=b))(q)
                errs.append(
                    np.abs(np.concatenate([np.asarray(cos, np.float64), np.asarray(sin, np.float64)], -1) - ref).max()
                )
            digits, bits = digit_plan(0, limit - 1)
            print(f"| {dim} | {limit} | {digits} x {bits} | {errs[0]:.2e} | {errs[1]:.2e} |")


if __name__ == "__main__":
    main()

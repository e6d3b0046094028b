"""ALiBi against Hugging Face's storage and against float64: what docs/rope-alibi.md and alibi.py claim.

    python benchmarks/alibi_parity.py        # ~20 s on 2 cores; needs torch + transformers

1. ``mpt_alibi_tensor`` vs MPT's ``build_mpt_alibi_tensor`` and ``bloom_alibi_tensor`` vs BLOOM's
   ``build_alibi_tensor`` (seq 128), for every head count 1..128: which are bit-identical.
2. ``alibi_bias`` entries vs the exact product ``m_h * (i - j)`` (float64 slope, exact distance)
   rounded once to float32: the share that is 1 ulp off, the largest error in ulps.
3. Softmax of random float32 scores (N(0, 1)) plus each storage, causal: the largest difference of
   the attention probabilities from the float64 softmax with exact biases, for ours, BLOOM's and
   MPT's, at sequence lengths 128, 512, 2048 (12 heads; the last 128 query rows, where BLOOM's
   ``m_h * j`` is largest).
"""

from __future__ import annotations

import numpy as np


def main() -> None:
    import jax
    import jax.numpy as jnp
    import torch
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    import flax_posenc as fp
    from flax_posenc.alibi import bloom_alibi_tensor, mpt_alibi_tensor

    seq = 128
    mpt_exact, bloom_exact, mpt_worst, bloom_worst = [], [], 0.0, 0.0
    for heads in range(1, 129):
        mpt = np.abs(np.asarray(mpt_alibi_tensor(heads, seq)) - build_mpt_alibi_tensor(heads, seq).numpy()).max()
        mask = np.ones((1, seq), np.int64)
        bloom = np.abs(
            np.asarray(bloom_alibi_tensor(jnp.asarray(mask), heads))
            - build_alibi_tensor(torch.from_numpy(mask), heads, torch.float32).numpy()
        ).max()
        (mpt_exact if mpt == 0 else []).append(heads)
        (bloom_exact if bloom == 0 else []).append(heads)
        mpt_worst, bloom_worst = max(mpt_worst, mpt), max(bloom_worst, bloom)
    mpt_differs = [h for h in range(1, 129) if h not in mpt_exact]
    print(
        f"1. seq {seq}, heads 1..128: MPT bit-identical for {len(mpt_exact)} head counts; differs for {mpt_differs} "
        f"(worst {mpt_worst:.2e})"
    )
    print(f"   BLOOM bit-identical for {len(bloom_exact)} of 128 head counts ({bloom_exact}); worst {bloom_worst:.2e}")
    long_seq = max(
        np.abs(
            np.asarray(mpt_alibi_tensor(h, 2048, b)) - build_mpt_alibi_tensor(h, 2048, alibi_bias_max=b).numpy()
        ).max()
        for h in (12, 24, 48, 16)
        for b in (8, 16)
    )
    print(f"   MPT at seq 2048, heads 12/24/48/16, alibi_bias_max 8/16: worst {long_seq:.2e}")

    off, total, worst_ulps = 0, 0, 0.0
    for heads in (8, 12, 16, 30, 112):
        L = 512
        exact_slopes = fp.alibi_slopes(heads)  # float64
        d = np.arange(L, dtype=np.float64)
        exact = -exact_slopes[:, None] * d[None, :]  # (heads, distance): every i - j occurs
        correctly_rounded = exact.astype(np.float32)
        ours = np.asarray(fp.alibi_bias(heads, L))[:, L - 1, ::-1]  # row i = L-1: distances 0..L-1
        ulps = np.abs(ours.astype(np.float64) - correctly_rounded) / np.spacing(np.abs(correctly_rounded)).clip(1e-45)
        off += int((ours != correctly_rounded).sum())
        total += ours.size
        worst_ulps = max(worst_ulps, float(np.nanmax(np.where(correctly_rounded == 0, 0, ulps))))
        err_exact = np.abs(ours - exact) / np.spacing(np.abs(exact).astype(np.float32)).clip(1e-45)
        worst_vs_exact = float(np.where(exact == 0, 0, err_exact).max())
    print(
        f"2. alibi_bias vs the correctly rounded exact product (heads 8, 12, 16, 30, 112; distances < 512): "
        f"{off / total:.1%} of {total} entries differ, by at most {worst_ulps:.0f} ulp; "
        f"within {worst_vs_exact:.2f} ulp of the exact value"
    )

    rng = np.random.default_rng(0)
    heads = 12
    slopes = fp.alibi_slopes(heads)
    for L in (128, 512, 2048):
        rows = np.arange(L - 128, L)
        scores = rng.standard_normal((heads, rows.size, L)).astype(np.float32)
        causal = np.arange(L)[None, :] <= rows[:, None]
        exact_bias = -slopes[:, None, None] * (rows[:, None] - np.arange(L)[None, :])
        ref = _softmax64(np.where(causal, scores.astype(np.float64) + exact_bias, -np.inf))
        ours = np.asarray(fp.alibi_bias(heads, L))[:, rows]
        bloom = np.asarray(bloom_alibi_tensor(jnp.ones((1, L), jnp.int32), heads))
        mpt = np.asarray(mpt_alibi_tensor(heads, L))
        out = []
        for name, bias in (("ours", ours), ("BLOOM", bloom), ("MPT", mpt)):
            probs = np.asarray(
                jax.nn.softmax(jnp.asarray(np.where(causal, scores + bias, np.finfo(np.float32).min)), axis=-1)
            )
            out.append(f"{name} {np.abs(probs - ref).max():.1e}")
        ours_p = np.asarray(
            jax.nn.softmax(jnp.asarray(np.where(causal, scores + ours, np.finfo(np.float32).min)), axis=-1)
        )
        agree = [
            np.abs(
                ours_p
                - np.asarray(
                    jax.nn.softmax(jnp.asarray(np.where(causal, scores + b, np.finfo(np.float32).min)), axis=-1)
                )
            ).max()
            for b in (bloom, mpt)
        ]
        print(f"3. L={L}: attention vs float64: {', '.join(out)}; ours vs BLOOM {agree[0]:.1e}, vs MPT {agree[1]:.1e}")


def _softmax64(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


if __name__ == "__main__":
    main()

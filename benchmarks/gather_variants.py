"""Experiments behind issue 16's fast paths: row-gather variants for bfloat16 and RoPE forms.

    python benchmarks/gather_variants.py [--rounds 3] [--dtype bfloat16|float32]

One process, same inputs, candidates interleaved (see benchmarks/run.py); prints per-round
medians (ms) and each candidate's ratio to the plain form, and whether it is bit-exact to it
(including out-of-range ids). Gather candidates (B16 x T1024 x D768, vocab 50257, + wpe[:T]):
plain ``jnp.take``; the table bit-cast to same-width unsigned ints (``take_rows``'s path, with a
row-level fill); the table bit-cast to ``(V, D/2)`` uint32 (wider words); PyTorch's
``wte(ids) + wpe(pos)``. RoPE candidates (B4 x T1024 x 16 heads x 128, static cos/sin): the
concatenated form ``concat([x1 c - x2 s, x2 c + x1 s])`` and ``fp.apply_rotary``.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from run import interleaved, loadavg  # noqa: E402

import flax_posenc as fp  # noqa: E402
from flax_posenc.lookup import take_rows  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    args = parser.parse_args()
    B, T, D, V = 16, 1024, 768, 50257
    dt = jnp.bfloat16 if args.dtype == "bfloat16" else jnp.float32
    rng = np.random.default_rng(0)
    ids_np = [rng.integers(0, V, (B, T), dtype=np.int32) for _ in range(4)]
    ids = [jnp.asarray(x) for x in ids_np]
    word = jnp.asarray(rng.standard_normal((V, D), dtype=np.float32), dt)
    wpe = jnp.asarray(rng.standard_normal((1024, D), dtype=np.float32), dt)

    def wide(w, x):
        w32 = jax.lax.bitcast_convert_type(w.reshape(V, D // 2, 2), jnp.uint32) if dt == jnp.bfloat16 else w
        r = jnp.take(w32, x, axis=0)
        return jax.lax.bitcast_convert_type(r, dt).reshape(*x.shape, D) if dt == jnp.bfloat16 else r

    def same_width_bits(w, x):
        if dt == jnp.float32:  # take_rows keeps 4-byte rows on the plain gather; force the bit path here
            bits = jax.lax.bitcast_convert_type(w, jnp.uint32)
            ok = (x >= -V) & (x < V)
            got = bits.at[jnp.where(x < 0, x + V, x)].get(mode="promise_in_bounds")
            nan = jax.lax.bitcast_convert_type(jnp.array(jnp.nan, dt), jnp.uint32)
            return jax.lax.bitcast_convert_type(jnp.where(ok[..., None], got, nan), dt)
        return take_rows(w, x)

    gathers = {
        "plain jnp.take": lambda w, x: jnp.take(w, x, axis=0),
        "same-width uint bits": same_width_bits,
        "(V, D/2) uint32 wider words": wide,
    }
    fns = {k: jax.jit(lambda w, p, x, g=g: g(w, x) + p[: x.shape[-1]]) for k, g in gathers.items()}
    bad = ids[0].at[0, :3].set(jnp.array([-1, V, -V - 1]))
    for k, f in fns.items():
        same = all(
            np.array_equal(
                np.asarray(f(word, wpe, x)).view(np.uint8),
                np.asarray(fns["plain jnp.take"](word, wpe, x)).view(np.uint8),
            )
            for x in (ids[0], bad)
        )
        print(f"{k}: bit-exact to plain (incl. out-of-range ids): {same}")
    tt = torch.bfloat16 if dt == jnp.bfloat16 else torch.float32
    emb, pe = torch.nn.Embedding(V, D).to(tt), torch.nn.Embedding(1024, D).to(tt)
    tids = [torch.from_numpy(x.astype(np.int64)) for x in ids_np]

    def hf(x):
        with torch.no_grad():
            return emb(x) + pe(torch.arange(x.shape[-1]).unsqueeze(0))

    sync = jax.block_until_ready
    cands = {k: (lambda x, f=f: f(word, wpe, x), ids, sync) for k, f in fns.items()}
    cands["PyTorch wte(ids) + wpe(pos)"] = (hf, tids, lambda _: None)
    report("row gather + add, " + args.dtype, cands, "plain jnp.take", args.rounds)

    bq, hq, hd = 4, 16, 128
    cfg = fp.RopeConfig(head_dim=hd, rope_theta=500000.0)
    cos, sin = fp.rotary_cos_sin(np.arange(T), cfg)
    cos, sin = cos[:, None, :], sin[:, None, :]
    qk = [jnp.asarray(rng.standard_normal((2, bq, T, hq, hd), dtype=np.float32)) for _ in range(3)]

    def concat(x):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    ropes = {"concatenated form": jax.jit(concat), "fp.apply_rotary": jax.jit(lambda x: fp.apply_rotary(x, cos, sin))}
    ref = np.asarray(qk[0], np.float64)
    c64, s64 = np.asarray(cos, np.float64), np.asarray(sin, np.float64)
    want = np.concatenate([ref[..., :64] * c64 - ref[..., 64:] * s64, ref[..., 64:] * c64 + ref[..., :64] * s64], -1)
    for k, f in ropes.items():
        print(f"{k}: max error vs float64 {np.abs(np.asarray(f(qk[0]), np.float64) - want).max():.2e}")
    report(
        "RoPE on q and k, static cos/sin",
        {k: (f, qk, sync) for k, f in ropes.items()},
        "concatenated form",
        args.rounds,
    )


def report(title, cands, base, rounds):
    load0 = loadavg()
    times = interleaved(cands, rounds=rounds, calls=12)
    print(f"\n{title} (load before/after: {load0} / {loadavg()})")
    for k, v in times.items():
        r = [a / b for a, b in zip(v, times[base])]
        print(
            f"  {k:32s} ms {[round(x * 1e3, 2) for x in v]}  / {base}: median {np.median(r):.2f} [{min(r):.2f}-{max(r):.2f}]"
        )


if __name__ == "__main__":
    main()

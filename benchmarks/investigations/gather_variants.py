"""Experiments behind issue 16's fast paths: row-gather variants, the decode-step guard, RoPE forms.

    python benchmarks/investigations/gather_variants.py [--rounds 3] [--dtype bfloat16|float32] [--skip-rope]

One process, same inputs, candidates interleaved (see benchmarks/run.py); prints per-round
medians (ms or us) and each candidate's ratio to the plain form and to PyTorch, and whether it is
bit-exact to the plain form (including out-of-range ids). Gather candidates (B16 x T1024 x D768,
vocab 50257, + wpe[:T]): plain ``jnp.take``; ``take_rows`` as it was (same-width unsigned bits,
one fusion with the add) and as it is (``lax.cond(all ids in range, plain row gather, general)``,
which XLA does not fuse into the add); an explicit ``lax.gather`` with ``PROMISE_IN_BOUNDS``;
the table bit-cast to ``(V, D/2)`` uint32 (wider words); a ``(V*D/64, 64)`` view with computed
flat row indices; ``jnp.take_along_axis``; the add in float32 cast once; and the parts alone
(the gather, the add, PyTorch's ``wte(ids)`` alone) beside PyTorch's ``wte(ids) + wpe(pos)``.
Decode candidates (batch 1, one token, traced start, float32 GPT-2 tables, 100 steps per timed
call): the hand-written ``word[ids] + wpe[t]``, and the functional block with the general guard
(positions array, reduction) and with the scalar-start guard. RoPE candidates (B4 x T1024 x 16
heads x 128, static cos/sin): the concatenated form and ``fp.apply_rotary``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from run import interleaved, loadavg  # noqa: E402

import flax_posenc as fp  # noqa: E402
from flax_posenc import lookup  # noqa: E402
from flax_posenc.lookup import take_rows  # noqa: E402


def traced_with(attr, value, fn, *args, **kwargs):
    """Trace (and compile) the jitted ``fn`` with ``lookup.<attr> = value``; later calls reuse it."""
    old = getattr(lookup, attr)
    setattr(lookup, attr, value)
    try:
        jax.block_until_ready(fn(*args, **kwargs))
    finally:
        setattr(lookup, attr, old)
    return fn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--skip-rope", action="store_true")
    parser.add_argument("--skip-decode", action="store_true")
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

    ut = jnp.uint16 if dt == jnp.bfloat16 else jnp.uint32

    def promise(w, x):  # explicit lax.gather, slice (1, D), PROMISE_IN_BOUNDS (ids proven in range)
        dims = jax.lax.GatherDimensionNumbers(offset_dims=(x.ndim,), collapsed_slice_dims=(0,), start_index_map=(0,))
        bits = jax.lax.bitcast_convert_type(w, ut)
        got = jax.lax.gather(
            bits,
            x[..., None],
            dims,
            (1, D),
            indices_are_sorted=False,
            unique_indices=False,
            mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS,
        )
        return jax.lax.bitcast_convert_type(got, dt)

    def split(w, x):  # take_rows's large-gather form, for any width
        return jax.lax.cond(jnp.all((x >= 0) & (x < V)), lambda: promise(w, x), lambda: jnp.take(w, x, axis=0))

    def flat64(w, x):  # (V*D/64, 64) rows, 12 computed row indices per token
        bits = jax.lax.bitcast_convert_type(w, ut).reshape(V * D // 64, 64)
        rows = x[..., None] * (D // 64) + jnp.arange(D // 64, dtype=x.dtype)
        return jax.lax.bitcast_convert_type(jnp.take(bits, rows, axis=0), dt).reshape(*x.shape, D)

    def along(w, x):
        return jnp.take_along_axis(w, x.reshape(-1, 1), axis=0, mode="fill").reshape(*x.shape, D)

    plain_add = jax.jit(lambda w, p, x: jnp.take(w, x, axis=0) + p[: x.shape[-1]])
    fns = {"plain jnp.take": plain_add}
    fns["take_rows without the split (one fusion)"] = traced_with(
        "SPLIT_ELEMENTS", 1 << 62, jax.jit(lambda w, p, x: take_rows(w, x) + p[: x.shape[-1]]), word, wpe, ids[0]
    )
    fns["take_rows now (2-byte: lax.cond split)"] = jax.jit(lambda w, p, x: take_rows(w, x) + p[: x.shape[-1]])
    if dt == jnp.float32:
        fns["same-width uint32 bits"] = jax.jit(lambda w, p, x: same_width_bits(w, x) + p[: x.shape[-1]])
        fns["lax.cond split (float32)"] = jax.jit(lambda w, p, x: split(w, x) + p[: x.shape[-1]])
    others = {
        "lax.gather PROMISE_IN_BOUNDS": promise,
        "(V, D/2) uint32 wider words": wide,
        "(V*D/64, 64) flat rows": flat64,
        "jnp.take_along_axis": along,
    }
    for k, g in others.items():
        fns[k] = jax.jit(lambda w, p, x, g=g: g(w, x) + p[: x.shape[-1]])
    fns["add in float32, cast once"] = jax.jit(
        lambda w, p, x: (take_rows(w, x).astype(jnp.float32) + p[: x.shape[-1]].astype(jnp.float32)).astype(dt)
    )
    bad = ids[0].at[0, :3].set(jnp.array([-1, V, -V - 1]))
    for k, f in fns.items():
        same = all(
            np.array_equal(
                np.asarray(f(word, wpe, x)).view(np.uint8), np.asarray(plain_add(word, wpe, x)).view(np.uint8)
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

    def hf_rows(x):
        with torch.no_grad():
            return emb(x)

    sync = jax.block_until_ready
    cands = {k: (lambda x, f=f: f(word, wpe, x), ids, sync) for k, f in fns.items()}
    gather_only = jax.jit(lambda w, x: take_rows(w, x))
    add_only = jax.jit(lambda a, p: a + p[: a.shape[-2]])
    rows = [gather_only(word, x) for x in ids[:2]]
    cands["part: take_rows gather alone"] = (lambda x: gather_only(word, x), ids, sync)
    cands["part: the add alone (B,T,D) + wpe[:T]"] = (lambda a: add_only(a, wpe), rows, sync)
    cands["part: PyTorch wte(ids) alone (index_select)"] = (hf_rows, tids, lambda _: None)
    cands["PyTorch wte(ids) + wpe(pos)"] = (hf, tids, lambda _: None)
    report(
        "row gather + add, " + args.dtype,
        cands,
        "plain jnp.take",
        args.rounds,
        torch_name="PyTorch wte(ids) + wpe(pos)",
    )
    if not args.skip_decode:
        decode(args.rounds)
    if args.skip_rope:
        return

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
        {k: (f, qk, jax.block_until_ready) for k, f in ropes.items()},
        "concatenated form",
        args.rounds,
    )


def decode(rounds: int) -> None:
    """Batch 1, one token, traced start, float32 GPT-2 tables: guard forms vs the hand-written step."""
    from flax import nnx

    block = fp.nnx.TransformerInput.from_arguments(50257, 768, num_positions=1024, rngs=nnx.Rngs(0))
    params, spec = block.params(), block.spec
    steps = [(jnp.array([[42 + i]], jnp.int32), jnp.int32(100 + i)) for i in range(4)]
    step = functools.partial(fp.block.transformer_input, spec)
    general = traced_with("SCALAR_START_GUARD", False, jax.jit(step), params, steps[0][0], start=steps[0][1])
    scalar = jax.jit(step)
    by_hand = jax.jit(lambda p, ids, t: p["word_embeddings"][ids] + p["position_embeddings"][t])
    for a in steps:
        want = np.asarray(by_hand(params, *a))
        for f in (general, scalar):
            assert np.array_equal(np.asarray(f(params, a[0], start=a[1])), want)
    inner = 100

    def looped(fn):
        def run(a):
            for _ in range(inner):
                out = fn(a)
            return out

        return run

    cands = {
        "hand-written word[ids] + wpe[t] (jax.jit)": looped(lambda a: by_hand(params, a[0], a[1])),
        "functional, general guard (positions, reduction)": looped(lambda a: general(params, a[0], start=a[1])),
        "functional, scalar-start guard (now)": looped(lambda a: scalar(params, a[0], start=a[1])),
    }
    cands = {k: (f, steps, jax.block_until_ready) for k, f in cands.items()}
    report(
        "decode step, us per step",
        cands,
        "hand-written word[ids] + wpe[t] (jax.jit)",
        rounds,
        calls=15,
        scale=1e6 / inner,
    )


def report(title, cands, base, rounds, *, torch_name=None, calls=12, scale=1e3):
    load0 = loadavg()
    times = interleaved(cands, rounds=rounds, calls=calls)
    env = "MALLOC_* opt-in" if "MALLOC_MMAP_THRESHOLD_" in os.environ else "default malloc"
    print(f"\n{title} ({env}; load before/after: {load0} / {loadavg()})")
    for k, v in times.items():
        r = [a / b for a, b in zip(v, times[base])]
        line = f"  {k:48s} {[round(x * scale, 2) for x in v]}  / {base}: {np.median(r):.2f} [{min(r):.2f}-{max(r):.2f}]"
        if torch_name:
            t = [b / a for a, b in zip(v, times[torch_name])]
            line += f"  PyTorch / this: {np.median(t):.2f} [{min(t):.2f}-{max(t):.2f}]"
        print(line)


if __name__ == "__main__":
    main()

"""Compile and run time of the exact-angle path (traced sinusoids, traced RoPE), before and after issue 16.

    python benchmarks/exact_angles.py [--rounds 5]

"before": the round-one layout of ``exact_cos_sin`` (always four 8-bit digits, one gather per
digit), kept here verbatim; "now": ``flax_posenc.sinusoidal.exact_cos_sin`` (digits sized by the
guard's bounds, ``digit_plan``; one gather for all digits). Both are swapped into the library
(``sinusoidal``/``rope`` module attribute) so the block and ``apply_rope`` are timed as users
call them. Same shapes as ``benchmarks/run.py``'s compile section (B16 x T1024 x D768 block with
1024 positions; RoPE 16 heads x 128, no limit). Compile: lower + compile of a fresh jit after
``jax.clear_caches()``; run: median of 15 calls. Candidates interleaved, ``--rounds`` rounds;
median [min-max] over rounds, ratios computed within a round. Also: the block with
``on_overflow="clip"`` and the overflow guard alone, which show what the guard's ``lax.cond``
costs to compile. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from compile_baselines import fresh_compile_times, plain_embed_block, summary
from compile_baselines import naive_rope as make_naive_rope
from flax import nnx

import flax_posenc as fp
from flax_posenc import overflow
from flax_posenc import rope as rope_module
from flax_posenc import sinusoidal as sin_module

NOW = sin_module.exact_cos_sin
USE_BEFORE = {"on": False}


def before_exact_cos_sin(positions, frequencies):
    """Round one's ``_exact_cos_sin``: four 8-bit digits, four gathers (verbatim but for names)."""
    w = np.ascontiguousarray(np.asarray(frequencies, dtype=np.float64).reshape(-1))
    n = w.shape[0]
    rotations = jnp.asarray(sin_module._digit_rotations_for(w.tobytes(), 4, 8))
    magnitude = jnp.abs(positions.astype(jnp.int32)).astype(jnp.uint32)
    cos = sin = None
    for k in range(4):
        digit = (magnitude >> (8 * k)) & 255
        rot = rotations[k].at[digit.astype(jnp.int32)].get(mode="promise_in_bounds")
        c, s = rot[..., :n], rot[..., n:]
        if cos is None:
            cos, sin = c, s
        else:
            cos, sin = cos * c - sin * s, sin * c + cos * s
    sin = jnp.where((positions < 0)[..., None], -sin, sin)
    return cos, sin


def switch(positions, frequencies, *, bounds=sin_module.INT32_RANGE):
    if USE_BEFORE["on"]:
        return before_exact_cos_sin(positions, frequencies)
    return NOW(positions, frequencies, bounds=bounds)


def before(f):
    def run():
        USE_BEFORE["on"] = True
        try:
            return f()
        finally:
            USE_BEFORE["on"] = False

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="tiny shapes, one round (smoke run)")
    args = ap.parse_args()
    sin_module.exact_cos_sin = switch
    rope_module.exact_cos_sin = switch
    batch, seq, dim, vocab, positions = (2, 16, 32, 100, 64) if args.quick else (16, 1024, 768, 50257, 1024)
    heads, head_dim = (2, 16) if args.quick else (16, 128)
    rounds = 1 if args.quick else args.rounds
    ids = jnp.zeros((batch, seq), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq))
    pos_shape = jax.ShapeDtypeStruct((seq,), jnp.int32)  # abstract: no eager slice compiled inside the timed call
    qk = jnp.asarray(np.random.default_rng(0).standard_normal((batch, seq, heads, head_dim)), jnp.float32)
    cfg = fp.RopeConfig(head_dim=head_dim)
    plain, state = plain_embed_block(vocab, dim, positions)
    naive_rope = make_naive_rope(cfg, seq)

    block = fp.nnx.TransformerInput(vocab, dim, num_positions=positions, position="sinusoidal", rngs=nnx.Rngs(0))
    spec, params = block.spec, block.params()
    clip = dataclasses.replace(spec, position=dataclasses.replace(spec.position, on_overflow="clip"))
    limit = overflow.Limit(positions, name="t")

    def blk(p, x, q):
        return fp.block.transformer_input(spec, p, x, position_ids=q)

    def blk_clip(p, x, q):
        return fp.block.transformer_input(clip, p, x, position_ids=q)

    def rope(x, p):
        return fp.apply_rope(x, cfg, p)

    compiles = {
        "plain nnx.Embed block": lambda: jax.jit(plain).lower(state, ids).compile(),
        "sinusoidal block, traced, before": before(lambda: jax.jit(blk).lower(params, ids, pos).compile()),
        "sinusoidal block, traced, now": lambda: jax.jit(blk).lower(params, ids, pos).compile(),
        "sinusoidal block, traced, now, on_overflow=clip": lambda: jax.jit(blk_clip).lower(params, ids, pos).compile(),
        "guard alone (on_overflow=error)": lambda: (
            jax.jit(lambda q: overflow.guard_positions(q, limit, "error")[0]).lower(pos).compile()
        ),
        "elementwise q + 1": lambda: jax.jit(lambda q: q + 1).lower(pos).compile(),
        "naive RoPE": lambda: jax.jit(naive_rope).lower(qk).compile(),
        "apply_rope, traced, before": before(lambda: jax.jit(rope).lower(qk, pos_shape).compile()),
        "apply_rope, traced, now": lambda: jax.jit(rope).lower(qk, pos_shape).compile(),
    }
    print(f"load average at start: {open('/proc/loadavg').read().split()[:3]}")
    times = fresh_compile_times(compiles, rounds)
    print("\n| compile (lower + compile, fresh jit) | time | ratio to plain nnx.Embed block / naive RoPE |")
    print("|---|---|---|")
    for k, v in times.items():
        base = times["naive RoPE" if "RoPE" in k or "rope" in k else "plain nnx.Embed block"]
        print(f"| {k} | {summary(v, base)} |")

    runs = {}
    for name, use_before in (("before", True), ("now", False)):
        USE_BEFORE["on"] = use_before
        jax.clear_caches()
        runs[f"sinusoidal block, traced, {name}"] = (jax.jit(blk).lower(params, ids, pos).compile(), (params, ids, pos))
        runs[f"apply_rope, traced, {name}"] = (jax.jit(rope).lower(qk, pos[0] + 5000).compile(), (qk, pos[0] + 5000))

        def step(p, x, t):
            return fp.block.transformer_input(spec, p, x, position_ids=jnp.full((1, 1), t, jnp.int32))

        runs[f"decode step (batch 1, traced position), {name}"] = (
            jax.jit(step).lower(params, ids[:1, :1], jnp.int32(5)).compile(),
            (params, ids[:1, :1], jnp.int32(5)),
        )
    USE_BEFORE["on"] = False
    for k in [k for k in runs if k.endswith("now")]:
        a = np.asarray(runs[k][0](*runs[k][1]))
        b = np.asarray(runs[k.replace("now", "before")][0](*runs[k][1]))
        print(f"\n{k}: max |now - before| = {np.abs(a - b).max():.2e}", end="")
    print()
    rtimes = {k: [] for k in runs}
    for _ in range(rounds):
        per = {k: [] for k in runs}
        for _ in range(15):
            for k, (f, a) in runs.items():
                t0 = time.perf_counter()
                jax.block_until_ready(f(*a))
                per[k].append(time.perf_counter() - t0)
        for k in runs:
            rtimes[k].append(statistics.median(per[k]))
    print("\n| run time | time | now / before |")
    print("|---|---|---|")
    for k, v in rtimes.items():
        base = rtimes[k.replace("now", "before")] if k.endswith("now") else None
        print(f"| {k} | {summary(v, base)} |")
    print(f"\nload average at end: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()

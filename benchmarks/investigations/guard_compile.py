"""Compile and run time of the overflow guard's run-time check (traced positions, ``on_overflow="error"``).

    python benchmarks/investigations/guard_compile.py [--rounds 7] [--quick]

Forms of the check, each swapped into the library (``overflow.guard_positions`` and
``lookup.guard_positions``) so the blocks are timed as users call them; everything else
(static positions, ``"clip"``/``"fill"``, checkify) is the library's:

- ``before``: the guard up to issue 16's fourth pass, verbatim: ``all(inside)`` for the
  predicate; the ``lax.cond`` branch computes ``min``/``max`` for the message.
- ``two reductions``: ``jnp.min`` and ``jnp.max`` outside the conditional, feeding both the
  predicate and the callback (the branch holds only the callback).
- ``one key reduction``: one ``max`` over an elementwise key ordered by how far a position is
  outside (below the limit first); the host decodes the worst position from the key.
- ``now``: the library (``overflow._min_max``: one variadic ``lax.reduce`` giving ``min`` and
  ``max`` together, then as ``two reductions``).

XLA CPU splits every single-output reduction over more than 32 elements into a windowed pass
and a final pass (two kernels) and does not fuse the producer of a windowed pass; a variadic
reduction stays one kernel. Compile: lower + compile of a fresh jit after
``jax.clear_caches()``, candidates interleaved, ``--rounds`` rounds, median [min-max], ratios
within a round. Run: median of 9 calls per round, after an untimed warm-up round of compiles. Shapes as ``benchmarks/run.py`` (B16 x T1024
x D768, 50257 words, 1024 positions). Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import functools  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from compile_baselines import fresh_compile_times, plain_embed_block, summary  # noqa: E402
from flax import nnx  # noqa: E402

import flax_posenc as fp  # noqa: E402
from flax_posenc import lookup, overflow  # noqa: E402

LIBRARY = overflow.guard_positions


def _checked_by_library(positions, limit, on_overflow) -> bool:
    """True where the library's own code path applies (everything but the traced "error" check)."""
    if on_overflow != "error" or not overflow.is_traced(positions) or positions.size == 0:
        return True
    if overflow.guard_mode.get() is not None or jax.default_backend() not in overflow._CALLBACK_PLATFORMS:
        return True
    lo, hi = overflow._bounds_in(positions.dtype, limit)
    info = jnp.iinfo(positions.dtype)
    return lo == info.min and hi == info.max


# --- before: verbatim but for names (overflow.py at d66bd78) ---------------------------------
def _before_raise_on_host(bad, lowest, highest, *, limit):
    if np.any(bad):
        limit.check(int(np.min(lowest)), int(np.max(highest)))
    return np.zeros(np.shape(bad), np.int32)


def before(positions, limit, on_overflow="error"):
    if _checked_by_library(positions, limit, on_overflow):
        return LIBRARY(positions, limit, on_overflow)
    lo, hi = overflow._bounds_in(positions.dtype, limit)
    inside = (positions >= lo) & (positions <= hi)
    clipped = jnp.clip(positions, lo, hi).astype(jnp.int32)
    bad = ~jnp.all(inside)
    callback = functools.partial(_before_raise_on_host, limit=limit)

    def report():
        shape = jax.ShapeDtypeStruct(bad.shape, jnp.int32)
        return jax.pure_callback(
            callback, shape, bad, jnp.min(positions), jnp.max(positions), vmap_method="expand_dims"
        )

    return clipped + jax.lax.cond(bad, report, lambda: jnp.zeros(bad.shape, jnp.int32)), None


# --- two reductions ---------------------------------------------------------------------------
def two_reductions(positions, limit, on_overflow="error"):
    if _checked_by_library(positions, limit, on_overflow):
        return LIBRARY(positions, limit, on_overflow)
    lo, hi = overflow._bounds_in(positions.dtype, limit)
    lowest, highest = jnp.min(positions), jnp.max(positions)
    zero = overflow._runtime_error((lowest < lo) | (highest > hi), lowest, highest, limit)
    return jnp.clip(positions, lo, hi).astype(jnp.int32) + zero, None


# --- one key reduction ------------------------------------------------------------------------
def _key_on_host(key, *, limit, lo, dtype):
    # key: p - lo for p >= lo (0 .. max - lo); for p < lo, UMAX - (p - min) (all larger)
    info, k = np.iinfo(dtype), int(np.max(key))
    worst = k + lo if k <= info.max - lo else info.min + (2**info.bits - 1) - k
    limit.check(worst, worst)
    return np.zeros(np.shape(key), np.int32)


def one_key(positions, limit, on_overflow="error"):
    if _checked_by_library(positions, limit, on_overflow):
        return LIBRARY(positions, limit, on_overflow)
    lo, hi = overflow._bounds_in(positions.dtype, limit)
    info = jnp.iinfo(positions.dtype)
    unsigned = jnp.dtype(f"uint{info.bits}")
    u = jax.lax.bitcast_convert_type(positions, unsigned) if info.min < 0 else positions
    above = u - np.array(lo % 2**info.bits, unsigned)
    below = ~(u - np.array(int(info.min) % 2**info.bits, unsigned))
    key = jnp.max(jnp.where(positions < lo, below, above))
    callback = functools.partial(_key_on_host, limit=limit, lo=lo, dtype=positions.dtype)

    def report(k):
        return jax.pure_callback(callback, jax.ShapeDtypeStruct((), jnp.int32), k, vmap_method="expand_dims")

    bad = key > np.array(hi - lo, unsigned)
    zero = jax.lax.cond(bad, report, lambda k: jnp.zeros((), jnp.int32), key)
    return jnp.clip(positions, lo, hi).astype(jnp.int32) + zero, None


GUARDS = {"before": before, "two reductions": two_reductions, "one key reduction": one_key, "now": LIBRARY}


def use(guard):
    overflow.guard_positions = lookup.guard_positions = guard


def loadavg() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="tiny shapes, one round (smoke run)")
    args = ap.parse_args()
    batch, seq, dim, vocab, positions = (2, 16, 32, 100, 64) if args.quick else (16, 1024, 768, 50257, 1024)
    rounds = 1 if args.quick else args.rounds
    ids = jnp.asarray(np.random.default_rng(0).integers(0, vocab, (batch, seq)), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq))
    plain, state = plain_embed_block(vocab, dim, positions)

    sin_block = fp.nnx.TransformerInput.from_arguments(
        vocab, dim, num_positions=positions, position="sinusoidal", rngs=nnx.Rngs(0)
    )
    learned = fp.nnx.TransformerInput.from_arguments(vocab, dim, num_positions=positions, rngs=nnx.Rngs(0))
    sin_spec, sin_params = sin_block.spec, sin_block.params()
    spec, params = learned.spec, learned.params()
    clip = dataclasses.replace(sin_spec, position=dataclasses.replace(sin_spec.position, on_overflow="clip"))
    limit = overflow.Limit(positions, name="t")

    def sin_traced(p, x, q):
        return fp.block.transformer_input(sin_spec, p, x, position_ids=q)

    def learned_traced(p, x, q):
        return fp.block.transformer_input(spec, p, x, position_ids=q)

    def loss_ours(p, x, q):  # the training step of benchmarks/run.py: guard on (traced position_ids)
        return jnp.sum(jnp.square(fp.block.transformer_input(spec, p, x, position_ids=q)))

    def loss_plain(p, x, q):
        y = jnp.take(p["word_embeddings"], x, axis=0) + jnp.take(p["position_embeddings"], q, axis=0)
        return jnp.sum(jnp.square(y))

    def with_guard(name, f):
        def run():
            use(GUARDS[name])
            try:
                return f()
            finally:
                use(LIBRARY)

        return run

    compiles = {"plain nnx.Embed block": lambda: jax.jit(plain).lower(state, ids).compile()}
    compiles["sinusoidal block, traced, on_overflow=clip"] = lambda: (
        jax.jit(lambda p, x, q: fp.block.transformer_input(clip, p, x, position_ids=q))
        .lower(sin_params, ids, pos)
        .compile()
    )
    for name in GUARDS:
        compiles[f"sinusoidal block, traced, {name}"] = with_guard(
            name, lambda: jax.jit(sin_traced).lower(sin_params, ids, pos).compile()
        )
    for name in GUARDS:
        compiles[f"learned block, traced, {name}"] = with_guard(
            name, lambda: jax.jit(learned_traced).lower(params, ids, pos).compile()
        )
    for name in GUARDS:
        compiles[f"guard alone, {name}"] = with_guard(
            name, lambda: jax.jit(lambda q: overflow.guard_positions(q, limit)[0]).lower(pos).compile()
        )
    print(f"load average at start: {loadavg()}")
    times = fresh_compile_times(compiles, rounds, warmup=True)
    print("\n| compile (lower + compile, fresh jit) | time | / plain nnx.Embed block |")
    print("|---|---|---|")
    for k, v in times.items():
        print(f"| {k} | {summary(v, times['plain nnx.Embed block'])} |")
    print(f"\nload average: {loadavg()}")

    runs = {}
    for name in GUARDS:
        use(GUARDS[name])
        runs[f"sinusoidal block, traced, {name}"] = (jax.jit(sin_traced), (sin_params, ids, pos))
        runs[f"training step (value_and_grad), guard {name}"] = (
            jax.jit(jax.value_and_grad(loss_ours)),
            (params, ids, pos),
        )
        runs[f"guard alone, {name}"] = (jax.jit(lambda q: overflow.guard_positions(q, limit)[0]), (pos,))
        jax.block_until_ready(runs[f"guard alone, {name}"][0](pos))
        jax.block_until_ready(runs[f"sinusoidal block, traced, {name}"][0](sin_params, ids, pos))
        jax.block_until_ready(runs[f"training step (value_and_grad), guard {name}"][0](params, ids, pos))
    use(LIBRARY)
    clip_spec = dataclasses.replace(spec, position=dataclasses.replace(spec.position, on_overflow="clip"))
    runs["training step (value_and_grad), on_overflow=clip (no check)"] = (
        jax.jit(
            jax.value_and_grad(
                lambda p, x, q: jnp.sum(jnp.square(fp.block.transformer_input(clip_spec, p, x, position_ids=q)))
            )
        ),
        (params, ids, pos),
    )
    runs["training step (value_and_grad), hand-written take + add"] = (
        jax.jit(jax.value_and_grad(loss_plain)),
        (params, ids, pos),
    )
    ref = runs["training step (value_and_grad), hand-written take + add"]
    want = jax.tree.map(np.asarray, ref[0](*ref[1]))
    for name in [*GUARDS, "on_overflow=clip"]:
        key = f"guard {name}" if name in GUARDS else "on_overflow=clip (no check)"
        got = jax.tree.map(np.asarray, runs[f"training step (value_and_grad), {key}"][0](params, ids, pos))
        same = all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
        print(f"training step, guard {name}: value and gradients bit-equal to hand-written: {same}")
    rtimes = {k: [] for k in runs}
    for _ in range(rounds):
        per = {k: [] for k in runs}
        for _ in range(9):
            for k, (f, a) in runs.items():
                t0 = time.perf_counter()
                jax.block_until_ready(f(*a))
                per[k].append(time.perf_counter() - t0)
                time.sleep(0.01)  # untimed settle, as benchmarks/run.py
        for k in runs:
            rtimes[k].append(statistics.median(per[k]))
    print("\n| run time (median of 9 calls per round) | time | / reference |")
    print("|---|---|---|")
    for k, v in rtimes.items():
        if k.startswith("training"):
            base = rtimes["training step (value_and_grad), hand-written take + add"]
        elif k.startswith("guard alone"):
            base = rtimes["guard alone, before"]
        else:
            base = rtimes["sinusoidal block, traced, before"]
        print(f"| {k} | {summary(v, base)} |")
    print(f"\nload average at end: {loadavg()}")


if __name__ == "__main__":
    main()

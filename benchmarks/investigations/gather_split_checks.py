"""Checks behind the second pass of issue 16 (docs/benchmarks.md, "bfloat16 block and decode guard").

    python benchmarks/investigations/gather_split_checks.py [--rounds 3] [--part sizes|trap|decode|all]

One process per part, same inputs, candidates interleaved (``run.interleaved``); medians per
round and ratios per round, median [min-max].

- ``sizes``: the bfloat16 learned block (``fp.block.transformer_input``, GPT-2 shapes) with the
  split gather of ``take_rows`` (``lax.cond``, the add unfused) against the single fusion
  (``lookup.SPLIT_ELEMENTS`` raised while tracing), default and explicit ``position_ids``, at
  ``B x T`` in {16 x 1024, 1 x 1024, 1 x 128}: where the split starts to pay.
- ``trap``: the conditional returning ``uint16`` bits (bit-cast to bfloat16 after it) against
  returning bfloat16: the add's fusion then converts element by element.
- ``decode``: guard forms for a one-token step written by hand (no library code): a bool
  ``lax.cond`` with a zero dependency (the adopted form), an int32 ``lax.switch`` index, the
  output passed through the conditional, and no guard.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from run import interleaved, loadavg  # noqa: E402

import flax_posenc as fp  # noqa: E402
from flax_posenc import lookup  # noqa: E402

V, D, P = 50257, 768, 1024


def show(title, times, base, scale=1e3, unit="ms"):
    env = "MALLOC_* opt-in" if "MALLOC_MMAP_THRESHOLD_" in os.environ else "default malloc"
    print(f"\n{title} ({env}; load after: {loadavg()})")
    for k, v in times.items():
        r = [a / b for a, b in zip(v, times[base])]
        print(
            f"  {k:44s} {unit} {[round(x * scale, 3) for x in v]}  / {base}: {np.median(r):.2f} [{min(r):.2f}-{max(r):.2f}]"
        )


def sizes(rounds):
    from flax import nnx

    block = fp.nnx.TransformerInput.from_arguments(
        V, D, num_positions=P, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0)
    )
    spec, params = block.spec, block.params()
    rng = np.random.default_rng(0)
    for b, t in ((16, 1024), (1, 1024), (1, 128)):
        ids = [jnp.asarray(rng.integers(0, V, (b, t), dtype=np.int32)) for _ in range(4)]
        pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))

        def build(split, explicit):
            old = lookup.SPLIT_ELEMENTS
            lookup.SPLIT_ELEMENTS = split
            try:
                kw = {"position_ids": pos} if explicit else {}
                f = jax.jit(lambda p, x, kw=kw: fp.block.transformer_input(spec, p, x, **kw))
                jax.block_until_ready(f(params, ids[0]))  # traced with this setting; later calls reuse it
            finally:
                lookup.SPLIT_ELEMENTS = old
            return lambda x: f(params, x)

        fns = {
            "one fusion, default positions": build(1 << 62, False),
            "split, default positions": build(1, False),
            "one fusion, explicit position_ids": build(1 << 62, True),
            "split, explicit position_ids": build(1, True),
        }
        want = np.asarray(
            jnp.take(params["word_embeddings"], ids[0], axis=0) + jnp.take(params["position_embeddings"], pos, axis=0)
        )
        assert all(np.array_equal(np.asarray(f(ids[0])).view(np.uint16), want.view(np.uint16)) for f in fns.values())
        times = interleaved({k: (f, ids, jax.block_until_ready) for k, f in fns.items()}, rounds=rounds, calls=9)
        show(f"bf16 block B{b} x T{t}, bit-exact to jnp.take + jnp.take: True", times, "one fusion, default positions")


def trap(rounds):
    rng = np.random.default_rng(0)
    ids = [jnp.asarray(rng.integers(0, V, (16, 1024), dtype=np.int32)) for _ in range(4)]
    w = jnp.asarray(rng.standard_normal((V, D), dtype=np.float32), jnp.bfloat16)
    p = jnp.asarray(rng.standard_normal((P, D), dtype=np.float32), jnp.bfloat16)

    def plain16(x):
        return jax.lax.bitcast_convert_type(w, jnp.uint16).at[x].get(mode="promise_in_bounds")

    def fill16(x):
        got = jax.lax.bitcast_convert_type(w, jnp.uint16).at[jnp.where(x < 0, x + V, x)].get(mode="promise_in_bounds")
        return jnp.where(((x >= -V) & (x < V))[..., None], got, jnp.uint16(0x7FC0))

    def inside(x):
        return jnp.all((x >= 0) & (x < V))

    def as_bf16(f):
        return lambda x: jax.lax.bitcast_convert_type(f(x), jnp.bfloat16)

    fns = {
        "plain jnp.take + add": lambda x: jnp.take(w, x, axis=0) + p[:1024],
        "branches return bfloat16 (adopted)": lambda x: (
            jax.lax.cond(inside(x), as_bf16(plain16), as_bf16(fill16), x) + p[:1024]
        ),
        "branches return uint16, bit-cast after": lambda x: (
            as_bf16(lambda y: jax.lax.cond(inside(y), plain16, fill16, y))(x) + p[:1024]
        ),
    }
    fns = {k: jax.jit(f) for k, f in fns.items()}
    times = interleaved({k: (f, ids, jax.block_until_ready) for k, f in fns.items()}, rounds=rounds, calls=9)
    show("the conditional's output dtype (bf16 B16 x T1024 gather + add)", times, "plain jnp.take + add")


def decode(rounds):
    rng = np.random.default_rng(0)
    params = {
        "w": jnp.asarray(rng.standard_normal((V, D), dtype=np.float32)),
        "p": jnp.asarray(rng.standard_normal((P, D), dtype=np.float32)),
    }
    steps = [(jnp.array([[42 + i]], jnp.int32), jnp.int32(100 + i)) for i in range(4)]

    def report(s):
        return jax.pure_callback(
            lambda s: np.zeros(np.shape(s), np.int32), jax.ShapeDtypeStruct((), jnp.int32), s, vmap_method="expand_dims"
        )

    def rows(p, i, t, zero=0):
        return jnp.take(p["w"], i, axis=0) + jax.lax.dynamic_slice_in_dim(p["p"], jnp.clip(t, 0, P - 1) + zero, 1)

    def bool_cond(p, i, t):
        return rows(p, i, t, jax.lax.cond((t < 0) | (t > P - 1), report, lambda s: jnp.zeros((), jnp.int32), t))

    def int_switch(p, i, t):
        index = (t < 0).astype(jnp.int32) | (t > P - 1).astype(jnp.int32)
        return rows(p, i, t, jax.lax.switch(index, [lambda s: jnp.zeros((), jnp.int32), report], t))

    def through(p, i, t):
        out = rows(p, i, t)
        return jax.lax.cond((t < 0) | (t > P - 1), lambda o, s: o + report(s).astype(o.dtype), lambda o, s: o, out, t)

    fns = {
        "hand-written word[ids] + wpe[t]": lambda p, i, t: p["w"][i] + p["p"][t],
        "bool lax.cond, zero dependency (adopted)": bool_cond,
        "int32 lax.switch index, zero dependency": int_switch,
        "output through the conditional": through,
    }
    inner = 100

    def looped(f):
        def run(a):
            for _ in range(inner):
                out = f(params, a[0], a[1])
            return out

        return run

    cands = {k: (looped(jax.jit(f)), steps, jax.block_until_ready) for k, f in fns.items()}
    times = interleaved(cands, rounds=rounds, calls=15)
    show("decode guard forms, us per step", times, "hand-written word[ids] + wpe[t]", scale=1e6 / inner, unit="us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--part", default="all", choices=("sizes", "trap", "decode", "all"))
    args = parser.parse_args()
    print(f"load before: {loadavg()}")
    for name, part in (("sizes", sizes), ("trap", trap), ("decode", decode)):
        if args.part in (name, "all"):
            part(args.rounds)


if __name__ == "__main__":
    main()

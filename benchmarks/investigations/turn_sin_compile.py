"""What the exact-angle ``rotary_cos_sin`` costs to compile, against naive JAX and against the
least program that gives the same bits (issue 38 item 5, second target).

Candidates, each the whole ``rotary_cos_sin(np.arange(T), LLAMA31)`` program (``--kind cs``) or
``apply_rope_qk`` on ``(1, T, 1, 128)`` bf16 ``q`` and ``k`` (``--kind qk``), compiled fresh in
turn in one process (``jax.clear_caches()`` before each), wall and process CPU time:

- ``naive``: float32 ``cos``/``sin`` of ``arange(T) * inv_freq`` (``compile_baselines``);
- ``library``: the library as it is (``turn_cos_sin`` with the known positions' bounds);
- ``unmaterialized``: the library's arithmetic without the two-lane reduction that materializes
  the values (the least program that gives these bits; XLA may then fuse the sines into every
  consumer, so the library cannot drop it);
- ``one_pass``: one ``turn_sin`` over ``[w | w]`` with quarter turns ``[1 | 0]``, split after;
- ``no_sin`` (``--kind cs`` only): ``arange * w`` and ``+ 1``, no ``sin``: the fixed cost of
  compiling any small program here.

Every candidate but ``naive``/``no_sin`` is checked bit-equal to ``library`` first.

Usage::

    python benchmarks/investigations/turn_sin_compile.py --lengths 1024 131072 --rounds 9
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compile_baselines import LLAMA31, naive_rope  # noqa: E402

import flax_posenc as fp  # noqa: E402
import flax_posenc.rope as rope_module  # noqa: E402
from flax_posenc import sinusoidal  # noqa: E402

INV = fp.rope_inverse_frequencies(LLAMA31)[0]


class _NoLanes:
    """``jax.lax`` for ``turn_sin``, but its lane of zeros is not padded on and the lane reduction
    is a squeeze: the same values, not materialized."""

    def __getattr__(self, name):
        return getattr(lax, name)

    @staticmethod
    def pad(x, value, config):
        return x

    @staticmethod
    def reduce(x, init, op, dims):
        return tuple(lax.squeeze(v, dims) for v in x) if isinstance(x, tuple) else lax.squeeze(x, dims)


def unmaterialized(p, w, bounds):
    """``turn_cos_sin``'s arithmetic without the two-lane reduction that materializes the values."""
    saved = sinusoidal.lax
    sinusoidal.lax = _NoLanes()
    try:
        return sinusoidal.turn_cos_sin(p, w, bounds=bounds)
    finally:
        sinusoidal.lax = saved


def one_pass(p, w, bounds):
    n = w.shape[0]
    quarters = np.concatenate([np.ones(n, np.int64), np.zeros(n, np.int64)])
    both = sinusoidal.turn_sin(p, np.concatenate([w, w]), quarters, bounds=bounds)
    return both[..., :n], both[..., n:]


@contextlib.contextmanager
def swapped(form):
    saved = rope_module.turn_cos_sin
    if form is not None:
        rope_module.turn_cos_sin = lambda p, w, bounds=sinusoidal.INT32_RANGE: form(p, w, bounds)
    try:
        yield
    finally:
        rope_module.turn_cos_sin = saved


def candidates(seq: int, kind: str) -> dict:
    """``name -> (fn, args)``."""
    x = jax.ShapeDtypeStruct((1, seq, 1, 128), jnp.bfloat16)
    inv32 = jnp.asarray(INV, jnp.float32)

    def library_with(form):
        def run(*a):
            with swapped(form):
                if kind == "cs":
                    return fp.rotary_cos_sin(np.arange(seq), LLAMA31)
                return fp.apply_rope_qk(a[0], a[1], LLAMA31)

        return run

    args = () if kind == "cs" else (x, x)
    if kind == "cs":

        def naive():
            angle = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv32
            return jnp.cos(angle), jnp.sin(angle)

        def no_sin():
            angle = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv32
            return angle, angle + 1

        out = {"naive": (naive, args)}
    else:
        rope = naive_rope(LLAMA31, seq)
        out = {"naive": (lambda q, k: (rope(q), rope(k)), args)}
    out["library"] = (library_with(None), args)
    out["unmaterialized"] = (library_with(unmaterialized), args)
    out["one_pass"] = (library_with(one_pass), args)
    if kind == "cs":
        out["no_sin"] = (no_sin, args)
    return out


def check_bits(cands: dict, kind: str, seq: int) -> None:
    def bits(fn, args):
        if kind == "qk":
            x = jnp.asarray(np.random.default_rng(0).standard_normal((1, seq, 1, 128)), jnp.bfloat16)
            args = (x, x)
        return [np.asarray(o).view(np.uint16 if o.dtype == jnp.bfloat16 else np.uint32) for o in jax.jit(fn)(*args)]

    ref = bits(*cands["library"])
    for name in ("unmaterialized", "one_pass"):
        got = bits(*cands[name])
        if not all(np.array_equal(a, b) for a, b in zip(got, ref)):
            raise SystemExit(f"{name}: bits differ from the library's at T={seq}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 131072])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--kind", choices=("cs", "qk"), default="cs")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f} at the start")
    print("| T | candidate | wall ms | / naive (median [min-max]) | CPU ms | CPU / naive |")
    print("|---|---|---|---|---|---|")
    for seq in args.lengths:
        cands = candidates(seq, args.kind)
        check_bits(cands, args.kind, seq)
        times = {k: [] for k in cands}
        for r in range(args.rounds + 1):  # round 0: warm-up, untimed
            for name, (fn, a) in cands.items():
                jax.clear_caches()
                t0, c0 = time.perf_counter(), time.process_time()
                jax.jit(fn).lower(*a).compile()
                if r:
                    times[name].append((time.perf_counter() - t0, time.process_time() - c0))
        base = times["naive"]
        for name, v in times.items():
            wall = [a[0] / b[0] for a, b in zip(v, base)]
            cpu = [a[1] / b[1] for a, b in zip(v, base)]
            print(
                f"| {seq} | {name} | {statistics.median(x[0] for x in v) * 1e3:.0f} | "
                f"{statistics.median(wall):.2f} [{min(wall):.2f}-{max(wall):.2f}] | "
                f"{statistics.median(x[1] for x in v) * 1e3:.0f} | {statistics.median(cpu):.2f} |"
            )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

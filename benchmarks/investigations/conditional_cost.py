"""What the overflow guard's run-time check costs to compile, part by part, and the alternative.

    python benchmarks/investigations/conditional_cost.py [--rounds 9]

The guard on traced positions (``on_overflow="error"``) is: one variadic min/max reduction,
a comparison, and a ``lax.cond`` whose taken branch calls back to the host to raise. This
script compiles (lower + compile, fresh jit after ``jax.clear_caches()``, interleaved,
``--rounds`` rounds, median [min-max]) the pieces one by one on B16 x T1024 int32 positions
with a 1024-row limit:

- ``clip``: ``jnp.clip`` alone (what ``on_overflow="clip"`` does);
- ``+ reduction``: the min/max reduction feeding the result (no conditional);
- ``+ lax.cond, no callback``: the conditional with a trivial taken branch;
- ``+ lax.cond + callback``: the full check, as the library builds it (``overflow.guard_positions``);
- ``callback on every call``: no conditional, the host callback runs each call;

and times one call of each for a decode-sized input (1 x 1 positions, median of
2,000 calls). Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from compile_baselines import fresh_compile_times, summary  # noqa: E402

from flax_posenc import overflow  # noqa: E402

LIMIT = 1024
INT = jax.ShapeDtypeStruct((), jnp.int32)


def _zero(lo, hi):
    return np.zeros(np.shape(lo), np.int32)


def clip(q):
    return jnp.clip(q, 0, LIMIT - 1)


def with_reduction(q):
    lo, hi = overflow._min_max(q)
    return clip(q) + ((lo < 0) | (hi >= LIMIT)).astype(jnp.int32)


def with_cond(q):
    lo, hi = overflow._min_max(q)
    zero = jax.lax.cond((lo < 0) | (hi >= LIMIT), lambda a, b: a - b, lambda a, b: jnp.zeros((), jnp.int32), lo, hi)
    return clip(q) + zero


def library(q):
    return overflow.guard_positions(q, overflow.Limit(LIMIT))[0]


def callback_always(q):
    lo, hi = overflow._min_max(q)
    return clip(q) + jax.pure_callback(_zero, INT, lo, hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    pos = jax.ShapeDtypeStruct((16, 1024), jnp.int32)
    fns = {
        "clip": clip,
        "+ reduction": with_reduction,
        "+ lax.cond, no callback": with_cond,
        "+ lax.cond + callback (the library)": library,
        "callback on every call": callback_always,
    }
    print(f"load average at start: {open('/proc/loadavg').read().split()[:3]}")
    times = fresh_compile_times(
        {k: (lambda f=f: jax.jit(f).lower(pos).compile()) for k, f in fns.items()}, args.rounds, warmup=True
    )
    one = jnp.zeros((1, 1), jnp.int32)
    print("\n| guard form | compile | compile ratio to clip | decode-sized call |")
    print("|---|---|---|---|")
    for name, values in times.items():
        fn = jax.jit(fns[name])
        fn(one).block_until_ready()
        runs = []
        for _ in range(2000):
            t0 = time.perf_counter()
            fn(one).block_until_ready()
            runs.append(time.perf_counter() - t0)
        call = f"{statistics.median(runs) * 1e6:.1f} us"
        ratio = summary(values, times["clip"]).split(" | ")[-1]
        print(f"| {name} | {summary(values).split(' | ')[0]} | {ratio} | {call} |")
    print(f"load average at end: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()

"""Traced sinusoids with a limit: gather rows of the constant table, or compose exact angles?

    python benchmarks/investigations/sinusoid_paths.py [--rounds 7] [--quick]

``flax_posenc.sinusoidal_encoding`` with ``num_positions`` reads rows of the float64-exact
``(num_positions, dim)`` table (a compile-time constant, correctly rounded) when it has at most
``sinusoidal.TABLE_GATHER_ELEMENTS`` entries, and composes exact angles from digit tables
(``exact_cos_sin``) otherwise. This script measures both paths for the GPT-2-shaped block
(``jnp.take`` of a 50257 x 768 word table plus the positions' encoding, B16 x T1024 traced
``position_ids``, ``on_overflow="clip"`` so that only the encoding differs) at several limits:
compile time (lower + compile of a fresh jit after ``jax.clear_caches()``; candidates
interleaved, ``--rounds`` rounds, median [min-max], ratio to the plain ``nnx.Embed`` block
within each round) and run time (median of 9 calls). A constant costs compile time roughly in
proportion to its bytes; the digit tables do not grow with the limit. Not a test: nothing here
asserts a time.
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
from compile_baselines import fresh_compile_times, plain_embed_block, summary  # noqa: E402

from flax_posenc import sinusoidal  # noqa: E402
from flax_posenc.sinusoid_math import sinusoidal_table_np  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="tiny shapes, one round (smoke run)")
    args = ap.parse_args()
    batch, seq, dim, vocab = (2, 16, 32, 100) if args.quick else (16, 1024, 768, 50257)
    limits = (64, 128) if args.quick else (512, 1024, 2048, 4096)
    rounds = 1 if args.quick else args.rounds
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(0, vocab, (batch, seq)), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq))
    params = {"word_embeddings": jnp.asarray(rng.standard_normal((vocab, dim)), jnp.float32)}
    plain, state = plain_embed_block(vocab, dim, max(limits))

    def table_block(limit):
        table = sinusoidal_table_np(limit, dim, dtype=np.float32)

        def block(p, x, q):
            rows = jnp.asarray(table).at[jnp.clip(q, 0, limit - 1)].get(mode="promise_in_bounds")
            return jnp.take(p["word_embeddings"], x, axis=0) + rows

        return block

    def exact_block(limit):
        w = sinusoidal.sinusoidal_frequencies(dim)

        def block(p, x, q):
            cos, sin = sinusoidal.exact_cos_sin(jnp.clip(q, 0, limit - 1), w, bounds=(0, limit - 1))
            rows = jnp.stack([sin, cos], axis=-1).reshape(*q.shape, dim)  # the interleaved layout
            return jnp.take(p["word_embeddings"], x, axis=0) + rows

        return block

    blocks = {}
    for limit in limits:
        blocks[f"table rows, limit {limit} ({limit * dim / 2**20:.2f} Mi entries)"] = table_block(limit)
        blocks[f"exact angles, limit {limit}"] = exact_block(limit)
    compiles = {"plain nnx.Embed block": lambda: jax.jit(plain).lower(state, ids).compile()}
    for name, fn in blocks.items():
        compiles[name] = lambda fn=fn: jax.jit(fn).lower(params, ids, pos).compile()
    print(f"load average at start: {open('/proc/loadavg').read().split()[:3]}")
    print(
        f"TABLE_GATHER_ELEMENTS = {sinusoidal.TABLE_GATHER_ELEMENTS} ({sinusoidal.TABLE_GATHER_ELEMENTS / 2**20:.0f} Mi)"
    )
    times = fresh_compile_times(compiles, rounds, warmup=True)
    print("\n| block (B x T traced position_ids) | compile | ratio to plain nnx.Embed block | run |")
    print("|---|---|---|---|")
    base = times["plain nnx.Embed block"]
    for name, values in times.items():
        if name in blocks:
            fn = jax.jit(blocks[name])
            fn(params, ids, pos).block_until_ready()
            runs = []
            for _ in range(9):
                t0 = time.perf_counter()
                fn(params, ids, pos).block_until_ready()
                runs.append(time.perf_counter() - t0)
            run = f"{statistics.median(runs) * 1e3:.2f} ms"
        else:
            run = ""
        ratio = summary(values, base).split(" | ")[-1] if name in blocks else "1"
        print(f"| {name} | {summary(values).split(' | ')[0]} | {ratio} | {run} |")
    print(f"load average at end: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()

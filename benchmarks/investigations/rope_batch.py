"""RoPE's time at large batches against XLA's elementwise floor on the same array.

    python benchmarks/investigations/rope_batch.py [--rounds 5]

docs/benchmarks.md's cost curves show RoPE (q or k of batch x 1024 x 8 x 128, float32, positions
``arange(1024)``) growing faster than linearly from batch 8 to 16. This script times, per batch,
``apply_rope`` (static positions), the hand-written naive float32 RoPE, and the floor ``x * 2``
(one elementwise pass producing a fresh array of the same size): candidates interleaved call by
call with a 10 ms pause, median of 9 calls per round, median [min-max] over ``--rounds`` rounds.
Run it under both malloc settings (``MALLOC_MMAP_THRESHOLD_=1000000000
MALLOC_TRIM_THRESHOLD_=1000000000`` for the opt-in). Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/

import argparse  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from compile_baselines import naive_rope  # noqa: E402

import flax_posenc as fp  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, nargs="+", default=[4, 8, 12, 16])
    args = ap.parse_args()
    seq, heads, head_dim = 1024, 8, 128
    cfg = fp.RopeConfig(head_dim=head_dim)
    fns = {
        "apply_rope": jax.jit(lambda x: fp.apply_rope(x, cfg)),
        "naive RoPE": jax.jit(naive_rope(cfg, seq)),
        "floor x * 2": jax.jit(lambda x: x * 2.0),
    }
    malloc = "opt-in" if os.environ.get("MALLOC_MMAP_THRESHOLD_") else "default"
    print(f"malloc: {malloc}; load average at start: {open('/proc/loadavg').read().split()[:3]}")
    print("\n| batch | MB per array | apply_rope ms | naive RoPE ms | floor x * 2 ms | apply_rope / floor |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for batch in args.batches:
        x = jnp.asarray(rng.standard_normal((batch, seq, heads, head_dim), dtype=np.float32))
        for f in fns.values():
            f(x).block_until_ready()
        rounds = {k: [] for k in fns}
        for _ in range(args.rounds):
            calls = {k: [] for k in fns}
            for _ in range(9):
                for k, f in fns.items():
                    t0 = time.perf_counter()
                    f(x).block_until_ready()
                    calls[k].append(time.perf_counter() - t0)
                    time.sleep(0.01)
            for k in fns:
                rounds[k].append(statistics.median(calls[k]) * 1e3)
        ratio = [a / b for a, b in zip(rounds["apply_rope"], rounds["floor x * 2"])]

        def cell(v):
            return f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"

        mb = x.size * 4 / 2**20
        print(
            f"| {batch} | {mb:.0f} | {cell(rounds['apply_rope'])} | {cell(rounds['naive RoPE'])} | "
            f"{cell(rounds['floor x * 2'])} | {cell(ratio)} |"
        )
    print(f"load average at end: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()

"""Run time of the static-position ``apply_rope_qk`` and ``sinusoidal_encoding``: the library
against the ``turn_sin`` of an earlier git revision, in one process (issue 38 item 5: a change
made for compile time must not cost run time).

``apply_rope_qk`` on Llama-3.1-8B's heads (``q`` ``(1, T, 32, 128)``, ``k`` ``(1, T, 8, 128)``,
bf16) and ``sinusoidal_encoding(np.arange(T), 768)``, each compiled once, then ``--calls``
interleaved timed calls; the outputs are checked bit-equal first.

Usage::

    python benchmarks/investigations/turn_sin_runtime.py --before 40105b1 --length 32768 --calls 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compile_baselines import LLAMA31  # noqa: E402
from program_size import load_before, traced_with  # noqa: E402

import flax_posenc as fp  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="40105b1")
    parser.add_argument("--length", type=int, default=32768)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args(argv)
    old, seq = load_before(args.before), args.length
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((1, seq, 32, 128)), jnp.bfloat16)
    k = jnp.asarray(rng.standard_normal((1, seq, 8, 128)), jnp.bfloat16)
    rope = lambda q, k: fp.apply_rope_qk(q, k, LLAMA31)  # noqa: E731
    sinus = lambda: fp.sinusoidal_encoding(np.arange(seq), 768)  # noqa: E731
    runs = {
        "apply_rope_qk": (jax.jit(rope), jax.jit(traced_with(rope, old)), (q, k)),
        "sinusoidal_encoding": (jax.jit(sinus), jax.jit(traced_with(sinus, old)), ()),
    }
    for name, (new_f, old_f, a) in runs.items():
        new_out, old_out = jax.tree.leaves(new_f(*a)), jax.tree.leaves(old_f(*a))
        equal = all(
            np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8)) for x, y in zip(new_out, old_out)
        )
        if not equal:
            raise SystemExit(f"{name}: outputs differ from {args.before}'s")
    print(
        f"load average {os.getloadavg()[0]:.1f} at the start; T={seq}, {args.calls} interleaved calls; outputs bit-equal"
    )
    print(f"| function | library ms | {args.before} ms | library / {args.before}: median [min-max] |")
    print("|---|---|---|---|")
    for name, (new_f, old_f, a) in runs.items():
        t = {"new": [], "old": []}
        for _ in range(args.calls):
            for key, f in (("new", new_f), ("old", old_f)):
                t0 = time.perf_counter()
                jax.block_until_ready(f(*a))
                t[key].append(time.perf_counter() - t0)
        r = [x / y for x, y in zip(t["new"], t["old"])]
        print(
            f"| {name} | {statistics.median(t['new']) * 1e3:.0f} | {statistics.median(t['old']) * 1e3:.0f} | "
            f"{statistics.median(r):.2f} [{min(r):.2f}-{max(r):.2f}] |"
        )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

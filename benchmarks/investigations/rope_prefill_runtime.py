"""Run time of ``apply_rope`` at static positions (a prefill), Llama-3.1-8B config, float32 ``x``.

``python benchmarks/investigations/rope_prefill_runtime.py [label]``: median and fastest of 30 calls for three
shapes; run it with ``PYTHONPATH`` pointing at two checkouts to compare them (docs/benchmarks.md,
"Program size and compile time at static positions"). ``--naive`` times the naive float32 RoPE.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compile_baselines import LLAMA31, naive_rope  # noqa: E402

import flax_posenc as fp  # noqa: E402


def main() -> None:
    naive = "--naive" in sys.argv
    label = next((a for a in sys.argv[1:] if not a.startswith("--")), "naive" if naive else "ours")
    for shape in ((4, 1024, 16, 128), (1, 8192, 8, 128), (1, 32768, 1, 128)):
        x = jnp.asarray(np.random.default_rng(0).standard_normal(shape), jnp.float32)
        f = jax.jit(naive_rope(LLAMA31, shape[1]) if naive else (lambda x: fp.apply_rope(x, LLAMA31)))
        f(x).block_until_ready()
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            f(x).block_until_ready()
            times.append(time.perf_counter() - t0)
        print(f"{label} {shape}: median {statistics.median(times) * 1e3:.1f} ms, fastest {min(times) * 1e3:.1f} ms")
    print(f"load average {', '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()

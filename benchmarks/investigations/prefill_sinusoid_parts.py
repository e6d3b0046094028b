"""Where the sinusoid block's prefill time goes: the block against its parts, at one length.

    python benchmarks/investigations/prefill_sinusoid_parts.py [T]     # default T = 32768

``benchmarks/prefill.py``'s sinusoid block (dim 1024, 32000 float32 words, ids ``(1, T)``),
ours with the default guard (``"error"``) and with ``on_overflow="clip"`` (no check), the naive
block (``take`` + float32 ``sin``/``cos`` on device), and the parts alone: our
``sinusoidal_encoding(np.arange(T), 1024)``, the naive table, the word ``take``. Candidates
interleaved (``prefill.interleaved_times``: 5 rounds of 3 calls), each time / the naive block's
within a round, median [min-max]. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from prefill import SIN_DIM, VOCAB, interleaved_times  # noqa: E402

import flax_posenc as fp  # noqa: E402


def main() -> None:
    seq = int(sys.argv[1]) if len(sys.argv) > 1 else 32768
    rng = np.random.default_rng(0)
    word = jnp.asarray(rng.standard_normal((VOCAB, SIN_DIM), np.float32))
    ids = jnp.asarray(rng.integers(0, VOCAB, (1, seq), dtype=np.int32))
    w = jnp.asarray(fp.sinusoidal_frequencies(SIN_DIM), jnp.float32)

    def naive_table():
        angle = jnp.arange(seq, dtype=jnp.float32)[:, None] * w
        return jnp.stack([jnp.sin(angle), jnp.cos(angle)], -1).reshape(seq, SIN_DIM)

    def block(policy):
        spec = fp.block.InputSpec(VOCAB, fp.block.PositionSpec("sinusoidal", dim=SIN_DIM, on_overflow=policy))
        return jax.jit(lambda word, ids: fp.block.transformer_input(spec, {"word_embeddings": word}, ids))

    cands = {
        "block ours": (block("error"), (word, ids)),
        "block ours, clip": (block("clip"), (word, ids)),
        "block naive": (jax.jit(lambda word, ids: jnp.take(word, ids, axis=0) + naive_table()), (word, ids)),
        "sinusoid ours": (jax.jit(lambda: fp.sinusoidal_encoding(np.arange(seq), SIN_DIM)), ()),
        "sinusoid naive": (jax.jit(naive_table), ()),
        "word take alone": (jax.jit(lambda word, ids: jnp.take(word, ids, axis=0)), (word, ids)),
    }
    runs = {k: (lambda f=f, a=a: jax.block_until_ready(f(*a))) for k, (f, a) in cands.items()}
    times = interleaved_times(runs, 5, 3)
    print(f"T={seq}, load average {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for name, t in times.items():
        r = [a / b for a, b in zip(t, times["block naive"])]
        print(
            f"{name:18s} {statistics.median(t) * 1e3:8.1f} ms   / block naive "
            f"{statistics.median(r):.2f} [{min(r):.2f}-{max(r):.2f}]"
        )


if __name__ == "__main__":
    main()

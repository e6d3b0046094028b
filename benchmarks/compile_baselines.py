"""What the compile-time benchmarks share: the plain baselines and the fresh-compile timer.

Used by ``run.py`` (compile section), ``program_size.py``, ``prefill.py`` and the scripts in
``investigations/`` (``exact_angles.py``, ``guard_compile.py``, ...) so that they
compare against the same plain ``nnx.Embed`` block and the same naive RoPE.
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
from flax import nnx

import flax_posenc as fp


def plain_embed_block(vocab: int, dim: int, positions: int):
    """``(fn, state)``: two ``nnx.Embed`` tables, ``fn(state, ids) = wte(ids) + wpe(arange(T))``."""
    wte, wpe = nnx.Embed(vocab, dim, rngs=nnx.Rngs(0)), nnx.Embed(positions, dim, rngs=nnx.Rngs(1))
    graph, state = nnx.split(nnx.List([wte, wpe]))

    def plain(s, x):
        te, pe = nnx.merge(graph, s)
        return te(x) + pe(jnp.arange(x.shape[-1]))

    return plain, state


#: Llama-3.1-8B's RoPE (llama3 scaling, 131072 positions): the long-context benchmarks' config.
LLAMA31 = fp.RopeConfig(
    head_dim=128,
    rope_theta=500000.0,
    rope_type="llama3",
    factor=8.0,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    original_max_position_embeddings=8192,
    max_position_embeddings=131072,
)


def naive_rope(cfg: fp.RopeConfig, seq: int):
    """RoPE as written by hand: float32 ``cos``/``sin`` of ``p * w`` on device, half layout."""
    half = cfg.rotary_dim // 2

    def rope(x):
        inv = jnp.asarray(fp.rope_inverse_frequencies(cfg)[0], jnp.float32)
        angle = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv
        cos, sin = jnp.cos(angle)[:, None, :], jnp.sin(angle)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    return rope


def fresh_compile_times(compiles: dict, rounds: int, *, warmup: bool = False) -> dict[str, list[float]]:
    """Seconds of each ``compiles[name]()`` (lower + compile) after ``jax.clear_caches()``, per round.

    Candidates take turns within a round; ``warmup`` runs one untimed round first (first-use
    imports and host caches).
    """
    if warmup:
        for f in compiles.values():
            jax.clear_caches()
            f()
    times = {k: [] for k in compiles}
    for _ in range(rounds):
        for k, f in compiles.items():
            jax.clear_caches()
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return times


def summary(values, base=None) -> str:
    """``median ms [min-max]``, and ``| ratio median [min-max]`` to ``base`` (per round)."""
    text = f"{statistics.median(values) * 1e3:.2f} ms [{min(values) * 1e3:.2f}-{max(values) * 1e3:.2f}]"
    if base is not None:
        r = [a / b for a, b in zip(values, base)]
        text += f" | {statistics.median(r):.2f} [{min(r):.2f}-{max(r):.2f}]"
    return text

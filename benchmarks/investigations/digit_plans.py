"""Compile time and exactness of exact_cos_sin's digit plans for unbounded (int32) positions.

    python benchmarks/investigations/digit_plans.py

Issue 16 (docs/benchmarks.md, "What limits", item 8): does the digit plan (digits x bits of the
position, i.e. the constant table's size and the number of angle additions) drive the compile
time of traced RoPE / sinusoids? Each plan is forced for positions past 2**24 by substituting
``digit_plan``; compile = lower + compile of ``exact_cos_sin`` for 1024 traced positions and
RoPE's 64 frequencies (head_dim 128), fresh (``jax.clear_caches``), median of 5 per round,
interleaved with a naive float32 ``cos``/``sin``. Exactness: max |error| vs float64 over
positions 0..4095 and 20,000 random int32 positions.
"""

import sys

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import jax
import jax.numpy as jnp
import run as R

import flax_posenc as fp
import flax_posenc.sinusoidal as S

seq = 1024
cfg = fp.RopeConfig(head_dim=128)
inv = fp.rope_inverse_frequencies(cfg)[0]
p = jnp.arange(seq, dtype=jnp.int32)
orig = S.digit_plan


def plan_with(d, b):
    return lambda lo, hi: (d, b) if max(abs(lo), abs(hi)).bit_length() > 24 else orig(lo, hi)


def fresh(plan):
    def run(_):
        S.digit_plan = plan
        jax.clear_caches()
        r = jax.jit(lambda q: S.exact_cos_sin(q, inv)).lower(p).compile()
        S.digit_plan = orig
        return r

    return run


cands = {
    f"{d}x{b}": (fresh(plan_with(d, b)), [None], lambda _: None) for d, b in [(4, 8), (8, 4), (6, 6), (3, 11), (16, 2)]
}
cands["naive"] = (
    lambda _: (
        jax.clear_caches(),
        jax.jit(
            lambda q: (
                jnp.cos(q.astype(jnp.float32)[:, None] * jnp.asarray(inv, jnp.float32)),
                jnp.sin(q.astype(jnp.float32)[:, None] * jnp.asarray(inv, jnp.float32)),
            )
        )
        .lower(p)
        .compile(),
    ),
    [None],
    lambda _: None,
)
times = R.interleaved(cands, rounds=3, calls=5)
for k, v in times.items():
    print(k, [round(x * 1000, 1) for x in v])
# exactness of each plan at large positions vs float64
q = np.concatenate([np.arange(0, 4096), np.random.default_rng(0).integers(-(2**31), 2**31 - 1, 20000)]).astype(np.int32)
ref_c, ref_s = np.cos(q.astype(np.float64)[:, None] * inv), np.sin(q.astype(np.float64)[:, None] * inv)
for d, b in [(4, 8), (8, 4), (6, 6), (3, 11), (16, 2)]:
    S.digit_plan = plan_with(d, b)
    c, s = jax.jit(lambda x: S.exact_cos_sin(x, inv))(jnp.asarray(q))
    S.digit_plan = orig
    print(d, b, "max err", float(max(np.abs(np.asarray(c) - ref_c).max(), np.abs(np.asarray(s) - ref_s).max())))

"""Compile and run time of the exact-angle path (traced sinusoids, traced RoPE), before and after issue 16.

    python benchmarks/investigations/exact_angles.py [--rounds 5]

Three forms of ``exact_cos_sin``: "round one" (always four 8-bit digits of ``|p|``, one gather per
digit) and "fourth pass" (digits of ``|p|`` sized by the guard's bounds, one gather, unrolled
angle-addition products, a sign select), both kept here verbatim, and "now" (the library:
two's-complement digits with a signed top digit, one gather, the angle additions as one
variadic ``lax.reduce``; a limited table of at most ``TABLE_GATHER_ELEMENTS`` entries is gathered
directly). Each is swapped into the library
(``sinusoidal``/``rope`` module attribute) so the block and ``apply_rope`` are timed as users
call them. Same shapes as ``benchmarks/run.py``'s compile section (B16 x T1024 x D768 block with
1024 positions; RoPE 16 heads x 128, no limit). Compile: lower + compile of a fresh jit after
``jax.clear_caches()``; run: median of 15 calls. Candidates interleaved, ``--rounds`` rounds;
median [min-max] over rounds, ratios computed within a round. Also: the block with
``on_overflow="clip"`` and the overflow guard alone, which show what the guard's ``lax.cond``
costs to compile. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from compile_baselines import fresh_compile_times, plain_embed_block, summary  # noqa: E402
from compile_baselines import naive_rope as make_naive_rope  # noqa: E402
from flax import nnx  # noqa: E402

import flax_posenc as fp  # noqa: E402
from flax_posenc import overflow  # noqa: E402
from flax_posenc import rope as rope_module  # noqa: E402
from flax_posenc import sinusoidal as sin_module  # noqa: E402

NOW = sin_module.exact_cos_sin
FORM = {"form": "now"}  # which exact_cos_sin the library calls: "round one", "fourth pass" or "now"


def before_exact_cos_sin(positions, frequencies):
    """Round one's ``_exact_cos_sin``: four 8-bit digits, four gathers (verbatim but for names)."""
    w = np.ascontiguousarray(np.asarray(frequencies, dtype=np.float64).reshape(-1))
    n = w.shape[0]
    rotations = jnp.asarray(sin_module._digit_rotations_for(w.tobytes(), 4, 8))
    magnitude = jnp.abs(positions.astype(jnp.int32)).astype(jnp.uint32)
    cos = sin = None
    for k in range(4):
        digit = (magnitude >> (8 * k)) & 255
        rot = rotations[k].at[digit.astype(jnp.int32)].get(mode="promise_in_bounds")
        c, s = rot[..., :n], rot[..., n:]
        if cos is None:
            cos, sin = c, s
        else:
            cos, sin = cos * c - sin * s, sin * c + cos * s
    sin = jnp.where((positions < 0)[..., None], -sin, sin)
    return cos, sin


def fourth_pass_exact_cos_sin(positions, frequencies, *, bounds=sin_module.INT32_RANGE):
    """The fourth pass's ``exact_cos_sin``: digits of ``|p|`` sized by the bounds, one gather,
    unrolled angle-addition products, a sign select for negative positions (verbatim but for names)."""
    lowest, highest = int(bounds[0]), int(bounds[1])
    bits_needed = max(abs(lowest), abs(highest), 1).bit_length()
    digits = -(-bits_needed // 8)
    bits = -(-bits_needed // digits)
    w = np.ascontiguousarray(np.asarray(frequencies, dtype=np.float64).reshape(-1))
    n = w.shape[0]
    rows = 1 << bits
    table = jnp.asarray(sin_module._digit_rotations_for(w.tobytes(), digits, bits).reshape(digits * rows, 2 * n))
    signed = lowest < 0
    p = positions.astype(jnp.int32)
    magnitude = (jnp.abs(p) if signed else p).astype(jnp.uint32)
    lead = (digits,) + (1,) * p.ndim
    shifts = (np.arange(digits, dtype=np.uint32) * np.uint32(bits)).reshape(lead)
    first_row = (np.arange(digits, dtype=np.int32) * np.int32(rows)).reshape(lead)
    index = ((magnitude[None] >> shifts) & np.uint32(rows - 1)).astype(jnp.int32) + first_row
    rot = table.at[index].get(mode="promise_in_bounds")
    cos, sin = rot[0, ..., :n], rot[0, ..., n:]
    for k in range(1, digits):
        c, s = rot[k, ..., :n], rot[k, ..., n:]
        cos, sin = cos * c - sin * s, sin * c + cos * s
    if signed:
        sin = jnp.where((p < 0)[..., None], -sin, sin)
    return cos, sin


def switch(positions, frequencies, *, bounds=sin_module.INT32_RANGE):
    if FORM["form"] == "round one":
        return before_exact_cos_sin(positions, frequencies)
    if FORM["form"] == "fourth pass":
        return fourth_pass_exact_cos_sin(positions, frequencies, bounds=bounds)
    return NOW(positions, frequencies, bounds=bounds)


TABLE_GATHER_ELEMENTS = sin_module.TABLE_GATHER_ELEMENTS


def set_form(form):
    """Select the form; the earlier forms had no table-gather path for limited sinusoids."""
    FORM["form"] = form
    sin_module.TABLE_GATHER_ELEMENTS = TABLE_GATHER_ELEMENTS if form == "now" else -1


def using(form, f):
    """``f`` run with the library calling the ``form`` of ``exact_cos_sin``."""

    def run(*args):
        set_form(form)
        try:
            return f(*args)
        finally:
            set_form("now")

    return run


def before(f):
    return using("round one", f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="tiny shapes, one round (smoke run)")
    args = ap.parse_args()
    sin_module.exact_cos_sin = switch
    rope_module.exact_cos_sin = switch
    batch, seq, dim, vocab, positions = (2, 16, 32, 100, 64) if args.quick else (16, 1024, 768, 50257, 1024)
    heads, head_dim = (2, 16) if args.quick else (16, 128)
    rounds = 1 if args.quick else args.rounds
    ids = jnp.zeros((batch, seq), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq))
    pos_shape = jax.ShapeDtypeStruct((seq,), jnp.int32)  # abstract: no eager slice compiled inside the timed call
    qk = jnp.asarray(np.random.default_rng(0).standard_normal((batch, seq, heads, head_dim)), jnp.float32)
    cfg = fp.RopeConfig(head_dim=head_dim)
    plain, state = plain_embed_block(vocab, dim, positions)
    naive_rope = make_naive_rope(cfg, seq)

    block = fp.nnx.TransformerInput.from_arguments(
        vocab, dim, num_positions=positions, position="sinusoidal", rngs=nnx.Rngs(0)
    )
    spec, params = block.spec, block.params()
    clip = dataclasses.replace(spec, position=dataclasses.replace(spec.position, on_overflow="clip"))
    limit = overflow.Limit(positions, name="t")

    def blk(p, x, q):
        return fp.block.transformer_input(spec, p, x, position_ids=q)

    def blk_clip(p, x, q):
        return fp.block.transformer_input(clip, p, x, position_ids=q)

    def rope(x, p):
        return fp.apply_rope(x, cfg, p)

    inv = fp.rope_inverse_frequencies(cfg)[0]

    def naive_cos_sin(q):
        angle = q.astype(jnp.float32)[:, None] * jnp.asarray(inv, jnp.float32)
        return jnp.cos(angle), jnp.sin(angle)

    def unbounded_blk(p, x, q):  # no limit: the int32 plan (4 x 8 digits, signed)
        return jnp.take(p["word_embeddings"], x, axis=0) + fp.sinusoidal_encoding(q, dim)

    forms = ("round one", "fourth pass", "now")
    compiles = {
        "plain nnx.Embed block": lambda: jax.jit(plain).lower(state, ids).compile(),
        "naive RoPE": lambda: jax.jit(naive_rope).lower(qk).compile(),
        "naive float32 cos/sin, 1024 positions": lambda: jax.jit(naive_cos_sin).lower(pos_shape).compile(),
        "guard alone (on_overflow=error)": lambda: (
            jax.jit(lambda q: overflow.guard_positions(q, limit, "error")[0]).lower(pos).compile()
        ),
        "elementwise q + 1": lambda: jax.jit(lambda q: q + 1).lower(pos).compile(),
        "sinusoidal block, traced, now, on_overflow=clip": lambda: jax.jit(blk_clip).lower(params, ids, pos).compile(),
    }
    for form in forms:
        compiles[f"exact_cos_sin alone, int32 positions, {form}"] = using(
            form, lambda: jax.jit(lambda q: sin_module.exact_cos_sin(q, inv)).lower(pos_shape).compile()
        )
        compiles[f"sinusoidal block, traced, {form}"] = using(
            form, lambda: jax.jit(blk).lower(params, ids, pos).compile()
        )
        compiles[f"apply_rope, traced, {form}"] = using(form, lambda: jax.jit(rope).lower(qk, pos_shape).compile())
    print(f"load average at start: {open('/proc/loadavg').read().split()[:3]}")
    times = fresh_compile_times(compiles, rounds)
    print(
        "\n| compile (lower + compile, fresh jit) | time | ratio to plain nnx.Embed block / naive RoPE / naive cos/sin |"
    )
    print("|---|---|---|")
    for k, v in times.items():
        if "RoPE" in k or "rope" in k:
            base = times["naive RoPE"]
        elif "exact_cos_sin" in k or "cos/sin" in k:
            base = times["naive float32 cos/sin, 1024 positions"]
        else:
            base = times["plain nnx.Embed block"]
        print(f"| {k} | {summary(v, base)} |")

    runs = {}
    for form in forms:
        set_form(form)
        jax.clear_caches()
        runs[f"sinusoidal block, traced, limit {positions}, {form}"] = (
            jax.jit(blk).lower(params, ids, pos).compile(),
            (params, ids, pos),
        )
        runs[f"sinusoidal block, traced, no limit, {form}"] = (
            jax.jit(unbounded_blk).lower(params, ids, pos).compile(),
            (params, ids, pos),
        )
        runs[f"apply_rope, traced, {form}"] = (jax.jit(rope).lower(qk, pos[0] + 5000).compile(), (qk, pos[0] + 5000))

        def step(p, x, t):
            return fp.block.transformer_input(spec, p, x, position_ids=jnp.full((1, 1), t, jnp.int32))

        runs[f"decode step (batch 1, traced position), {form}"] = (
            jax.jit(step).lower(params, ids[:1, :1], jnp.int32(5)).compile(),
            (params, ids[:1, :1], jnp.int32(5)),
        )
    set_form("now")
    for k in [k for k in runs if k.endswith(", now")]:
        a = np.asarray(runs[k][0](*runs[k][1]))
        for form in forms[:-1]:
            b = np.asarray(runs[k.replace(", now", f", {form}")][0](*runs[k][1]))
            print(f"\n{k}: max |now - {form}| = {np.abs(a - b).max():.2e}", end="")
    print()
    rtimes = {k: [] for k in runs}
    for _ in range(rounds):
        per = {k: [] for k in runs}
        for _ in range(15):
            for k, (f, a) in runs.items():
                t0 = time.perf_counter()
                jax.block_until_ready(f(*a))
                per[k].append(time.perf_counter() - t0)
        for k in runs:
            rtimes[k].append(statistics.median(per[k]))
    print("\n| run time | time | ratio to round one |")
    print("|---|---|---|")
    for k, v in rtimes.items():
        base = rtimes[k.rsplit(", ", 1)[0] + ", round one"]
        print(f"| {k} | {summary(v, base)} |")
    print(f"\nload average at end: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()

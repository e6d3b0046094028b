"""RoPE and the sinusoid block against the memory floor (issue 38, item 5).

A long prefill's RoPE reads ``q`` and ``k`` once and writes them once: no program that returns
rotated copies can beat a bare copy of the same arrays. This script times, in one process and in
interleaved rounds, each candidate against that floor:

- **RoPE** ``apply_rope_qk(q, k, LLAMA31)``, ``q`` ``(1, T, 32, 128)`` and ``k`` ``(1, T, 8, 128)``
  bfloat16 (Llama-3.1-8B, one layer). Floor: ``(-q, -k)`` jitted (one read and one write of each;
  a negation, which XLA cannot elide the way it elides ``q * 1``). Also timed, to show where the
  time above the floor goes: ``apply_rotary`` with ``cos``/``sin`` precomputed and passed in
  (the rotation alone; ``cos``/``sin`` ``(1, T, 1, 64)`` float32 are then inputs, read, not computed).
- **sinusoid** ``sinusoidal_encoding(arange(T), 1024)`` float32, and the **sinusoid block**
  ``block.transformer_input`` (32000-row float32 word table, ids ``(1, T)``; the block of
  ``benchmarks/prefill.py``). Floor: a jitted fill of the output's shape (``jnp.full`` of a traced
  scalar: one write). For the block, also ``take(word, ids)`` alone (the gather's read and write).

Each round calls every candidate ``--calls`` times (median within the round); ``ours / floor`` is
taken within each round and reported as median [min-max] over ``--rounds``, so that load from
other jobs hits both alike. Outputs are fresh arrays on every call for every candidate (page
faults included in both).

Usage::

    python benchmarks/copy_floor.py                      # 32k and 128k, 7 rounds x 3 calls
    python benchmarks/copy_floor.py --write-docs          # and docs/benchmarks.md's table
    python benchmarks/copy_floor.py --quick               # T=256, 2 rounds: smoke run only
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # compile_baselines: LLAMA31

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
SIN_DIM, VOCAB = 1024, 32000
TARGET = 1.3
BEGIN, END = "<!-- copy_floor.py: begin -->", "<!-- copy_floor.py: end -->"


def _compiled(f, *args):
    import jax

    c = jax.jit(f).lower(*args).compile()
    return lambda: jax.block_until_ready(c(*args))


def rope_candidates(seq: int) -> dict:
    """name -> run() for the RoPE rows; ``floor`` is the bare copy."""
    import jax.numpy as jnp
    from compile_baselines import LLAMA31

    import flax_posenc as fp

    rng = np.random.default_rng(0)
    block_q = jnp.asarray(rng.standard_normal((1, min(seq, 1024), Q_HEADS, HEAD_DIM), np.float32), jnp.bfloat16)
    block_k = jnp.asarray(rng.standard_normal((1, min(seq, 1024), KV_HEADS, HEAD_DIM), np.float32), jnp.bfloat16)
    reps = -(-seq // block_q.shape[1])
    q = jnp.tile(block_q, (1, reps, 1, 1))[:, :seq]
    k = jnp.tile(block_k, (1, reps, 1, 1))[:, :seq]
    cos, sin = fp.rotary_cos_sin(np.arange(seq), LLAMA31)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    inv = jnp.asarray(fp.rope_inverse_frequencies(LLAMA31)[0], jnp.float32)

    def naive(q, k):  # benchmarks/prefill.py's naive JAX (Hugging Face's recipe in jnp)
        freqs = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv
        emb = jnp.concatenate([freqs, freqs], axis=-1)
        c, s = jnp.cos(emb).astype(q.dtype)[:, None, :], jnp.sin(emb).astype(q.dtype)[:, None, :]

        def rotate_half(x):
            return jnp.concatenate([-x[..., HEAD_DIM // 2 :], x[..., : HEAD_DIM // 2]], axis=-1)

        return q * c + rotate_half(q) * s, k * c + rotate_half(k) * s

    return {
        "floor": _compiled(lambda q, k: (-q, -k), q, k),
        "apply_rope_qk": _compiled(lambda q, k: fp.apply_rope_qk(q, k, LLAMA31), q, k),
        "naive JAX (bf16 cos/sin, rotate_half)": _compiled(naive, q, k),
        "rotation only (cos/sin given)": _compiled(
            lambda q, k, c, s: (fp.apply_rotary(q, c, s), fp.apply_rotary(k, c, s)), q, k, cos, sin
        ),
    }


def sinusoid_candidates(seq: int) -> dict:
    import jax.numpy as jnp

    import flax_posenc as fp

    rng = np.random.default_rng(0)
    word = jnp.asarray(rng.standard_normal((VOCAB, SIN_DIM), np.float32))
    ids = jnp.asarray(rng.integers(0, VOCAB, (1, seq), dtype=np.int32))
    spec = fp.block.InputSpec(VOCAB, fp.block.PositionSpec("sinusoidal", dim=SIN_DIM))
    one = jnp.float32(1.0)
    return {
        "floor": _compiled(lambda x: jnp.full((1, seq, SIN_DIM), x), one),
        "sinusoidal_encoding": _compiled(lambda: fp.sinusoidal_encoding(np.arange(seq)[None], SIN_DIM)),
        "naive float32 sin/cos of arange * w": _compiled(lambda: _naive_sinusoid(seq)),
        "block gather only (take)": _compiled(lambda w, i: jnp.take(w, i, axis=0), word, ids),
        "sinusoid block (transformer_input)": _compiled(
            lambda w, i: fp.block.transformer_input(spec, {"word_embeddings": w}, i), word, ids
        ),
    }


def _naive_sinusoid(seq: int):
    """``benchmarks/prefill.py``'s naive sinusoid: float32 ``sin``/``cos`` of ``arange(T) * w``, interleaved."""
    import jax.numpy as jnp

    import flax_posenc as fp

    w = jnp.asarray(fp.sinusoidal_frequencies(SIN_DIM), jnp.float32)
    angle = jnp.arange(seq, dtype=jnp.float32)[:, None] * w
    return jnp.stack([jnp.sin(angle), jnp.cos(angle)], axis=-1).reshape(1, seq, SIN_DIM)


def measure(cands: dict, rounds: int, calls: int) -> dict:
    """name -> {"times": per-round median seconds, "ratios": per-round time / floor's}."""
    for run in cands.values():  # warm: first-touch of the allocator's pages
        run()
    times: dict = {name: [] for name in cands}
    for _ in range(rounds):
        for name, run in cands.items():
            ts = []
            for _ in range(calls):
                t0 = time.perf_counter()
                run()
                ts.append(time.perf_counter() - t0)
            times[name].append(statistics.median(ts))
    floor = times["floor"]
    return {n: {"times": ts, "ratios": [t / f for t, f in zip(ts, floor, strict=True)]} for n, ts in times.items()}


def _label(seq: int) -> str:
    return f"{seq // 1024}k" if seq % 1024 == 0 else str(seq)


def table(results: list) -> str:
    lines = [
        "| encoding | T | candidate | ms (median of rounds) | / floor: median [min-max] |",
        "|---|---|---|---|---|",
    ]
    for enc, seq, res in results:
        for name, r in res.items():
            ratio = r["ratios"]
            cell = (
                "1.00 (floor)"
                if name == "floor"
                else f"{statistics.median(ratio):.2f} [{min(ratio):.2f}-{max(ratio):.2f}]"
            )
            lines.append(f"| {enc} | {_label(seq)} | {name} | {1e3 * statistics.median(r['times']):.1f} | {cell} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[32768, 131072])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="T=256, 2 rounds of 1 call: a smoke run")
    ap.add_argument("--write-docs", action="store_true", help="replace the table in docs/benchmarks.md")
    args = ap.parse_args(argv)
    if args.quick:
        args.lengths, args.rounds, args.calls = [256], 2, 1
    import jax

    load0 = os.getloadavg()[0]
    results = []
    for seq in args.lengths:
        for enc, build in (("RoPE", rope_candidates), ("sinusoid", sinusoid_candidates)):
            cands = build(seq)
            results.append((enc, seq, measure(cands, args.rounds, args.calls)))
            del cands
    load1 = os.getloadavg()[0]
    cmd = " ".join(["python benchmarks/copy_floor.py", *(sys.argv[1:] if argv is None else argv)])
    head = (
        f"`{cmd.replace(' --write-docs', '')}`: jax {jax.__version__}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load0:.1f} at the start, {load1:.1f} at the end; "
        f"{args.rounds} interleaved rounds x {args.calls} calls (target: ours / floor <= {TARGET})."
    )
    text = head + "\n\n" + table(results)
    print(text)
    if args.write_docs:
        doc = ROOT / "docs" / "benchmarks.md"
        body = doc.read_text()
        block = f"{BEGIN}\n{text}\n{END}"
        pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
        if not pattern.search(body):
            print(f"{doc}: no {BEGIN} ... {END} markers", file=sys.stderr)
            return 2
        doc.write_text(pattern.sub(lambda _: block, body))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

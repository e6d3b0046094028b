"""Program size and compile time of every encoding's static-position path, by sequence length.

For each encoding and ``T`` in ``--lengths`` (default 1k, 4k, 32k, 128k), in one process:

- **HLO bytes**: the length of ``jax.jit(f).lower(...).as_text()`` (StableHLO; a constant is
  printed in full, as hex), ours and the naive JAX form;
- **compile s**: lower + compile after ``jax.clear_caches()``, median of ``--rounds`` fresh
  compiles, ours and naive taking turns; **ratio** = ours / naive (per round, median);
- **max error**: of ours against float64 numpy from the formula (RoPE and sinusoids: the
  ``cos``/``sin`` values; ALiBi: the *relative* error of the unmasked non-zero entries, whose
  size grows with the distance; T5: the bias against the table rows of numpy's bucket rule,
  ``BucketConfig.buckets``).

The encodings (static positions throughout; every ``x``/table is an argument, not a constant):

- RoPE on the Llama-3.1-8B config (head_dim 128, rope_theta 500000, llama3 scaling factor 8,
  low 1, high 4, original 8192, max_position_embeddings 131072): ``apply_rope`` on bf16 ``x`` of
  shape ``(1, T, 1, 128)``, ``apply_rope_qk`` on two such, ``rotary_cos_sin(np.arange(T))``.
  Naive: float32 ``cos``/``sin`` of ``arange(T) * inv_freq`` on device
  (``compile_baselines.naive_rope``). Error of ``apply_rope``/``apply_rope_qk``: their output on
  the float32 probe ``x = [1]*64 + [0]*64``, which is ``[cos | sin]``.
- Sinusoids, dim 768, no limit: ``sinusoidal_encoding(np.arange(T), 768)`` and the input block
  (``transformer_input`` with ``PositionSpec("sinusoidal", dim=768)``, a 1000-row word table,
  ``ids`` of shape ``(1, T)``). Naive: float32 ``sin``/``cos`` on device (+ ``jnp.take``). Error
  of the block: its output with an all-zero word table (= the sinusoid).
- ALiBi, 32 heads: ``alibi_bias(cfg, 16, T)`` (the last 16 queries over ``T`` keys: a chunk of
  prefill; ``T x T`` is 32 * T**2 floats, too large to run at 128k). Naive: slopes times
  ``iota`` distances, masked.
- T5 relative bias, 32 buckets, 8 heads, causal: ``relative_position_bias(table, 16, T,
  query_start=T - 16)``. Naive: transformers' ``_relative_position_bucket`` written in jnp.

Usage::

    python benchmarks/program_size.py                      # print the table
    python benchmarks/program_size.py --out table.md       # and write it to a file
    python benchmarks/program_size.py --write-docs         # and replace the table in docs/benchmarks.md
    python benchmarks/program_size.py --lengths 1024 --rounds 1    # quick look
    python benchmarks/program_size.py --only apply_rope_qk rotary_cos_sin --before 40105b1
        # also the ``turn_sin`` of git revision 40105b1 (flax_posenc/sinusoidal.py), a third
        # candidate in the same rounds: column "before / naive"
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from compile_baselines import LLAMA31, naive_rope  # noqa: E402

import flax_posenc as fp  # noqa: E402
from flax_posenc.alibi_config import alibi_slopes  # noqa: E402
from flax_posenc.relative_bias_config import BucketConfig  # noqa: E402

SIN_DIM = 768
VOCAB = 1000
HEADS = 32
QUERIES = 16
T5_BUCKETS, T5_HEADS, T5_MAX_DISTANCE = 32, 8, 128
DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks.md")
BEGIN, END = "<!-- program_size.py: begin -->", "<!-- program_size.py: end -->"


def _probe(seq: int) -> np.ndarray:
    """float32 ``(1, seq, 1, 128)`` of ``[1]*64 + [0]*64``: RoPE turns it into ``[cos | sin]``."""
    x = np.zeros((1, seq, 1, 128), np.float32)
    x[..., :64] = 1.0
    return x


def _rope_reference(seq: int):
    inv, attention = fp.rope_inverse_frequencies(LLAMA31)
    angle = np.arange(seq, dtype=np.float64)[:, None] * inv
    return np.cos(angle) * attention, np.sin(angle) * attention


def _cos_sin_error(cos, sin, seq: int) -> float:
    ref_cos, ref_sin = _rope_reference(seq)
    return max(
        float(np.abs(np.asarray(cos, np.float64).reshape(ref_cos.shape) - ref_cos).max()),
        float(np.abs(np.asarray(sin, np.float64).reshape(ref_sin.shape) - ref_sin).max()),
    )


def _naive_sinusoid(seq: int):
    w = jnp.asarray(fp.sinusoidal_frequencies(SIN_DIM), jnp.float32)
    angle = jnp.arange(seq, dtype=jnp.float32)[:, None] * w
    return jnp.stack([jnp.sin(angle), jnp.cos(angle)], axis=-1).reshape(seq, SIN_DIM)  # interleaved


def _sinusoid_reference(seq: int) -> np.ndarray:
    angle = np.arange(seq, dtype=np.float64)[:, None] * fp.sinusoidal_frequencies(SIN_DIM)
    return np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(seq, SIN_DIM)


def _naive_t5_bias(table, seq: int):
    """transformers' T5 ``_relative_position_bucket`` (causal) and the gather, in jnp."""
    context = jnp.arange(QUERIES, dtype=jnp.int32)[:, None] + (seq - QUERIES)
    rel = jnp.arange(seq, dtype=jnp.int32)[None, :] - context
    n = jnp.maximum(-rel, 0)
    max_exact = T5_BUCKETS // 2
    large = max_exact + (
        jnp.log(n.astype(jnp.float32) / max_exact) / math.log(T5_MAX_DISTANCE / max_exact) * (T5_BUCKETS - max_exact)
    ).astype(jnp.int32)
    bucket = jnp.where(n < max_exact, n, jnp.minimum(large, T5_BUCKETS - 1))
    return jnp.transpose(jnp.take(table, bucket, axis=0), (2, 0, 1))


def cases(seq: int) -> dict:
    """``name -> (ours, naive, args, error)``: ``ours``/``naive`` take ``args`` (shape structs);
    ``error()`` runs ours and returns its max abs error against float64."""
    x = jax.ShapeDtypeStruct((1, seq, 1, 128), jnp.bfloat16)
    rope = naive_rope(LLAMA31, seq)
    inv32 = jnp.asarray(fp.rope_inverse_frequencies(LLAMA31)[0], jnp.float32)

    def naive_cos_sin():
        angle = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv32
        return jnp.cos(angle), jnp.sin(angle)

    def rope_error(fn):
        out = np.asarray(jax.jit(fn)(_probe(seq)), np.float64)
        return _cos_sin_error(out[..., :64], out[..., 64:], seq)

    spec = fp.block.InputSpec(VOCAB, fp.block.PositionSpec("sinusoidal", dim=SIN_DIM))
    word = jax.ShapeDtypeStruct((VOCAB, SIN_DIM), jnp.float32)
    ids = jax.ShapeDtypeStruct((1, seq), jnp.int32)

    def block(w, i):
        return fp.block.transformer_input(spec, {"word_embeddings": w}, i)

    def block_error():
        out = jax.jit(block)(jnp.zeros((VOCAB, SIN_DIM), jnp.float32), jnp.zeros((1, seq), jnp.int32))
        return float(np.abs(np.asarray(out[0], np.float64) - _sinusoid_reference(seq)).max())

    alibi_cfg = fp.AlibiConfig(HEADS)
    slopes32 = jnp.asarray(alibi_slopes(HEADS).astype(np.float32))

    def naive_alibi():
        i = jnp.arange(QUERIES, dtype=jnp.int32)[:, None] + (seq - QUERIES)
        d = (i - jnp.arange(seq, dtype=jnp.int32)[None, :])[None]
        bias = -slopes32[:, None, None] * d.astype(jnp.float32)
        return jnp.where(d < 0, jnp.finfo(jnp.float32).min, bias)

    def alibi_error():
        got = np.asarray(jax.jit(lambda: fp.alibi_bias(alibi_cfg, QUERIES, seq))(), np.float64)
        d = (np.arange(seq - QUERIES, seq)[:, None] - np.arange(seq)[None, :])[None]
        ref = -alibi_slopes(HEADS)[:, None, None] * d
        keep = (d > 0) & np.ones_like(got, bool)  # unmasked, non-zero: relative error
        return float((np.abs(got - ref)[keep] / np.abs(ref)[keep]).max())

    table = jax.ShapeDtypeStruct((T5_BUCKETS, T5_HEADS), jnp.float32)

    def t5(tab):
        return fp.relative_position_bias(tab, QUERIES, seq, query_start=seq - QUERIES, bidirectional=False)

    def t5_error():
        tab = np.random.default_rng(0).standard_normal((T5_BUCKETS, T5_HEADS)).astype(np.float32)
        got = np.asarray(jax.jit(t5)(tab), np.float64)
        rel = np.arange(seq)[None, :] - np.arange(seq - QUERIES, seq)[:, None]
        buckets = BucketConfig(T5_BUCKETS, T5_MAX_DISTANCE, False).buckets(rel)
        return float(np.abs(got - np.transpose(tab[buckets], (2, 0, 1))).max())

    return {
        "RoPE apply_rope": (
            lambda x: fp.apply_rope(x, LLAMA31),
            rope,
            (x,),
            lambda: rope_error(lambda p: fp.apply_rope(p, LLAMA31)),
        ),
        "RoPE apply_rope_qk": (
            lambda q, k: fp.apply_rope_qk(q, k, LLAMA31),
            lambda q, k: (rope(q), rope(k)),
            (x, x),
            lambda: rope_error(lambda p: fp.apply_rope_qk(p, p, LLAMA31)[1]),
        ),
        "RoPE rotary_cos_sin": (
            lambda: fp.rotary_cos_sin(np.arange(seq), LLAMA31),
            naive_cos_sin,
            (),
            lambda: _cos_sin_error(*jax.jit(lambda: fp.rotary_cos_sin(np.arange(seq), LLAMA31))(), seq),
        ),
        "sinusoidal_encoding (768)": (
            lambda: fp.sinusoidal_encoding(np.arange(seq), SIN_DIM),
            lambda: _naive_sinusoid(seq),
            (),
            lambda: float(
                np.abs(
                    np.asarray(jax.jit(lambda: fp.sinusoidal_encoding(np.arange(seq), SIN_DIM))(), np.float64)
                    - _sinusoid_reference(seq)
                ).max()
            ),
        ),
        "sinusoid block (768)": (
            block,
            lambda w, i: jnp.take(w, i, axis=0) + _naive_sinusoid(seq),
            (word, ids),
            block_error,
        ),
        "ALiBi alibi_bias (16 x T)": (lambda: fp.alibi_bias(alibi_cfg, QUERIES, seq), naive_alibi, (), alibi_error),
        "T5 relative bias (16 x T)": (t5, lambda tab: _naive_t5_bias(tab, seq), (table,), t5_error),
    }


def load_before(rev: str):
    """``flax_posenc/sinusoidal.py`` of git revision ``rev``, imported as a separate module."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = subprocess.run(
        ["git", "-C", root, "show", f"{rev}:flax_posenc/sinusoidal.py"], capture_output=True, text=True, check=True
    ).stdout
    path = os.path.join(tempfile.mkdtemp(prefix="program_size_before_"), "sinusoidal_before.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location("sinusoidal_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def using_before(old):
    """The library's static-position paths call ``old``'s ``turn_sin``/``turn_cos_sin`` (while tracing)."""
    import flax_posenc.rope as rope_module
    import flax_posenc.sinusoidal as sin_module

    saved = rope_module.turn_cos_sin, sin_module.turn_sin
    rope_module.turn_cos_sin = lambda p, w, bounds=None: old.turn_cos_sin(p, w)
    sin_module.turn_sin = lambda p, w, q=0, bounds=None: old.turn_sin(p, w, q)
    try:
        yield
    finally:
        rope_module.turn_cos_sin, sin_module.turn_sin = saved


def traced_with(fn, old):
    """``fn`` traced with ``old``'s ``turn_sin`` (a fresh function each call: no jit cache shared)."""

    def run(*args):
        with using_before(old):
            return fn(*args)

    return run


def hlo_bytes(fn, args) -> int:
    return len(jax.jit(fn).lower(*args).as_text().encode())


def compile_seconds(fns: dict, args, rounds: int) -> dict[str, list[float]]:
    """Lower + compile after ``jax.clear_caches()``; candidates take turns; one untimed warm-up."""
    for f in fns.values():
        jax.clear_caches()
        jax.jit(f).lower(*args).compile()
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            jax.clear_caches()
            t0 = time.perf_counter()
            jax.jit(f).lower(*args).compile()
            times[k].append(time.perf_counter() - t0)
    return times


def _length(t: int) -> str:
    return f"{t // 1024}k" if t % 1024 == 0 else str(t)


def _size(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def measure(lengths, rounds: int, only=None, before=None) -> list[dict]:
    rows = []
    for seq in lengths:
        for name, (ours, naive, args, error) in cases(seq).items():
            if only and not any(o in name for o in only):
                continue
            fns = {"ours": ours, "naive": naive}
            if before is not None:
                fns["before"] = traced_with(ours, before)
            t = compile_seconds(fns, args, rounds)
            ratios = [a / b for a, b in zip(t["ours"], t["naive"])]
            extra = {}
            if before is not None:
                old = [a / b for a, b in zip(t["before"], t["naive"])]
                extra = dict(
                    before_s=statistics.median(t["before"]),
                    before_ratio=statistics.median(old),
                    before_range=(min(old), max(old)),
                )
            rows.append(
                dict(
                    **extra,
                    encoding=name,
                    T=seq,
                    hlo=hlo_bytes(ours, args),
                    naive_hlo=hlo_bytes(naive, args),
                    ours_s=statistics.median(t["ours"]),
                    naive_s=statistics.median(t["naive"]),
                    ratio=statistics.median(ratios),
                    ratio_range=(min(ratios), max(ratios)),
                    error=error(),
                )
            )
            print(f"  {name} T={seq}: done", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict], rounds: int, before: str | None = None) -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    head = "| encoding | T | HLO text (ours) | HLO text (naive) | compile s (ours) | compile s (naive) "
    head += "| ours / naive: median [min-max] "
    rule = "|---|---|---|---|---|---|---|"
    if before:
        head += f"| compile s ({before}) | {before} / naive: median [min-max] "
        rule += "---|---|"
    lines = [
        f"jax {jax.__version__}, {platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{', '.join(f'{v:.2f}' for v in load)} at the end; compile: median of {rounds} fresh compiles.",
        "",
        head + "| max error vs float64 |",
        rule + "---|",
    ]
    for r in sorted(rows, key=lambda r: (r["encoding"], r["T"])):
        lo, hi = r["ratio_range"]
        line = (
            f"| {r['encoding']} | {_length(r['T'])} | {_size(r['hlo'])} | {_size(r['naive_hlo'])} "
            f"| {r['ours_s']:.3f} | {r['naive_s']:.3f} | {r['ratio']:.2f} [{lo:.2f}-{hi:.2f}] "
        )
        if before:
            blo, bhi = r["before_range"]
            line += f"| {r['before_s']:.3f} | {r['before_ratio']:.2f} [{blo:.2f}-{bhi:.2f}] "
        lines.append(line + f"| {r['error']:.2e} |")
    return "\n".join(lines) + "\n"


def write_docs(text: str, command: str) -> None:
    with open(DOCS) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOCS}: expected the markers {BEGIN} and {END}")
    head, rest = doc.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    with open(DOCS, "w") as f:
        f.write(f"{head}{BEGIN}\n`{command}`:\n\n{text}{END}{tail}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 32768, 131072])
    parser.add_argument("--rounds", type=int, default=5, help="fresh compiles per candidate (median)")
    parser.add_argument("--only", nargs="+", help="encodings whose name contains one of these")
    parser.add_argument("--out", help="also write the table to this path")
    parser.add_argument("--write-docs", action="store_true", help="replace the table in docs/benchmarks.md")
    parser.add_argument("--before", help="a git revision whose turn_sin to time too (a third candidate)")
    args = parser.parse_args(argv)
    before = load_before(args.before) if args.before else None
    text = table(measure(args.lengths, args.rounds, args.only, before), args.rounds, args.before)
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.write_docs:
        write_docs(text, "python benchmarks/program_size.py " + " ".join(argv if argv is not None else sys.argv[1:]))


if __name__ == "__main__":
    main()

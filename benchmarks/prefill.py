"""Long-context prefill: time and peak memory of every encoding's static path at 32k and 128k.

Shapes: Llama-3.1-8B, one layer, batch 1 (32 query heads, 8 key-value heads, head_dim 128,
bfloat16). Candidates per encoding, each against a naive JAX version written from the textbook
and, where one exists, the PyTorch peer from transformers:

- **RoPE** ``apply_rope_qk(q, k, LLAMA31)`` (Llama-3.1's llama3 scaling), ``q`` ``(1, T, 32, 128)``
  and ``k`` ``(1, T, 8, 128)`` bf16. Naive JAX: Hugging Face's recipe in jnp (float32 angles
  ``arange(T) * inv_freq``, ``cos``/``sin`` cast to bf16, ``q * cos + rotate_half(q) * sin`` in
  bf16). PyTorch: ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb`` on ``(1, heads, T, 128)``.
- **sinusoid block** ``transformer_input`` with ``PositionSpec("sinusoidal", dim=1024)``, a
  32000-row float32 word table, ids ``(1, T)``. Naive JAX: ``take(word, ids)`` + float32
  ``sin``/``cos`` of ``arange(T) * w`` on device. No PyTorch peer (transformers has no sinusoid
  input block of this form).
- **ALiBi** ``alibi_bias(AlibiConfig(32), C, T)``: the bias of a chunk of ``C`` (``--chunk``,
  default 64) queries, the last of ``T`` keys, causal, ``(32, C, T)`` float32. Naive JAX: slopes
  times the ``iota`` distance, masked with ``finfo.min``. PyTorch: BLOOM's ``build_alibi_tensor``
  (``m_h * j``, equal after the softmax) broadcast to the chunk and masked the way BLOOM's
  attention does (``masked_fill`` with ``finfo.min``), so that it is materialised like ours.
- **T5 bias** ``relative_position_bias(table, C, T, query_start=T - C, bidirectional=False)``,
  32 buckets, 32 heads, max distance 128, ``(32, C, T)`` float32. Naive JAX: transformers'
  ``_relative_position_bucket`` in jnp, then ``take``. PyTorch: ``T5Attention.compute_bias(C, T,
  past_seen_tokens=T - C)`` of a decoder ``T5Attention``.

**Time**: all candidates of an encoding live in one process and take turns: ``--rounds`` rounds,
``--calls`` synchronised calls per candidate per round (median within a round); the ratio to
naive JAX is taken within each round, reported as median [min-max] over rounds, so load from
other jobs hits all candidates alike. **Memory**: each candidate runs in its own child process:
with its inputs built and (JAX) its program compiled ahead of time, the child resets its peak
resident memory (``/proc/self/clear_refs``) and reads ``VmHWM`` after the first call: the *call
peak* is that peak minus the resident memory before the call (the output plus every temporary
the call touches); the *process peak* is the child's ``VmHWM`` over its whole life (imports,
compilation, inputs). Inputs are a block of 1024 random positions repeated along ``T``, so that
building them costs no more memory than holding them.

Usage::

    python benchmarks/prefill.py                 # 32k and 128k: table printed, and in out/prefill/
    python benchmarks/prefill.py --lengths 8192 32768 131072 --rounds 3 --calls 2 --docs
        # docs/benchmarks.md's table, docs/figures/prefill_curves.png, benchmarks/results/prefill.json
        # (about 10 minutes on 2 cores at load ~4; the RoPE children at 128k need ~6 GiB)
    python benchmarks/prefill.py --quick         # T=256 (or --lengths), one round: smoke run only
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # output_folder: --out / --docs
sys.path.insert(0, str(Path(__file__).resolve().parent))  # compile_baselines: LLAMA31

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
SIN_DIM, VOCAB = 1024, 32000
BIAS_HEADS, T5_BUCKETS, T5_MAX_DISTANCE = 32, 32, 128
ENCODINGS = ("RoPE apply_rope_qk", "sinusoid block", "ALiBi chunk bias", "T5 chunk bias")
NAIVE, OURS, TORCH = "naive JAX", "flax_posenc", "PyTorch (transformers)"
BEGIN, END = "<!-- prefill.py: begin -->", "<!-- prefill.py: end -->"
TIME_TARGET, MEMORY_TARGET = 1.2, 1.1


# --------------------------------------------------------------------------- candidates
# Each builder returns ``run()``: one synchronised call on inputs built once (outside the timing).


def _rope(seq: int, chunk: int):
    import jax
    import jax.numpy as jnp
    from compile_baselines import LLAMA31

    import flax_posenc as fp

    q = _tiled(np.random.default_rng(0), (1, seq, Q_HEADS, HEAD_DIM), jnp.bfloat16)
    k = _tiled(np.random.default_rng(1), (1, seq, KV_HEADS, HEAD_DIM), jnp.bfloat16)
    inv = jnp.asarray(fp.rope_inverse_frequencies(LLAMA31)[0], jnp.float32)

    def naive(q, k):  # Hugging Face's recipe, written in jnp
        freqs = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv
        emb = jnp.concatenate([freqs, freqs], axis=-1)
        cos, sin = jnp.cos(emb).astype(q.dtype)[:, None, :], jnp.sin(emb).astype(q.dtype)[:, None, :]

        def rotate_half(x):
            return jnp.concatenate([-x[..., HEAD_DIM // 2 :], x[..., : HEAD_DIM // 2]], axis=-1)

        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    fns = {OURS: jax.jit(lambda q, k: fp.apply_rope_qk(q, k, LLAMA31)), NAIVE: jax.jit(naive)}
    return {name: _jax_call(f, q, k) for name, f in fns.items()}


def _rope_torch(seq: int, chunk: int):
    import torch
    from compile_baselines import LLAMA31
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(
        hidden_size=Q_HEADS * HEAD_DIM,
        num_attention_heads=Q_HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=LLAMA31.max_position_embeddings,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": LLAMA31.rope_theta,
            "factor": LLAMA31.factor,
            "low_freq_factor": LLAMA31.low_freq_factor,
            "high_freq_factor": LLAMA31.high_freq_factor,
            "original_max_position_embeddings": LLAMA31.original_max_position_embeddings,
        },
    )
    rotary = LlamaRotaryEmbedding(config)
    q = torch.from_numpy(_tiled_np(np.random.default_rng(0), (1, Q_HEADS, seq, HEAD_DIM), axis=2))  # HF layout
    k = torch.from_numpy(_tiled_np(np.random.default_rng(1), (1, KV_HEADS, seq, HEAD_DIM), axis=2))
    q, k = q.bfloat16(), k.bfloat16()
    positions = torch.arange(seq)[None]

    def run():
        with torch.no_grad():
            cos, sin = rotary(q, positions)
            return apply_rotary_pos_emb(q, k, cos, sin)

    return {TORCH: run}


def _tiled_np(rng, shape, axis: int = 1):
    """float32 standard normals of ``shape``: a block of at most 1024 along ``axis``, repeated (a
    128k input is then no larger while it is built than when it is used)."""
    block = list(shape)
    block[axis] = min(shape[axis], 1024)
    reps = [1] * len(shape)
    reps[axis] = -(-shape[axis] // block[axis])
    out = np.tile(rng.standard_normal(block).astype(np.float32), reps)
    return np.ascontiguousarray(out[tuple(slice(0, n) for n in shape)])


def _tiled(rng, shape, dtype):
    """:func:`_tiled_np` built on device in ``dtype`` (the repeat is done by XLA, in ``dtype``)."""
    import jax.numpy as jnp

    block = list(shape)
    block[1] = min(shape[1], 1024)
    reps = -(-shape[1] // block[1])
    small = jnp.asarray(rng.standard_normal(block).astype(np.float32), dtype)
    return jnp.tile(small, (1, reps, 1, 1))[:, : shape[1]]


def _sinusoid(seq: int, chunk: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import flax_posenc as fp

    spec = fp.block.InputSpec(VOCAB, fp.block.PositionSpec("sinusoidal", dim=SIN_DIM))
    rng = np.random.default_rng(0)
    word = jnp.asarray(rng.standard_normal((VOCAB, SIN_DIM), np.float32))
    ids = jnp.asarray(rng.integers(0, VOCAB, (1, seq), dtype=np.int32))
    w = jnp.asarray(fp.sinusoidal_frequencies(SIN_DIM), jnp.float32)

    def naive(word, ids):
        angle = jnp.arange(seq, dtype=jnp.float32)[:, None] * w
        table = jnp.stack([jnp.sin(angle), jnp.cos(angle)], axis=-1).reshape(seq, SIN_DIM)  # interleaved
        return jnp.take(word, ids, axis=0) + table

    fns = {
        OURS: jax.jit(lambda word, ids: fp.block.transformer_input(spec, {"word_embeddings": word}, ids)),
        NAIVE: jax.jit(naive),
    }
    return {name: _jax_call(f, word, ids) for name, f in fns.items()}


def _alibi(seq: int, chunk: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import flax_posenc as fp

    cfg = fp.AlibiConfig(BIAS_HEADS)
    slopes = jnp.asarray(fp.alibi_slopes(BIAS_HEADS).astype(np.float32))

    def naive():
        d = (jnp.arange(seq - chunk, seq, dtype=jnp.int32)[:, None] - jnp.arange(seq, dtype=jnp.int32)[None, :])[None]
        return jnp.where(d < 0, jnp.finfo(jnp.float32).min, -slopes[:, None, None] * d.astype(jnp.float32))

    fns = {OURS: jax.jit(lambda: fp.alibi_bias(cfg, chunk, seq)), NAIVE: jax.jit(naive)}
    return {name: _jax_call(f) for name, f in fns.items()}


def _alibi_torch(seq: int, chunk: int):
    import torch
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    mask = torch.ones(1, seq, dtype=torch.long)
    future = torch.arange(seq)[None, :] > torch.arange(seq - chunk, seq)[:, None]  # (chunk, T)

    def run():
        with torch.no_grad():
            alibi = build_alibi_tensor(mask, BIAS_HEADS, torch.float32)  # (heads, 1, T)
            return alibi.expand(BIAS_HEADS, chunk, seq).masked_fill(future, torch.finfo(torch.float32).min)

    return {TORCH: run}


def _t5(seq: int, chunk: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import flax_posenc as fp

    table = jnp.asarray(np.random.default_rng(0).standard_normal((T5_BUCKETS, BIAS_HEADS), np.float32))

    def naive(table):  # transformers' _relative_position_bucket (causal), in jnp
        context = jnp.arange(chunk, dtype=jnp.int32)[:, None] + (seq - chunk)
        n = jnp.maximum(-(jnp.arange(seq, dtype=jnp.int32)[None, :] - context), 0)
        exact = T5_BUCKETS // 2
        large = exact + (
            jnp.log(n.astype(jnp.float32) / exact) / math.log(T5_MAX_DISTANCE / exact) * (T5_BUCKETS - exact)
        ).astype(jnp.int32)
        bucket = jnp.where(n < exact, n, jnp.minimum(large, T5_BUCKETS - 1))
        return jnp.transpose(jnp.take(table, bucket, axis=0), (2, 0, 1))

    def ours(table):
        return fp.relative_position_bias(table, chunk, seq, query_start=seq - chunk, bidirectional=False)

    return {OURS: _jax_call(jax.jit(ours), table), NAIVE: _jax_call(jax.jit(naive), table)}


def _t5_torch(seq: int, chunk: int):
    import torch
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    config = T5Config(
        d_model=64,
        d_kv=2,
        num_heads=BIAS_HEADS,
        relative_attention_num_buckets=T5_BUCKETS,
        relative_attention_max_distance=T5_MAX_DISTANCE,
        is_decoder=True,
    )
    attention = T5Attention(config, has_relative_attention_bias=True, layer_idx=0).eval()

    def run():
        with torch.no_grad():
            return attention.compute_bias(chunk, seq, past_seen_tokens=seq - chunk)

    return {TORCH: run}


def _jax_call(f, *args):
    """``run()`` of the ahead-of-time compiled ``f`` (compiled here, so that no call compiles)."""
    import jax

    compiled = f.lower(*args).compile()

    def run():
        return jax.block_until_ready(compiled(*args))

    return run


#: encoding -> (JAX builder, PyTorch builder or None)
BUILDERS = {
    "RoPE apply_rope_qk": (_rope, _rope_torch),
    "sinusoid block": (_sinusoid, None),
    "ALiBi chunk bias": (_alibi, _alibi_torch),
    "T5 chunk bias": (_t5, _t5_torch),
}


def candidates(encoding: str, seq: int, chunk: int, *, torch: bool = True) -> dict:
    jax_builder, torch_builder = BUILDERS[encoding]
    out = jax_builder(seq, chunk)
    if torch and torch_builder is not None:
        out.update(torch_builder(seq, chunk))
    return out


# --------------------------------------------------------------------------- measurement


def interleaved_times(runs: dict, rounds: int, calls: int) -> dict[str, list[float]]:
    """Per-round median seconds of each ``run()``; candidates take turns, one warm-up call each."""
    for run in runs.values():
        run()
    out = {name: [] for name in runs}
    for _ in range(rounds):
        samples = {name: [] for name in runs}
        for _ in range(calls):
            for name, run in runs.items():
                t0 = time.perf_counter()
                run()
                samples[name].append(time.perf_counter() - t0)
                time.sleep(0.01)  # untimed: the previous candidate's worker threads go idle
        for name in runs:
            out[name].append(statistics.median(samples[name]))
    return out


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def child(encoding: str, name: str, seq: int, chunk: int) -> dict:
    """In the child process: one candidate's call peak and process peak, in MiB. The candidate is
    built (inputs, and for JAX the compiled program) but never called before the measured call."""
    run = candidates(encoding, seq, chunk, torch=name == TORCH)[name]
    gc.collect()
    process_peak = _status_kib("VmHWM")
    before = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident size
    out = run()
    peak = _status_kib("VmHWM")
    del out
    return {"call_mib": (peak - before) / 1024, "process_mib": max(process_peak, peak) / 1024}


def peak_memory(encoding: str, name: str, seq: int, chunk: int) -> dict:
    cmd = [sys.executable, __file__, "--child", encoding, name, str(seq), str(chunk)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:  # e.g. killed for memory by a shared machine: the row says so, the run goes on
        print(f"child {encoding!r} {name!r} T={seq} failed (exit {proc.returncode}):", file=sys.stderr)
        print(proc.stderr[-2000:], file=sys.stderr, flush=True)
        return {"failed": proc.returncode}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(lengths, encodings, chunk: int, rounds: int, calls: int, memory: bool = True) -> list[dict]:
    rows = []
    for seq in lengths:
        for encoding in encodings:
            runs = candidates(encoding, seq, chunk)
            times = interleaved_times(runs, rounds, calls)
            del runs
            gc.collect()
            for name, t in times.items():
                ratios = [a / b for a, b in zip(t, times[NAIVE])]
                row = dict(encoding=encoding, T=seq, candidate=name, times=t, ratios=ratios)
                if memory:
                    row.update(peak_memory(encoding, name, seq, chunk))
                rows.append(row)
            print(f"  {encoding} T={seq}: done", file=sys.stderr, flush=True)
    return rows


# --------------------------------------------------------------------------- report


def _length(t: int) -> str:
    return f"{t // 1024}k" if t % 1024 == 0 else str(t)


def _range(values, fmt="{:.2f}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def _memory(r: dict, base: dict) -> tuple[str, str]:
    """``(call peak / naive, process peak MiB)`` of row ``r``; "n/a" without a measurement."""
    if "failed" in r:
        return f"child failed (exit {r['failed']})", "n/a"
    if "call_mib" not in r or "call_mib" not in base:
        return "n/a", "n/a"
    if r is base:
        return "1.00", f"{r['process_mib']:.0f}"
    ratio = "n/a" if base["call_mib"] < 1 else f"{r['call_mib'] / base['call_mib']:.2f}"  # below 1 MiB: noise
    return ratio, f"{r['process_mib']:.0f}"


def table(rows: list[dict], *, rounds: int, calls: int, chunk: int, command: str) -> str:
    """One line per encoding and length: naive JAX's time and call peak, and every candidate's
    ratios to them (time: median [min-max] over rounds of the per-round ratio)."""
    import jax

    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    by = {(r["encoding"], r["T"], r["candidate"]): r for r in rows}
    lines = [
        f"`{command}`: jax {jax.__version__}, {platform.machine()}, {os.cpu_count()} CPU cores shared with other "
        f"jobs (load average {load} at the end); chunk {chunk} queries; time: median over {rounds} interleaved "
        f"rounds of the median of {calls} calls, ratio to naive JAX per round, median [min-max]; memory: one "
        "child process per candidate; process peaks in the order ours / naive / PyTorch.",
        "",
        "| encoding | T | naive JAX ms | ours / naive: time | PyTorch / naive: time | naive call peak MiB "
        "| ours / naive: call peak | PyTorch / naive: call peak | process peak MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for encoding, seq in dict.fromkeys((r["encoding"], r["T"]) for r in rows):
        base = by[(encoding, seq, NAIVE)]
        ours, peer = by[(encoding, seq, OURS)], by.get((encoding, seq, TORCH))
        naive_mib = f"{base['call_mib']:.0f}" if "call_mib" in base else "n/a"
        ours_mem, peer_mem = _memory(ours, base), _memory(peer, base) if peer else ("no peer", None)
        process = " / ".join(m[1] for m in (ours_mem, _memory(base, base), peer_mem) if m[1] is not None)
        lines.append(
            f"| {encoding} | {_length(seq)} | {_range([t * 1e3 for t in base['times']], '{:.1f}')} "
            f"| {_range(ours['ratios'])} | {_range(peer['ratios']) if peer else 'no peer'} | {naive_mib} "
            f"| {ours_mem[0]} | {peer_mem[0]} | {process} |"
        )
    return "\n".join(lines) + "\n"


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    encodings = list(dict.fromkeys(r["encoding"] for r in rows))
    fig, axes = plt.subplots(2, len(encodings), figsize=(4 * len(encodings), 6.5), squeeze=False)
    for col, encoding in enumerate(encodings):
        mine = [r for r in rows if r["encoding"] == encoding]
        for name in dict.fromkeys(r["candidate"] for r in mine):
            pts = sorted((r["T"], r) for r in mine if r["candidate"] == name)
            xs = [t for t, _ in pts]
            axes[0, col].plot(xs, [statistics.median(r["times"]) * 1e3 for _, r in pts], "o-", label=name)
            if all("call_mib" in r for _, r in pts):
                axes[1, col].plot(xs, [r["call_mib"] for _, r in pts], "o-", label=name)
        axes[0, col].set_title(encoding)
        axes[0, col].set_ylabel("time per call, ms")
        axes[1, col].set_ylabel("call peak memory, MiB")
        for ax in axes[:, col]:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("sequence length T")
            ax.grid(True, which="both", alpha=0.3)
        axes[0, col].legend(fontsize=7)
    fig.suptitle("Long-context prefill, Llama-3.1-8B shapes, batch 1 (CPU, shared cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_docs(page: Path, text: str) -> None:
    doc = page.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{page}: expected the markers {BEGIN} and {END}")
    head, rest = doc.split(BEGIN, 1)
    page.write_text(f"{head}{BEGIN}\n{text}{END}{rest.split(END, 1)[1]}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        encoding, name, seq, chunk = argv[1:5]
        print(json.dumps(child(encoding, name, int(seq), int(chunk))))
        return 0
    from output_folder import add_arguments, resolve

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", help="sequence lengths T (default 32768 131072)")
    parser.add_argument("--chunk", type=int, default=64, help="queries of the ALiBi and T5 chunk (default 64)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5; --quick 1)")
    parser.add_argument("--calls", type=int, default=None, help="calls per candidate per round (default 3)")
    parser.add_argument("--only", nargs="+", help="encodings whose name contains one of these")
    parser.add_argument("--no-memory", action="store_true", help="skip the child processes (time only)")
    parser.add_argument("--quick", action="store_true", help="T=256, chunk 16, one round of one call: smoke run")
    add_arguments(parser, what="the prefill table, its raw rows and figures/prefill_curves.png")
    args = parser.parse_args(argv)
    lengths = args.lengths or ([256] if args.quick else [32768, 131072])
    chunk = min(args.chunk if not args.quick else 16, min(lengths))
    rounds = args.rounds or (1 if args.quick else 5)
    calls = args.calls or (1 if args.quick else 3)
    encodings = [e for e in ENCODINGS if not args.only or any(o.lower() in e.lower() for o in args.only)]
    if not encodings:
        parser.error(f"--only: expected a part of one of {ENCODINGS}, found {args.only}")
    if any(t < 1 for t in lengths) or args.chunk < 1:
        parser.error(f"--lengths/--chunk: expected positive integers, found {lengths} / {args.chunk}")
    out = resolve(parser, args, "prefill")
    rows = measure(lengths, encodings, chunk, rounds, calls, memory=not args.no_memory)
    text = table(
        rows, rounds=rounds, calls=calls, chunk=chunk, command="python benchmarks/prefill.py " + " ".join(argv)
    )
    print(text, end="")
    (out / "figures").mkdir(exist_ok=True)
    figure(rows, out / "figures" / "prefill_curves.png")
    raw = ROOT / "benchmarks" / "results" / "prefill.json" if args.docs else out / "prefill.json"
    raw.write_text(json.dumps(rows, indent=1))  # the rows behind the table (docs: beside the other results)
    if args.docs:
        write_docs(out / "benchmarks.md", text)
    else:
        (out / "prefill.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Greedy decoding throughput: examples/models/llama.py's bucketed ``generate`` against
transformers' ``generate`` on the same CPU cores, with the layers scanned and unrolled.

    python benchmarks/decode.py --out /tmp/decode.md [--batch 4 --prompt 32 --new 64 --rounds 3]
    python benchmarks/decode.py --write-docs         # also replaces the table in docs/benchmarks.md
    python benchmarks/decode.py --layers-mode scan   # only the default (scanned) layers

The model is a randomly initialised Llama shaped like SmolLM2-135M (30 layers, width 576, 9 query /
3 key-value heads of 64, SiLU MLP 1536, vocabulary 49152, tied head, float32), built with
transformers' own ``LlamaForCausalLM`` and saved once; ours loads the same ``model.safetensors``.
Both decode the same left-padded ragged batch (real lengths ``prompt`` down to ``prompt / 2``),
``max_new_tokens`` tokens with no early stop (``min_new_tokens`` for transformers), prefill included.
``--layers-mode``: ours with ``from_pretrained(..., scan_layers=True)`` (``scan``: one stacked
block in one ``lax.scan``) and/or ``scan_layers=False`` (``unrolled``: 30 separate blocks), loaded
from the same file into the same process. Reported, medians of ``--rounds`` interleaved rounds
(each: every mode of ours, then theirs):

- tokens/s: ``batch * new`` / wall time of one ``generate`` call, after a warm-up call;
- compilations: XLA backend compilations (``jax.monitoring``) over calls with four prompt lengths
  and four ``max_new_tokens`` of one bucket, the first call included, and the XLA backend compile
  seconds of the first call (the new bucket: the whole ``generate`` program);
- the weight copy (scanned layers): XLA CPU copies each layer's weights out of the stacks on every
  decode step (a ``dynamic-slice`` fusion before each library dot); the time to read and write
  those bytes once in place (every stacked block weight negated, buffers donated), median of 10 per
  round, and its share of the scanned step (``batch`` / its tokens/s);
- time to first token for a new prompt length inside an already compiled bucket: one
  ``generate(..., max_new_tokens=1)`` with a prompt length not seen before (host checks, prefill,
  first token; that bucket compiled once before by a call with another length), and the same for
  transformers.

Threads: both run on this process's CPU affinity (``--cores`` to pin it); torch gets one intra-op
thread per core. ``--quick``: a 2-layer model of width 72 (smoke test; numbers never published).
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "models"))

SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    head_dim=64,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    bos_token_id=0,
    eos_token_id=0,
    pad_token_id=0,
)
QUICK = dict(SMOLLM2_135M, vocab_size=1000, hidden_size=72, intermediate_size=128, num_hidden_layers=2, head_dim=8)
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- benchmarks/decode.py: begin -->", "<!-- benchmarks/decode.py: end -->"


def build(config: dict, path: Path):
    import torch
    import transformers

    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()
    model.save_pretrained(path)
    return model


def progress(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def ragged(batch: int, prompt: int, vocab: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = np.linspace(prompt, max(1, prompt // 2), batch).astype(int)
    ids = np.zeros((batch, prompt), np.int64)
    mask = np.zeros((batch, prompt), np.int64)
    for row, n in enumerate(lengths):
        ids[row, prompt - n :] = rng.integers(1, vocab, n)
        mask[row, prompt - n :] = 1
    return ids, mask


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write the report (markdown) here")
    ap.add_argument("--write-docs", action="store_true", help="also replace the table in docs/benchmarks.md")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=32, help="padded prompt length (bucket: the next power of two)")
    ap.add_argument("--new", type=int, default=64, help="max_new_tokens")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=str, default=None, help="CPU cores to run on, e.g. 0,1")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--layers-mode",
        default="scan,unrolled",
        help="ours with scanned and/or unrolled layers: scan, unrolled, or both",
    )
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.layers_mode.split(",") if m.strip()]
    if not modes or any(m not in ("scan", "unrolled") for m in modes):
        ap.error(f"--layers-mode: expected scan, unrolled or scan,unrolled, got {args.layers_mode!r}")
    if args.cores:
        os.sched_setaffinity(0, {int(c) for c in args.cores.split(",")})
    cores = len(os.sched_getaffinity(0))

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    torch.set_num_threads(cores)
    import common
    import llama
    from flax import nnx

    config = QUICK if args.quick else SMOLLM2_135M
    load_start = os.getloadavg()
    compiles = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    with tempfile.TemporaryDirectory() as tmp:
        theirs = build(config, Path(tmp))
        ours = {mode: llama.from_pretrained(tmp, scan_layers=mode == "scan") for mode in modes}
    ids, mask = ragged(args.batch, args.prompt, config["vocab_size"])
    progress("models built and loaded")

    def run_ours(mode):
        return lambda ids, mask, new: np.asarray(llama.generate(ours[mode], ids, new, attention_mask=mask))

    def run_theirs(ids, mask, new):
        with torch.no_grad():
            return theirs.generate(
                torch.tensor(ids),
                attention_mask=torch.tensor(mask),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                num_beams=1,
                pad_token_id=0,
            ).numpy()

    # compilations for one bucket: 4 prompt lengths x 4 max_new_tokens, first call included
    bucket_p, bucket_n = common.bucket(args.prompt), common.bucket(args.new)
    lengths = [bucket_p // 2 + 1, (3 * bucket_p) // 4, bucket_p]  # three more prompt lengths of the bucket
    news = [bucket_n // 2 + 1, (3 * bucket_n) // 4, bucket_n]  # and three more max_new_tokens
    first_call, first_compile, per_bucket, same = {}, {}, {}, {}
    reference = run_theirs(ids, mask, args.new)  # also transformers' warm-up
    for mode in modes:
        before = len(compiles)
        t0 = time.perf_counter()
        run_ours(mode)(ids, mask, args.new)
        first_call[mode] = time.perf_counter() - t0
        first_compile[mode] = sum(compiles[before:])
        for length, new in zip(lengths, news):
            i, m = ragged(args.batch, length, config["vocab_size"], seed=length)
            run_ours(mode)(i, m, new)
        per_bucket[mode] = len(compiles) - before
        same[mode] = np.array_equal(run_ours(mode)(ids, mask, args.new), reference)
        run_ours(mode)(ids, mask, 1)  # the (prompt bucket, 1 new token) program, compiled once
        progress(f"{mode}: first call {first_call[mode]:.1f} s ({first_compile[mode]:.1f} s compiling)")
    run_theirs(ids, mask, 1)

    copy = None
    if "scan" in modes:  # the bytes a scanned step copies out of the stacks: every stacked block weight
        stacks = [jnp.array(v) for v in jax.tree.leaves(nnx.state(ours["scan"].layers, nnx.Param)) if v.ndim >= 3]
        copy_bytes = sum(w.nbytes for w in stacks)
        # read and written once, in place (donated: no fresh buffer to fault in); negated so nothing is elided
        copy = jax.jit(lambda ws: [-w for w in ws], donate_argnums=0)
        stacks = jax.block_until_ready(copy(stacks))

    rounds = {name: [] for name in ("theirs", "ttft theirs", "copy")}
    rounds.update({f"{k} {mode}": [] for mode in modes for k in ("ours", "ttft")})
    unseen = [n for n in range(bucket_p // 2 + 1, bucket_p + 1) if n not in lengths]
    for r in range(args.rounds):
        runs = [(f"ours {mode}", run_ours(mode)) for mode in modes] + [("theirs", run_theirs)]
        for name, fn in runs:
            t0 = time.perf_counter()
            fn(ids, mask, args.new)
            rounds[name].append(args.batch * args.new / (time.perf_counter() - t0))
        if copy is not None:
            times = []
            for _ in range(10):
                t0 = time.perf_counter()
                stacks = jax.block_until_ready(copy(stacks))
                times.append(time.perf_counter() - t0)
            rounds["copy"].append(statistics.median(times))
        i, m = ragged(args.batch, unseen[r % len(unseen)], config["vocab_size"], seed=100 + r)
        before = len(compiles)
        for name, fn in [(f"ttft {mode}", run_ours(mode)) for mode in modes] + [("ttft theirs", run_theirs)]:
            t0 = time.perf_counter()
            fn(i, m, 1)
            rounds[name].append(time.perf_counter() - t0)
        assert len(compiles) == before, "a new prompt length inside the bucket compiled"
        progress(f"round {r + 1}/{args.rounds} done")
    jax.monitoring.unregister_event_duration_listener(listener)
    load_end = os.getloadavg()

    def cell(values, fmt):
        return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"

    names = {"scan": "scanned (default)", "unrolled": "unrolled (`scan_layers=False`)"}
    command = "python benchmarks/decode.py" + (" " + " ".join(argv) if argv else " " + " ".join(sys.argv[1:]))
    shape = "2-layer width-72 Llama (--quick)" if args.quick else "SmolLM2-135M-shaped Llama (random weights)"

    def row(measure, values, theirs="", blank=""):
        return f"| {measure} | " + " | ".join(values) + f" | {theirs or blank} |"

    lines = [
        f"`{command.strip()}`: {shape}, float32, batch {args.batch}, ragged prompts left-padded to "
        f"{args.prompt} (bucket {bucket_p}), {args.new} new tokens (bucket {bucket_n}), {cores} CPU cores, "
        f"jax {jax.__version__}, torch {torch.__version__}; median [min-max] of {args.rounds} rounds; "
        f"load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at the end.",
        "",
        "| measure | " + " | ".join(f"ours, {names[m]}" for m in modes) + " | transformers generate |",
        "|---|" + "---|" * (len(modes) + 1),
        row(
            "tokens/s, steady state",
            [cell(rounds[f"ours {m}"], "{:.1f}") for m in modes],
            cell(rounds["theirs"], "{:.1f}"),
        ),
        row(
            "tokens/s / transformers' (per round)",
            [cell([a / b for a, b in zip(rounds[f"ours {m}"], rounds["theirs"])], "{:.2f}") for m in modes],
        ),
        row(
            "time to first token, new prompt length in a compiled bucket (s)",
            [cell(rounds[f"ttft {m}"], "{:.3f}") for m in modes],
            cell(rounds["ttft theirs"], "{:.3f}"),
        ),
        row(
            f"XLA compilations for {len(lengths) + 1} calls in one bucket (prompt lengths "
            f"{', '.join(map(str, [args.prompt, *lengths]))}; max_new_tokens {', '.join(map(str, [args.new, *news]))})",
            [
                f"{per_bucket[m]} (first call {first_call[m]:.1f} s, {first_compile[m]:.1f} s of it compiling)"
                for m in modes
            ],
            "n/a",
        ),
        row("same ids as transformers", ["yes" if same[m] else "NO" for m in modes]),
    ]
    if copy is not None:
        step = [1e3 * args.batch / v for v in rounds["ours scan"]]  # ms per new token of the batch
        lines.append(
            row(
                f"every stacked block weight read and written once in place ({copy_bytes / 2**20:.0f} MiB: the "
                "bytes a scanned step copies out of the stacks) (ms); as a share of the scanned step",
                [
                    f"{cell([1e3 * c for c in rounds['copy']], '{:.1f}')}; "
                    f"{cell([1e3 * c / s for c, s in zip(rounds['copy'], step)], '{:.2f}')}"
                ]
                + ["" for m in modes if m != "scan"],
            )
        )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    if args.write_docs:
        text = DOCS.read_text()
        head, rest = text.split(BEGIN, 1)
        DOCS.write_text(head + BEGIN + "\n" + report + END + rest.split(END, 1)[1])
    return report


if __name__ == "__main__":
    main()

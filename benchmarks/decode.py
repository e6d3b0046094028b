"""Greedy decoding throughput: examples/models/llama.py's bucketed ``generate`` against
transformers' ``generate`` on the same CPU cores.

    python benchmarks/decode.py --out /tmp/decode.md [--batch 4 --prompt 32 --new 64 --rounds 3]
    python benchmarks/decode.py --write-docs         # also replaces the table in docs/benchmarks.md

The model is a randomly initialised Llama shaped like SmolLM2-135M (30 layers, width 576, 9 query /
3 key-value heads of 64, SiLU MLP 1536, vocabulary 49152, tied head, float32), built with
transformers' own ``LlamaForCausalLM`` and saved once; ours loads the same ``model.safetensors``.
Both decode the same left-padded ragged batch (real lengths ``prompt`` down to ``prompt / 2``),
``max_new_tokens`` tokens with no early stop (``min_new_tokens`` for transformers), prefill included.
Reported, medians of ``--rounds`` interleaved rounds (each ours then theirs):

- tokens/s: ``batch * new`` / wall time of one ``generate`` call, after a warm-up call;
- compilations: XLA backend compilations (``jax.monitoring``) over calls with four prompt lengths
  and four ``max_new_tokens`` of one bucket, the first call included;
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
    args = ap.parse_args(argv)
    if args.cores:
        os.sched_setaffinity(0, {int(c) for c in args.cores.split(",")})
    cores = len(os.sched_getaffinity(0))

    import jax
    import numpy as np
    import torch

    torch.set_num_threads(cores)
    import common
    import llama

    config = QUICK if args.quick else SMOLLM2_135M
    load_start = os.getloadavg()
    compiles = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    with tempfile.TemporaryDirectory() as tmp:
        theirs = build(config, Path(tmp))
        ours = llama.from_pretrained(tmp)
    ids, mask = ragged(args.batch, args.prompt, config["vocab_size"])
    progress("models built and loaded")

    def run_ours(ids, mask, new):
        return np.asarray(llama.generate(ours, ids, new, attention_mask=mask))

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
    before = len(compiles)
    t0 = time.perf_counter()
    run_ours(ids, mask, args.new)
    first_call = time.perf_counter() - t0
    lengths = [bucket_p // 2 + 1, (3 * bucket_p) // 4, bucket_p]  # three more prompt lengths of the bucket
    news = [bucket_n // 2 + 1, (3 * bucket_n) // 4, bucket_n]  # and three more max_new_tokens
    for length, new in zip(lengths, news):
        i, m = ragged(args.batch, length, config["vocab_size"], seed=length)
        run_ours(i, m, new)
    per_bucket = len(compiles) - before
    progress(f"first call {first_call:.1f} s; {per_bucket} compilation(s) for the bucket")
    same = np.array_equal(run_ours(ids, mask, args.new), run_theirs(ids, mask, args.new))
    run_theirs(ids, mask, args.new)  # warm-up
    run_ours(ids, mask, 1), run_theirs(ids, mask, 1)  # the (prompt bucket, 1 new token) program, compiled once

    rounds = {"ours": [], "theirs": [], "ttft ours": [], "ttft theirs": []}
    unseen = [n for n in range(bucket_p // 2 + 1, bucket_p + 1) if n not in lengths]
    for r in range(args.rounds):
        for name, fn in (("ours", run_ours), ("theirs", run_theirs)):
            t0 = time.perf_counter()
            fn(ids, mask, args.new)
            rounds[name].append(args.batch * args.new / (time.perf_counter() - t0))
        i, m = ragged(args.batch, unseen[r % len(unseen)], config["vocab_size"], seed=100 + r)
        before = len(compiles)
        for name, fn in (("ttft ours", run_ours), ("ttft theirs", run_theirs)):
            t0 = time.perf_counter()
            fn(i, m, 1)
            rounds[name].append(time.perf_counter() - t0)
        assert len(compiles) == before, "a new prompt length inside the bucket compiled"
        progress(f"round {r + 1}/{args.rounds} done")
    jax.monitoring.unregister_event_duration_listener(listener)
    load_end = os.getloadavg()

    def cell(values, fmt):
        return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"

    ratio = [a / b for a, b in zip(rounds["ours"], rounds["theirs"])]
    command = "python benchmarks/decode.py" + (" " + " ".join(argv) if argv else " " + " ".join(sys.argv[1:]))
    shape = "2-layer width-72 Llama (--quick)" if args.quick else "SmolLM2-135M-shaped Llama (random weights)"
    lines = [
        f"`{command.strip()}`: {shape}, float32, batch {args.batch}, ragged prompts left-padded to "
        f"{args.prompt} (bucket {bucket_p}), {args.new} new tokens (bucket {bucket_n}), {cores} CPU cores, "
        f"jax {jax.__version__}, torch {torch.__version__}; median [min-max] of {args.rounds} rounds; "
        f"load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at the end.",
        "",
        "| measure | ours (examples/models/llama.py) | transformers generate | ours / transformers |",
        "|---|---|---|---|",
        f"| tokens/s, steady state | {cell(rounds['ours'], '{:.1f}')} | {cell(rounds['theirs'], '{:.1f}')} "
        f"| {cell(ratio, '{:.2f}')} |",
        f"| time to first token, new prompt length in a compiled bucket (s) | {cell(rounds['ttft ours'], '{:.3f}')} "
        f"| {cell(rounds['ttft theirs'], '{:.3f}')} | |",
        f"| XLA compilations for {len(lengths) + 1} calls in one bucket (prompt lengths {', '.join(map(str, [args.prompt, *lengths]))}; "
        f"max_new_tokens {', '.join(map(str, [args.new, *news]))}) | {per_bucket} (first call {first_call:.1f} s) | n/a | |",
        f"| same ids as transformers | {'yes' if same else 'NO'} | | |",
    ]
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

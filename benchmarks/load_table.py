"""Benchmark: load GPT-2's position table with flax_posenc vs transformers.AutoModel.from_pretrained.

Builds a GPT-2 small-sized checkpoint (``GPT2Config()`` defaults: 12 layers, vocab 50257,
1024 x 768 positions; about 500 MB of safetensors) into a temporary directory once, then times,
each run in a fresh subprocess (cold imports excluded, warm page cache):

- ``flax_posenc.conversion.load_position_table(dir)``  (reads the 3 MiB table only)
- ``transformers.AutoModel.from_pretrained(dir)``      (builds the model, reads everything)

and reports the median wall time, the tracemalloc peak (Python/numpy allocations) and the peak
RSS growth (``VmHWM`` after ``clear_refs``; Linux only) of the load itself. The first load in a
fresh process also pays for one-time work (transformers' lazy module set-up, first-call code
paths), so each child then loads again ``--steady`` times in the same process: the median of
those is the in-process steady-state time, reported beside the fresh-process one.

Usage::

    .venv/bin/python benchmarks/load_table.py [--repeats 5] [--dir DIR] [--keep]

Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

_CHILD = textwrap.dedent(
    """
    import json, os, sys, time, tracemalloc

    def rss_kib(field):
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        return int(line.split()[1])
        except OSError:
            return None

    which, path, steady, quick = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    if which == "flax_posenc":
        from flax_posenc.conversion import load_position_table
        import safetensors  # the reader no longer needs it; imported up front as in round one (same fresh-process work)
        load = lambda: load_position_table(path).weights
    else:
        import logging, transformers
        logging.getLogger("transformers").setLevel(logging.ERROR)
        transformers.utils.logging.disable_progress_bar()
        load = lambda: transformers.AutoModel.from_pretrained(path)
        if quick:  # smoke test: import the model code first (~30 s under tracemalloc otherwise)
            transformers.GPT2Model
    try:  # reset the peak-RSS mark so it measures the load alone
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    before = rss_kib("VmRSS")
    tracemalloc.start()
    t0 = time.perf_counter()
    out = load()
    dt = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    hwm = rss_kib("VmHWM")
    del out
    again = []
    for _ in range(steady):  # the same load, in the same (now warm) process
        t0 = time.perf_counter()
        out = load()
        again.append(time.perf_counter() - t0)
        del out
    again.sort()
    print(json.dumps({"seconds": dt, "tracemalloc_peak": peak,
                      "rss_peak_growth": None if hwm is None or before is None else (hwm - before) * 1024,
                      "steady_seconds": again[len(again) // 2] if again else None}))
    """
)


def build_checkpoint(path: Path, quick: bool = False) -> None:
    """GPT-2 small's shapes and layer count (``GPT2Config()`` defaults), random weights.

    ``quick``: a tiny GPT-2 (smoke test of this script only; its numbers mean nothing).
    """
    import torch
    import transformers

    torch.manual_seed(0)
    config = (
        transformers.GPT2Config(vocab_size=1000, n_positions=1024, n_embd=64, n_layer=1, n_head=2)
        if quick
        else transformers.GPT2Config()
    )
    model = transformers.GPT2Model(config)
    model.save_pretrained(path)


def run(which: str, path: Path, steady: int = 3, quick: bool = False) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, which, str(path), str(steady), str(int(quick))],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def mib(x: float | None) -> str:
    return "n/a" if x is None else f"{x / 2**20:8.1f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per loader (median reported)")
    ap.add_argument("--dir", type=Path, default=None, help="reuse/build the checkpoint here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary checkpoint")
    ap.add_argument("--steady", type=int, default=3, help="further loads in the same process (in-process steady state)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: a tiny checkpoint, one run and one steady load each, transformers' model code imported "
        "before the timed load (its numbers mean nothing)",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.steady = 1, 1

    tmp = None
    path = args.dir
    if path is None:
        tmp = Path(tempfile.mkdtemp(prefix="gpt2-bench-"))
        path = tmp / "gpt2"
    try:
        if not (path / "model.safetensors").is_file():
            print(f"building a GPT2Config() checkpoint in {path} ...", flush=True)
            build_checkpoint(path, quick=args.quick)
        size = (path / "model.safetensors").stat().st_size
        config = json.loads((path / "config.json").read_text())
        print(
            f"checkpoint: {path} ({size / 2**20:.0f} MiB); table {config['n_positions']} x {config['n_embd']} float32; "
            f"{args.repeats} runs each, fresh process per run, warm page cache"
        )
        with open(path / "model.safetensors", "rb") as f:  # warm the page cache for both
            while f.read(64 << 20):
                pass
        results = {}
        for which in ("flax_posenc", "transformers"):
            runs = [run(which, path, args.steady, args.quick) for _ in range(args.repeats)]
            results[which] = {k: _median(r[k] for r in runs) for k in runs[0]}
        print(f"\n{'loader':<40}{'median s':>10}{'tracemalloc MiB':>17}{'RSS growth MiB':>16}{'in-process ms':>15}")
        labels = {
            "flax_posenc": "flax_posenc load_position_table",
            "transformers": "transformers AutoModel.from_pretrained",
        }
        for which, r in results.items():
            steady = "n/a" if r["steady_seconds"] is None else f"{r['steady_seconds'] * 1e3:.3f}"
            print(
                f"{labels[which]:<40}{r['seconds']:>10.4f}{mib(r['tracemalloc_peak']):>17}"
                f"{mib(r['rss_peak_growth']):>16}{steady:>15}"
            )
        ratio = results["transformers"]["seconds"] / results["flax_posenc"]["seconds"]
        print(f"\nspeed-up, first load in a fresh process (median transformers / median flax_posenc): {ratio:.0f}x")
        if results["flax_posenc"]["steady_seconds"] and results["transformers"]["steady_seconds"]:
            steady_ratio = results["transformers"]["steady_seconds"] / results["flax_posenc"]["steady_seconds"]
            print(f"speed-up, in-process steady state (median of the repeated loads): {steady_ratio:.0f}x")
    finally:
        if tmp is not None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp is not None:
            print(f"kept {path}")


if __name__ == "__main__":
    main()

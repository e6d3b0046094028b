"""The verdict table of docs/benchmarks.md from saved ``run.py --json`` files.

    python benchmarks/verdicts.py benchmarks/results/idle-2026-11-30-run{J,K,L}.json

One row per target of ``run.py``'s "Ratios" list, one cell per run and malloc environment:
median [min-max] over the run's interleaved rounds, with ✓ when the whole range is on the
right side of the target and ✗ when it is not (``run.py``'s MET rule). Verdict: **met** when
every cell is ✓, **met in the default environment** when every default cell is ✓, **not met**
otherwise; rows without a target are "reported".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ENVIRONMENTS = ("default malloc", "MALLOC_* opt-in")


def cell(t: dict) -> str:
    text = f"{t['median']:.2f} [{t['min']:.2f}-{t['max']:.2f}]"
    return text if t["met"] is None else text + (" ✓" if t["met"] else " ✗")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run.py --json outputs, in order")
    args = ap.parse_args()
    runs = {
        path.stem.rsplit("-", 1)[-1].removeprefix("run"): json.loads(path.read_text())["targets"] for path in args.runs
    }
    envs = [e for e in ENVIRONMENTS if all(e in r for r in runs.values())]
    header = [f"{name} {'default' if env == ENVIRONMENTS[0] else 'opt-in'}" for env in envs for name in runs]
    print("| target | " + " | ".join(header) + " | verdict |")
    print("|---|" + "---|" * len(header) + "---|")
    first = next(iter(runs.values()))[envs[0]]
    for label in first:
        cells = [runs[name][env][label] for env in envs for name in runs]
        if cells[0]["met"] is None:
            verdict = "reported"
        elif all(c["met"] for c in cells):
            verdict = "**met**"
        elif all(runs[name][envs[0]][label]["met"] for name in runs):
            verdict = "**met in the default environment**"
        else:
            verdict = "**not met**"
        print(f"| {label} | " + " | ".join(cell(c) for c in cells) + f" | {verdict} |")


if __name__ == "__main__":
    main()

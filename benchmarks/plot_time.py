"""Wall and CPU time of ``flax-posenc plot SOURCE --out DIR`` (issue 38, item 6: at most 3 s).

Each source is plotted ``--repeats`` times, each in a fresh process (``python -m
flax_posenc.report.cli plot SOURCE --out DIR``, its default figures): wall time, and the child's
user + system CPU time (``resource.getrusage(RUSAGE_CHILDREN)``), which a loaded machine inflates
much less than the wall time. Then one run under ``-X importtime`` gives the share of the imports.

Two conditions, taking turns: **no .pyc** (the environment as it is; with
``PYTHONDONTWRITEBYTECODE=1``, as on the shared development machine, every flax_posenc module
is compiled from source in every process: ~0.2-0.3 s of CPU) and **.pyc cached** (the bytecode
cache written by one untimed run into a temporary ``PYTHONPYCACHEPREFIX``: what an installed
package, whose wheel pip byte-compiles, or a checkout that may write ``__pycache__`` gets).

Sources: ``sinusoidal:1024:768`` and a GPT-2-shaped checkpoint directory written here with numpy
(``config.json`` of ``model_type`` gpt2 and ``model.safetensors`` holding ``wpe.weight`` 1024 x 768
float32 and a 16-row ``wte.weight``).

``--against DIR``: a second checkout's code (``PYTHONPATH=DIR``, e.g. the main branch before a
change) runs too, taking turns with this one run by run, so both see the same load; the table
gets one row per checkout.

Usage::

    python benchmarks/plot_time.py                 # 3 repeats per source
    python benchmarks/plot_time.py --repeats 5 --against ../main   # this checkout and main, taking turns
    python benchmarks/plot_time.py --quick         # 1 repeat of sinusoidal:64:16: smoke run only
    python benchmarks/plot_time.py --imports 5     # only the CPU time of the plot command's imports

``--imports N``: N fresh processes per row, taking turns, each printing its own CPU time
(``getrusage``) after importing: a bare interpreter; numpy + matplotlib's ``Figure`` and Agg
canvas (what drawing needs); the plot command's modules (``flax_posenc.report.cli`` and those)
with a bytecode cache, and without one (as the environment is).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def gpt2_dir(parent: Path, rows: int = 1024, dim: int = 768) -> Path:
    from safetensors.numpy import save_file

    d = parent / "gpt2-tiny"
    d.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    cfg = {"model_type": "gpt2", "n_positions": rows, "n_embd": dim, "vocab_size": 16, "n_layer": 1, "n_head": 12}
    (d / "config.json").write_text(json.dumps(cfg))
    tensors = {
        "wpe.weight": (0.02 * rng.standard_normal((rows, dim))).astype(np.float32),
        "wte.weight": (0.02 * rng.standard_normal((16, dim))).astype(np.float32),
    }
    save_file(tensors, str(d / "model.safetensors"))
    return d


def run_once(
    source: str, out: Path, extra: tuple[str, ...] = (), pycache: Path | None = None, root: Path = ROOT
) -> tuple[float, float, str]:
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if pycache is not None:  # bytecode cached (written by a first run) in a folder of its own
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    cmd = [sys.executable, *extra, "-m", "flax_posenc.report.cli", "plot", source, "--out", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root)  # -m imports from the cwd first
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"plot {source}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stderr


def import_share(stderr: str) -> float:
    """Seconds of the top-level imports in ``-X importtime`` output (cumulative, outermost only)."""
    total = 0
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)
        if m and not m.group(2).startswith(" "):
            total += int(m.group(1))
    return total / 1e6


IMPORT_ROWS = {
    "bare interpreter": "",
    "numpy + matplotlib Figure, Agg": "import numpy, matplotlib.figure, matplotlib.backends.backend_agg",
    "plot command (flax_posenc.report.cli + matplotlib), .pyc cached": (
        "import flax_posenc.report.cli, matplotlib.figure, matplotlib.backends.backend_agg"
    ),
    "plot command, no .pyc": "import flax_posenc.report.cli, matplotlib.figure, matplotlib.backends.backend_agg",
}


def import_cpu(repeats: int) -> int:
    """Print the CPU seconds of the imports of each row of :data:`IMPORT_ROWS` (fresh processes)."""
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        pycache = Path(tmp) / "pycache"
        times: dict[str, list[float]] = {k: [] for k in IMPORT_ROWS}
        for i in range(repeats + 1):  # the first round writes the bytecode cache: untimed
            for row, stmt in IMPORT_ROWS.items():
                env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
                if "no .pyc" not in row:
                    env.pop("PYTHONDONTWRITEBYTECODE", None)
                    env["PYTHONPYCACHEPREFIX"] = str(pycache)
                code = f"import resource\n{stmt}\nr = resource.getrusage(resource.RUSAGE_SELF)\nprint(r.ru_utime + r.ru_stime)"
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
                if i:
                    times[row].append(float(out.stdout.strip()))
    load1 = os.getloadavg()[0]
    print(
        f"`python benchmarks/plot_time.py --imports {repeats}`: load average {load0:.1f} at the start, "
        f"{load1:.1f} at the end; {repeats} fresh processes per row, taking turns.\n"
    )
    print("| imports | CPU s: median [min-max] |")
    print("|---|---|")
    for row, v in times.items():
        print(f"| {row} | {statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}] |")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--imports", type=int, metavar="N", help="only the CPU time of the imports, N processes a row")
    ap.add_argument("--against", metavar="DIR", help="a second checkout, run taking turns with this one")
    args = ap.parse_args(argv)
    if args.imports:
        return import_cpu(args.imports)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sources = ["sinusoidal:64:16"] if args.quick else ["sinusoidal:1024:768", str(gpt2_dir(tmp))]
        repeats = 1 if args.quick else args.repeats
        roots = {"this": ROOT}
        if args.against:
            roots["against"] = Path(args.against).resolve()
        pycaches = {code: tmp / f"pycache-{code}" for code in roots}  # each checkout its own bytecode
        rows = []
        for source in sources:
            for code, root in roots.items():  # writes the bytecode caches: untimed
                run_once(source, tmp / "warm", pycache=pycaches[code], root=root)
            keys = [(code, c) for code in roots for c in ("no .pyc", ".pyc cached")]
            walls: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
            cpus: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
            for i in range(repeats):
                for code, c in keys:  # checkouts and conditions take turns
                    cache = pycaches[code] if c == ".pyc cached" else None
                    wall, cpu, _ = run_once(source, tmp / f"out{i}", pycache=cache, root=roots[code])
                    walls[code, c].append(wall)
                    cpus[code, c].append(cpu)
            figures = len(list((tmp / "out0").glob("*.png")))
            for code, c in keys:
                cache = pycaches[code] if c == ".pyc cached" else None
                _, _, err = run_once(source, tmp / "imp", ("-X", "importtime"), pycache=cache, root=roots[code])
                rows.append((source, code, c, figures, walls[code, c], cpus[code, c], import_share(err)))
    load1 = os.getloadavg()[0]
    cmd = " ".join(["python benchmarks/plot_time.py", *(sys.argv[1:] if argv is None else argv)])
    dont = os.environ.get("PYTHONDONTWRITEBYTECODE") or "unset"
    print(
        f"`{cmd}`: load average {load0:.1f} at the start, {load1:.1f} at the end; {repeats} fresh processes "
        f"per source and condition (PYTHONDONTWRITEBYTECODE={dont} for 'no .pyc').\n"
    )
    label = {"this": str(ROOT), "against": str(Path(args.against).resolve()) if args.against else ""}
    print(
        "| source | code | bytecode | figures | wall s: median [min-max] | CPU s (user+sys): median [min-max] "
        "| imports s (wall, -X importtime) |"
    )
    print("|---|---|---|---|---|---|---|")
    for source, code, c, figures, walls, cpus, imports in rows:
        name = "GPT-2-shaped checkpoint dir (wpe 1024 x 768)" if source.endswith("gpt2-tiny") else source
        print(
            f"| `{name}` | {label[code]} | {c} | {figures} | {statistics.median(walls):.2f} "
            f"[{min(walls):.2f}-{max(walls):.2f}] | {statistics.median(cpus):.2f} [{min(cpus):.2f}-{max(cpus):.2f}] "
            f"| {imports:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

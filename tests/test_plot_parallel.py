"""``flax-posenc plot`` draws every other figure in a forked child (issue 38): same output, same errors.

Each case runs the command in a fresh interpreter (a forked child is only made in a process
without jax or other threads, which this test process may not be), once as it is and once with
the fork switched off, and compares the two. The figure jobs are wrapped to record the process
that ran them and, on request, to fail while a PNG is being written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flax_posenc.report import output
from flax_posenc.report.cli import EXIT_INTERNAL, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

SCRIPT = r"""
import os, sys
from pathlib import Path
import flax_posenc.report.output as output
from flax_posenc.report import plots

mode, source, out, log = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
fail = dict(item.split("=") for item in sys.argv[5:])  # figure label -> how it fails
output._idle_cpus = lambda: 2  # an idle machine, whatever else runs beside the tests
if mode == "sequential":
    output._can_fork = lambda: False


class Unpicklable(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.hook = lambda: None  # a lambda does not pickle


real_write, real_jobs = plots._write_png, plots.figure_jobs
failing = []


def write_png(fig, f):
    if failing:  # half a PNG, then the error: _save must not leave it behind
        f.write(b"\x89PNG\r\n\x1a\n half")
        f.flush()
        how = failing.pop()
        if how == "unpicklable":
            raise Unpicklable("figure broke\nin two lines")
        raise ValueError(f"figure {how} broke\nin two lines")
    real_write(fig, f)


def figure_jobs(record, out_dir, **kw):
    def wrap(label, draw):
        def run():
            with open(log, "a") as f:
                f.write(f"{label} {os.getpid()}\n")
            if label in fail:
                failing.append(fail[label])
            return draw()
        return run
    return [(label, wrap(label, draw)) for label, draw in real_jobs(record, out_dir, **kw)]


plots._write_png, plots.figure_jobs = write_png, figure_jobs
from flax_posenc.report.cli import main
sys.exit(main(["plot", source, "--out", str(out)]))
"""


def plot(tmp_path: Path, mode: str, source: str, *fail: str):
    out, log = tmp_path / mode / "figs", tmp_path / mode / "jobs.log"
    out.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, source, str(out), str(log), *fail],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    pids = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        label, pid = line.split()
        pids[label] = int(pid)
    return proc, out, pids


def check_no_partial_output(out: Path) -> list[str]:
    """Only complete PNGs in ``out``: no temporary file, nothing half-written. Returns the names."""
    from PIL import Image

    names = sorted(p.name for p in out.iterdir())
    assert all(not n.startswith(".") for n in names), names
    for name in names:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        with Image.open(out / name) as im:
            im.load()  # decodes every row: a truncated file raises
    return names


needs_fork = pytest.mark.skipif(
    not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2 or len(os.sched_getaffinity(0)) < 2,
    reason="the forked path runs on Linux with two CPUs",
)


@needs_fork
def test_figures_drawn_on_two_processes_match_one(tmp_path):
    # 400 rows: the similarity matrix is block-averaged, so there is a note on stderr
    par, par_out, par_pids = plot(tmp_path, "parallel", "sinusoidal:400:8")
    seq, seq_out, seq_pids = plot(tmp_path, "sequential", "sinusoidal:400:8")
    assert par.returncode == seq.returncode == 0, (par.stderr, seq.stderr)
    labels = ["heatmap", "waves", "similarity_vs_offset", "similarity_matrix"]
    assert sorted(par_pids) == sorted(seq_pids) == sorted(labels)
    assert len(set(seq_pids.values())) == 1  # one process
    assert par_pids["heatmap"] == par_pids["similarity_vs_offset"] != par_pids["waves"] == par_pids["similarity_matrix"]
    # the same paths in the same order, the same notes, every file complete
    assert par.stdout.replace(str(par_out), "OUT") == seq.stdout.replace(str(seq_out), "OUT")
    assert par.stdout.split() == [str(par_out / f"{label}.png") for label in labels]
    assert par.stderr == seq.stderr and "note:" in par.stderr and "block-averaged" in par.stderr
    assert check_no_partial_output(par_out) == check_no_partial_output(seq_out) == sorted(f"{k}.png" for k in labels)


@needs_fork
@pytest.mark.parametrize(
    "fail",
    [
        ("waves=value",),  # in the child
        ("similarity_vs_offset=value",),  # here, after the child's waves were written
        ("waves=first", "similarity_vs_offset=second"),  # both: the lower-numbered figure's error
        ("similarity_matrix=unpicklable",),  # an error that does not pickle: its type and message
    ],
)
def test_an_error_in_a_figure_is_the_same_one_line_error(tmp_path, fail):
    par, par_out, par_pids = plot(tmp_path, "parallel", "sinusoidal:64:16", *fail)
    seq, seq_out, _ = plot(tmp_path, "sequential", "sinusoidal:64:16", *fail)
    assert len(set(par_pids.values())) == 2  # the figures were drawn on two processes
    assert par.returncode == seq.returncode != 0
    lines = par.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in par.stderr, par.stderr
    assert par.stderr == seq.stderr  # the same message, the class name included (an internal error's)
    how = fail[0].split("=")[1]
    if how == "unpicklable":  # the class does not cross the pipe: its name, built-in base and message do
        assert "internal error: Unpicklable: figure broke in two lines" in lines[0]
        assert seq.returncode == EXIT_INTERNAL
    else:
        assert lines[0].endswith(f"figure {how} broke in two lines"), lines[0]
        assert seq.returncode == EXIT_USAGE  # a ValueError: bad input
    check_no_partial_output(par_out)
    check_no_partial_output(seq_out)


def test_no_fork_with_jax_threads_or_no_idle_cpu(monkeypatch):
    import threading

    monkeypatch.setattr(output, "_idle_cpus", lambda: 2)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    if sys.platform.startswith("linux"):
        assert output._can_fork()  # two idle CPUs
    monkeypatch.setattr(output, "_idle_cpus", lambda: 1)
    assert not output._can_fork()  # one: a second process would only compete
    monkeypatch.setattr(output, "_idle_cpus", lambda: 2)
    monkeypatch.setitem(sys.modules, "jax", object())
    assert not output._can_fork()  # jax imported
    monkeypatch.delitem(sys.modules, "jax")
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    assert not output._can_fork()  # another thread


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="Linux's /proc/loadavg")
def test_idle_cpus_counts_the_runnable_tasks(monkeypatch, tmp_path):
    import builtins

    real_open = builtins.open

    def fake(runnable):
        def opener(path, *args, **kwargs):
            if path == "/proc/loadavg":
                return real_open(write(f"0.50 0.40 0.30 {runnable}/321 4567\n"), *args, **kwargs)
            return real_open(path, *args, **kwargs)

        return opener

    def write(text):
        path = tmp_path / "loadavg"
        path.write_text(text)
        return path

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)))
    monkeypatch.setattr(builtins, "open", fake(1))
    assert output._idle_cpus() == 4  # only this process runs
    monkeypatch.setattr(builtins, "open", fake(3))
    assert output._idle_cpus() == 2  # two others run
    monkeypatch.setattr(builtins, "open", fake(9))
    assert output._idle_cpus() == -4

"""Exports under races and signals (issue 12): exclusive, atomic, nothing left behind.

- a destination created by someone else during an export is never replaced or deleted;
- two processes exporting to one destination: exactly one succeeds, the other says so;
- SIGTERM and SIGINT (Ctrl-C) during a large export remove the temporary folder; ``kill -9``
  (which cannot be caught) leaves at most the hidden temporary sibling, never a partial
  destination; the source is unchanged in every case.

The "large" source holds a 512 MiB *sparse* file (``truncate``: it takes no disk and reads as
zeros). A signal is sent at a known state, never after a duration: the exporter runs with
``FLAX_POSENC_TEST_HOLD`` (:func:`flax_posenc.conversion.atomic.hold`) and stops right after the
first chunk of that file is copied into the temporary folder, announcing it with a file; the test
waits for that file, then signals. So the export is always in progress, unfinished, when the signal
arrives, however fast or loaded the machine (a clean run once finished the export first).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from flax_posenc.conversion import CheckpointError, export, export_position_table, load_position_table
from flax_posenc.conversion.atomic import TEST_HOLD_ENV

ROWS, DIM = 8, 4
BIG = 512 << 20
ROOT = Path(__file__).resolve().parents[1]


def make_source(folder: Path, big: int = 0) -> Path:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": ROWS, "n_embd": DIM}))
    save_file(
        {
            "wpe.weight": rng.standard_normal((ROWS, DIM)).astype(np.float32),
            "wte.weight": rng.standard_normal((10, DIM)).astype(np.float32),
        },
        str(folder / "model.safetensors"),
    )
    (folder / "notes.txt").write_text("keep me")
    if big:
        with open(folder / "blob.dat", "wb") as f:
            f.truncate(big)  # sparse
    return folder


def fingerprint(folder: Path) -> dict[str, object]:
    return {p.name: (p.stat().st_size if p.name == "blob.dat" else p.read_bytes()) for p in folder.iterdir()}


def longer(src: Path) -> np.ndarray:
    w = load_position_table(src).weights
    return np.concatenate([w, w[:2]])


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


# --------------------------------------------------------------------------- races, in process


@pytest.mark.parametrize("intruder", ["file in a dir", "empty dir", "a file"])
def test_destination_created_during_the_export_is_left_alone(tmp_path, monkeypatch, intruder):
    src = make_source(tmp_path / "src")
    out = tmp_path / "out"
    original = export._copy_file

    def racing_copy(a, b, size):  # another process creates the destination mid-export
        if not os.path.lexists(out):
            if intruder == "a file":
                out.write_text("theirs")
            else:
                out.mkdir()
                if intruder == "file in a dir":
                    (out / "theirs.txt").write_text("theirs")
        return original(a, b, size)

    monkeypatch.setattr(export, "_copy_file", racing_copy)
    with pytest.raises(CheckpointError, match="already exists|someone else") as info:
        export_position_table(src, longer(src), out)
    assert "\n" not in str(info.value)
    if intruder == "a file":
        assert out.read_text() == "theirs"
    elif intruder == "file in a dir":
        assert (out / "theirs.txt").read_text() == "theirs"
    else:
        assert out.is_dir() and not any(out.iterdir())
    assert leftovers(tmp_path) == []


def test_overwrite_keeps_the_old_destination_when_publishing_fails(tmp_path, monkeypatch):
    from flax_posenc.conversion import atomic

    src = make_source(tmp_path / "src")
    out = tmp_path / "out"
    export_position_table(src, longer(src), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def refuse(tmp, dest):
        raise CheckpointError(f"{dest}: expected a new export target, found it already exists")

    monkeypatch.setattr(atomic, "_rename_onto_claim", refuse)
    with pytest.raises(CheckpointError):
        export_position_table(src, longer(src), out, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # put back, untouched
    assert leftovers(tmp_path) == []


# --------------------------------------------------------------------------- races and signals, processes

#: A terminal's foreground process starts with SIGINT at its default; a process launched in the
#: background by a non-interactive shell (a CI runner's ``cmd &``) inherits it ignored, and Python then
#: never raises KeyboardInterrupt. The children here restore it first, as a terminal would have it.
DEFAULT_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"

WORKER = (
    DEFAULT_SIGINT
    + """
import os, sys, time
import numpy as np
from flax_posenc.conversion import CheckpointError, export_position_table, load_position_table
src, out, go = sys.argv[1:4]
w = load_position_table(src).weights
w = np.concatenate([w, w[:2]])
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
try:
    export_position_table(src, w, out)
except CheckpointError as e:
    print(e, flush=True)
    sys.exit(2)
print("ok", flush=True)
"""
)


def spawn(*args: str, hold: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if hold is not None:
        env[TEST_HOLD_ENV] = str(hold)
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def test_two_processes_race_for_one_destination(tmp_path):
    src = make_source(tmp_path / "src", big=32 << 20)  # both copies overlap in time
    before = fingerprint(src)
    out, go = tmp_path / "out", tmp_path / "go"
    procs = [spawn(str(src), str(out), str(go)) for _ in range(2)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    go.touch()
    results = [(p.wait(60), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes == [0, 2], results  # exactly one wins; the other says why, in one line
    loser = next(r for r in results if r[0] == 2)
    assert "already exists" in loser[1] and "Traceback" not in loser[2]
    assert load_position_table(out).num_positions == ROWS + 2
    assert fingerprint(src) == before
    assert leftovers(tmp_path) == []


def _wait_until_held(hold: Path, proc: subprocess.Popen, point: str = "copying") -> None:
    """Until the exporter has stopped at ``point`` (the state; the 120 s are only a failsafe)."""
    for _ in range(120_000):
        if (hold / f"{point}.held").exists():
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.001)
    pytest.fail(f"the export never reached the hold point {point!r}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["TERM", "INT", "KILL"])
def test_signal_during_a_512_mib_export(tmp_path, sig):
    src = make_source(tmp_path / "src", big=BIG)
    before = fingerprint(src)
    out, go, hold = tmp_path / "out", tmp_path / "go", tmp_path / "hold"
    go.touch()
    hold.mkdir()
    proc = spawn(str(src), str(out), str(go), hold=hold)
    try:
        assert proc.stdout.readline().strip() == "ready"
        _wait_until_held(hold, proc)
        assert [p.name for p in tmp_path.glob(".out.tmp-*/blob.dat")] == ["blob.dat"]  # copying, unfinished
        proc.send_signal(sig)
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert not out.exists()  # never a partial destination
    assert fingerprint(src) == before
    shutil.rmtree(hold)
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL
        for tmp in tmp_path.glob(".out.tmp-*"):  # what kill -9 may leave: the hidden temporary only
            shutil.rmtree(tmp)
    else:
        # SIGTERM: re-delivered after the cleanup, so the process still dies of it; SIGINT:
        # KeyboardInterrupt after the cleanup, and Python then dies of SIGINT (a bare worker,
        # not the CLI, which exits 130 -- see below)
        assert code == -sig, err
        assert leftovers(tmp_path) == []


def test_cli_ctrl_c_during_export_exits_130_and_cleans_up(tmp_path):
    src = make_source(tmp_path / "src", big=BIG)
    hold = tmp_path / "hold"
    hold.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), TEST_HOLD_ENV: str(hold)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            DEFAULT_SIGINT
            + "import runpy; runpy.run_module('flax_posenc.report.cli', run_name='__main__', alter_sys=True)",
            "extend",
            str(src),
            "--length",
            "12",
            "--out",
            str(tmp_path / "out"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        _wait_until_held(hold, proc)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert code == 130 and "interrupted" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_the_hold_hook_releases_and_the_export_completes(tmp_path):
    """The hook itself: held at the known point, then released, the export finishes as usual."""
    src = make_source(tmp_path / "src", big=1 << 20)
    out, go, hold = tmp_path / "out", tmp_path / "go", tmp_path / "hold"
    go.touch()
    hold.mkdir()
    proc = spawn(str(src), str(out), str(go), hold=hold)
    try:
        _wait_until_held(hold, proc)
        assert not out.exists()
        (hold / "copying.release").touch()
        assert proc.wait(60) == 0, proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert load_position_table(out).num_positions == ROWS + 2 and leftovers(tmp_path) == []

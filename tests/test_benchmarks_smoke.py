"""The benchmarks run (tiny sizes); no time is asserted, only the structure of what they report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = (
    "input block",
    "decode step",
    "training step",
    "sinusoids",
    "RoPE prefill",
    "RoPE at traced",
    "compile time",
    "cost curves",
)


def test_run_quick_reports_every_section_and_target(tmp_path):
    raw, fig = tmp_path / "rows.json", tmp_path / "curves.png"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--json", str(raw), "--figure", str(fig)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(raw.read_text())
    rows = data["results"]["default malloc"]
    found = {r["section"] for r in rows}
    for section in SECTIONS:
        assert any(s.startswith(section) for s in found), (section, found)
    for r in rows:  # three interleaved rounds, positive times, the load recorded beside them
        assert len(r["runs"]) == 3 and all(t > 0 for t in r["runs"]), r
        assert len(r["load"]) == 2
    targets = data["targets"]["default malloc"]
    assert len(targets) == 18  # every ratio of benchmarks/run.py's TARGETS was computable
    for label, t in targets.items():
        assert t["min"] <= t["median"] <= t["max"] and len(t["values"]) == 3, label
        assert (t["met"] is None) == (t["target"] == ""), label
        if t["met"] is not None:  # met means the whole range is on the right side
            op, bound = t["target"].split()
            assert t["met"] == all((v >= float(bound)) if op == ">=" else (v <= float(bound)) for v in t["values"]), (
                label
            )
    assert (
        "## Ratios" in out.stdout
        and "Hugging Face GPT-2 wte+wpe (PyTorch)" in out.stdout
        and "load average" in out.stdout
    )
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_loading_benchmark_runs():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "load_table.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "speed-up" in out.stdout

"""The benchmarks run (tiny sizes); they assert no time, only that they work end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_input_block_benchmark_runs():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "## Ratios" in out.stdout and "Hugging Face GPT-2 wte+wpe (PyTorch)" in out.stdout
    assert "exact sinusoidal_encoding" in out.stdout


def test_table_loading_benchmark_runs():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "load_table.py"), "--quick"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "speed-up" in out.stdout

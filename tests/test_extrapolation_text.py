"""examples/extrapolation_text.py: the ``--quick`` run end to end and its ``--add`` (one subprocess,
tiny sizes) and the pieces its numbers rest on, each against an independent reference (float64 numpy)."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx
from helpers import fast_xla_env

import flax_posenc as fp

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "extrapolation_text.py"


def _load():
    spec = importlib.util.spec_from_file_location("extrapolation_text", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


et = _load()


# One process runs both invocations through the script's main(argv), as its __main__ does: the full
# --quick run into OUT, then --add t5 into ADD, whose saved results are OUT's with T5's rows removed
# (one jax start-up instead of two; the --add run retrains T5 from its seed alone).
DRIVER = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import extrapolation_text as et
out, add = Path(sys.argv[2]), Path(sys.argv[3])
et.main(["--quick", "--out", str(out)])
saved = json.loads((out / "figures" / "extrapolation_text.json").read_text())
saved["summary"].pop("t5")
for seed in saved["per_seed"]:
    seed.pop("t5")
(add / "figures").mkdir(parents=True)
(add / "figures" / "extrapolation_text.json").write_text(json.dumps(saved))
et.main(["--quick", "--add", "t5", "--out", str(add)])
"""


@pytest.fixture(scope="module")
def both_runs(tmp_path_factory):
    out, add = tmp_path_factory.mktemp("extrapolation_text"), tmp_path_factory.mktemp("extrapolation_text_add")
    env = fast_xla_env(PYTHONPATH=str(ROOT))  # compile-bound; the quick numbers are not published
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(SCRIPT.parent), str(out), str(add)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, f"exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return out, add


@pytest.fixture(scope="module")
def quick(both_runs):
    out, _ = both_runs
    return out, json.loads((out / "figures" / "extrapolation_text.json").read_text())


def test_quick_run_writes_the_report(quick):
    out, results = quick
    doc = (out / "extrapolation-text.md").read_text()
    assert doc.startswith("# ")
    assert "examples/extrapolation_text.py --quick" in doc
    assert "| encoding | L=16 | L=32 |" in doc
    for name in et.variant_names(et.QUICK):
        assert f"| {name} |" in doc
        assert set(results["summary"][name]) == {"16", "32"}
    assert "rope+PI ft 2x" in results["summary"] and "rope ft 2x" in results["summary"]
    assert (out / "figures" / "extrapolation_text.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results["corpus"]["held_out_bytes"] > 0 and results["corpus"]["train_bytes"] > 0
    assert not set(results["corpus"]["held_out_files"]) & set(results["corpus"]["train_files"])
    # the report re-renders from the saved results alone, byte for byte
    (out / "extrapolation-text.md").unlink()
    et.report(results, out)  # what --report-only does
    assert (out / "extrapolation-text.md").read_text() == doc


def test_quick_run_measures_real_properties(quick):
    _, results = quick
    trained = results["config"]["train_length"]
    # a learned table read past its rows is an error, never a silent clamp
    assert results["summary"]["learned"]["32"] == "error"
    assert results["limit_error"].startswith("PositionLimitError: learned table (16 rows) holds 16 positions")
    # every other cell: a finite perplexity above 1, and at the trained length every encoding beats
    # the unigram baseline (which the test recomputes itself below)
    for name, rows in results["summary"].items():
        for length, row in rows.items():
            if row == "error":
                assert name == "learned" and int(length) > trained
                continue
            for part in ("whole", "past"):
                if part in row:
                    assert all(math.isfinite(v) and 2**v > 1 for v in row[part]["seeds"]), (name, length)
            assert all(math.isfinite(v) and v > 0 for v in row["bands"].values())
        assert rows[str(trained)]["whole"]["max"] < results["unigram_bpb"], name
    # at the trained length the RoPE scalings are plain RoPE (factor 1): identical numbers
    for name in ("rope+PI", "rope+NTK", "rope+YaRN"):
        assert results["summary"][name][str(trained)] == results["summary"]["rope"][str(trained)]


def test_add_reproduces_an_encoding_of_the_full_run(quick, both_runs):
    """``--add t5`` retrains only T5 and merges it into saved results without T5's rows (DRIVER): its
    rows equal the full run's, bit for bit (each encoding's runs depend on the seed alone), the other
    rows are kept, and both invocations are listed."""
    _, results = quick
    _, add = both_runs
    merged = json.loads((add / "figures" / "extrapolation_text.json").read_text())
    assert merged["summary"] == results["summary"]
    assert list(merged["summary"]) == list(results["summary"])  # the table's row order
    assert [r["encodings"] for r in merged["runs"]] == [list(et.TRAINED), ["t5"]]
    assert "--add t5" in (add / "extrapolation-text.md").read_text()


def test_unigram_baseline_against_counter():
    cfg = et.QUICK
    corpus = et.load_corpus(cfg)
    scored = corpus["held"][1 : cfg.eval_bytes + 1]
    counts = Counter(corpus["train"].tolist())
    total = len(corpus["train"]) + 256
    reference = -sum(math.log2((counts.get(b, 0) + 1) / total) for b in scored.tolist()) / len(scored)
    assert et.unigram_bpb(corpus["train"], scored) == pytest.approx(reference, abs=1e-9)


def test_split_is_by_file_and_deterministic():
    cfg = et.QUICK
    info = et.load_corpus(cfg)["info"]
    files = sorted(p.name for p in et.stdlib_dir().glob("*.py"))
    assert info["held_out_files"] == files[cfg.holdout_every - 1 :: cfg.holdout_every]
    assert info["train_bytes"] == sum((et.stdlib_dir() / f).stat().st_size for f in info["train_files"])


def test_eval_windows_score_the_same_bytes_at_every_length():
    cfg = et.QUICK
    held = np.arange(1000, dtype=np.int64) % 251
    for length in (16, 32, 64):
        w = et.eval_windows(held, cfg, length)
        assert w.shape == (cfg.eval_bytes // length, length + 1)
        np.testing.assert_array_equal(w[:, 1:].reshape(-1), held[1 : cfg.eval_bytes + 1])


def test_position_nll_against_float64_numpy():
    cfg = et.QUICK
    model = et.ByteLM(cfg, "rope", rngs=nnx.Rngs(3))
    windows = np.random.default_rng(0).integers(0, 256, (3, 9)).astype(np.int32)
    rotary = et.rotary_tables(et.rope_config(cfg, "rope", 8), 8)
    got = et.position_nll(model, windows, rotary, cfg)
    # the model's logits in one compiled call (eagerly, each op compiles on its own: ~3 CPU s more)
    logits = np.asarray(nnx.jit(lambda m, w, r: m(w, r))(model, jax.numpy.asarray(windows[:, :-1]), rotary))
    logits = logits.astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, windows[:, 1:, None], -1)[..., 0]
    np.testing.assert_allclose(got, nll.mean(0) / math.log(2), rtol=1e-5)


def test_rope_rows_use_the_library_configs():
    cfg = et.Config()
    assert et.rope_config(cfg, "rope+PI", 512) == fp.RopeConfig(head_dim=16, rope_type="linear", factor=4.0)
    assert et.rope_config(cfg, "rope+YaRN", 128) == fp.RopeConfig(head_dim=16)
    ntk = et.rope_config(cfg, "rope+NTK", 1024)
    assert (ntk.rope_type, ntk.factor, ntk.max_position_embeddings) == ("dynamic", 1.0, 128)
    # dynamic NTK at L = 1024: base 10000 * 8 ** (d / (d - 2)), as Hugging Face's formula
    inv, _ = fp.rope_inverse_frequencies(ntk, seq_len=1024)
    base = 10000.0 * 8.0 ** (16 / 14)
    np.testing.assert_allclose(inv, base ** (-np.arange(0, 16, 2) / 16), rtol=1e-12)

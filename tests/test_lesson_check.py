"""examples/lesson_check.py: its numbers against independent float64 references.

The references are computed here from closed forms in plain numpy (or read straight from the
checkpoint / built with torch), never taken from the lesson's text or the script's output.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
D = 512


def _load_script():
    spec = importlib.util.spec_from_file_location("lesson_check", ROOT / "examples" / "lesson_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    return _load_script()


@pytest.fixture(scope="module")
def values(script):
    return script.compute()


def freqs(dim: int) -> np.ndarray:
    return 10000.0 ** (-2.0 * np.arange(dim // 2) / dim)


def test_neighbour_dot_products(values):
    expected = float(np.cos(freqs(D)).sum())  # PE(p)·PE(p+1) = Σ cos(w_i), any p
    for key in ("dot_1_2", "dot_50_51", "dot_100_101"):
        assert values[key] == pytest.approx(expected, abs=1e-10)
    assert values["dot_self"] == pytest.approx(D / 2, abs=1e-10)
    assert values["dot_offset1_spread"] < 1e-11 and values["dot_max_spread"] < 1e-11
    assert values["rotation_max_error"] < 1e-11
    assert values["lesson_code_vs_formula"] < 1e-11
    assert values["library_float32_vs_float64"] < 2e-6


def test_four_dim_table(values):
    w = freqs(4)  # [1, 0.01]
    for pos in (1, 2):
        ref = [math.sin(pos * w[0]), math.cos(pos * w[0]), math.sin(pos * w[1]), math.cos(pos * w[1])]
        for d in range(4):
            assert values[f"pe4_{pos}_{d}"] == pytest.approx(ref[d], abs=1e-15)
    assert values["d4_fast_wavelength"] == pytest.approx(2 * math.pi, rel=1e-14)
    assert values["d4_slow_wavelength"] == pytest.approx(200 * math.pi, rel=1e-14)
    assert values["d4_wavelength_ratio"] == pytest.approx(100.0, rel=1e-14)
    # closest pair among positions 0..1023: the distance depends only on the offset k
    dist = [math.sqrt(2 * np.sum(1 - np.cos(k * w))) for k in range(1, 1024)]
    k = int(np.argmin(dist)) + 1
    assert values["d4_closest_distance_1024"] == pytest.approx(min(dist), rel=1e-9)
    a, b = values["d4_closest_pair_1024"]
    assert b - a == k


def test_wavelengths_and_periods(values):
    wl = lambda dim_index: 2 * math.pi * 10000.0 ** (2 * (dim_index // 2) / D)  # noqa: E731
    assert values["wavelength_dim0"] == pytest.approx(2 * math.pi, rel=1e-14)
    assert values["wavelength_dim1"] == pytest.approx(2 * math.pi, rel=1e-14)
    assert values["wavelength_dim50"] == pytest.approx(wl(50), rel=1e-12)
    assert values["wavelength_dim100"] == pytest.approx(wl(100), rel=1e-12)
    assert values["wavelength_last_pair"] == pytest.approx(wl(D - 1), rel=1e-12)
    assert values["two_pi_times_base"] == pytest.approx(2 * math.pi * 1e4, rel=1e-15)
    # the FFT estimate on the table agrees with the closed form
    assert values["measured_wavelength_dim0"] == pytest.approx(wl(0), rel=5e-3)
    assert values["measured_wavelength_dim50"] == pytest.approx(wl(50), rel=5e-3)
    assert values["measured_wavelength_dim100"] == pytest.approx(wl(100), rel=5e-3)
    assert values["fraction_of_period_512"] == pytest.approx(512 / wl(D - 1), rel=1e-12)
    assert values["angle_pos10000_last_pair"] == pytest.approx(10000 * freqs(D)[-1], rel=1e-12)


def test_decay_and_uniqueness(values):
    w = freqs(D)
    cos = lambda k: float(np.cos(k * w).sum() / (D / 2))  # noqa: E731
    for k in (1, 10, 100, 500, 1000):
        assert values[f"cos_k{k}"] == pytest.approx(cos(k), abs=1e-12)
    curve = np.array([cos(k) for k in range(1025)])
    maxima = int(np.sum((curve[1:-1] > curve[:-2]) & (curve[1:-1] > curve[2:])))
    assert values["cos_local_maxima_1024"] == maxima
    assert values["cos_min_1024"] == pytest.approx(curve.min(), abs=1e-12)
    dist = [math.sqrt(2 * np.sum(1 - np.cos(k * w))) for k in range(1, 2048)]
    assert values["d512_closest_distance_2048"] == pytest.approx(min(dist), rel=1e-9)


def test_attention_is_equivariant_not_invariant(values):
    assert values["attention_equivariance_error"] < 1e-12
    assert values["attention_invariance_gap"] > 1e-3


def test_gpt2_parameter_counts(values):
    torch = pytest.importorskip("torch")
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config()
    with torch.device("meta"):
        model = GPT2LMHeadModel(config)
    total = sum(p.numel() for p in model.parameters())  # tied lm_head counted once
    assert values["gpt2_total_params"] == total
    assert values["gpt2_table_params"] == config.n_positions * config.n_embd == model.transformer.wpe.weight.numel()
    assert values["gpt2_table_share"] == pytest.approx(model.transformer.wpe.weight.numel() / total, rel=1e-15)
    assert values["gpt2_first_missing_position"] == config.n_positions
    assert values["gpt2_last_position"] == config.n_positions - 1


def test_jax_overflow_behaviour(values):
    assert values["jax_index_past_end"] == 3.0  # clamped to the last of rows 0..3
    assert math.isnan(values["jax_take_fill_past_end"])


def test_bert_limit_from_the_real_checkpoint(values, minilm_dir):
    from safetensors import safe_open

    with safe_open(str(minilm_dir / "model.safetensors"), "np") as f:
        rows = f.get_slice("embeddings.position_embeddings.weight").get_shape()[0]
    config = json.loads((minilm_dir / "config.json").read_text())
    assert values["bert_rows"] == rows == values["bert_max_length"]
    assert values["bert_config_limit"] == config["max_position_embeddings"]


def test_document_is_current_and_names_its_command(script, values):
    text = script.render_markdown(script.claims(values))
    assert text.splitlines()[2] == f"Regenerate with: `{script.COMMAND}`"
    doc = ROOT / "docs" / "lesson-check.md"
    assert doc.read_text(encoding="utf-8") == text, f"docs/lesson-check.md is stale: run {script.COMMAND}"
    assert all(c.verdict in {"correct", "WRONG", "imprecise", "loose", "not checked"} for c in script.claims(values))
    assert all(c.right for c in script.claims(values) if c.verdict in {"WRONG", "imprecise", "loose"})

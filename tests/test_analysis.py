"""flax_posenc.report.analysis against brute-force float64 numpy references."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from helpers import sinusoid
from hypothesis import given, settings
from hypothesis import strategies as st

from flax_posenc.conversion.table import PositionTable
from flax_posenc.report import analysis


def learned(length: int, dim: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 0.02, size=(length, dim))


# ----------------------------------------------------------------- similarity


@settings(max_examples=25, deadline=None)
@given(
    half=st.integers(1, 32),
    length=st.integers(2, 160),
    base=st.sampled_from([100.0, 10000.0, 500000.0]),
)
def test_sinusoid_dot_product_depends_only_on_offset(half, length, base):
    dim = 2 * half
    prof = analysis.similarity_by_offset(sinusoid(length, dim, base), metric="dot")
    w = base ** (-np.arange(0, dim, 2) / dim)
    expected = np.array([np.cos(k * w).sum() for k in range(length)])
    np.testing.assert_allclose(prof.mean, expected, atol=1e-9 * dim)
    assert prof.max_spread < 1e-9 * dim
    np.testing.assert_array_equal(prof.count, length - np.arange(length))


def test_offset_profile_over_several_blocks_of_diagonals_matches_the_per_diagonal_loop():
    """600 rows: the statistics are computed a block of 256 diagonals at a time (three blocks, the
    last one partial); each offset equals numpy's own mean/std/min/max of that diagonal."""
    t = np.random.default_rng(7).normal(size=(600, 5))
    prof = analysis.similarity_by_offset(t, metric="dot")  # 600 <= max_rows: no sampling
    gram = t @ t.T
    for k in range(600):
        diag = np.diagonal(gram, k)
        np.testing.assert_allclose(
            [prof.mean[k], prof.std[k], prof.min[k], prof.max[k], prof.count[k]],
            [diag.mean(), diag.std(), diag.min(), diag.max(), diag.size],
            rtol=1e-12,
            atol=1e-12,
            err_msg=f"offset {k}",
        )


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    rows=st.integers(2, 40),
    dim=st.integers(1, 12),
    metric=st.sampled_from(["dot", "cosine"]),
)
def test_offset_profile_matches_brute_force(seed, rows, dim, metric):
    t = np.random.default_rng(seed).normal(size=(rows, dim))
    prof = analysis.similarity_by_offset(t, metric=metric)

    def sim(a, b):
        d = a @ b
        return d if metric == "dot" else d / (np.linalg.norm(a) * np.linalg.norm(b))

    for k in range(rows):
        vals = np.array([sim(t[p], t[p + k]) for p in range(rows - k)])
        assert prof.mean[k] == pytest.approx(vals.mean(), abs=1e-10)
        assert prof.std[k] == pytest.approx(vals.std(), abs=1e-10)
        assert prof.min[k] == pytest.approx(vals.min(), abs=1e-10)
        assert prof.max[k] == pytest.approx(vals.max(), abs=1e-10)


def test_learned_table_has_measurable_spread():
    prof = analysis.similarity_by_offset(learned(256, 64))
    assert prof.max_spread > 0.05
    assert analysis.similarity_by_offset(sinusoid(256, 64)).max_spread < 1e-12


def test_max_offset_limits_the_profile():
    prof = analysis.similarity_by_offset(sinusoid(100, 8), max_offset=10)
    assert prof.offsets.tolist() == list(range(11))
    with pytest.raises(KeyError):
        prof.at(11)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 30), dim=st.integers(1, 10))
def test_similarity_matrices(seed, rows, dim):
    t = np.random.default_rng(seed).normal(size=(rows, dim))
    dot = analysis.dot_similarity(t)
    np.testing.assert_allclose(dot.matrix, t @ t.T, atol=1e-12)
    cos = analysis.cosine_similarity(t)
    n = np.linalg.norm(t, axis=1)
    np.testing.assert_allclose(cos.matrix, (t @ t.T) / np.outer(n, n), atol=1e-12)
    np.testing.assert_allclose(np.diag(cos.matrix), 1.0, atol=1e-12)
    assert np.all(np.abs(cos.matrix) <= 1 + 1e-12)
    assert dot.stride == 1 and dot.note == ""


def test_cosine_of_zero_row_is_zero():
    cos = analysis.cosine_similarity(np.array([[0.0, 0.0], [1.0, 0.0]]))
    assert cos.matrix[0, 1] == 0.0


def test_large_table_is_subsampled_and_says_so():
    t = sinusoid(1000, 8)
    sim = analysis.cosine_similarity(t, max_rows=300)
    assert sim.stride == 4 and sim.positions.tolist() == list(range(0, 1000, 4))
    assert "subsampled" in sim.note and "1000" in sim.note
    prof = analysis.similarity_by_offset(t, metric="dot", max_rows=300)
    assert prof.stride == 4 and prof.offsets[1] == 4
    w = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    assert prof.at(8)[0] == pytest.approx(np.cos(8 * w).sum(), abs=1e-9)
    assert "subsampled" in str(prof) and "subsampled" in prof.to_dict()["note"]


# ----------------------------------------------------------------- uniqueness


def _brute_closest(t):
    best = (math.inf, -1, -1)
    for a in range(len(t)):
        for b in range(a + 1, len(t)):
            best = min(best, (float(np.linalg.norm(t[a] - t[b])), a, b))
    return best


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(2, 30), dim=st.integers(1, 6))
def test_uniqueness_matches_brute_force(seed, rows, dim):
    t = np.random.default_rng(seed).normal(size=(rows, dim))
    u = analysis.uniqueness(t)
    dist, _, _ = _brute_closest(t)
    assert u.distance == pytest.approx(dist, rel=1e-9)
    assert u.distance == pytest.approx(float(np.linalg.norm(t[u.first] - t[u.second])), rel=1e-12)
    assert u.first < u.second and u.all_distinct


def test_uniqueness_finds_duplicates():
    t = learned(50, 8)
    t[37] = t[12]
    u = analysis.uniqueness(t)
    assert (u.first, u.second, u.distance) == (12, 37, 0.0)
    assert not u.all_distinct and "DUPLICATE" in str(u)


def test_uniqueness_subsampled_still_checks_adjacent_pairs():
    t = learned(1001, 8)
    t[501] = t[500]  # adjacent duplicate, off the stride-2 grid for one of them
    u = analysis.uniqueness(t, max_rows=400)
    assert (u.first, u.second, u.distance) == (500, 501, 0.0)
    assert u.stride == 3 and "adjacent" in u.note


def test_uniqueness_of_sinusoid_is_offset_one_distance():
    d, L = 64, 300
    w = 10000.0 ** (-np.arange(0, d, 2) / d)
    per_k = [math.sqrt(2 * np.sum(1 - np.cos(k * w))) for k in range(1, L)]
    assert analysis.uniqueness(sinusoid(L, d)).distance == pytest.approx(min(per_k), rel=1e-9)


def test_uniqueness_one_row():
    u = analysis.uniqueness(np.ones((1, 3)))
    assert u.first == -1 and u.all_distinct and json.dumps(u.to_dict(), allow_nan=True)


# ----------------------------------------------------------------- norms, spectrum, length


def test_row_norms():
    prof = analysis.row_norms(sinusoid(50, 32))
    np.testing.assert_allclose(prof.norms, 4.0, atol=1e-12)  # sqrt(32 / 2)
    t = learned(20, 4)
    prof = analysis.row_norms(t)
    assert prof.argmax == int(np.argmax(np.linalg.norm(t, axis=1)))
    assert prof.mean == pytest.approx(np.linalg.norm(t, axis=1).mean())


def test_dominant_wavelengths_match_sinusoidal_spectrum():
    L, d = 1024, 64
    spec = analysis.dominant_wavelengths(sinusoid(L, d))
    ref = 2 * np.pi * 10000.0 ** (2 * (np.arange(d) // 2) / d)
    np.testing.assert_allclose(analysis.sinusoidal_wavelengths(d), ref, rtol=1e-14)
    assert spec.resolved.sum() >= 20
    np.testing.assert_allclose(spec.wavelengths[spec.resolved], ref[spec.resolved], rtol=0.01)
    assert np.all(ref[~spec.resolved] > L / 2 * 0.9)  # unresolved = slow columns
    assert spec.power_share[spec.resolved].min() > 0.9


def test_dominant_wavelengths_constant_and_noise():
    t = np.column_stack([np.ones(64), np.random.default_rng(0).normal(size=64)])
    spec = analysis.dominant_wavelengths(t)
    assert math.isinf(spec.wavelengths[0]) and not spec.resolved[0]
    assert 2.0 <= spec.wavelengths[1] <= 64
    assert spec.power_share[1] < 0.5
    json.dumps(spec.to_dict(include_arrays=True))
    with pytest.raises(ValueError, match="4 rows"):
        analysis.dominant_wavelengths(np.ones((3, 2)))


def test_usable_length():
    assert analysis.usable_length(1024) == 1024
    assert analysis.usable_length(514, 2) == 512
    with pytest.raises(ValueError):
        analysis.usable_length(2, 3)


@pytest.mark.parametrize("bad", [np.ones(5), np.ones((0, 3)), np.array([[1.0, np.nan]])])
def test_bad_tables_are_one_line_value_errors(bad):
    with pytest.raises(ValueError) as info:
        analysis.as_float64(bad)
    assert "\n" not in str(info.value)


def test_accepts_jax_and_low_precision_arrays():
    import jax.numpy as jnp

    ref = sinusoid(40, 8)
    prof = analysis.similarity_by_offset(jnp.asarray(ref, dtype=jnp.bfloat16), metric="dot")
    assert prof.mean[1] == pytest.approx(analysis.similarity_by_offset(ref, metric="dot").mean[1], rel=2e-2)


# ----------------------------------------------------------------- records and summarize


def test_records_print_and_serialise():
    t = learned(64, 16)
    records = [
        analysis.dot_similarity(t),
        analysis.cosine_similarity(t),
        analysis.similarity_by_offset(t),
        analysis.uniqueness(t),
        analysis.row_norms(t),
        analysis.dominant_wavelengths(t),
    ]
    for r in records:
        assert str(r) and "\n" not in str(r)
        json.dumps(r.to_dict())
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.x = 1  # frozen


def test_summarize_skips_reserved_rows():
    body = sinusoid(40, 8)
    weights = np.vstack([np.full((2, 8), 1e3), body]).astype(np.float32)
    rep = analysis.summarize(PositionTable(weights, family="roberta", key="pos", offset=2, source="toy"))
    assert (rep.rows, rep.offset, rep.num_positions, rep.dim) == (42, 2, 40, 8)
    assert rep.norms.max == pytest.approx(2.0, abs=1e-6)  # the reserved 1e3 rows are not analysed
    assert rep.offset_similarity.max_spread < 1e-6
    d = rep.to_dict()
    assert json.loads(json.dumps(d))["num_positions"] == 40
    assert d["positions"] == "0..39"
    text = str(rep)
    assert "num_positions 40" in text and "max_length" not in text and "2 reserved" in text and "toy" in text
    # the former name: a warning from the attribute, the same value under the JSON's old key (until 0.3)
    with pytest.warns(DeprecationWarning, match="^TableReport.max_length: deprecated, use num_positions$") as caught:
        assert rep.max_length == 40
    assert caught[0].filename == __file__  # the warning names the caller's line
    assert d["max_length"] == d["num_positions"] == 40


def test_summarize_real_bert(minilm_dir):
    from flax_posenc.conversion import load_position_table

    rep = analysis.summarize(load_position_table(str(minilm_dir)))
    assert (rep.family, rep.num_positions, rep.dim) == ("bert", 512, 384)
    assert rep.offset_similarity.max_spread > 0.05  # a learned table: not offset-invariant
    assert rep.uniqueness.all_distinct
    json.dumps(rep.to_dict())

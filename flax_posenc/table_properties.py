"""Properties of any position table: similarity, offset invariance, uniqueness, norms, spectrum.

The numeric floor of :mod:`flax_posenc.report.analysis` (which re-exports every name here and
adds RoPE's): numpy only, below :mod:`flax_posenc.conversion`, whose inspection records
(``inspect_source(...)``: ``str``, ``to_dict()``) carry a table's :class:`TableReport`.

Pure functions of a ``(rows, dim)`` table (numpy or jax array, or anything ``np.asarray``
accepts). Everything is computed in float64 numpy on the host, whatever the table's dtype.
Each function returns a small frozen dataclass: ``str()`` gives a one-line summary and
``to_dict()`` a JSON-serialisable dict.

Positions are rows: row ``r`` of the array given here is position ``r``. For a checkpoint
table with reserved leading rows (RoBERTa/OPT: 2), pass ``weights[offset:]``, or use
:func:`summarize`, which does so from a :class:`~flax_posenc.conversion.table.PositionTable`.

Large tables: the functions that need every pair of rows (:func:`dot_similarity`,
:func:`cosine_similarity`, :func:`similarity_by_offset`, :func:`uniqueness`) use every
``stride``-th row when the table has more than ``max_rows`` rows (default 4096), and say so in
the result (``stride`` > 1 and a ``note``).

>>> import numpy as np
>>> from flax_posenc.sinusoid_math import sinusoidal_table_np
>>> pe = sinusoidal_table_np(64, 8, dtype=np.float64)   # the lesson's layout, float64
>>> prof = similarity_by_offset(pe, metric="dot")
>>> round(float(prof.mean[1]), 4), bool(prof.max_spread < 1e-12)   # sum_i cos(w_i)
(3.5353, True)
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, Literal, Protocol

import numpy as np

from flax_posenc.sinusoid_math import sinusoidal_frequencies


class TableLike(Protocol):
    """What :func:`summarize` reads of a table (a :class:`~flax_posenc.conversion.table.PositionTable`,
    one floor up, which this numpy floor does not import)."""

    @property
    def weights(self) -> np.ndarray: ...

    @property
    def family(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def offset(self) -> int: ...

    @property
    def source(self) -> str: ...

    @property
    def rows(self) -> int: ...

    @property
    def dim(self) -> int: ...

    @property
    def dtype(self) -> Any: ...


DEFAULT_MAX_ROWS = 4096
Metric = Literal["dot", "cosine"]

__all__ = [
    "DEFAULT_MAX_ROWS",
    "SimilarityMatrix",
    "OffsetProfile",
    "Uniqueness",
    "NormProfile",
    "Spectrum",
    "TableReport",
    "as_float64",
    "usable_length",
    "sampling_stride",
    "dot_similarity",
    "cosine_similarity",
    "similarity_by_offset",
    "uniqueness",
    "row_norms",
    "dominant_wavelengths",
    "sinusoidal_wavelengths",
    "summarize",
]


# --------------------------------------------------------------------------- helpers


def as_float64(table: Any) -> np.ndarray:
    """The table as a float64 numpy array of shape ``(rows, dim)``.

    Raises ValueError (one line) unless the table is 2-D with at least one row and column
    and only finite values.

    >>> as_float64([[1, 2], [3, 4]]).dtype
    dtype('float64')
    """
    arr = np.asarray(table, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"expected a 2-D table (rows, dim) with rows, dim >= 1; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"table of shape {arr.shape} holds NaN or infinite values")
    return arr


def usable_length(rows: int, offset: int = 0) -> int:
    """Positions a table of ``rows`` rows serves when its first ``offset`` rows are reserved.

    GPT-2: 1024 rows, offset 0 -> 1024. RoBERTa: 514 rows, offset 2 -> 512.

    >>> usable_length(514, offset=2)
    512
    """
    if rows < 0 or offset < 0:
        raise ValueError(f"rows and offset must be >= 0; got rows={rows}, offset={offset}")
    if offset > rows:
        raise ValueError(f"offset {offset} exceeds the table's {rows} rows")
    return rows - offset


def sampling_stride(rows: int, max_rows: int = DEFAULT_MAX_ROWS) -> int:
    """Stride ``s`` so that every ``s``-th of ``rows`` rows gives at most ``max_rows`` rows.

    >>> sampling_stride(1024), sampling_stride(10_000, 4096)
    (1, 3)
    """
    if max_rows < 2:
        raise ValueError(f"max_rows must be >= 2; got {max_rows}")
    return max(1, math.ceil(rows / max_rows))


def _sampled(arr: np.ndarray, max_rows: int) -> tuple[np.ndarray, int, str]:
    stride = sampling_stride(arr.shape[0], max_rows)
    if stride == 1:
        return arr, 1, ""
    note = (
        f"subsampled: 1 row in {stride} of {arr.shape[0]} "
        f"({len(range(0, arr.shape[0], stride))} rows used; max_rows={max_rows})"
    )
    return arr[::stride], stride, note


def _gram(arr: np.ndarray, metric: Metric) -> np.ndarray:
    if metric == "dot":
        return arr @ arr.T
    if metric == "cosine":
        norms = np.linalg.norm(arr, axis=1)
        unit = arr / np.where(norms > 0, norms, 1.0)[:, None]
        return unit @ unit.T
    raise ValueError(f"metric must be 'dot' or 'cosine'; got {metric!r}")


def _f(x: float) -> float:
    return float(x)


# --------------------------------------------------------------------------- similarity


@dataclasses.dataclass(frozen=True)
class SimilarityMatrix:
    """Pairwise similarity of rows.

    Attributes:
      matrix: ``(n, n)`` float64, ``matrix[a, b]`` = similarity of rows ``positions[a]`` and
        ``positions[b]``.
      positions: ``(n,)`` int, the rows used (``0, stride, 2*stride, ...``).
      metric: ``"dot"`` (``x·y``) or ``"cosine"`` (``x·y / (|x| |y|)``, 0 for a zero row).
      stride: 1 when every row was used.
      note: what was subsampled, or ``""``.
    """

    matrix: np.ndarray
    positions: np.ndarray
    metric: str
    stride: int = 1
    note: str = ""

    def to_dict(self, *, include_matrix: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "metric": self.metric,
            "rows_used": int(self.positions.size),
            "stride": self.stride,
            "min": _f(self.matrix.min()),
            "max": _f(self.matrix.max()),
            "note": self.note,
        }
        if include_matrix:
            out["positions"] = self.positions.tolist()
            out["matrix"] = self.matrix.tolist()
        return out

    def __str__(self) -> str:
        s = (
            f"{self.metric} similarity of {self.positions.size} rows: "
            f"min {self.matrix.min():.4g}, max {self.matrix.max():.4g}"
        )
        return s + (f" ({self.note})" if self.note else "")


def _similarity(table: Any, metric: Metric, max_rows: int) -> SimilarityMatrix:
    arr = as_float64(table)
    sub, stride, note = _sampled(arr, max_rows)
    positions = np.arange(0, arr.shape[0], stride)
    return SimilarityMatrix(_gram(sub, metric), positions, metric, stride, note)


def dot_similarity(table: Any, *, max_rows: int = DEFAULT_MAX_ROWS) -> SimilarityMatrix:
    """Dot products ``table[a] · table[b]`` of every pair of rows, in float64.

    Args:
      table: ``(rows, dim)`` array.
      max_rows: above this many rows, every ``stride``-th row is used (see the result's note).

    >>> import numpy as np
    >>> dot_similarity(np.eye(3)).matrix.tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    return _similarity(table, "dot", max_rows)


def cosine_similarity(table: Any, *, max_rows: int = DEFAULT_MAX_ROWS) -> SimilarityMatrix:
    """Cosine similarities of every pair of rows (unitless, in [-1, 1]; 0 for a zero row).

    >>> import numpy as np
    >>> round(float(cosine_similarity(np.array([[1.0, 0.0], [1.0, 1.0]])).matrix[0, 1]), 4)
    0.7071
    """
    return _similarity(table, "cosine", max_rows)


@dataclasses.dataclass(frozen=True)
class OffsetProfile:
    """Similarity of positions ``p`` and ``p + k`` as a function of the offset ``k``.

    For every offset ``offsets[j]`` (in positions), the statistics run over all positions
    ``p`` with ``p + k`` in the table: ``mean[j]``, ``std[j]`` (the spread over positions:
    ~1e-13 for a sinusoidal table's dot products, clearly larger for a learned table),
    ``min[j]``, ``max[j]`` and ``count[j]`` (how many pairs).

    Attributes:
      offsets, mean, std, min, max, count: ``(n_offsets,)`` arrays; ``offsets[0] == 0``.
      metric: ``"dot"`` or ``"cosine"``.
      stride: offsets are multiples of ``stride`` (1 unless the table was subsampled).
      note: what was subsampled, or ``""``.
    """

    offsets: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    count: np.ndarray
    metric: str
    stride: int = 1
    note: str = ""

    @property
    def max_spread(self) -> float:
        """Largest spread (std over positions) over all offsets with at least 2 pairs."""
        mask = self.count >= 2
        return float(self.std[mask].max()) if mask.any() else 0.0

    def _picks(self, wanted: tuple[int, ...]) -> list[int]:
        """Offsets near ``wanted`` that the profile holds (multiples of ``stride``)."""
        ks = (self.stride * max(1, round(k / self.stride)) for k in wanted)
        return sorted({k for k in ks if k <= self.offsets[-1]})

    def at(self, k: int) -> tuple[float, float]:
        """``(mean, std)`` at offset ``k`` (a multiple of ``stride`` inside the table)."""
        idx = np.flatnonzero(self.offsets == k)
        if idx.size == 0:
            raise KeyError(f"offset {k} not in profile (offsets 0..{int(self.offsets[-1])} step {self.stride})")
        return float(self.mean[idx[0]]), float(self.std[idx[0]])

    def to_dict(self, *, include_arrays: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "metric": self.metric,
            "max_offset": int(self.offsets[-1]),
            "stride": self.stride,
            "max_spread": self.max_spread,
            "note": self.note,
        }
        picks = self._picks((1, 2, 4, 8, 16, 64, 256, 1024))
        out["at"] = {str(k): {"mean": self.at(k)[0], "std": self.at(k)[1]} for k in picks}
        if include_arrays:
            for name in ("offsets", "mean", "std", "min", "max", "count"):
                out[name] = getattr(self, name).tolist()
        return out

    def __str__(self) -> str:
        parts = []
        for k in self._picks((1, 16, 256)):
            m, sd = self.at(k)
            parts.append(f"k={k}: {m:.4g} ± {sd:.2g}")
        s = f"{self.metric} similarity vs offset ({', '.join(parts) or 'one row'}); max spread {self.max_spread:.3g}"
        return s + (f" ({self.note})" if self.note else "")


def _diagonal_stats(gram: np.ndarray, last: int, chunk: int = 256) -> np.ndarray:
    """``(last + 1, 5)``: mean, std, min, max and size of the diagonals ``0..last`` of a square matrix.

    What ``np.diagonal(gram, j).mean()`` (``.std()``, ...) gives for each ``j`` (the std two-pass,
    about the mean), computed a block of diagonals at a time: column ``j`` of a skewed view
    (row stride ``n + 1`` elements) holds diagonal ``j``, rows ``p < n - j`` valid. One pass of
    numpy calls per block instead of five per diagonal (issue 38: the plot's similarity vs offset).
    """
    gram = np.ascontiguousarray(gram)
    n = gram.shape[0]
    stats = np.empty((last + 1, 5))
    if last < 0:
        return stats
    main = np.diagonal(gram)
    stats[0] = (main.mean(), main.std(), main.min(), main.max(), n)
    item = gram.itemsize
    for j0 in range(1, last + 1, chunk):
        j = np.arange(j0, min(last + 1, j0 + chunk))
        rows = n - j0  # block[p, c] = gram[p, p + j0 + c]; rows p < n - j0 read inside the matrix
        block = np.lib.stride_tricks.as_strided(
            gram.reshape(-1)[j0:], shape=(rows, j.size), strides=((n + 1) * item, item), writeable=False
        )
        valid = np.arange(rows)[:, None] < (n - j)
        count = (n - j).astype(np.float64)
        mean = np.where(valid, block, 0.0).sum(axis=0) / count
        dev = np.where(valid, block - mean, 0.0)
        stats[j, 0] = mean
        stats[j, 1] = np.sqrt((dev * dev).sum(axis=0) / count)
        stats[j, 2] = np.where(valid, block, np.inf).min(axis=0)
        stats[j, 3] = np.where(valid, block, -np.inf).max(axis=0)
        stats[j, 4] = count
    return stats


def similarity_by_offset(
    table: Any,
    *,
    metric: Metric = "cosine",
    max_offset: int | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> OffsetProfile:
    """Mean and spread over positions ``p`` of ``sim(p, p + k)`` for each offset ``k``.

    Args:
      table: ``(rows, dim)`` array; row ``p`` is position ``p``.
      metric: ``"dot"`` or ``"cosine"``.
      max_offset: largest offset (in positions) to report; default ``rows - 1``.
      max_rows: above this many rows, every ``stride``-th row is used, so the offsets are
        multiples of ``stride`` (see the result's note).

    Returns:
      :class:`OffsetProfile` with ``offsets = 0, stride, 2*stride, ... <= max_offset``.

    >>> import numpy as np
    >>> similarity_by_offset(np.ones((5, 3)), metric="dot").mean.tolist()
    [3.0, 3.0, 3.0, 3.0, 3.0]
    """
    arr = as_float64(table)
    sub, stride, note = _sampled(arr, max_rows)
    gram = _gram(sub, metric)
    n = sub.shape[0]
    last = n - 1 if max_offset is None else min(n - 1, max(0, int(max_offset)) // stride)
    stats = _diagonal_stats(gram, last)
    return OffsetProfile(
        offsets=np.arange(last + 1) * stride,
        mean=stats[:, 0],
        std=stats[:, 1],
        min=stats[:, 2],
        max=stats[:, 3],
        count=stats[:, 4].astype(np.int64),
        metric=metric,
        stride=stride,
        note=note,
    )


# --------------------------------------------------------------------------- uniqueness


@dataclasses.dataclass(frozen=True)
class Uniqueness:
    """The closest pair of distinct positions (rows) of a table.

    Attributes:
      first, second: the two positions (``first < second``); both -1 for a one-row table.
      distance: their Euclidean distance ``|table[first] - table[second]|`` (table units).
      relative: ``distance`` divided by the mean row norm (0 when all rows are zero).
      rows: rows in the table.
      stride: pairs among every ``stride``-th row were searched, plus all adjacent pairs.
      note: what was subsampled, or ``""``.
    """

    first: int
    second: int
    distance: float
    relative: float
    rows: int
    stride: int = 1
    note: str = ""

    @property
    def all_distinct(self) -> bool:
        """True when no two searched rows coincide (distance > 1e-12 relative)."""
        return self.rows < 2 or self.relative > 1e-12

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["all_distinct"] = self.all_distinct
        return d

    def __str__(self) -> str:
        if self.rows < 2:
            return "one row: nothing to compare"
        verdict = "all rows distinct" if self.all_distinct else "DUPLICATE rows"
        s = (
            f"closest positions {self.first} and {self.second}: distance {self.distance:.4g} "
            f"({self.relative:.3g} of the mean row norm); {verdict}"
        )
        return s + (f" ({self.note})" if self.note else "")


def uniqueness(table: Any, *, max_rows: int = DEFAULT_MAX_ROWS) -> Uniqueness:
    """Find the closest pair of distinct rows and their distance.

    Every pair is searched when ``rows <= max_rows``; above that, every pair among every
    ``stride``-th row plus every adjacent pair ``(p, p + 1)`` (the result says so). The
    distance of the pair found is recomputed directly (no cancellation).

    >>> import numpy as np
    >>> u = uniqueness(np.array([[0.0, 0.0], [3.0, 4.0], [3.0, 4.5]]))
    >>> (u.first, u.second, u.distance)
    (1, 2, 0.5)
    """
    arr = as_float64(table)
    rows = arr.shape[0]
    norms = np.linalg.norm(arr, axis=1)
    mean_norm = float(norms.mean())
    if rows < 2:
        return Uniqueness(-1, -1, math.inf, math.inf, rows)
    sub, stride, note = _sampled(arr, max_rows)
    if stride > 1:
        note += " + all adjacent pairs"
    sq = np.einsum("ij,ij->i", sub, sub)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (sub @ sub.T)
    np.fill_diagonal(d2, np.inf)
    a, b = np.unravel_index(int(np.argmin(d2)), d2.shape)
    candidates = [(int(min(a, b)) * stride, int(max(a, b)) * stride)]
    if stride > 1:
        adjacent = np.linalg.norm(np.diff(arr, axis=0), axis=1)
        p = int(np.argmin(adjacent))
        candidates.append((p, p + 1))
    best = min(candidates, key=lambda ij: float(np.linalg.norm(arr[ij[0]] - arr[ij[1]])))
    dist = float(np.linalg.norm(arr[best[0]] - arr[best[1]]))
    rel = dist / mean_norm if mean_norm > 0 else 0.0
    return Uniqueness(best[0], best[1], dist, rel, rows, stride, note)


# --------------------------------------------------------------------------- norms


@dataclasses.dataclass(frozen=True)
class NormProfile:
    """Euclidean norm of every row (table units).

    Attributes:
      norms: ``(rows,)`` float64.
    """

    norms: np.ndarray

    @property
    def min(self) -> float:
        return float(self.norms.min())

    @property
    def max(self) -> float:
        return float(self.norms.max())

    @property
    def mean(self) -> float:
        return float(self.norms.mean())

    @property
    def argmin(self) -> int:
        return int(self.norms.argmin())

    @property
    def argmax(self) -> int:
        return int(self.norms.argmax())

    def to_dict(self, *, include_arrays: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "min": self.min,
            "mean": self.mean,
            "max": self.max,
            "argmin": self.argmin,
            "argmax": self.argmax,
        }
        if include_arrays:
            out["norms"] = self.norms.tolist()
        return out

    def __str__(self) -> str:
        return (
            f"row norm min {self.min:.4g} (position {self.argmin}), mean {self.mean:.4g}, "
            f"max {self.max:.4g} (position {self.argmax})"
        )


def row_norms(table: Any) -> NormProfile:
    """Norm ``|table[p]|`` of every row ``p``.

    A sinusoidal table of even width ``d`` has every norm ``sqrt(d / 2)``.

    >>> import numpy as np
    >>> row_norms(np.array([[3.0, 4.0], [0.0, 1.0]])).norms.tolist()
    [5.0, 1.0]
    """
    return NormProfile(np.linalg.norm(as_float64(table), axis=1))


# --------------------------------------------------------------------------- spectrum


@dataclasses.dataclass(frozen=True)
class Spectrum:
    """Dominant wavelength of each dimension (column) along positions.

    Attributes:
      wavelengths: ``(dim,)`` float64, positions per cycle of the strongest frequency in each
        column (after removing its mean); ``inf`` for a constant column.
      resolved: ``(dim,)`` bool: the wavelength is at most half the table length (at least
        two full cycles seen), so the estimate is reliable. An unresolved wavelength only
        says "longer than about rows / 2".
      power_share: ``(dim,)`` share of each column's variance in its dominant peak (~1 for a
        pure sinusoid, small for noise).
      rows: positions analysed.

    Comparable with a sinusoidal table's spectrum ``2π / w_i`` (see
    :func:`sinusoidal_wavelengths`).
    """

    wavelengths: np.ndarray
    resolved: np.ndarray
    power_share: np.ndarray
    rows: int

    def to_dict(self, *, include_arrays: bool = False) -> dict[str, Any]:
        res = self.wavelengths[self.resolved]
        out: dict[str, Any] = {
            "rows": self.rows,
            "dims": int(self.wavelengths.size),
            "resolved_dims": int(self.resolved.sum()),
            "shortest_wavelength": _f(res.min()) if res.size else None,
            "median_resolved_wavelength": _f(np.median(res)) if res.size else None,
            "mean_power_share": _f(self.power_share.mean()),
        }
        if include_arrays:
            out["wavelengths"] = [None if not np.isfinite(x) else float(x) for x in self.wavelengths]
            out["resolved"] = self.resolved.tolist()
            out["power_share"] = self.power_share.tolist()
        return out

    def __str__(self) -> str:
        res = self.wavelengths[self.resolved]
        if res.size == 0:
            head = "no dimension completes two cycles"
        else:
            head = f"shortest {res.min():.4g}, median {np.median(res):.4g} positions/cycle over {res.size} dims"
        return (
            f"dominant wavelength: {head}; {int((~self.resolved).sum())} of {self.wavelengths.size} "
            f"dims longer than ~{self.rows / 2:g} (unresolved); peak holds {self.power_share.mean():.0%} "
            "of the variance on average"
        )


def dominant_wavelengths(table: Any, *, pad_factor: int = 8, chunk: int = 128) -> Spectrum:
    """Dominant wavelength of every column, from an FFT along positions.

    Each column has its mean removed, is Hann-windowed and zero-padded to ``pad_factor``
    times its length (at most ``2**16`` points, never fewer than ``rows``); the strongest
    non-zero frequency bin is refined by parabolic interpolation of the log magnitude.

    Args:
      table: ``(rows, dim)`` array (rows >= 4).
      pad_factor: zero-padding factor (finer frequency grid).
      chunk: columns transformed at a time (bounds memory).

    Returns:
      :class:`Spectrum` with wavelengths in positions per cycle.

    >>> import numpy as np
    >>> col = np.sin(2 * np.pi * np.arange(256) / 16.0)[:, None]
    >>> round(float(dominant_wavelengths(col).wavelengths[0]), 2)
    16.0
    """
    arr = as_float64(table)
    rows, dim = arr.shape
    if rows < 4:
        raise ValueError(f"need at least 4 rows for a spectrum; got {rows}")
    nfft = 1 << max(int(math.ceil(math.log2(rows))), int(math.ceil(math.log2(min(rows * pad_factor, 1 << 16)))))
    window = np.hanning(rows)
    wavelengths = np.empty(dim)
    share = np.empty(dim)
    for start in range(0, dim, chunk):
        cols = arr[:, start : start + chunk]
        centred = cols - cols.mean(axis=0)
        var = (centred**2).sum(axis=0)
        mag = np.abs(np.fft.rfft(centred * window[:, None], n=nfft, axis=0))
        mag[0] = 0.0
        peak = mag.argmax(axis=0)
        # parabolic refinement on log magnitude around the peak
        lo, hi = np.clip(peak - 1, 0, mag.shape[0] - 1), np.clip(peak + 1, 0, mag.shape[0] - 1)
        idx = np.arange(cols.shape[1])
        ya, yb, yc = (np.log(mag[i, idx] + 1e-300) for i in (lo, peak, hi))
        denom = ya - 2 * yb + yc
        safe = (peak > 0) & (peak < mag.shape[0] - 1) & (denom < 0)
        delta = np.where(safe, 0.5 * (ya - yc) / np.where(safe, denom, -1.0), 0.0)
        freq = (peak + delta) / nfft  # cycles per position
        with np.errstate(divide="ignore"):
            wl = np.where((var > 0) & (freq > 0), 1.0 / np.where(freq > 0, freq, 1.0), np.inf)
        # share of variance in the peak: energy within the Hann main lobe (±2 bins unpadded)
        width = max(1, 2 * nfft // rows)
        band = np.zeros(cols.shape[1])
        for off in range(-width, width + 1):
            band += mag[np.clip(peak + off, 1, mag.shape[0] - 1), idx] ** 2
        total = (mag[1:] ** 2).sum(axis=0)
        wavelengths[start : start + chunk] = wl
        share[start : start + chunk] = np.where(total > 0, np.minimum(band / np.where(total > 0, total, 1.0), 1.0), 0.0)
    resolved = np.isfinite(wavelengths) & (wavelengths <= rows / 2)
    return Spectrum(wavelengths, resolved, share, rows)


def sinusoidal_wavelengths(dim: int, *, base: float = 10000.0) -> np.ndarray:
    """Wavelength (positions per cycle) of each column of the lesson's sinusoidal layout.

    Columns ``2i`` and ``2i + 1`` share ``2π / w_i`` with ``w_i = base**(-2i/dim)``
    (:func:`flax_posenc.sinusoid_math.sinusoidal_frequencies`); ``dim`` even.

    >>> [round(float(x), 3) for x in sinusoidal_wavelengths(4)]
    [6.283, 6.283, 628.319, 628.319]
    """
    return np.repeat(2.0 * np.pi / sinusoidal_frequencies(dim, base=base), 2)


# --------------------------------------------------------------------------- report


@dataclasses.dataclass(frozen=True)
class TableReport:
    """What ``flax-posenc inspect`` prints about a position table.

    The properties are computed on the usable rows ``weights[offset:]`` (position ``p`` is
    row ``offset + p``). ``num_positions`` is the limit (usable positions, ``rows - offset``);
    ``max_length`` is its deprecated former name (a ``DeprecationWarning``), and
    :meth:`to_dict` still writes a ``"max_length"`` key beside ``"num_positions"`` (the same
    value) for scripts reading the JSON of ``flax-posenc inspect --json``: it goes in 0.3.
    """

    @property
    def max_length(self) -> int:
        """Deprecated: :attr:`num_positions`."""
        warnings.warn("TableReport.max_length: deprecated, use num_positions", DeprecationWarning, stacklevel=2)
        return self.num_positions

    source: str
    family: str
    key: str
    rows: int
    dim: int
    offset: int
    num_positions: int
    dtype: str
    norms: NormProfile
    offset_similarity: OffsetProfile
    uniqueness: Uniqueness
    spectrum: Spectrum | None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "family": self.family,
            "key": self.key,
            "rows": self.rows,
            "dim": self.dim,
            "offset": self.offset,
            "num_positions": self.num_positions,
            "max_length": self.num_positions,  # deprecated key (the former name), goes in 0.3
            "dtype": self.dtype,
            "positions": f"0..{self.num_positions - 1}" if self.num_positions else "none",
            "norms": self.norms.to_dict(),
            "offset_similarity": self.offset_similarity.to_dict(),
            "uniqueness": self.uniqueness.to_dict(),
            "spectrum": self.spectrum.to_dict() if self.spectrum is not None else None,
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        rows_note = f" ({self.offset} reserved leading rows)" if self.offset else ""
        lines = [
            f"source      {self.source}",
            f"family      {self.family}   key {self.key}",
            f"table       {self.rows} rows x {self.dim} dims, {self.dtype}{rows_note}",
            f"limit       num_positions {self.num_positions}: positions 0..{self.num_positions - 1}; "
            f"position {self.num_positions} and beyond do not exist",
            f"norms       {self.norms}",
            f"similarity  {self.offset_similarity}",
            f"uniqueness  {self.uniqueness}",
            f"spectrum    {self.spectrum if self.spectrum is not None else 'too few rows'}",
        ]
        lines += [f"note        {n}" for n in self.notes]
        return "\n".join(lines)


def summarize(table: TableLike, *, max_rows: int = DEFAULT_MAX_ROWS) -> TableReport:
    """Gather the properties of a loaded table (what ``flax-posenc inspect`` prints).

    Args:
      table: a :class:`~flax_posenc.conversion.table.PositionTable`; rows ``offset:`` are
        analysed.
      max_rows: subsampling threshold for the pairwise properties.

    >>> from flax_posenc.conversion.table import PositionTable
    >>> import numpy as np
    >>> rep = summarize(PositionTable(np.eye(6), family="toy", key="w", offset=2))
    >>> rep.num_positions, rep.norms.mean
    (4, 1.0)
    """
    usable = as_float64(table.weights)[table.offset :]
    num_positions = usable_length(table.rows, table.offset)
    if num_positions == 0:
        raise ValueError(f"{table.source or table.key}: no usable rows ({table.rows} rows, offset {table.offset})")
    offsets = similarity_by_offset(usable, metric="cosine", max_rows=max_rows)
    uniq = uniqueness(usable, max_rows=max_rows)
    spectrum = dominant_wavelengths(usable) if num_positions >= 4 else None
    notes = tuple(dict.fromkeys(n for n in (offsets.note, uniq.note) if n))
    return TableReport(
        source=table.source,
        family=table.family,
        key=table.key,
        rows=table.rows,
        dim=table.dim,
        offset=table.offset,
        num_positions=num_positions,
        dtype=str(table.dtype),
        norms=row_norms(usable),
        offset_similarity=offsets,
        uniqueness=uniq,
        spectrum=spectrum,
        notes=notes,
    )

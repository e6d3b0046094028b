"""SAM/ViTDet decomposed relative positions as data and float64 math (numpy only).

SAM's image encoder (and ViTDet, SegGPT, GOT-OCR 2's, SLANeXt's, PP-FormulaNet's and the
DeepSeek-OCR SAM towers) keeps, in each attention layer, two learned tables ``rel_pos_h`` and
``rel_pos_w`` of ``2 * S - 1`` rows (``S``: the layer's window, or the whole grid of patches for a
global layer) and ``head_dim`` columns: one row per relative offset ``-(S-1) .. S-1`` along the
height and the width. A query at ``(qy, qx)`` and a key at ``(ky, kx)`` get the bias

    bias[(qy, qx), (ky, kx)] = q . R_h[qy, ky] + q . R_w[qx, kx]

added to the attention logits (``q`` unscaled), where ``R = get_rel_pos(q_size, k_size, table)``
(transformers 5.24.0, ``SamVisionAttention.get_rel_pos``):

1. ``L = 2 * max(q_size, k_size) - 1``; the table is resampled to ``L`` rows by linear
   interpolation (``F.interpolate(mode="linear", align_corners=False)``: source index
   ``max((i + 0.5) * n / L - 0.5, 0)``, the two nearest rows weighted ``1 - f`` and ``f``). SAM
   always calls it (the identity when ``n == L``); ViTDet and SegGPT only when ``n != L``: the
   same values.
2. ``R[i, j] = resized[floor(i * max(k/q, 1) - j * max(q/k, 1) + (k - 1) * max(q/k, 1))]``
   (``(q_size, k_size, head_dim)``), the offsets computed in float32 as torch does.

Units: sizes are patches along one axis. There is no hard limit: a table is resampled to any
size. With ``interpolate=False`` (a model that never resamples) a table must have exactly
``2 * max(q_size, k_size) - 1`` rows.

>>> rel_pos_index(2, 2).tolist()
[[1, 0], [2, 1]]
>>> rel_pos_table_float64(np.arange(5.0)[:, None], 2, 2)[..., 0].round(4).tolist()   # 5 rows -> 3
[[2.0, 0.3333], [3.6667, 2.0]]
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = [
    "MAX_REL_POS_SIZE",
    "DecomposedRelPosSpec",
    "check_rel_pos_rows",
    "check_rel_pos_size",
    "decomposed_rel_pos_float64",
    "linear_resample_weights",
    "rel_pos_index",
    "rel_pos_rows",
    "rel_pos_table_float64",
]

#: The largest size (patches along one axis) a query or key may have here: 2**15 keeps every
#: index and weight exact in float32.
MAX_REL_POS_SIZE = 1 << 15


def check_rel_pos_size(size: object, argument: str) -> int:
    """``size`` as an int in ``1 .. MAX_REL_POS_SIZE`` (patches along one axis).

    Raises:
      ValueError: anything else (one line naming the argument).
    """
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not 1 <= size <= MAX_REL_POS_SIZE:
        raise ValueError(f"{argument}: expected a number of patches in 1..{MAX_REL_POS_SIZE}, found {size!r}")
    return int(size)


def rel_pos_rows(q_size: int, k_size: int) -> int:
    """``2 * max(q_size, k_size) - 1``: the rows ``get_rel_pos`` resamples a table to.

    >>> rel_pos_rows(14, 14)
    27
    """
    return 2 * max(int(q_size), int(k_size)) - 1


def check_rel_pos_rows(rows: int, q_size: int, k_size: int, argument: str = "rel_pos") -> None:
    """Without interpolation a table must have ``2 * max(q_size, k_size) - 1`` rows.

    Raises:
      ValueError: another count (one line naming the argument, the rows expected and found).

    >>> check_rel_pos_rows(27, 14, 14)
    """
    want = rel_pos_rows(q_size, k_size)
    if rows != want:
        raise ValueError(
            f"{argument}: expected {want} rows (2 * max({q_size}, {k_size}) - 1) without interpolation, "
            f"found {rows} rows"
        )


def rel_pos_index(q_size: int, k_size: int) -> np.ndarray:
    """``(q_size, k_size)`` int32 rows of the resized table each (query, key) pair reads, computed
    as torch computes them (float32 coordinates, truncated).

    >>> rel_pos_index(1, 3).tolist()   # a query of 1 patch against 3 keys: offsets scaled by 3
    [[2, 1, 0]]
    """
    q = check_rel_pos_size(q_size, "q_size")
    k = check_rel_pos_size(k_size, "k_size")
    q_scale = np.float32(max(k / q, 1.0))
    k_scale = np.float32(max(q / k, 1.0))
    q_coords = np.arange(q, dtype=np.float32)[:, None] * q_scale
    k_coords = np.arange(k, dtype=np.float32)[None, :] * k_scale
    rel = (q_coords - k_coords) + np.float32((k - 1) * max(q / k, 1.0))
    return rel.astype(np.int64).astype(np.int32)


def linear_resample_weights(
    rows: int, size: int, dtype: type = np.float64
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(i0, i1, w0, w1)``: ``F.interpolate(mode="linear", align_corners=False)`` from ``rows`` to
    ``size`` as index pairs and weights: ``out[i] = w0[i] * x[i0[i]] + w1[i] * x[i1[i]]``. With
    ``dtype=np.float32`` the weights are torch's float32 ones, bit for bit (its CPU kernel computes
    the source index ``scale * (i + 0.5) - 0.5`` as one fused multiply-add); ``np.float64``: the
    exact formula.

    >>> i0, i1, w0, w1 = linear_resample_weights(3, 5)   # torch: [0, 0.4, 1, 1.6, 2] of [0, 1, 2]
    >>> i0.tolist(), i1.tolist(), w1.round(4).tolist()
    ([0, 0, 1, 1, 2], [1, 1, 2, 2, 2], [0.0, 0.4, 0.0, 0.6, 0.2])
    """
    n = check_rel_pos_size(rows, "rows") if rows > 0 else rows
    m = check_rel_pos_size(size, "size")
    if n < 1:
        raise ValueError(f"rows: expected at least 1 row to resample, found {rows!r}")
    t = np.dtype(dtype).type
    if n == m:  # torch's shortcut: the rows themselves
        same = np.arange(m)
        return same, same, np.ones(m, dtype), np.zeros(m, dtype)
    scale = t(n) / t(m)
    # torch's kernel computes scale * (i + 0.5) - 0.5 as one fused multiply-add: exact in float64, rounded once
    src = (np.float64(scale) * (np.arange(m) + 0.5) - 0.5).astype(dtype)
    src = np.maximum(src, t(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    i1 = np.where(i0 < n - 1, i0 + 1, i0)
    w1 = np.clip(src - i0.astype(dtype), t(0), t(1)).astype(dtype)
    w0 = (t(1) - w1).astype(dtype)
    return i0, i1, w0, w1


def rel_pos_table_float64(table: np.ndarray, q_size: int, k_size: int, *, interpolate: bool = True) -> np.ndarray:
    """``(q_size, k_size, C)`` float64: ``get_rel_pos`` of a ``(rows, C)`` table in float64.

    Raises:
      ValueError: a table that is not 2-D, sizes out of range, or (``interpolate=False``) rows that
        are not ``2 * max(q_size, k_size) - 1`` (one line).
    """
    t = np.asarray(table, np.float64)
    if t.ndim != 2 or t.shape[0] < 1:
        raise ValueError(f"rel_pos: expected a (rows, head_dim) table, found shape {t.shape}")
    length = rel_pos_rows(check_rel_pos_size(q_size, "q_size"), check_rel_pos_size(k_size, "k_size"))
    if not interpolate:
        check_rel_pos_rows(t.shape[0], q_size, k_size)
    i0, i1, w0, w1 = linear_resample_weights(t.shape[0], length)
    resized = w0[:, None] * t[i0] + w1[:, None] * t[i1]
    return resized[rel_pos_index(q_size, k_size)]


def decomposed_rel_pos_float64(
    query: np.ndarray,
    rel_pos_h: np.ndarray,
    rel_pos_w: np.ndarray,
    q_size: tuple[int, int],
    k_size: tuple[int, int],
    *,
    interpolate: bool = True,
) -> np.ndarray:
    """``(batch, qh * qw, kh * kw)`` float64: the bias a SAM attention adds to its logits, from the
    unscaled ``query`` ``(batch, qh * qw, head_dim)`` (``add_decomposed_rel_pos``)."""
    (qh, qw), (kh, kw) = q_size, k_size
    q = np.asarray(query, np.float64)
    rh = rel_pos_table_float64(rel_pos_h, qh, kh, interpolate=interpolate)
    rw = rel_pos_table_float64(rel_pos_w, qw, kw, interpolate=interpolate)
    r = q.reshape(q.shape[0], qh, qw, q.shape[-1])
    bias_h = np.einsum("bhwc,hkc->bhwk", r, rh)
    bias_w = np.einsum("bhwc,wkc->bhwk", r, rw)
    return (bias_h[..., :, None] + bias_w[..., None, :]).reshape(q.shape[0], qh * qw, kh * kw)


@dataclasses.dataclass(frozen=True)
class DecomposedRelPosSpec:
    """One attention layer's decomposed relative positions, as data: the ``(height, width)`` in
    patches its tables were built for (a window, or a global layer's grid) and ``head_dim``. The
    tables are ``(2 * height - 1, head_dim)`` and ``(2 * width - 1, head_dim)``.

    Raises:
      ValueError: a size outside ``1 .. MAX_REL_POS_SIZE`` or a ``head_dim`` that is not a positive
        integer (one line naming the field).

    >>> DecomposedRelPosSpec((14, 14), 64).table_shapes
    ((27, 64), (27, 64))
    """

    size: tuple[int, int]
    head_dim: int

    def __post_init__(self):
        size = self.size
        if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
            size = (int(size), int(size))
        if not isinstance(size, (tuple, list)) or len(size) != 2:
            raise ValueError(f"size: expected (height, width) in patches, found {self.size!r}")
        object.__setattr__(self, "size", (check_rel_pos_size(size[0], "size"), check_rel_pos_size(size[1], "size")))
        d = self.head_dim
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 1 <= d <= 1 << 16:
            raise ValueError(f"head_dim: expected an integer in 1..65536, found {d!r}")

    @property
    def table_shapes(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """``((2h - 1, head_dim), (2w - 1, head_dim))``: ``rel_pos_h`` and ``rel_pos_w``."""
        h, w = self.size
        return (2 * h - 1, int(self.head_dim)), (2 * w - 1, int(self.head_dim))

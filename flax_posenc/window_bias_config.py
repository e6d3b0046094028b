"""Window relative position bias tables (Swin, BEiT, SwinV2), as data and float64 numpy only.

Swin's windowed attention adds to the logits of query patch ``i`` and key patch ``j`` of one
``h x w`` window a learned bias per head, looked up by their offset ``(dy, dx)``
(``-(h-1) .. h-1`` by ``-(w-1) .. w-1``): a table of ``(2h - 1) * (2w - 1)`` rows by ``heads``.
Row ``(dy + h - 1) * (2w - 1) + (dx + w - 1)`` holds offset ``(dy, dx)``
(:func:`relative_position_index`, exactly transformers' ``relative_position_index``).

BEiT and Data2Vec-Vision attend over the whole ``gh x gw`` patch grid plus a class token: their
table has 3 more rows, class-to-patch, patch-to-class and class-to-class (in that order), and
the index is ``(N + 1, N + 1)`` with the class token first (``class_token=True``).

SwinV2 (and Swin2SR) store no table: a 2-layer MLP (``cpb_mlp``: ``Linear(2, 512)``, ReLU,
``Linear(512, heads)`` without bias) maps each offset's log-spaced coordinates
(:func:`log_spaced_coords`) to a row, and the bias is ``16 * sigmoid(row)``. A table of any
window is computed from the weights: SwinV2 resizes natively.

A table is resized to another window (:func:`resize_table`) by one of :data:`WINDOW_RESIZES`:

- ``"transformers"``: what BEiT's and Data2Vec-Vision's ``BeitRelativePositionBias.forward``
  does at every resolution: the ``(2h-1) x (2w-1)`` offsets resampled with
  ``F.interpolate(mode="bilinear", align_corners=False)`` (read as a ``(2w-1) x (2h-1)`` image,
  as transformers reshapes it; the same for square windows), the 3 class rows kept;
- ``"timm"``: timm's ``resize_rel_pos_bias_table`` (``timm/layers/pos_embed_rel.py``, from
  BEiT's fine-tuning code): the source offsets spread on a geometric progression, the target's on
  the integers, linear interpolation between them (its ``RegularGridInterpolator``, constant
  past the ends), the class rows kept. transformers cannot resize a Swin table; this is the
  convention for it.

Both are separable: a resize is ``A_h @ offsets @ A_w.T`` per head with the ``(out, in)`` float64
matrices of :func:`resize_matrices`.

>>> relative_position_index((2, 2)).tolist()
[[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]]
>>> num_relative_positions((7, 7)), num_relative_positions((14, 14), class_token=True)
(169, 732)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.errors import CheckpointError
from flax_posenc.grid_config import MAX_GRID_SIDE, positive_pair

__all__ = [
    "CLASS_TOKEN_ROWS",
    "CPB_SCALE",
    "WINDOW_RESIZES",
    "WindowBiasSpec",
    "WindowResize",
    "check_table_rows",
    "log_spaced_coords",
    "num_relative_positions",
    "relative_position_index",
    "resize_matrices",
    "resize_table",
    "window_pair",
]

#: Rows after the offsets in a BEiT table: class-to-patch, patch-to-class, class-to-class.
CLASS_TOKEN_ROWS = 3
#: SwinV2's continuous bias is ``CPB_SCALE * sigmoid(mlp(coords))``.
CPB_SCALE = 16.0
#: The largest window side a table is built for (bounds the ``(N, N)`` index: 64 -> 4096 x 4096).
MAX_WINDOW_SIDE = 64


def _fail(where: object, expected: str, found: str) -> CheckpointError:
    return CheckpointError(f"{where}: expected {expected}, found {found}")


def window_pair(value: Any, field: str = "window", where: object = "window") -> tuple[int, int]:
    """``7`` or ``(7, 7)`` -> ``(7, 7)``: a window of positive integer sides, each at most
    :data:`MAX_WINDOW_SIDE` (a BEiT grid may be larger: at most ``MAX_GRID_SIDE``).

    Raises:
      CheckpointError: not a positive integer or pair (one line naming ``field``).

    >>> window_pair(7), window_pair([2, 3])
    ((7, 7), (2, 3))
    """
    return positive_pair(value, field, where, MAX_GRID_SIDE)


def _text(window: tuple[int, int]) -> str:
    return f"{window[0]} x {window[1]}"


def num_relative_positions(window: Any, *, class_token: bool = False) -> int:
    """``(2h - 1) * (2w - 1)`` rows (``+ 3`` with the class token): the table of a window.

    >>> num_relative_positions(2), num_relative_positions((2, 3), class_token=True)
    (9, 18)
    """
    h, w = window_pair(window)
    return (2 * h - 1) * (2 * w - 1) + (CLASS_TOKEN_ROWS if class_token else 0)


def relative_position_index(window: Any, *, class_token: bool = False) -> np.ndarray:
    """The table row of each (query, key) pair of a window: int64 ``(N, N)``, ``N = h * w``
    (``(N + 1, N + 1)`` with the class token first).

    Patches are numbered row-major (patch ``(r, c)`` is ``r * w + c``); the pair ``(i, j)`` reads
    row ``(r_i - r_j + h - 1) * (2w - 1) + (c_i - c_j + w - 1)``. With ``class_token``, row 0 and
    column 0 are the class token: ``R`` (class to patch) along row 0, ``R + 1`` (patch to class)
    down column 0, ``R + 2`` at ``(0, 0)``, where ``R = (2h - 1) * (2w - 1)``.

    Raises:
      CheckpointError: a side that is not a positive integer, or past :data:`MAX_WINDOW_SIDE`
        squared patches in all (one line).

    >>> relative_position_index(1, class_token=True).tolist()
    [[3, 1], [2, 0]]
    """
    h, w = window_pair(window)
    if h * w > MAX_WINDOW_SIDE * MAX_WINDOW_SIDE:
        raise _fail("window", f"at most {MAX_WINDOW_SIDE * MAX_WINDOW_SIDE} patches", f"{_text((h, w))}")
    r, c = np.divmod(np.arange(h * w, dtype=np.int64), w)
    index = (r[:, None] - r[None, :] + h - 1) * (2 * w - 1) + (c[:, None] - c[None, :] + w - 1)
    if not class_token:
        return index
    rows = (2 * h - 1) * (2 * w - 1)
    out = np.empty((h * w + 1, h * w + 1), np.int64)
    out[1:, 1:] = index
    out[0, :] = rows
    out[:, 0] = rows + 1
    out[0, 0] = rows + 2
    return out


def check_table_rows(rows: int, window: Any, *, class_token: bool = False, where: object = "table") -> None:
    """Raise unless a table of ``rows`` rows fits ``window``: ``(2h-1) * (2w-1)`` (``+ 3``).

    Raises:
      CheckpointError: one line naming ``where``, the rows expected and found.

    >>> check_table_rows(10, 2, where="t")
    Traceback (most recent call last):
    ...
    flax_posenc.errors.CheckpointError: t: expected 9 rows ((2*2-1) x (2*2-1) offsets of a 2 x 2 window), found 10 rows
    """
    h, w = window_pair(window)
    want = num_relative_positions((h, w), class_token=class_token)
    if rows != want:
        extra = f" + {CLASS_TOKEN_ROWS} class-token rows" if class_token else ""
        raise _fail(
            where,
            f"{want} rows ((2*{h}-1) x (2*{w}-1) offsets of a {_text((h, w))} window{extra})",
            f"{rows} rows",
        )


def log_spaced_coords(window: Any, pretrained_window: Any = 0) -> np.ndarray:
    """SwinV2's input to its bias MLP: float64 ``((2h-1) * (2w-1), 2)``, one ``(dy, dx)`` per row
    in table order.

    Each offset is divided by ``pretrained_window - 1`` (``0``: by ``window - 1``, when the
    window's height is above 1), times 8, then ``sign(x) * log2(1 + |x|) / 3``: within
    ``log2(9) / 3 = 1.057`` of 0 at the trained window, growing slowly past it.

    Raises:
      CheckpointError: a pretrained window side of 1 (a division by zero in transformers).

    >>> c = log_spaced_coords(2)
    >>> c.shape, bool(c[0, 0] == -np.log2(9) / 3 and c[4, 0] == 0 and c[8, 1] == np.log2(9) / 3)
    ((9, 2), True)
    """
    h, w = window_pair(window)
    ph, pw = (0, 0) if pretrained_window in (0, None, (0, 0), [0, 0]) else window_pair(pretrained_window)
    if ph == 1 or pw == 1:
        raise _fail("pretrained_window_size", "0 or a side of at least 2", _text((ph, pw)))
    dy = np.arange(-(h - 1), h, dtype=np.float64)
    dx = np.arange(-(w - 1), w, dtype=np.float64)
    if ph > 0:
        dy, dx = dy / (ph - 1), dx / (pw - 1)
    elif h > 1:
        dy, dx = dy / (h - 1), dx / (w - 1)
    yy, xx = np.meshgrid(dy * 8.0, dx * 8.0, indexing="ij")
    coords = np.stack([yy, xx], axis=-1).reshape(-1, 2)
    return np.sign(coords) * np.log2(np.abs(coords) + 1.0) / math.log2(8.0)


# ----------------------------------------------------------------------------- resizing


@dataclasses.dataclass(frozen=True)
class WindowResize:
    """One way of resizing a window bias table (a row of :data:`WINDOW_RESIZES`).

    Attributes:
      name: the key; kind: ``"bilinear"`` (torch, ``align_corners=False``, no antialias) or
        ``"geometric"`` (timm's progression); transposed: the offsets are read as a
        ``(2w-1) x (2h-1)`` image (transformers' reshape; no change for square windows);
      reference: where the recipe is defined.
    """

    name: str
    kind: str
    transposed: bool
    reference: str


WINDOW_RESIZES: Mapping[str, WindowResize] = MappingProxyType(
    {
        r.name: r
        for r in (
            WindowResize(
                "transformers",
                "bilinear",
                True,
                "transformers BeitRelativePositionBias.forward (BEiT, Data2Vec-Vision): "
                "F.interpolate(mode='bilinear') of the offsets, class rows kept",
            ),
            WindowResize(
                "timm",
                "geometric",
                False,
                "timm/layers/pos_embed_rel.py resize_rel_pos_bias_table: geometric-progression "
                "source offsets, linear RegularGridInterpolator, class rows kept",
            ),
        )
    }
)


def _resize_for(convention: str | WindowResize) -> WindowResize:
    if isinstance(convention, WindowResize):
        return convention
    if isinstance(convention, str) and convention in WINDOW_RESIZES:
        return WINDOW_RESIZES[convention]
    raise ValueError(f"convention: expected one of {', '.join(WINDOW_RESIZES)}, got {convention!r}")


def _bilinear(in_size: int, out_size: int) -> np.ndarray:
    """torch ``upsample_bilinear2d`` (``align_corners=False``) along one axis: ``(out, in)`` float64."""
    m = np.zeros((out_size, in_size), np.float64)
    scale = in_size / out_size
    for o in range(out_size):
        src = max(scale * (o + 0.5) - 0.5, 0.0)
        i0 = min(int(math.floor(src)), in_size - 1)
        i1 = i0 + 1 if i0 < in_size - 1 else i0
        t = src - i0
        m[o, i0] += 1.0 - t
        m[o, i1] += t
    return m


def _geometric_points(src: int, dst: int) -> list[float]:
    """timm's ``_calc``: ``src`` source offsets on a geometric progression reaching ``dst // 2``."""
    left, right = 1.01, 1.5
    q = (left + right) / 2.0
    while right - left > 1e-6:
        q = (left + right) / 2.0
        gp = (1.0 - q ** (src // 2)) / (1.0 - q)
        if gp > dst // 2:
            right = q
        else:
            left = q
    dis: list[float] = []
    cur = 1.0
    for i in range(src // 2):
        dis.append(cur)
        cur += q ** (i + 1)
    return [-d for d in reversed(dis)] + [0.0] + dis


def _linear_at(points: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """timm's ``RegularGridInterpolator`` along one axis (linear, constant past the ends): ``(out, in)``."""
    n = len(points)
    m = np.zeros((len(targets), n), np.float64)
    for o, x in enumerate(targets):
        right = min(int(np.searchsorted(points, x, side="left")), n - 1)
        left = min(max(right - 1, 0), n - 1)
        d_left = max(x - points[left], 0.0)
        d_right = max(points[right] - x, 0.0)
        if d_left == 0.0 and d_right == 0.0:
            d_left = d_right = 1.0
        total = d_left + d_right
        m[o, left] += d_right / total
        m[o, right] += d_left / total
    return m


def _geometric(in_size: int, out_size: int) -> np.ndarray:
    if in_size == out_size:
        return np.eye(in_size)
    points = np.asarray(_geometric_points(in_size, out_size), np.float64)
    t = out_size // 2
    return _linear_at(points, np.arange(-t, t + 0.1, 1.0))


def resize_matrices(
    window: Any, new_window: Any, convention: str | WindowResize = "timm"
) -> tuple[np.ndarray, np.ndarray]:
    """``(A_rows, A_cols)``: float64 ``(out, in)`` matrices resampling the offset grid of
    ``window`` to that of ``new_window``; ``offsets_new = A_rows @ offsets @ A_cols.T`` per head,
    where ``offsets`` is the table's first ``(2h-1)*(2w-1)`` rows as a ``(2h-1, 2w-1)`` grid
    (``"transformers"``: read as ``(2w-1, 2h-1)``, as transformers reshapes it).

    Raises:
      ValueError: an unknown convention; CheckpointError: a window side not a positive integer.

    >>> a, b = resize_matrices(2, 3, "transformers")
    >>> a.shape, b.shape, bool(np.allclose(a.sum(1), 1))
    ((5, 3), (5, 3), True)
    """
    conv = _resize_for(convention)
    h, w = window_pair(window, "window")
    nh, nw = window_pair(new_window, "new window")
    src = (2 * w - 1, 2 * h - 1) if conv.transposed else (2 * h - 1, 2 * w - 1)
    dst = (2 * nh - 1, 2 * nw - 1)
    make = _bilinear if conv.kind == "bilinear" else _geometric
    return make(src[0], dst[0]), make(src[1], dst[1])


def resize_table(
    table: np.ndarray,
    window: Any,
    new_window: Any,
    *,
    class_token: bool = False,
    convention: str | WindowResize = "timm",
) -> np.ndarray:
    """The table of ``new_window`` resized from ``table`` (``(rows, heads)`` of ``window``), float64.

    The offsets are resampled (:func:`resize_matrices`); the class-token rows are kept. The
    same window returns the table unchanged (float64).

    Raises:
      CheckpointError: the table's rows do not fit ``window`` (:func:`check_table_rows`).

    >>> t = np.arange(9.0)[:, None]
    >>> resize_table(t, 2, 2).ravel().tolist() == t.ravel().tolist()
    True
    """
    table = np.asarray(table, np.float64)
    if table.ndim != 2:
        raise _fail("table", "a 2-D table (rows, heads)", f"shape {table.shape}")
    check_table_rows(table.shape[0], window, class_token=class_token)
    conv = _resize_for(convention)
    h, w = window_pair(window)
    nh, nw = window_pair(new_window, "new window")
    n = (2 * h - 1) * (2 * w - 1)
    a, b = resize_matrices((h, w), (nh, nw), conv)
    src = (2 * w - 1, 2 * h - 1) if conv.transposed else (2 * h - 1, 2 * w - 1)
    grid = table[:n].reshape(*src, table.shape[1])
    new = np.einsum("oi,ijh,pj->oph", a, grid, b).reshape(-1, table.shape[1])
    return np.concatenate([new, table[n:]], axis=0)


# ----------------------------------------------------------------------------- the spec


@dataclasses.dataclass(frozen=True)
class WindowBiasSpec:
    """What a window bias module is: ``num_heads``, ``window`` ``(h, w)`` patches and
    ``class_token`` (BEiT's 3 extra rows and the class token first).

    ``table_shape`` is ``(num_relative_positions, num_heads)``; ``tokens`` the tokens one window
    attends over (``h * w``, ``+ 1`` with the class token).

    >>> s = WindowBiasSpec(4, (7, 7))
    >>> s.table_shape, s.tokens
    ((169, 4), 49)
    >>> WindowBiasSpec.from_arguments(2, 2, class_token=True).table_shape
    (12, 2)
    """

    num_heads: int
    window: tuple[int, int]
    class_token: bool = False

    def __post_init__(self):
        heads = self.num_heads
        if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads <= 0:
            raise _fail("num_heads", "a positive integer", repr(heads)[:80])
        object.__setattr__(self, "num_heads", int(heads))
        object.__setattr__(self, "window", window_pair(self.window))
        object.__setattr__(self, "class_token", bool(self.class_token))

    @classmethod
    def from_arguments(cls, num_heads: int, window: Any, *, class_token: bool = False) -> WindowBiasSpec:
        """The spec of flat arguments (``window``: an int or ``(h, w)``)."""
        return cls(num_heads, window, class_token)

    @property
    def table_shape(self) -> tuple[int, int]:
        return num_relative_positions(self.window, class_token=self.class_token), self.num_heads

    @property
    def tokens(self) -> int:
        return self.window[0] * self.window[1] + (1 if self.class_token else 0)

"""Growing a learned position table past its trained length.

Numpy only (float64 inside, the table's dtype out), so it serves the command line and the
conversion layer as well as models. Reserved leading rows (RoBERTa/OPT/BART's ``offset``) stay at
the head, untouched, under every method.

Methods:

``"tile"``
    Longformer's copy initialisation (Beltagy et al., 2020, section 5): row ``offset + p`` of the
    new table is trained row ``offset + p mod L``. The trained rows stay where they were,
    unchanged; the new ones repeat them (Longformer extended RoBERTa's 512 to 4096 this way).
``"linear"``, ``"cubic"``
    Position interpolation: the trained table is resampled along positions so ``L`` trained
    positions span ``new_length`` (``align_corners=True``: the first and last trained rows are
    kept at both ends). ``"cubic"`` is the cubic-convolution kernel with ``a = -0.75`` (the
    same as PyTorch's bicubic, used to resize ViT/DeiT position tables). The model then sees
    fractional positions it was trained between, not positions it never saw; rows in between
    change, so fine-tune (see ``examples/finetune_extended.py``).
``"interpolate"``
    an alias of ``"linear"``.

:func:`extend_input` applies it to a transformer input block (its spec and parameters); both
``TransformerInput.extend_positions`` (NNX and Linen) are thin shells over it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

METHODS: tuple[str, ...] = ("tile", "linear", "cubic", "interpolate")
ExtendMethod = Literal["tile", "linear", "cubic", "interpolate"]  #: one of :data:`METHODS`
#: the largest table grown: rows x dim values (computed in float64: 8 bytes each, 2 GiB).
MAX_VALUES = 1 << 28


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> np.ndarray:
    """Keys' cubic-convolution weights for the 4 neighbours at fractional offset ``t``, ``(n, 4)``."""

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def _resample(trained: np.ndarray, new_length: int, method: str) -> np.ndarray:
    """Resample ``(L, dim)`` float64 rows to ``(new_length, dim)`` along positions."""
    length = trained.shape[0]
    x = np.arange(new_length, dtype=np.float64) * ((length - 1) / (new_length - 1) if new_length > 1 else 0.0)
    base = np.floor(x).astype(np.int64)
    t = x - base
    if method == "linear":
        upper = np.minimum(base + 1, length - 1)
        return trained[base] * (1 - t)[:, None] + trained[upper] * t[:, None]
    weights = _cubic_weights(t)  # neighbours base-1 .. base+2, clamped at the ends as PyTorch does
    index = np.clip(base[:, None] + np.arange(-1, 3), 0, length - 1)
    return np.einsum("nk,nkd->nd", weights, trained[index])


def extend_table(table, new_length: int, *, method: ExtendMethod = "tile", offset: int = 0) -> np.ndarray:
    """A table with ``new_length`` usable positions, grown from a trained one.

    Args:
      table: ``(offset + L, dim)`` trained table (numpy or jax array), reserved rows first.
      new_length: usable positions of the result, ``> L`` (rows: ``offset + new_length``).
      method: ``"tile"``, ``"linear"``, ``"cubic"`` (or ``"interpolate"`` = ``"linear"``).
      offset: reserved leading rows, copied unchanged.

    Returns:
      ``np.ndarray`` of shape ``(offset + new_length, dim)`` and the input's dtype.

    Raises:
      ValueError: ``new_length`` not larger than ``L``, an unknown method, a table that is not
        2-D, an offset that leaves no trained rows, or a result of more than
        :data:`MAX_VALUES` values (checked before anything is allocated; the message names the
        memory it would need).

    >>> import numpy as np
    >>> t = np.arange(6.0).reshape(3, 2)          # 3 positions
    >>> extend_table(t, 5, method="tile")
    array([[0., 1.],
           [2., 3.],
           [4., 5.],
           [0., 1.],
           [2., 3.]])
    >>> extend_table(t, 5, method="linear")[:, 0]
    array([0., 1., 2., 3., 4.])
    """
    table = np.asarray(table)
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    if table.ndim != 2:
        raise ValueError(f"table: expected a 2-D (rows, dim) array, got shape {table.shape}")
    if not isinstance(offset, (int, np.integer)) or not 0 <= offset < table.shape[0]:
        raise ValueError(f"offset: expected 0 <= offset < rows ({table.shape[0]}), got {offset!r}")
    length = table.shape[0] - offset
    if isinstance(new_length, bool) or not isinstance(new_length, (int, np.integer)) or new_length <= length:
        raise ValueError(
            f"new_length: expected an integer larger than the current {length} positions, got {new_length!r}"
        )
    values = (offset + int(new_length)) * table.shape[1]
    if values > MAX_VALUES:
        raise ValueError(
            f"new_length: expected a table of at most {MAX_VALUES} values ({MAX_VALUES * 8 >> 30} GiB "
            f"as float64), got {new_length} positions x {table.shape[1]} dims = {values} values "
            f"({values * 8 / 2**30:.1f} GiB)"
        )
    method = "linear" if method == "interpolate" else method
    trained = table[offset:].astype(np.float64)
    if method == "tile":
        grown = trained[np.arange(new_length) % length]
    else:
        grown = _resample(trained, int(new_length), method)
    return np.concatenate([table[:offset], grown.astype(table.dtype)], axis=0)


def extend_input(spec, params: Mapping[str, Any], num_positions: int, *, method: ExtendMethod = "tile"):
    """``(spec, params)`` of an input block whose learned table holds ``num_positions`` positions.

    The functional core of ``TransformerInput.extend_positions``: the table
    ``params["position_embeddings"]`` grows with :func:`extend_table` (reserved rows kept at the
    head), the spec's ``position.num_positions`` becomes ``num_positions``; every other
    parameter is the same object (nothing copied). Host-side (numpy), not traceable.

    Args:
      spec: an :class:`~flax_posenc.block.InputSpec` with a learned position table.
      params: its parameters (a mapping named as in :mod:`flax_posenc.block`; numpy or jax arrays).
      num_positions: usable positions of the result, larger than ``spec.position.num_positions``.
      method: ``"tile"``, ``"linear"``, ``"cubic"`` (or ``"interpolate"``), see :func:`extend_table`.

    Returns:
      ``(new_spec, new_params)``; the new table is a numpy array of shape
      ``(offset + num_positions, dim)`` in the old table's dtype.

    Raises:
      ValueError: a spec without a learned table, a table whose shape is not the spec's, or
        anything :func:`extend_table` refuses.

    >>> import numpy as np
    >>> from flax_posenc.block import InputSpec
    >>> spec = InputSpec.from_arguments(10, 2, num_positions=3)
    >>> params = {"word_embeddings": np.zeros((10, 2)), "position_embeddings": np.arange(6.0).reshape(3, 2)}
    >>> longer, grown = extend_input(spec, params, 5)
    >>> longer.position.num_positions, grown["position_embeddings"][:, 0]
    (5, array([0., 2., 4., 0., 2.]))
    >>> grown["word_embeddings"] is params["word_embeddings"]
    True
    """
    position = spec.position
    if position.kind != "learned":
        raise ValueError(
            f"extend_input: only a learned table can be extended, this block's position is {position.kind!r}"
        )
    old = params.get("position_embeddings")
    if old is None or tuple(old.shape) != position.table_shape:
        found = None if old is None else tuple(old.shape)
        raise ValueError(
            f"params['position_embeddings']: expected the spec's table of shape {position.table_shape}, found {found}"
        )
    table = extend_table(np.asarray(old), num_positions, method=method, offset=position.offset)
    new_spec = dataclasses.replace(spec, position=dataclasses.replace(position, num_positions=int(num_positions)))
    return new_spec, {**params, "position_embeddings": table}


__all__ = ["METHODS", "extend_input", "extend_table"]

"""Learned-table lookup: rows of a position table, through the one overflow guard.

JAX hides out-of-range indices (``table[i]`` clamps, ``jnp.take`` fills with NaN); here every
position goes through :func:`flax_posenc.overflow.guard_positions`: known positions are checked
while tracing, traced ones follow ``on_overflow`` (``"error"`` fails the call at run time with
the table's name and limit, ``"clip"``, ``"fill"``). See :mod:`flax_posenc.overflow`.

Positions are 0-based and index row ``offset + position``; of the reserved leading rows
(RoBERTa/OPT's 2) only the padding row ``offset - 1`` is reachable, with position ``-1``, which is
how padding tokens reach it (see :func:`padding_aware_positions`).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc.limits import check_positions, describe_limit
from flax_posenc.overflow import (
    OVERFLOW_POLICIES,
    Limit,
    OverflowPolicy,
    check_policy,
    fill_invalid,
    guard_indices,
    guard_start,
    int32_values,
    is_traced,
    keep_check,
)

# False: traced starts take the general guard (benchmarks/investigations/gather_variants.py compares the two).
SCALAR_START_GUARD = True

__all__ = [
    "OVERFLOW_POLICIES",
    "OverflowPolicy",
    "check_positions",
    "describe_limit",
    "lookup_positions",
    "lookup_rows",
    "padding_aware_positions",
    "sequential_positions",
    "slice_positions",
    "take_rows",
]


def take_rows(table: jax.Array, indices: jax.typing.ArrayLike, *, in_bounds: bool = False) -> jax.Array:
    """``jnp.take(table, indices, axis=0)``, bit for bit, gathered as same-width unsigned integers.

    XLA's CPU gather converts 2-byte floats (bfloat16, float16) to float32 element by element
    inside the gather loop; gathering the raw bits (``uint16``) and bit-casting back skips that
    and checks the index once per row instead of once per element (about 0.75x the time of
    ``jnp.take`` for a bfloat16 GPT-2 block, see benchmarks/HISTORY.md). Large unchecked 2-byte
    gathers (``SPLIT_ELEMENTS`` output elements or more) test once whether every index is in
    range and then take the plain row gather in a ``lax.cond``, which XLA does not fuse into the
    consumer's add (0.55-0.85x the fused block's time on a loaded machine; no gain on a quiet one, benchmarks/HISTORY.md). 4-byte and integer tables
    take the plain gather (the bit path gains nothing there and splits XLA's decode-step fusion). The
    values, the ``NaN`` rows of out-of-range indices (``jnp.take``'s ``"fill"`` mode, negative
    indices counting from the end) and the gradients (a plain ``jnp.take`` of the tangent) are
    those of ``jnp.take``.

    Args:
      table: ``(rows, dim)``.
      indices: integer array, any shape.
      in_bounds: the caller guarantees ``0 <= indices < rows`` (e.g. after the overflow guard):
        no wrap-around and no fill.

    Returns:
      ``indices.shape + (dim,)`` in the table's dtype.

    >>> import jax.numpy as jnp
    >>> take_rows(jnp.arange(6.0, dtype=jnp.bfloat16).reshape(3, 2), jnp.array([2, -1, 3]))
    Array([[4, 5],
           [4, 5],
           [nan, nan]], dtype=bfloat16)
    """
    table, indices = jnp.asarray(table), jnp.asarray(indices)
    if not jnp.issubdtype(table.dtype, jnp.floating) or table.dtype.itemsize != 2:  # 4-byte rows: no gain
        return table.at[indices].get(mode="promise_in_bounds") if in_bounds else jnp.take(table, indices, axis=0)
    return _take_bits(table, indices, in_bounds)


# Unchecked 2-byte gathers of at least this many elements run as lax.cond(all indices in range,
# plain row gather, general gather): the conditional keeps XLA from fusing the gather into its
# consumer (the add of position rows); the gather followed by a separate add measured faster than
# their fused loop under load, not on a quiet machine (benchmarks/HISTORY.md, bfloat16 block, item 2).
# Smaller gathers (a decode step, a short prompt) stay one fusion: no reduction, no conditional.
SPLIT_ELEMENTS = 1 << 20


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _take_bits(table, indices, in_bounds):
    rows = table.shape[0]
    # The bit-cast stays inside each branch: as an operand of the conditional it would be a copy.

    def plain():  # 0 <= indices < rows
        bits = jax.lax.bitcast_convert_type(table, jnp.uint16)
        return jax.lax.bitcast_convert_type(bits.at[indices].get(mode="promise_in_bounds"), table.dtype)

    def general():  # jnp.take's fill mode: negative indices wrap once, the rest are NaN rows
        bits = jax.lax.bitcast_convert_type(table, jnp.uint16)
        valid = (indices >= -rows) & (indices < rows)
        got = bits.at[jnp.where(indices < 0, indices + rows, indices)].get(mode="promise_in_bounds")
        nan = jax.lax.bitcast_convert_type(jnp.array(jnp.nan, table.dtype), bits.dtype)
        return jax.lax.bitcast_convert_type(jnp.where(valid[..., None], got, nan), table.dtype)

    if in_bounds:
        return plain()
    if indices.size * math.prod(table.shape[1:]) >= SPLIT_ELEMENTS:
        return jax.lax.cond(jnp.all((indices >= 0) & (indices < rows)), plain, general)
    return general()


@_take_bits.defjvp
def _take_bits_jvp(in_bounds, primals, tangents):
    table, indices = primals
    d_table = tangents[0]
    if in_bounds:
        return _take_bits(table, indices, in_bounds), d_table.at[indices].get(mode="promise_in_bounds")
    return _take_bits(table, indices, in_bounds), jnp.take(d_table, indices, axis=0)


def lookup_positions(
    table: jax.Array,
    positions: jax.typing.ArrayLike,
    *,
    offset: int = 0,
    on_overflow: OverflowPolicy = "error",
    name: str = "position table",
) -> jax.Array:
    """Rows ``table[offset + positions]`` with the overflow rule of this module.

    Args:
      table: ``(rows, dim)`` learned table, reserved rows included.
      positions: integer array, any shape.
      offset: reserved leading rows (2 for RoBERTa/OPT/BART, else 0).
      on_overflow: policy for traced positions: ``"error"``, ``"clip"`` or ``"fill"``.
      name: the table's name in error messages.

    Returns:
      ``positions.shape + (dim,)``, in the table's dtype.

    Raises:
      PositionLimitError: concrete positions outside the table (always).
      JaxRuntimeError: (at run time) traced positions past the table with ``on_overflow="error"``;
        its text ends with the same message (:func:`flax_posenc.position_errors` re-raises it as
        ``PositionLimitError``).

    >>> import jax.numpy as jnp
    >>> table = jnp.arange(8.0).reshape(4, 2)
    >>> lookup_positions(table, jnp.array([0, 3]))
    Array([[0., 1.],
           [6., 7.]], dtype=float32)
    >>> lookup_positions(table, jnp.array([4]))
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: position table holds 4 positions (0..3); asked for position 4, 1 past the end
    """
    return lookup_rows(table, positions, Limit(table.shape[0], offset, name), on_overflow)


def lookup_rows(table: jax.Array, indices: jax.typing.ArrayLike, limit: Limit, on_overflow: OverflowPolicy = "error"):
    """THE guarded table lookup: rows ``table[limit.offset + indices]`` (positions, token types, word ids).

    Every table the library gathers from (learned positions, token types, word embeddings) is read
    here, so one guard and one policy govern them all. The run-time check survives every table
    shape: a one-row table's gather (or one from a constant table) does not depend on the index,
    so XLA would drop the guard's check along with it; here the rows carry it
    (:func:`~flax_posenc.overflow.keep_check`).

    Args:
      table: ``(limit.rows, dim)``.
      indices: integer array, any shape (``limit.argument`` names it in a type error).
      limit: the valid range and the table's name and unit (:class:`~flax_posenc.overflow.Limit`).
      on_overflow: policy for traced indices: ``"error"``, ``"clip"`` or ``"fill"``.

    Returns:
      ``indices.shape + (dim,)``, in the table's dtype.

    >>> import jax.numpy as jnp
    >>> lookup_rows(jnp.zeros((2, 3)), jnp.array([2]), Limit(2, name="token type table", unit="type"))
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: token type table holds 2 types (0..1); asked for type 2, 1 past the end
    """
    indices, invalid, check = guard_indices(indices, limit, on_overflow)
    rows = take_rows(table, indices + limit.offset, in_bounds=True)  # the guard kept them in bounds
    # XLA drops the index of a gather that cannot depend on it (a one-row table, a table that is a
    # broadcast constant), and the check riding on the index with it: the rows carry it instead.
    return fill_invalid(keep_check(rows, check), invalid)


def slice_positions(
    table: jax.Array,
    length: int,
    *,
    start: int | jax.Array = 0,
    offset: int = 0,
    on_overflow: OverflowPolicy = "error",
    name: str = "position table",
) -> jax.Array:
    """Rows for positions ``start .. start + length - 1``: a slice, not a gather.

    ``length`` is static (a Python int); a static ``start`` is checked at trace time, a traced
    one (the step counter of a decoding loop) follows ``on_overflow``.

    Returns:
      ``(length, dim)``.

    >>> import jax.numpy as jnp
    >>> slice_positions(jnp.zeros((1024, 8)), 1025)
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: position table holds 1024 positions (0..1023); asked for position 1024, 1 past the end
    """
    check_policy(on_overflow)
    length = _static_length(length)
    if length == 0:  # nothing asked for, whatever the start
        return table[:0]
    if is_traced(start):
        if SCALAR_START_GUARD:
            guarded = guard_start(start, length, Limit(table.shape[0], offset, name), on_overflow, with_check=True)
            if guarded is not None:  # "error": two scalar compares on start, then a slice
                first, check = guarded  # the rows carry the check (a slice of the whole table, or of
                # a constant one, ignores its start, and XLA would drop the check with it)
                return keep_check(jax.lax.dynamic_slice_in_dim(table, first + offset, length, axis=0), check)
        return lookup_positions(table, start + jnp.arange(length), offset=offset, on_overflow=on_overflow, name=name)
    start = int(start)
    check_positions(start, start + length - 1, rows=table.shape[0], offset=offset, name=name)
    return jax.lax.slice_in_dim(table, offset + start, offset + start + length, axis=0)


def _static_length(length) -> int:
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise ValueError(f"length: expected a non-negative Python integer, got {length!r}")
    return int(length)


def sequential_positions(length: int, *, start: int | jax.Array = 0) -> jax.Array:
    """``start, start + 1, ..., start + length - 1`` as int32, shape ``(length,)``.

    >>> sequential_positions(3, start=5)
    Array([5, 6, 7], dtype=int32)
    """
    return jnp.arange(_static_length(length), dtype=jnp.int32) + start


def padding_aware_positions(mask: jax.typing.ArrayLike, *, start: int | jax.Array = 0) -> jax.Array:
    """Positions that skip padding, as RoBERTa, MPNet and OPT count them.

    Kept tokens (``mask`` true) are numbered ``start, start + 1, ...`` in order along the last
    axis; masked tokens get position ``-1``, which with the reserved offset of those tables
    indexes their padding row (row ``offset - 1``). Every value lies in
    ``[-1, start + seq_len - 1]``, so the limit can be checked from the shape alone.

    Args:
      mask: ``(..., seq_len)`` booleans or 0/1 ints; true for real tokens.
      start: tokens already processed (incremental decoding).

    >>> import jax.numpy as jnp
    >>> padding_aware_positions(jnp.array([[1, 1, 1, 0], [0, 1, 1, 1]]))
    Array([[ 0,  1,  2, -1],
           [-1,  0,  1,  2]], dtype=int32)
    """
    mask = jnp.asarray(mask).astype(jnp.int32)
    counted = jnp.cumsum(mask, axis=-1, dtype=jnp.int32) + start
    return jnp.where(mask > 0, counted - 1, -1).astype(jnp.int32)


def packed_positions(segment_ids: jax.typing.ArrayLike) -> jax.Array:
    """Per-token positions of packed sequences: each segment counts from 0 (MaxText's
    ``inputs_positions``).

    Several sequences packed into one row are told apart by their segment ids; a token's
    position is its index since the start of its segment (a new segment starts wherever the id
    changes along the last axis). The result feeds any encoding: ``position_ids`` of the input
    block, ``positions`` of :func:`~flax_posenc.apply_rope`, ALiBi's query/key positions.

    Args:
      segment_ids: ``(..., seq_len)`` integers; padding is usually its own segment (id 0).

    Returns:
      ``(..., seq_len)`` int32 positions.

    >>> import jax.numpy as jnp
    >>> packed_positions(jnp.array([[1, 1, 1, 2, 2, 0, 0]]))
    Array([[0, 1, 2, 0, 1, 0, 1]], dtype=int32)
    """
    segment_ids = jnp.asarray(int32_values(segment_ids, "segment_ids"))  # never two ids wrapped into one
    if not jnp.issubdtype(segment_ids.dtype, jnp.integer) or segment_ids.ndim < 1:
        raise TypeError(
            f"segment_ids: expected an integer array of shape (..., seq_len), got dtype {segment_ids.dtype}, "
            f"shape {tuple(segment_ids.shape)}"
        )
    seq = segment_ids.shape[-1]
    index = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), segment_ids.shape)
    starts = jnp.concatenate(
        [jnp.ones(segment_ids.shape[:-1] + (1,), bool), segment_ids[..., 1:] != segment_ids[..., :-1]], axis=-1
    )
    first = jax.lax.cummax(jnp.where(starts, index, 0), axis=segment_ids.ndim - 1)
    return index - first

"""Learned-table lookup and the overflow rule: no position past a table is ever silent.

JAX hides out-of-range indices: ``table[i]`` clamps to the last row, ``jnp.take`` fills with
NaN, ``nnx.Embed`` documents NaN. Here a position outside a table is an error:

- **Known positions** (a static length, or a concrete array outside ``jit``) are checked on
  the host, at trace time: :class:`~flax_posenc.PositionLimitError` names the table, its limit
  and what was asked for.
- **Traced positions** (values known only at run time, under ``jit``) follow ``on_overflow``:

  ``"error"`` (default)
      a :mod:`jax.experimental.checkify` check. Run the computation under
      ``jax.jit(checkify.checkify(f))`` and call ``err.throw()``. Compiling it *without*
      checkify fails before anything runs ("Cannot abstractly evaluate a checkify.check which
      was not functionalized"): you must either functionalize the check or pick a policy.
  ``"clip"``
      clamp to the nearest valid row (JAX's indexing behaviour, asked for explicitly).
  ``"fill"``
      NaN rows for positions outside the table (``nnx.Embed``'s behaviour, asked for explicitly).

Positions are 0-based and index row ``offset + position``; reserved leading rows
(RoBERTa/OPT's 2) are reachable only with negative positions, which is how padding tokens
reach them (see :func:`padding_aware_positions`).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from flax_posenc.errors import PositionLimitError

OverflowPolicy = Literal["error", "clip", "fill"]
OVERFLOW_POLICIES: tuple[str, ...] = ("error", "clip", "fill")

def is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)

def _check_policy(on_overflow: str) -> None:
    if on_overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"on_overflow: expected one of {OVERFLOW_POLICIES}, got {on_overflow!r}")

def describe_limit(name: str, rows: int, offset: int) -> str:
    """``"<name> holds 1024 positions (0..1023)"``, with reserved rows mentioned."""
    usable = rows - offset
    reserved = f" after {offset} reserved rows" if offset else ""
    return f"{name} holds {usable} positions (0..{usable - 1}){reserved}"

def check_positions(
    lowest: int,
    highest: int,
    *,
    rows: int,
    offset: int = 0,
    name: str = "position table",
) -> None:
    """Raise :class:`PositionLimitError` unless rows ``offset + lowest .. offset + highest`` exist.

    Host-side check, for positions known at trace time.

    >>> check_positions(0, 1023, rows=1024)          # fits: returns None
    >>> check_positions(0, 1024, rows=1024, name="gpt2 position table (wpe.weight)")
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: gpt2 position table (wpe.weight) holds 1024 positions (0..1023); asked for position 1024, 1 past the end
    """
    if offset + lowest < 0:
        raise PositionLimitError(
            f"{describe_limit(name, rows, offset)}; asked for position {lowest}, "
            f"below the first row"
        )
    if offset + highest >= rows:
        excess = offset + highest - rows + 1
        raise PositionLimitError(
            f"{describe_limit(name, rows, offset)}; asked for position {highest}, "
            f"{excess} past the end"
        )

def runtime_check(valid, positions, *, rows: int, offset: int, name: str) -> None:
    """A checkify check for traced positions (see the module docstring)."""
    message = f"{describe_limit(name, rows, offset)}; asked for positions from {{lo}} to {{hi}}"
    checkify.check(valid, message, lo=jnp.min(positions), hi=jnp.max(positions))

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
      ValueError: (from JAX, at compile time) traced positions with ``on_overflow="error"``
        compiled without ``checkify.checkify``.

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
    _check_policy(on_overflow)
    positions = jnp.asarray(positions) if not is_traced(positions) else positions
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        raise TypeError(f"positions: expected an integer array, got dtype {positions.dtype}")
    rows = table.shape[0]
    index = positions.astype(jnp.int32) + offset
    if not is_traced(positions):
        if positions.size:
            host = np.asarray(positions)
            check_positions(int(host.min()), int(host.max()), rows=rows, offset=offset, name=name)
        return table.at[index].get(mode="promise_in_bounds")
    if on_overflow == "clip":
        return table.at[index].get(mode="clip")
    if on_overflow == "fill":
        return table.at[index].get(mode="fill", fill_value=jnp.nan)
    runtime_check((index >= 0).all() & (index < rows).all(), positions, rows=rows, offset=offset, name=name)
    return table.at[index].get(mode="clip")

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
    _check_policy(on_overflow)
    length = _static_length(length)
    if is_traced(start):
        return lookup_positions(
            table, start + jnp.arange(length), offset=offset, on_overflow=on_overflow, name=name
        )
    start = int(start)
    if length:
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

"""The one overflow guard: no position past a limit is ever silent, under ``jit`` or not.

Every encoding (learned tables, sinusoids with a limit, the input block, RoPE, ALiBi, token
types) sends its positions through :func:`guard_positions` with a :class:`Limit` and an
``on_overflow`` policy. JAX itself hides out-of-range indices (``x[i]`` clamps, ``jnp.take``
fills with NaN); the guard makes them an error:

- **Known positions** (a static length or ``start``, default positions, a concrete array) are
  checked on the host while tracing: :class:`~flax_posenc.PositionLimitError` is raised before
  anything is compiled, and the compiled code carries no check at all (zero run-time cost).
- **Traced positions** (``position_ids`` or a decoding ``start`` known only at run time) follow
  ``on_overflow``:

  ``"error"`` (default)
      the call fails *at run time*, under plain ``jax.jit``, ``nnx.jit``, ``lax.scan``, ``vmap``
      and ``checkify`` alike, with the same one-line message (table, limit, position). A host
      callback runs only when a position is out of range (``lax.cond`` on the predicate; under
      ``vmap`` the callback re-checks its batch, so there is no false alarm). JAX re-raises a
      callback's exception as its own ``JaxRuntimeError`` (a ``ValueError`` from its fast
      dispatch path) whose text ends with our message; wrap the call in
      :func:`position_errors` to get a :class:`PositionLimitError` back.
      Inside :func:`checkify_errors`, the check is a ``checkify.check`` instead, carrying the
      same message in checkify's ``Error``. On a backend without host callbacks the out-of-range
      outputs are NaN (poison) and a warning is issued once.
  ``"clip"``
      positions are clamped into the limit (JAX's indexing behaviour, asked for explicitly).
  ``"fill"``
      outputs for out-of-range positions are NaN (``nnx.Embed``'s behaviour, asked for).

Positions of any integer dtype are compared with the limit *before* any cast to int32, so
``2**32 + 5`` is an error, never row 5.

>>> import jax, jax.numpy as jnp
>>> import flax_posenc as fp
>>> table = jnp.arange(8.0).reshape(4, 2)
>>> lookup = jax.jit(lambda p: fp.lookup_positions(table, p))
>>> fp.position_errors(lookup)(jnp.array([1, 4]))
Traceback (most recent call last):
...
flax_posenc.errors.PositionLimitError: position table holds 4 positions (0..3); asked for position 4, 1 past the end
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import dataclasses
import functools
import json
import logging
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from flax_posenc.errors import PositionLimitError
from flax_posenc.limits import (  # the policies live with the limit sentence (numpy-free); re-exported here
    OVERFLOW_POLICIES,
    OverflowPolicy,
    check_policy,
    check_positions,
    describe_limit,
    lowest_position,
)

__all__ = [
    "OVERFLOW_POLICIES",
    "Limit",
    "OverflowPolicy",
    "checkify_errors",
    "check_policy",
    "fill_invalid",
    "guard_indices",
    "guard_positions",
    "guard_start",
    "is_traced",
    "keep_check",
    "known_positions",
    "position_errors",
]


# Backends whose compiled code can call back into Python (jax.debug.callback).
_CALLBACK_PLATFORMS = frozenset({"cpu", "gpu", "cuda", "rocm", "tpu"})


class _GuardMode:
    """How traced checks are emitted: ``None`` (host callback), ``"checkify"`` or ``"export"``.

    A ``jax.make_user_context``: part of ``jit``'s cache key, so a function jitted (and cached)
    under one mode is traced again under another (a cached program with a host callback is never
    reused by :func:`flax_posenc.export`). A context variable where JAX has no user contexts.
    """

    def __init__(self):
        maker = getattr(jax, "make_user_context", None)
        self._context = maker(default_value=None) if maker is not None else None
        self._var: contextvars.ContextVar[str | None] = contextvars.ContextVar("flax_posenc_guard_mode", default=None)

    def get(self) -> str | None:
        return self._context.value if self._context is not None else self._var.get()

    @contextlib.contextmanager
    def __call__(self, mode: str | None) -> Iterator[None]:
        if self._context is not None:
            with self._context(mode):
                yield
            return
        token = self._var.set(mode)
        try:
            yield
        finally:
            self._var.reset(token)


#: how traced checks are emitted now (``guard_mode.get()``; ``with guard_mode("export"): ...``)
guard_mode = _GuardMode()
#: prefix of the ``checkify.check`` message that :func:`flax_posenc.checked` turns back into a limit
EXPORT_CHECK_PREFIX = "flax-posenc position check "
_warned_poison = False


def is_traced(x) -> bool:
    """True for a value known only at run time (a tracer under ``jit``/``vmap``/``scan``).

    >>> is_traced(3), jax.jit(lambda t: is_traced(t))(3)
    (False, Array(True, dtype=bool))
    """
    return isinstance(x, jax.core.Tracer)


def host_or_device(value: Any) -> Any:
    """``value`` itself when it is a jax array or a tracer, else a numpy array of it.

    Index arguments (ids, positions, token types) given on the host stay numpy until the guard has
    compared them with their limit: ``jnp.asarray`` of an ``int64``/``uint64`` array with x64 off
    wraps ``2**32 + 5`` to ``5`` before any check could see it.

    >>> host_or_device([2**32 + 5]).tolist()
    [4294967301]
    """
    if isinstance(value, jax.Array) or is_traced(value):
        return value
    return np.asarray(value)


def int32_values(value: Any, argument: str) -> Any:
    """:func:`host_or_device`, refusing host integers that do not fit int32 when x64 is off.

    For integer arguments whose values are compared, not bounded by a table (segment ids):
    ``jnp.asarray`` would wrap them silently, and two different ids could become equal.

    Raises:
      ValueError: a host integer array with a value outside ``-2**31 .. 2**31 - 1`` (x64 off),
        naming ``argument`` and the value.

    >>> int32_values([2**32 + 1], "segment_ids")
    Traceback (most recent call last):
    ...
    ValueError: segment_ids: expected integers that fit int32 (-2147483648..2147483647; jax_enable_x64 is off), found 4294967297
    """
    value = host_or_device(value)
    if (
        isinstance(value, np.ndarray)
        and value.size
        and np.issubdtype(value.dtype, np.integer)
        and not jax.config.read("jax_enable_x64")
        and value.dtype.itemsize >= 4
    ):
        lowest, highest = int(value.min()), int(value.max())
        info = np.iinfo(np.int32)
        if lowest < info.min or highest > info.max:
            worst = lowest if lowest < info.min else highest
            raise ValueError(
                f"{argument}: expected integers that fit int32 ({info.min}..{info.max}; jax_enable_x64 is off), "
                f"found {worst}"
            )
    return value


@dataclasses.dataclass(frozen=True)
class Limit:
    """Positions ``0 .. rows - offset - 1`` are valid, and ``-1`` with reserved rows (static, hashable).

    Attributes:
      rows: stored rows (or positions), reserved rows included.
      offset: reserved leading rows; position ``-1`` reaches the padding row ``offset - 1``.
      name: how the table is named in messages (``"gpt2 position table (wpe.weight)"``).
      signed: positions ``-rows .. rows - 1`` are valid (relative offsets; no table, no offset).
      unit: what one row is called in messages (singular): ``"position"``, ``"type"`` for token
        types, ``"id"`` for word ids.
      argument: the argument the indices come from, named when they are not integers
        (``"positions"``, ``"token_type_ids"``, ``"input_ids"``).

    RoBERTa's 514 rows, 2 reserved: positions -1 (padding) to 511.

    >>> limit = Limit(514, offset=2, name="roberta position table")
    >>> limit.lowest, limit.highest
    (-1, 511)
    >>> limit.check(0, 512)
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: roberta position table holds 512 positions (0..511) after 2 reserved rows; asked for position 512, 1 past the end
    """

    rows: int
    offset: int = 0
    name: str = "position table"
    signed: bool = False
    unit: str = "position"
    argument: str = "positions"

    def __post_init__(self):
        if self.rows - self.offset < 1 or self.offset < 0:
            raise ValueError(
                f"{self.name}: expected at least one usable {self.unit} after {self.offset} reserved rows, "
                f"found {self.rows} rows"
            )

    @property
    def lowest(self) -> int:
        return -self.rows if self.signed else lowest_position(self.offset)

    @property
    def highest(self) -> int:
        return self.rows - self.offset - 1

    def describe(self) -> str:
        """``"<name> holds N positions (0..N-1)"`` (see :func:`flax_posenc.limits.describe_limit`)."""
        if self.signed:
            return f"{self.name} accepts {self.unit}s {self.lowest}..{self.highest}"
        return describe_limit(self.name, self.rows, self.offset, unit=self.unit)

    def check(self, lowest: int, highest: int) -> None:
        """Host check of known bounds; raises :class:`PositionLimitError`."""
        if not self.signed:
            check_positions(lowest, highest, rows=self.rows, offset=self.offset, name=self.name, unit=self.unit)
        elif lowest < self.lowest or highest > self.highest:
            worst = lowest if lowest < self.lowest else highest
            raise PositionLimitError(f"{self.describe()}; asked for {self.unit} {worst}")


def encode_limit(limit: Limit) -> str:
    """``limit`` as one printable token (base64 of its JSON fields; no braces, no spaces)."""
    text = json.dumps(dataclasses.asdict(limit), sort_keys=True, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode()


def decode_limit(token: str) -> Limit:
    """The :class:`Limit` of :func:`encode_limit` (``ValueError`` on a token it did not write)."""
    try:
        fields = json.loads(base64.urlsafe_b64decode(token.encode()).decode())
        return Limit(**fields)
    except (ValueError, TypeError) as error:  # binascii.Error and JSONDecodeError are ValueErrors
        raise ValueError(f"flax-posenc position check: expected an encoded limit, found {token[:40]!r}") from error


def _bounds_in(dtype, limit: Limit) -> tuple[int, int]:
    """The limit's bounds clipped to what ``dtype`` can hold (so comparisons never wrap)."""
    info = jnp.iinfo(dtype)
    return max(limit.lowest, int(info.min)), min(limit.highest, int(info.max))


def _host_bounds(positions) -> tuple[int, int]:
    host = np.asarray(positions)
    return int(host.min()), int(host.max())


def _min_max(positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The lowest and the highest entry of ``positions`` (any shape, size >= 1), in its dtype.

    One variadic reduction: XLA compiles it as one loop, where ``jnp.min`` and ``jnp.max`` (or
    ``jnp.all`` of a comparison) are each split by XLA CPU into a windowed pass and a final pass,
    two kernels apiece; the guard's compile time is mostly its kernel count
    (``benchmarks/investigations/guard_compile.py``).
    """
    info = jnp.iinfo(positions.dtype)
    init = (jnp.array(info.max, positions.dtype), jnp.array(info.min, positions.dtype))
    lowest, highest = jax.lax.reduce(
        (positions, positions),
        init,
        lambda a, b: (jax.lax.min(a[0], b[0]), jax.lax.max(a[1], b[1])),
        tuple(range(positions.ndim)),
    )
    return lowest, highest


def _raise_on_host(lowest, highest, *, limit: Limit) -> np.ndarray:
    # Scalars, or one per vmapped entry (vmap turned lax.cond into a select, so this runs on
    # every call there): the limit is checked on the bounds of them all, so an in-range batch
    # passes and an out-of-range entry anywhere raises with the worst position of the batch.
    limit.check(int(np.min(lowest)), int(np.max(highest)))
    return np.zeros(np.shape(lowest), np.int32)


def _runtime_error(bad: jax.Array, lowest: jax.Array, highest: jax.Array, limit: Limit):
    """Fail the running computation with the limit's message when ``bad`` (a scalar) is true.

    ``lowest``/``highest`` are the positions' bounds (:func:`_min_max`), reported in the message.
    Returns an int32 scalar zero to add to the positions (the dependency that keeps the check
    alive; a constant zero under :func:`checkify_errors`), or ``True`` (poison with NaN) on a
    backend that cannot call back to the host.
    """
    mode = guard_mode.get()
    if mode == "checkify":
        message = f"{limit.describe()}; asked for {limit.unit}s from {{lo}} to {{hi}}"
        checkify.check(~bad, message, lo=lowest, hi=highest)
        return jnp.zeros((), jnp.int32)
    if mode == "export":  # the limit travels in the message, decoded by flax_posenc.checked
        checkify.check(~bad, EXPORT_CHECK_PREFIX + encode_limit(limit) + " {0} {1}", lowest, highest)
        return jnp.zeros((), jnp.int32)
    if jax.default_backend() not in _CALLBACK_PLATFORMS:
        global _warned_poison
        if not _warned_poison:
            warnings.warn(
                f"flax-posenc: backend {jax.default_backend()!r} has no host callbacks; traced positions "
                "past a limit give NaN outputs instead of an error (on_overflow='error')",
                RuntimeWarning,
                stacklevel=3,
            )
            _warned_poison = True
        return True
    # A pure callback (no effect: jit keeps its fast C++ dispatch path) whose int32 zero result
    # is added to the positions, so it is never dead code. lax.cond runs it only on overflow; its
    # operands are the bounds already computed for the predicate, so the branch holds nothing
    # but the callback (no reduction of its own to compile).
    callback = functools.partial(_raise_on_host, limit=limit)

    def report(lo, hi):
        return jax.pure_callback(callback, jax.ShapeDtypeStruct((), jnp.int32), lo, hi, vmap_method="expand_dims")

    return jax.lax.cond(bad, report, lambda lo, hi: jnp.zeros((), jnp.int32), lowest, highest)


#: known positions with at least this many entries are examined for runs (see :func:`known_positions`)
RUN_MIN_SIZE = 1024


def known_positions(positions) -> jax.Array:
    """Known (checked) positions as int32 on device, without a constant that grows with the length.

    When every row along the last axis is a run ``first, first + 1, ...`` (default positions, a
    static ``start``, ``np.arange``, batches of offset rows) the result is an iota plus the first
    position of each row: the program holds one integer per row, not one per position, so its
    size and compile time do not grow with the sequence. Other arrays (and small ones, fewer than
    :data:`RUN_MIN_SIZE` entries) become an int32 constant, as ``jnp.asarray(p, jnp.int32)``.
    The values are the same either way.

    >>> import jax
    >>> jax.make_jaxpr(lambda: known_positions(np.arange(5, 5 + 4096)))().consts
    []
    """
    host = np.asarray(positions)
    if host.ndim and host.size >= RUN_MIN_SIZE and host.shape[-1] > 1:
        first = host[..., :1].astype(np.int64)
        if np.array_equal(host - first, np.broadcast_to(np.arange(host.shape[-1]), host.shape)):
            iota = jax.lax.broadcasted_iota(jnp.int32, host.shape, host.ndim - 1)
            if np.all(first == first.flat[0]):  # one start for every row: a scalar
                return iota + np.int32(first.flat[0])
            return iota + jnp.asarray(first, dtype=jnp.int32)
    return jnp.asarray(host).astype(jnp.int32)


def guard_positions(
    positions: jax.typing.ArrayLike,
    limit: Limit,
    on_overflow: OverflowPolicy = "error",
) -> tuple[jax.Array, jax.Array | None]:
    """Check ``positions`` against ``limit``; return them as int32 and a NaN mask (or ``None``).

    Args:
      positions: integer array of any shape and integer dtype, traced or not.
      limit: the valid range (:class:`Limit`).
      on_overflow: the policy for traced positions (see the module docstring).

    Returns:
      ``(positions, invalid)``: int32 positions inside ``limit.lowest .. limit.highest`` (clamped
      when traced, so any gather is in bounds), and for ``"fill"`` (or the NaN poison of a
      backend without callbacks) a boolean mask of the out-of-range entries whose outputs the
      caller sets to NaN with :func:`fill_invalid`; ``None`` otherwise. The run-time check rides
      on the returned positions: a result that does not depend on them (a gather from a one-row
      table) must use :func:`guard_indices` and :func:`keep_check` instead.

    Raises:
      PositionLimitError: known positions outside the limit (at trace time, any policy).
      TypeError: ``positions`` is not an integer array (named by ``limit.argument``).

    >>> import jax.numpy as jnp
    >>> guard_positions(jnp.array([0, 3]), Limit(4))
    (Array([0, 3], dtype=int32), None)
    >>> guard_positions(jnp.array([-1]), Limit(4))
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: position table holds 4 positions (0..3); asked for position -1, below the first row
    """
    positions, invalid, _ = guard_indices(positions, limit, on_overflow)
    return positions, invalid


def guard_indices(
    indices: jax.typing.ArrayLike,
    limit: Limit,
    on_overflow: OverflowPolicy = "error",
) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """:func:`guard_positions`, also returning the run-time check itself: ``(indices, invalid, check)``.

    ``check`` is the int32 scalar zero that carries the run-time check under ``"error"`` (already
    added to ``indices``), or ``None`` when there is none (known indices, ``"clip"``, ``"fill"``).
    A caller whose result may not depend on the indices (XLA drops the index of a gather from a
    one-row table, and the check with it) passes its result through :func:`keep_check`.

    >>> import jax, jax.numpy as jnp
    >>> guard_indices(jnp.array([0]), Limit(1))[2] is None  # known: checked on the host
    True
    """
    check_policy(on_overflow)
    positions: Any = indices  # a tracer, or made an array below
    traced = is_traced(positions)
    if not traced:
        positions = np.asarray(positions) if not isinstance(positions, jax.Array) else positions
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        raise TypeError(f"{limit.argument}: expected an integer array, got dtype {positions.dtype}")
    if not traced:
        if positions.size:
            limit.check(*_host_bounds(positions))
        return known_positions(positions), None, None
    if positions.size == 0:
        return positions.astype(jnp.int32), None, None
    lo, hi = _bounds_in(positions.dtype, limit)
    info = jnp.iinfo(positions.dtype)
    if lo == info.min and hi == info.max:  # the dtype cannot hold an out-of-range value
        return positions.astype(jnp.int32), None, None
    clipped = jnp.clip(positions, lo, hi).astype(jnp.int32)
    if on_overflow == "clip":
        return clipped, None, None
    if on_overflow == "error":
        lowest, highest = _min_max(positions)  # one reduction gives the predicate and the message
        zero = _runtime_error((lowest < lo) | (highest > hi), lowest, highest, limit)
        if zero is not True:
            return clipped + zero, None, zero
    return clipped, (positions < lo) | (positions > hi), None  # "fill", or the poison fallback


def keep_check(values: jax.Array, check: jax.Array | None) -> jax.Array:
    """``values``, made to depend on the run-time ``check`` of :func:`guard_indices` (bit for bit).

    ``check`` is a zero the compiler cannot see through; subtracting it changes no value (``-0.0``
    stays ``-0.0``), but keeps the check alive where the result would otherwise not depend on
    the guarded indices.

    >>> keep_check(jnp.array([-0.0, 1.0]), jnp.zeros((), jnp.int32)).tolist()
    [-0.0, 1.0]
    """
    if check is None:
        return values
    if values.dtype == jnp.bool_:
        return values & (check == 0)
    return values - check.astype(values.dtype)


def _raise_on_host_start(start, *, limit: Limit, length: int) -> np.ndarray:
    # For positions start .. start + length - 1; start is a scalar, or the batch under vmap (where
    # the conditional became a select and this runs for every step): re-check each start here.
    starts = [int(s) for s in np.ravel(start)]
    bad = [s for s in starts if s < limit.lowest or s + length - 1 > limit.highest]
    if bad:
        limit.check(min(bad), max(bad) + length - 1)
    return np.zeros(np.shape(start), np.int32)


def guard_start(
    start: jax.typing.ArrayLike,
    length: int,
    limit: Limit,
    on_overflow: OverflowPolicy = "error",
    *,
    with_check: bool = False,
):
    """The decode-step form of :func:`guard_positions` for positions ``start .. start + length - 1``.

    With a traced scalar ``start`` and ``on_overflow="error"`` the check is two scalar
    comparisons on ``start`` (no positions array, no reduction) feeding the same ``lax.cond`` and
    host callback, with the same message. Callers slice ``length`` rows from the returned start
    (``lax.dynamic_slice``) instead of gathering them.

    Args:
      start: traced integer scalar, the first position.
      length: static number of positions (``>= 1``).
      limit: the valid range (:class:`Limit`).
      on_overflow: the policy; only ``"error"`` has this form.
      with_check: return ``(start, check)``, ``check`` being the run-time check's int32 zero for
        :func:`keep_check` (a result that may not depend on ``start`` must carry it).

    Returns:
      int32 ``start`` clamped into ``limit.lowest .. limit.highest - length + 1`` (so the slice is
      in bounds), carrying the check's dependency; ``None`` where the general
      :func:`guard_positions` applies (``"clip"``/``"fill"``, a non-scalar start, inside
      :func:`checkify_errors`, a backend without host callbacks, bounds the dtype cannot hold).

    >>> import jax, jax.numpy as jnp
    >>> step = jax.jit(lambda t: guard_start(t, 2, Limit(8)))
    >>> step(jnp.int32(6))
    Array(6, dtype=int32)
    >>> position_errors(step)(jnp.int32(7))
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: position table holds 8 positions (0..7); asked for position 8, 1 past the end
    """
    check_policy(on_overflow)
    start = jnp.asarray(start)
    if (
        on_overflow != "error"
        or start.ndim
        or not jnp.issubdtype(start.dtype, jnp.integer)
        or guard_mode.get() is not None
        or jax.default_backend() not in _CALLBACK_PLATFORMS
    ):
        return None
    info = jnp.iinfo(start.dtype)
    lo, hi = limit.lowest, limit.highest - (length - 1)
    if not int(info.min) <= lo <= hi <= int(info.max):
        return None
    bad = (start < lo) | (start > hi)  # two scalar compares in start's own dtype (no wrap-around)
    callback = functools.partial(_raise_on_host_start, limit=limit, length=length)

    def report(s):  # the host re-checks s itself: the branch needs only start, so the predicate
        # and its conversion to the branch index stay one fusion feeding the conditional
        return jax.pure_callback(callback, jax.ShapeDtypeStruct((), jnp.int32), s, vmap_method="expand_dims")

    zero = jax.lax.cond(bad, report, lambda s: jnp.zeros((), jnp.int32), start)
    first = jnp.clip(start, lo, hi).astype(jnp.int32) + zero  # the zero keeps the check alive
    return (first, zero) if with_check else first


def fill_invalid(values: jax.Array, invalid: jax.Array | None) -> jax.Array:
    """NaN where ``invalid`` (shape ``values.shape[:invalid.ndim]``); ``values`` when ``None``.

    >>> fill_invalid(jnp.ones((2, 3)), jnp.array([False, True])).tolist()
    [[1.0, 1.0, 1.0], [nan, nan, nan]]
    """
    if invalid is None:
        return values
    mask = invalid.reshape(invalid.shape + (1,) * (values.ndim - invalid.ndim))
    return jnp.where(mask, jnp.asarray(jnp.nan, values.dtype), values)


@contextlib.contextmanager
def checkify_errors() -> Iterator[None]:
    """Trace with ``checkify.check`` instead of host callbacks (for ``checkify.checkify`` users).

    Inside this context (it must enclose the *tracing*, i.e. the first call of a jitted
    function), traced overflow under ``on_overflow="error"`` becomes a ``checkify.check`` with
    the limit's message; functionalize it with ``checkify.checkify``, as checkify requires.

    >>> import jax, jax.numpy as jnp
    >>> from jax.experimental import checkify
    >>> import flax_posenc as fp
    >>> f = checkify.checkify(lambda p: fp.lookup_positions(jnp.zeros((4, 2)), p))
    >>> with fp.checkify_errors():
    ...     err, _ = jax.jit(f)(jnp.array([5]))
    >>> err.get().startswith("position table holds 4 positions (0..3); asked for positions from 5 to 5")
    True
    """
    with guard_mode("checkify"):
        yield


_MESSAGE = re.compile(r"PositionLimitError: (.*)")


_P = ParamSpec("_P")
_R = TypeVar("_R")


def position_errors(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Wrap ``fn`` so a run-time overflow raises :class:`PositionLimitError` with our message.

    JAX reports an exception raised in a host callback as its own ``JaxRuntimeError`` (or, from
    its fast dispatch path, a ``ValueError``) whose text ends with our one-line message. The wrapper waits for ``fn``'s outputs
    (``jax.block_until_ready``), so an error of asynchronous dispatch surfaces inside it, and
    re-raises that error as a :class:`PositionLimitError`; any other error passes unchanged.

    >>> import jax, jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> step = fp.position_errors(jax.jit(lambda t: fp.sinusoidal_encoding(t, 4, num_positions=8)))
    >>> step(jnp.array(8))
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: sinusoidal encoding holds 8 positions (0..7); asked for position 8, 1 past the end
    """

    @functools.wraps(fn)
    def wrapped(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return jax.block_until_ready(fn(*args, **kwargs))
        except PositionLimitError:
            raise
        except (jax.errors.JaxRuntimeError, ValueError) as error:  # the fast path raises ValueError
            text = str(error)
            found = _MESSAGE.findall(text) if "callback" in text.lower() else []
            if not found:
                raise
            raise PositionLimitError(found[-1].strip()) from None

    return wrapped


class _QuietPositionErrors(logging.Filter):
    """jax logs every failing callback with its traceback; ours is reported by the caller."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, PositionLimitError)


for _logger in ("jax._src.debugging", "jax._src.callback"):
    logging.getLogger(_logger).addFilter(_QuietPositionErrors())

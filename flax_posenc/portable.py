"""Export and cross-platform lowering with the overflow guard kept (``jax.export``, StableHLO).

The default guard of traced positions (``on_overflow="error"``) reports an overflow through a
host callback (:mod:`flax_posenc.overflow`). A host callback cannot be serialized
(``jax.export``: "serialization of host_callbacks is not yet implemented") nor lowered for a
platform other than the running one. :func:`checked` makes the guard a *value* instead:

- while ``checked(fn)`` is traced, every traced check of flax-posenc is a ``checkify.check``
  (no host callback anywhere; a function ``jax.jit`` cached under the callback form is traced
  again: the mode is part of ``jit``'s cache key);
- ``checkify.checkify`` carries the checks out of ``scan``, ``cond``, ``vmap``, nested ``jit`` and
  ``nnx.jit``, and ``checked`` returns them as a :class:`PositionReport`, a pytree of a few int32
  and bool scalars whose limits (table name, rows, offset) travel in its *structure*, which
  ``jax.export`` serializes: a deserialized program reports the same one-line
  :class:`~flax_posenc.PositionLimitError` as the callback form, in any process.

``checked(fn)`` is an ordinary JAX function: ``jax.jit`` it, lower it for ``"cpu"``, ``"cuda"``,
``"tpu"`` from any machine, shard it, export it. :func:`export` is ``jax.export.export`` of it,
and :func:`call_exported` runs an exported (or deserialized) program and raises the error.

>>> import jax, jax.numpy as jnp
>>> import flax_posenc as fp
>>> table = jnp.arange(8.0).reshape(4, 2)
>>> exported = fp.export(lambda p: fp.lookup_positions(table, p), platforms=("cpu", "cuda", "tpu"))(
...     jax.ShapeDtypeStruct((2,), jnp.int32))
>>> restored = jax.export.deserialize(exported.serialize())
>>> fp.call_exported(restored, jnp.array([1, 3])).tolist()
[[2.0, 3.0], [6.0, 7.0]]
>>> fp.call_exported(restored, jnp.array([1, 4]))
Traceback (most recent call last):
...
flax_posenc.errors.PositionLimitError: position table holds 4 positions (0..3); asked for position 4, 1 past the end
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import checkify

from flax_posenc.overflow import EXPORT_CHECK_PREFIX, Limit, decode_limit, encode_limit, guard_mode

__all__ = ["PositionReport", "call_exported", "checked", "export"]


@jax.tree_util.register_pytree_node_class
class PositionReport:
    """The run-time position checks of a :func:`checked` function, as a pytree of arrays.

    Attributes:
      entries: one ``(failed, code, lowest, highest)`` per kind of check (a checkify effect):
        ``failed`` a bool, ``code`` the int32 code of the first failing check, ``lowest`` and
        ``highest`` the bounds of its positions (scalars; a leading batch axis under an outer
        ``vmap``).
      limits: static ``(code, Limit)`` pairs: which limit each code names (pytree structure;
        serialized with an exported program).

    ``throw()`` raises :class:`~flax_posenc.PositionLimitError` with the limit's one-line message
    when a check failed; ``failed`` says whether one did.
    """

    def __init__(self, entries: Sequence[tuple[Any, Any, Any, Any]], limits: Sequence[tuple[int, Limit]]):
        self.entries = tuple(tuple(entry) for entry in entries)
        self.limits = tuple(limits)

    def tree_flatten(self):
        return self.entries, self.limits

    @classmethod
    def tree_unflatten(cls, limits, entries):
        return cls(entries, limits)

    @property
    def failed(self) -> bool:
        """True when a position was out of range (reads the values: call outside ``jit``)."""
        return self._failure() is not None

    def _failure(self) -> tuple[Limit, int, int] | None:
        by_code = dict(self.limits)
        worst: tuple[int, Limit, int, int] | None = None
        for failed, code, lowest, highest in self.entries:
            failed, code = np.asarray(failed), np.asarray(code)
            lowest, highest = np.asarray(lowest), np.asarray(highest)
            for index in zip(*np.nonzero(np.atleast_1d(failed)), strict=False) if failed.ndim else [()]:
                if failed.ndim == 0 and not failed:
                    continue
                c = int(code[index])
                entry = (c, by_code[c], int(lowest[index]), int(highest[index]))
                if worst is None or c < worst[0]:  # the first check in program order
                    worst = entry
                elif c == worst[0]:  # the same check in another batch entry: widen its bounds
                    worst = (c, worst[1], min(worst[2], entry[2]), max(worst[3], entry[3]))
        return None if worst is None else worst[1:]

    def throw(self) -> None:
        """Raise the :class:`~flax_posenc.PositionLimitError` of the first failed check, if any."""
        failure = self._failure()
        if failure is not None:
            limit, lowest, highest = failure
            limit.check(lowest, highest)
            raise AssertionError(f"flax-posenc: a check failed at {lowest}..{highest} within {limit.describe()}")

    def __repr__(self) -> str:
        return f"PositionReport({len(self.entries)} kinds of check, {len(self.limits)} limits)"


def _serialize_limits(limits) -> bytes:
    return json.dumps([[code, encode_limit(limit)] for code, limit in limits]).encode()


def _deserialize_limits(data: bytes):
    return tuple((int(code), decode_limit(token)) for code, token in json.loads(data.decode()))


if hasattr(jax, "export") and hasattr(jax.export, "register_pytree_node_serialization"):
    jax.export.register_pytree_node_serialization(
        PositionReport,
        serialized_name="flax_posenc.PositionReport",
        serialize_auxdata=_serialize_limits,
        deserialize_auxdata=_deserialize_limits,
    )


def _report(error: checkify.Error) -> PositionReport:
    """Our checks of a checkify ``Error`` (inside the trace), as a :class:`PositionReport`."""
    entries, limits = [], []
    for effect, pred in error._pred.items():
        payload = error._payload[effect]
        codes = [code for code, tree in error._metadata.items() if _effect_of(tree, payload) == effect]
        ours = []
        for code in codes:
            message = _message_of(error._metadata[code], payload)
            if message is None or not message.startswith(EXPORT_CHECK_PREFIX):
                raise ValueError(
                    "flax_posenc.checked: expected only flax-posenc's position checks in the function, "
                    f"found another checkify check: {message!r}"
                )
            ours.append((int(code), decode_limit(message[len(EXPORT_CHECK_PREFIX) :].split(" ", 1)[0])))
        if not ours:
            continue
        if len(payload) != 2:
            raise ValueError(f"flax_posenc.checked: expected a check with 2 bounds, found {len(payload)} values")
        entries.append((pred, error._code[effect], payload[0], payload[1]))
        limits.extend(ours)
    return PositionReport(entries, sorted(limits))


def _exception_of(tree, payload):
    try:
        return jax.tree_util.tree_unflatten(tree, list(payload))
    except (ValueError, TypeError):
        return None


def _effect_of(tree, payload):
    exception = _exception_of(tree, payload)
    return None if exception is None else exception.get_effect_type()


def _message_of(tree, payload) -> str | None:
    exception = _exception_of(tree, payload)
    return getattr(exception, "fmt_string", None)


def checked(fn: Callable[..., Any]) -> Callable[..., tuple[PositionReport, Any]]:
    """``fn`` with its position checks returned as a value: ``(report, fn's outputs)``.

    No host callback is traced in ``fn`` (any ``jit`` inside it is traced again in this mode), so
    the result can be exported (``jax.export``), lowered for another platform
    (``jax.jit(checked(fn)).trace(...).lower(lowering_platforms=("tpu",))``) and sharded. Call
    ``report.throw()`` on the host, or use :func:`call_exported` on an exported program.

    Args:
      fn: any JAX-traceable function of arrays (a ``jax.jit``/``nnx.jit`` function, a module call
        in a closure, ``nnx.merge`` of a split state ...).

    Returns:
      a function of the same arguments returning ``(PositionReport, outputs)``.

    Raises:
      ValueError: ``fn`` holds ``checkify.check`` calls of its own (functionalize those yourself).

    >>> import jax, jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> step = jax.jit(fp.checked(lambda t: fp.sinusoidal_encoding(t, 4, num_positions=8)))
    >>> report, out = step(jnp.array(8))
    >>> report.throw()
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: sinusoidal encoding holds 8 positions (0..7); asked for position 8, 1 past the end
    """

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with guard_mode("export"):
            error, out = checkify.checkify(fn)(*args, **kwargs)
        return _report(error), out

    return run


def export(fn: Callable[..., Any], *, platforms: Sequence[str] | None = None, **jit_kwargs) -> Callable[..., Any]:
    """``jax.export.export`` of :func:`checked` ``(fn)``: a program for ``platforms`` with the guard kept.

    Args:
      fn: the function to export (see :func:`checked`).
      platforms: ``"cpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"`` (several at once: one program for
        all); ``None`` for the default backend.
      jit_kwargs: passed to ``jax.jit`` (``in_shardings``, ``static_argnums`` ...).

    Returns:
      a function of arguments (arrays or ``jax.ShapeDtypeStruct``) that returns a
      ``jax.export.Exported`` whose outputs are ``(PositionReport, fn's outputs)``: serialize it
      with ``.serialize()``, run it (or its ``jax.export.deserialize``) with :func:`call_exported`.
    """
    return jax.export.export(jax.jit(checked(fn), **jit_kwargs), platforms=platforms)


def _check_arguments(exported, args, kwargs) -> None:
    """One line naming the argument whose shape or dtype the exported signature does not allow."""
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    if tree != exported.in_tree:
        raise TypeError(f"exported program: expected arguments structured as {exported.in_tree}, found {tree}")
    for index, (leaf, aval) in enumerate(zip(leaves, exported.in_avals, strict=True)):
        shape, dtype = np.shape(leaf), getattr(leaf, "dtype", None)
        if dtype is None:
            dtype = np.asarray(leaf).dtype
        symbolic = any(not isinstance(d, int) for d in aval.shape)
        if np.dtype(dtype) != np.dtype(aval.dtype) or (
            not symbolic and tuple(shape) != tuple(aval.shape) or symbolic and len(shape) != len(aval.shape)
        ):
            raise TypeError(
                f"exported program: argument {index} expected {aval.dtype}{list(aval.shape)}, "
                f"found {np.dtype(dtype)}{list(shape)}"
            )


def call_exported(exported, *args, **kwargs):
    """Run an exported :func:`checked` program; raise its position error, or return its outputs.

    Args:
      exported: a ``jax.export.Exported`` made by :func:`export` (or ``jax.export.deserialize`` of
        its bytes: the limits travel with the program).
      args, kwargs: the arguments, of the shapes and dtypes it was exported for.

    Raises:
      PositionLimitError: a position was out of range (the same message as the host callback).
      TypeError: an argument's shape or dtype does not match the exported signature (one line).
    """
    _check_arguments(exported, args, kwargs)
    report, out = exported.call(*args, **kwargs)
    jax.block_until_ready(out)
    report.throw()
    return out

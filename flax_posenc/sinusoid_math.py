"""The sinusoid on the host: frequencies, float64 values and tables rounded once (numpy only).

The formula of Vaswani et al. (2017) and its variants, as the module docstring of
:mod:`flax_posenc.sinusoidal` describes them: ``layout`` (``"interleaved"``: ``PE[p, 2i] =
sin(p w_i)``, ``PE[p, 2i + 1] = cos(p w_i)``; ``"concatenated"``: all sines, then all cosines),
``endpoint`` (the frequency spacing), ``min_timescale`` and ``odd_dim``. Everything here is
float64 numpy, rounded once to the requested dtype at the end; it imports no jax, so the
conversion package (``sinusoidal:LENGTH:DIM`` sources) and :mod:`flax_posenc.report.analysis` use it
directly. The device path (exact-angle arithmetic under ``jit``) is :mod:`flax_posenc.sinusoidal`.

>>> np.round(sinusoidal_table_np(3, 4), 4)   # the lesson's 4-dimensional table
array([[ 0.    ,  1.    ,  0.    ,  1.    ],
       [ 0.8415,  0.5403,  0.01  ,  1.    ],
       [ 0.9093, -0.4161,  0.02  ,  0.9998]], dtype=float32)
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any, Literal

import numpy as np

Layout = Literal["interleaved", "concatenated"]
LAYOUTS: tuple[str, ...] = ("interleaved", "concatenated")
OddDim = Literal["zero", "sin"]
ODD_DIMS: tuple[str, ...] = ("zero", "sin")


def check_sinusoid_options(
    dim: int, base: float, layout: str = "interleaved", odd_dim: str | None = None, min_timescale: float = 1.0
) -> None:
    """Validate a sinusoid's options; one-line ``ValueError`` naming the argument, else ``None``.

    Args:
      dim: encoding width: even, or odd with ``odd_dim`` (``dim >= 2``).
      base: the longest timescale; finite and ``> min_timescale``.
      layout: one of :data:`LAYOUTS`.
      odd_dim: ``None`` or one of :data:`ODD_DIMS`.
      min_timescale: finite and ``> 0``.

    Raises:
      ValueError: the first bad argument, what was expected and what was found.

    >>> check_sinusoid_options(4, 10000.0, "interleaved")
    >>> check_sinusoid_options(4, 10000.0, "split")
    Traceback (most recent call last):
    ...
    ValueError: layout: expected one of ('interleaved', 'concatenated'), got 'split'
    """
    if odd_dim is not None and odd_dim not in ODD_DIMS:
        raise ValueError(f"odd_dim: expected one of {ODD_DIMS} or None, got {odd_dim!r}")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 2 or (dim % 2 and odd_dim is None):
        hint = (
            "; for an odd width pass odd_dim='zero' (fairseq, tensor2tensor, flax: a zero last column) "
            "or odd_dim='sin' (DistilBERT, Marian, keras-hub: one more sin than cos column)"
            if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool) and dim > 2 and dim % 2
            else ""
        )
        raise ValueError(f"dim: expected a positive even integer (sin/cos pairs), got {dim!r}{hint}")
    if not np.isfinite(min_timescale) or min_timescale <= 0.0:
        raise ValueError(f"min_timescale: expected a finite number > 0, got {min_timescale!r}")
    if not np.isfinite(base) or base <= min_timescale:
        raise ValueError(
            f"base: expected a finite number > {min_timescale:g} (min_timescale), the longest timescale; got {base!r}"
        )
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")


def _num_frequencies(dim: int, odd_dim: str | None) -> int:
    """Frequencies needed for ``dim`` columns: ``dim // 2``, one more for an odd ``"sin"`` width."""
    return (dim + 1) // 2 if odd_dim == "sin" else dim // 2


def sinusoidal_frequencies(
    dim: int,
    *,
    base: float = 10000.0,
    endpoint: bool = False,
    min_timescale: float = 1.0,
    odd_dim: OddDim | None = None,
) -> np.ndarray:
    """Angular frequencies ``w_i`` in radians per position, float64, shape ``(n,)``.

    ``n = dim // 2`` (``(dim + 1) // 2`` for an odd ``dim`` with ``odd_dim="sin"``) and
    ``w_i = min_timescale * (base / min_timescale) ** (-e_i)`` with ``e_i = 2i / dim``
    (``endpoint=False``) or ``e_i = i / (n - 1)`` (``endpoint=True``). With the default
    ``min_timescale=1`` this is ``base ** (-e_i)``.

    Args:
      dim: encoding width (even, or odd with ``odd_dim``).
      base: the timescale the frequencies decay towards (10000 in the paper); tensor2tensor's
        ``max_timescale``, flax's ``max_scale``, keras-hub's ``max_wavelength``.
      endpoint: ``False`` for the paper's ``w_i = base**(-2i/dim)``; ``True`` for
        ``w_i = base**(-i/(n - 1))`` (flax, T5X, MaxText, tensor2tensor, fairseq), whose slowest
        timescale is exactly ``base``.
      min_timescale: tensor2tensor's ``min_timescale``, flax's ``min_scale`` (default 1). Like
        those two (``inv_timescales = min_timescale * exp(-i * log(max/min) / (n - 1))``), it
        *multiplies* the frequencies: ``w_0 = min_timescale``.
      odd_dim: how an odd ``dim`` is filled (see :func:`sinusoidal_table_np`); ``None`` rejects one.

    Raises:
      ValueError: ``dim < 2``, an odd ``dim`` without ``odd_dim``, ``min_timescale <= 0`` or
        ``base <= min_timescale``.

    >>> w = sinusoidal_frequencies(4)
    >>> [round(float(x), 6) for x in w]
    [1.0, 0.01]
    >>> [round(float(x), 3) for x in 2 * np.pi / w]   # wavelengths, in positions
    [6.283, 628.319]
    >>> sinusoidal_frequencies(5, odd_dim="sin").shape   # DistilBERT/Marian/keras-hub: 3 sin, 2 cos
    (3,)
    """
    check_sinusoid_options(dim, base, "interleaved", odd_dim, min_timescale)
    n = _num_frequencies(dim, odd_dim)
    i = np.arange(n, dtype=np.float64)
    exponent = i / max(n - 1, 1) if endpoint else 2.0 * i / dim
    if min_timescale == 1.0:
        return np.exp(-exponent * np.log(np.float64(base)))
    return np.float64(min_timescale) * np.exp(-exponent * np.log(np.float64(base) / np.float64(min_timescale)))


def arrange_sin_cos(sin: Any, cos: Any, layout: str, dim: int | None = None, *, xp: Any = np) -> Any:
    """Place sine and cosine columns, each ``(..., n)``, as ``(..., dim)`` in ``layout``.

    ``dim = 2n`` (default): all pairs. ``dim = 2n - 1`` (``odd_dim="sin"``): the last cosine is
    dropped, so the extra column is a sine (last in ``interleaved``, at ``n - 1`` in
    ``concatenated``). ``dim = 2n + 1`` (``odd_dim="zero"``): a zero column is appended.
    ``xp`` is the array namespace (``numpy``, or ``jax.numpy`` for the device path).

    >>> arrange_sin_cos(np.array([1.0, 2.0]), np.array([3.0, 4.0]), "interleaved").tolist()
    [1.0, 3.0, 2.0, 4.0]
    >>> arrange_sin_cos(np.array([1.0, 2.0]), np.array([3.0, 4.0]), "concatenated", 3).tolist()
    [1.0, 2.0, 3.0]
    """
    n = sin.shape[-1]
    dim = 2 * n if dim is None else dim
    if layout == "concatenated":
        out = xp.concatenate([sin, cos[..., : dim - n]], axis=-1)
    else:
        out = xp.stack([sin, cos], axis=-1).reshape(*sin.shape[:-1], 2 * n)[..., :dim]
    if dim > 2 * n:
        out = xp.concatenate([out, xp.zeros_like(out[..., :1])], axis=-1)
    return out


def round_once(x: np.ndarray, dtype: Any) -> np.ndarray:
    """Round float64 ``x`` to ``dtype`` with a single correct rounding (ties to even).

    numpy rounds float64 straight to float32/float16. bfloat16 has no direct float64 path in
    ml_dtypes (it goes through float32: two roundings), so round to float32 *to odd* first,
    which keeps enough information for the second rounding to be the correct one.

    >>> round_once(np.array([1 / 3]), np.float32).dtype
    dtype('float32')
    """
    dtype = np.dtype(dtype)
    if dtype.name != "bfloat16":
        return x.astype(dtype)
    f32 = x.astype(np.float32)
    toward_zero = np.where(np.abs(f32) > np.abs(x), np.nextafter(f32, np.float32(0)), f32)
    inexact = (toward_zero != x).astype(np.uint32)
    odd = (toward_zero.view(np.uint32) | inexact).view(np.float32)
    return odd.astype(dtype)


def sinusoidal_values(
    positions: Any,
    dim: int,
    *,
    base: float = 10000.0,
    layout: Layout = "interleaved",
    endpoint: bool = False,
    min_timescale: float = 1.0,
    odd_dim: OddDim | None = None,
) -> np.ndarray:
    """The float64 encoding of integer ``positions`` (any shape): ``positions.shape + (dim,)``.

    ``sin``/``cos`` of the float64 angle ``p * w_i`` (:func:`sinusoidal_frequencies`), arranged
    by :func:`arrange_sin_cos`. Positions may be negative or past any table length: this is
    the formula, with no limit.

    Raises:
      ValueError: as :func:`check_sinusoid_options`.

    >>> sinusoidal_values(np.array([[0], [1]]), 2).round(4).tolist()
    [[[0.0, 1.0]], [[0.8415, 0.5403]]]
    """
    check_sinusoid_options(dim, base, layout, odd_dim, min_timescale)
    angles = np.asarray(positions, dtype=np.float64)[..., None] * sinusoidal_frequencies(
        dim, base=base, endpoint=endpoint, min_timescale=min_timescale, odd_dim=odd_dim
    )
    return arrange_sin_cos(np.sin(angles), np.cos(angles), layout, dim)


def sinusoidal_table_np(
    length: int,
    dim: int,
    *,
    base: float = 10000.0,
    layout: Layout = "interleaved",
    endpoint: bool = False,
    start: int = 0,
    min_timescale: float = 1.0,
    odd_dim: OddDim | None = None,
    dtype: Any = np.float32,
) -> np.ndarray:
    """The ``(length, dim)`` numpy table of positions ``start .. start + length - 1``.

    Float64 (:func:`sinusoidal_values`) rounded once to ``dtype`` (:func:`round_once`): every
    entry is the correctly rounded value of ``sin``/``cos`` of the float64 angle. The arguments
    are those of :func:`flax_posenc.sinusoidal_table`, which returns the same values as a
    ``jax.Array``.

    Raises:
      ValueError: a negative or non-integer ``length``, or as :func:`check_sinusoid_options`.

    >>> sinusoidal_table_np(2, 4, layout="concatenated", dtype=np.float64).round(4).tolist()
    [[0.0, 0.0, 1.0, 1.0], [0.8415, 0.01, 0.5403, 1.0]]
    """
    check_sinusoid_options(dim, base, layout, odd_dim, min_timescale)
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise ValueError(f"length: expected a non-negative integer, got {length!r}")
    positions = np.arange(start, start + length, dtype=np.int64)
    values = sinusoidal_values(
        positions, dim, base=base, layout=layout, endpoint=endpoint, min_timescale=min_timescale, odd_dim=odd_dim
    )
    return round_once(values, dtype)


@functools.lru_cache(maxsize=1)
def _two_pi_reciprocal_256() -> int:
    """``floor(2**256 / (2 pi))``, from Machin's formula in integer arithmetic (no float)."""
    prec = 256 + 64  # guard bits for the series' truncations
    one = 1 << prec

    def arctan_inv(x: int) -> int:  # arctan(1/x) * 2**prec
        total, term, k, sign = 0, one // x, 1, 1
        while term:
            total += sign * (term // k)
            term //= x * x
            k, sign = k + 2, -sign
        return total

    pi = 4 * (4 * arctan_inv(5) - arctan_inv(239))  # pi * 2**prec, off by a few units
    return (one << 256) // (2 * pi)


@functools.lru_cache(maxsize=64)
def _turn_words(frequencies: bytes) -> tuple[np.ndarray, np.ndarray]:
    fixed = []
    for w in np.frombuffer(frequencies, dtype=np.float64):
        ratio = Fraction(float(w))  # the float64 frequency, exactly
        turns = ratio.numerator * _two_pi_reciprocal_256() // ratio.denominator  # w / (2 pi) * 2**256
        fixed.append(((turns + (1 << 191)) >> 192) & ((1 << 64) - 1))  # frac(w / 2pi) * 2**64, rounded
    high = np.array([f >> 32 for f in fixed], dtype=np.uint32)
    low = np.array([f & 0xFFFFFFFF for f in fixed], dtype=np.uint32)
    high.flags.writeable = low.flags.writeable = False
    return high, low


def frequency_turns(frequencies: Any) -> tuple[np.ndarray, np.ndarray]:
    """The fractional turns ``frac(w / (2 pi))`` of each angular frequency ``w``, in 64-bit fixed point.

    Returns ``(high, low)``, two uint32 arrays: ``frac(w / 2pi) * 2**64 = high * 2**32 + low``,
    rounded to the nearest integer from the exact float64 ``w`` and ``1 / (2 pi)`` to 256 bits
    (integer arithmetic only). ``p * w / (2 pi) mod 1`` for an integer ``p`` is then a product of
    integers modulo ``2**64``: :func:`flax_posenc.sinusoidal.turn_cos_sin` computes it on device
    with uint32 arithmetic. The rounding of the fixed point costs at most ``|p| * 2**-65`` turns
    (3e-12 rad below ``2**24``).

    >>> high, low = frequency_turns(np.array([np.pi, 1.0]))
    >>> int(high[0]) * 2**32 + int(low[0]) - 2**63   # float64 pi is 1.22e-16 rad short of half a turn
    -360
    >>> round((int(high[1]) * 2**32 + int(low[1])) / 2**64, 12)   # 1 rad = 0.159154943092 turns
    0.159154943092
    """
    w = np.ascontiguousarray(np.asarray(frequencies, dtype=np.float64).reshape(-1))
    if not np.all(np.isfinite(w)):
        raise ValueError("frequencies: expected finite numbers")
    return _turn_words(w.tobytes())


__all__ = [
    "LAYOUTS",
    "ODD_DIMS",
    "arrange_sin_cos",
    "check_sinusoid_options",
    "frequency_turns",
    "round_once",
    "sinusoidal_frequencies",
    "sinusoidal_table_np",
    "sinusoidal_values",
]

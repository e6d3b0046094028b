"""Sinusoidal position encodings (Vaswani et al., 2017), exact to float32 at any position.

Two conventions are in wide use and both are offered:

- ``layout="interleaved"`` (the paper, the lesson, Hugging Face's DistilBERT):
  ``PE[p, 2i] = sin(p * w_i)``, ``PE[p, 2i + 1] = cos(p * w_i)``.
- ``layout="concatenated"`` (flax's examples, T5X/MaxText/praxis, tensor2tensor, fairseq,
  Marian): ``PE[p, :dim/2] = sin(p * w)``, ``PE[p, dim/2:] = cos(p * w)``.

and two frequency spacings, both geometric from ``w_0 = 1`` rad/position downwards:

- ``endpoint=False`` (the paper): ``w_i = base ** (-2i / dim)``, the slowest timescale just
  short of ``base``;
- ``endpoint=True`` (flax, T5X, MaxText, tensor2tensor, fairseq):
  ``w_i = base ** (-i / (dim/2 - 1))``, the slowest timescale exactly ``base``
  (``log_timescale_increment = log(max/min) / (num_timescales - 1)`` with ``min = 1``).

The wavelength of pair ``i`` is ``2 * pi / w_i`` positions.

Odd widths (``odd_dim``) and tensor2tensor/flax's ``min_timescale`` are options too; which
options reproduce which library is in ``docs/conventions.md``, each row tested.

Precision. :func:`sinusoidal_table` computes in float64 on the host and rounds once to the
requested dtype (the numpy math lives in :mod:`flax_posenc.sinusoid_math`, which imports no jax).
:func:`sinusoidal_encoding` runs on device, under ``jit``, for positions that are only known at
run time; it never forms a large angle. With a small limit (``num_positions * dim`` at most
:data:`TABLE_GATHER_ELEMENTS`, GPT-2's 1024 x 768 included) it gathers rows of that float64 table,
rounded once, as a learned table would. Otherwise (:func:`exact_cos_sin`) a position is split into
at most four digits of at most 8 bits, ``p = d0 + 256 d1 + 256**2 d2 + 256**3 d3`` (two's
complement, the top digit signed; fewer and narrower when a limit bounds the positions:
``p = d0 + 32 d1`` below 1024), the rotation ``exp(i * d_k 256**k w)`` of each digit is read
from a small table computed in float64 on the host, and the rotations are composed by angle
addition -- the lesson's hour hand and minute hand. Every float32 result is
within 2e-6 of the float64 value for ``|p| < 2**24`` at any ``dim`` (measured: about 3e-7), where
the naive float32 ``sin(p * w)`` is off by ~0.07 near ``2**20`` and by ~1 near ``2**24``.
No float64 is needed on device (TPUs have none).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from flax_posenc import overflow
from flax_posenc.sinusoid_math import (
    LAYOUTS,
    ODD_DIMS,
    Layout,
    OddDim,
    arrange_sin_cos,
    check_sinusoid_options,
    frequency_turns,
    round_once,
    sinusoidal_frequencies,
    sinusoidal_table_np,
    sinusoidal_values,
)

__all__ = [
    "HOST_CONSTANT_BYTES",
    "INT32_RANGE",
    "LAYOUTS",
    "TABLE_GATHER_ELEMENTS",
    "ODD_DIMS",
    "check_sinusoid_options",
    "digit_plan",
    "exact_cos_sin",
    "sinusoidal_encoding",
    "sinusoidal_frequencies",
    "sinusoidal_table",
    "turn_cos_sin",
    "turn_sin",
]

_DIGIT_BITS = 8
_DIGITS = 4  # 4 x 8 bits: every int32 position

#: :func:`sinusoidal_encoding` with a ``num_positions`` limit reads rows of the float64-exact
#: ``(num_positions, dim)`` table (a compile-time constant) when it has at most this many entries
#: (4 MiB of float32: GPT-2's 1024 x 768 is 0.75 Mi); larger ones use :func:`exact_cos_sin`, whose
#: compile time does not grow with the limit (``python benchmarks/investigations/sinusoid_paths.py``).
TABLE_GATHER_ELEMENTS = 2**20

#: known (static) positions whose encoding (RoPE: ``cos`` and ``sin``) takes at most this many
#: bytes are computed in float64 on the host and embedded in the program, rounded once; larger
#: ones are computed on device by :func:`turn_sin` from an iota (``overflow.known_positions``),
#: so the program's size and compile time do not grow with the sequence (docs/benchmarks.md,
#: "Program size and compile time at static positions").
HOST_CONSTANT_BYTES = 64 * 1024


def sinusoidal_table(
    length: int,
    dim: int,
    *,
    base: float = 10000.0,
    layout: Layout = "interleaved",
    endpoint: bool = False,
    start: int = 0,
    min_timescale: float = 1.0,
    odd_dim: OddDim | None = None,
    dtype: jax.typing.DTypeLike = jnp.float32,
) -> jax.Array:
    """The ``(length, dim)`` table of positions ``start .. start + length - 1``.

    Computed in float64 on the host and rounded once to ``dtype``: every entry is the
    correctly rounded value of ``sin``/``cos`` of the float64 angle. Under ``jit`` it is a
    compile-time constant of ``length * dim`` values, which grows the program with the length;
    :func:`sinusoidal_encoding` of ``np.arange(start, start + length)`` gives the same values
    within 1e-7 from a program whose size does not depend on the length, and takes positions
    known only at run time.

    Args:
      length: number of positions (rows), ``>= 0``.
      dim: encoding width: even, or odd with ``odd_dim``.
      base, layout, endpoint: the convention (see the module docstring).
      start: first position (an offset while decoding, say; fairseq's ``padding_idx + 1``).
      min_timescale: tensor2tensor's ``min_timescale`` / flax's ``min_scale`` (see
        :func:`sinusoidal_frequencies`); 1 everywhere else.
      odd_dim: an odd ``dim``'s last column: ``"zero"`` (fairseq, tensor2tensor, flax: ``dim // 2``
        pairs and a zero column at the end) or ``"sin"`` (DistilBERT, Marian, keras-hub:
        ``dim // 2 + 1`` sin and ``dim // 2`` cos columns, exponent ``2i / dim`` with the odd
        ``dim``). ``None`` (default) rejects an odd ``dim``.
      dtype: output dtype (float32, bfloat16, float16, float64 needs ``jax_enable_x64``).

    Returns:
      ``jax.Array`` of shape ``(length, dim)``.

    >>> import numpy as np
    >>> import flax_posenc as fp
    >>> np.round(np.asarray(fp.sinusoidal_table(3, 4)), 4)   # the lesson's 4-dimensional table
    array([[ 0.    ,  1.    ,  0.    ,  1.    ],
           [ 0.8415,  0.5403,  0.01  ,  1.    ],
           [ 0.9093, -0.4161,  0.02  ,  0.9998]], dtype=float32)
    """
    table = sinusoidal_table_np(
        length,
        dim,
        base=base,
        layout=layout,
        endpoint=endpoint,
        start=start,
        min_timescale=min_timescale,
        odd_dim=odd_dim,
        dtype=jnp.dtype(dtype),
    )
    return jnp.asarray(table)


#: the int32 range: what :func:`exact_cos_sin` covers when no narrower range is known.
INT32_RANGE: tuple[int, int] = (-(2**31), 2**31 - 1)


def digit_plan(lowest: int, highest: int) -> tuple[int, int]:
    """``(digits, bits)``: how :func:`exact_cos_sin` splits positions in ``lowest .. highest``.

    The fewest digits of at most 8 bits that hold every position (in two's complement when
    ``lowest < 0``: the top digit is then signed), the bits shared evenly among them:
    ``0 .. 1023`` -> 2 digits of 5 bits (two 32-row tables), ``0 .. 2**16 - 1`` -> 2 x 8,
    ``0 .. 2**24 - 1`` -> 3 x 8, the int32 range -> 4 x 8. Fewer digits mean fewer angle
    additions (less rounding) and smaller constants.

    >>> digit_plan(0, 1023), digit_plan(0, 1024), digit_plan(-1024, 1023), digit_plan(*INT32_RANGE)
    ((2, 5), (2, 6), (2, 6), (4, 8))
    """
    lowest, highest = int(lowest), int(highest)
    bits = max(highest.bit_length(), 1)
    if lowest < 0:  # two's complement: a sign bit above the widest magnitude
        bits = max((-lowest - 1).bit_length(), highest.bit_length()) + 1
    digits = -(-bits // _DIGIT_BITS)
    return digits, -(-bits // digits)


@functools.lru_cache(maxsize=64)
def _digit_rotations_for(
    frequencies: bytes, digits: int = _DIGITS, bits: int = _DIGIT_BITS, signed: bool = False
) -> np.ndarray:
    """``(digits, 2**bits, 2 * n)`` float32: ``[cos | sin]`` of ``d * 2**(bits k) * w``, float64-exact.

    ``frequencies`` is the raw bytes of a float64 array of ``n`` angular frequencies ``w`` (in
    radians per position), so any frequencies can be cached (sinusoids, RoPE, scaled RoPE).
    Row ``d`` of digit ``k`` is the digit value ``d``, except for the top digit when ``signed``:
    rows ``2**(bits-1) ..`` hold the negative values ``d - 2**bits`` (two's complement).
    ``d * 2**(bits k)`` is an exact integer in float64, so each angle carries a single float64
    rounding, and numpy's float64 ``sin``/``cos`` reduce large arguments correctly.
    """
    w = np.frombuffer(frequencies, dtype=np.float64)
    digit = np.broadcast_to(np.arange(1 << bits, dtype=np.float64), (digits, 1 << bits)).copy()
    if signed:
        digit[-1] = np.where(digit[-1] >= 1 << (bits - 1), digit[-1] - (1 << bits), digit[-1])
    place = np.float64(1 << bits) ** np.arange(digits)
    angles = (place[:, None, None] * digit[:, :, None]) * w  # (digits, 2**bits, n)
    table = np.concatenate([np.cos(angles), np.sin(angles)], axis=-1).astype(np.float32)
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=16)
def _limited_table(num_positions, dim, base, layout, endpoint, min_timescale, odd_dim, dtype_name) -> np.ndarray:
    """The read-only ``(num_positions, dim)`` table :func:`sinusoidal_encoding` gathers from."""
    options = dict(base=base, layout=layout, endpoint=endpoint, min_timescale=min_timescale, odd_dim=odd_dim)
    table = sinusoidal_table_np(num_positions, dim, dtype=jnp.dtype(dtype_name), **options)
    table.flags.writeable = False
    return table


def _rotate(a, b):
    """Compose two rotations given as ``(cos, sin)`` pairs: the angle-addition formulas."""
    (ca, sa), (cb, sb) = a, b
    return ca * cb - sa * sb, sa * cb + ca * sb


def exact_cos_sin(
    positions: jax.Array, frequencies: np.ndarray, *, bounds: tuple[int, int] = INT32_RANGE
) -> tuple[jax.Array, jax.Array]:
    """``cos(p * w)`` and ``sin(p * w)`` in float32 for integer ``p`` (traced or not), exactly.

    The exact-angle machinery of :func:`sinusoidal_encoding` and
    :func:`flax_posenc.rope.rotary_cos_sin`: ``p`` is split into at most four digits of at most
    8 bits (:func:`digit_plan`; two's complement, so a negative position has a negative top
    digit), the rotation of each digit is read from a float64-exact host table (one gather for
    all digits), and the rotations are composed by angle addition (one variadic reduction over
    the digits, which XLA compiles and runs faster than the unrolled products). For
    ``|p| < 2**24`` every result is within 2e-6 of the float64 value of ``cos``/``sin`` of the
    float64 angle ``p * w`` (measured: ~3e-7).

    Args:
      positions: integer array, any shape, every value inside ``bounds``.
      frequencies: host float64 array of ``n`` angular frequencies (radians per position).
      bounds: ``(lowest, highest)`` that the positions are known to lie in (default: the int32
        range). Narrower bounds (a table's ``0 .. num_positions - 1``, enforced by
        :func:`flax_posenc.overflow.guard_positions`) need fewer and smaller digit tables.
        Positions outside them are not checked here: their high bits are dropped (wrong values).

    Returns:
      ``(cos, sin)``, each float32 of shape ``positions.shape + (n,)``.

    >>> import numpy as np, jax.numpy as jnp
    >>> cos, sin = exact_cos_sin(jnp.array([0, 3]), np.array([1.0, 0.5]), bounds=(0, 3))
    >>> cos.shape, round(float(sin[1, 0]), 6)
    ((2, 2), 0.14112)
    """
    lowest, highest = int(bounds[0]), int(bounds[1])
    if not INT32_RANGE[0] <= lowest <= highest <= INT32_RANGE[1]:
        raise ValueError(
            f"bounds: expected (lowest, highest) inside the int32 range, lowest <= highest; got {bounds!r}"
        )
    digits, bits = digit_plan(lowest, highest)
    w = np.ascontiguousarray(np.asarray(frequencies, dtype=np.float64).reshape(-1))
    n = w.shape[0]
    rows = 1 << bits
    # one (digits * rows, 2n) constant and one gather for all digits: each gather is its own
    # loop for XLA, and compile time grows with their count (benchmarks/HISTORY.md)
    signed = lowest < 0
    table = jnp.asarray(_digit_rotations_for(w.tobytes(), digits, bits, signed).reshape(digits * rows, 2 * n))
    # digit k of the int32 two's complement: (p >> bits k) & mask; the arithmetic shift carries
    # the sign into the top digit, whose rows hold the negative values (no abs, no sign select)
    p = positions.astype(jnp.int32)
    lead = (digits,) + (1,) * p.ndim  # digits first: digit k's rotations are one contiguous block
    shifts = (np.arange(digits, dtype=np.int32) * np.int32(bits)).reshape(lead)
    first_row = (np.arange(digits, dtype=np.int32) * np.int32(rows)).reshape(lead)  # digit k: rows k * rows ..
    index = ((p[None] >> shifts) & np.int32(rows - 1)) + first_row
    rot = table.at[index].get(mode="promise_in_bounds")  # (digits, ..., 2n)
    # angle addition exp(i(a + b)) = exp(ia) exp(ib) over the digits, as one variadic reduction:
    # XLA compiles a reduction loop in a fraction of the time of the unrolled products
    # (benchmarks/investigations/exact_angles.py), and it runs no slower
    cos, sin = jax.lax.reduce((rot[..., :n], rot[..., n:]), (np.float32(1), np.float32(0)), _rotate, dimensions=(0,))
    return cos, sin


_RAD_PER_UNIT = 2 * np.pi / 2**32  # radians per 2**-32 turn, as float32 high and low parts
_RAD_HI = np.float32(_RAD_PER_UNIT)
_RAD_LO = np.float32(_RAD_PER_UNIT - float(_RAD_HI))


def turn_sin(
    positions: jax.Array,
    frequencies: np.ndarray,
    quarter_turns: np.ndarray | int = 0,
    *,
    bounds: tuple[int, int] = INT32_RANGE,
) -> jax.Array:
    """``sin(p * w + q * pi/2)`` in float32 for int32 ``p``, from the angle in fixed-point turns.

    Each column ``j`` has a frequency ``w_j`` and a whole number of quarter turns ``q_j``:
    ``q = 1`` gives ``cos(p * w)``, so a sinusoid or RoPE's ``[cos | sin]`` is one elementwise
    pass over its columns (one loop for XLA). Each frequency is held as ``frac(w / 2pi)`` in
    64-bit fixed point (:func:`~flax_posenc.sinusoid_math.frequency_turns`, computed on the host
    from the float64 ``w``); ``p * w / 2pi mod 1`` is then an integer product, computed in uint32
    arithmetic to a few units of ``2**-32`` turn (two's complement ``p``: a negative ``p``
    subtracts the fraction ``2**32`` times). Its top two bits pick the quadrant; the rest, reflected
    in odd quadrants, is a float32 angle in ``[0, pi/2]`` (one rounding) whose ``sin`` (XLA's)
    is signed by the quadrant. No table, no gather: the program holds three uint32 words per
    column, whatever the positions; the values are materialized by a two-lane reduction (a lane of zeros)
    so that consumers that broadcast them do not recompute them. Every result is within 1e-7 of the
    float64 value of ``sin`` of the float64 angle for ``|p| < 2**24`` (measured: 6.3e-8; the
    digits of :func:`exact_cos_sin` give 1.9e-7); above that float64's own rounding of ``p * w``
    dominates the difference (1.5e-7 on random int32 positions).

    Args:
      positions: integer array, any shape, values in the int32 range.
      frequencies: host float64 array of ``n`` angular frequencies (radians per position).
      quarter_turns: host integers, broadcast against ``frequencies``.
      bounds: ``(lowest, highest)`` that the positions are known to lie in (default: the int32
        range). Known non-negative positions drop the negative-position correction, and
        positions below ``2**16`` the products of their (zero) high half: the same values from
        fewer operations, which XLA compiles faster. Positions outside the bounds are not
        checked here: they get wrong values.

    Returns:
      float32 of shape ``positions.shape + (n,)``.

    >>> import numpy as np, jax.numpy as jnp
    >>> [round(float(v), 6) for v in turn_sin(jnp.array([3, -3, 3]), np.array([1.0]))[:, 0]]
    [0.14112, -0.14112, 0.14112]
    >>> round(float(turn_sin(jnp.array([3]), np.array([0.5]), 1, bounds=(0, 3))[0, 0]), 6)   # cos(1.5)
    0.070737
    """
    lowest, highest = int(bounds[0]), int(bounds[1])
    if not INT32_RANGE[0] <= lowest <= highest <= INT32_RANGE[1]:
        raise ValueError(
            f"bounds: expected (lowest, highest) inside the int32 range, lowest <= highest; got {bounds!r}"
        )
    w = np.asarray(frequencies, dtype=np.float64).reshape(-1)
    quarters = np.broadcast_to(np.asarray(quarter_turns, dtype=np.int64), w.shape) % 4
    high, low = frequency_turns(w)
    p = jnp.asarray(positions)
    shape = (*p.shape, w.shape[0])
    last = (p.ndim,)

    def columns(c):  # an (n,) host uint32 constant, broadcast over the positions
        return lax.broadcast_in_dim(np.ascontiguousarray(c, dtype=np.uint32), shape, last)

    # lax operations throughout: jnp's operators each cost a dispatch while tracing (half of the
    # compile time of a short encoding), and every operation here is one more for XLA to compile
    # (issue 38: compile time <= 1.5x the naive float32 form)
    u = lax.broadcast_in_dim(lax.bitcast_convert_type(p.astype(jnp.int32), jnp.uint32), shape, tuple(range(p.ndim)))
    # frac(p w / 2pi) * 2**32 = u * high + (u * low) // 2**32 (mod 2**32); the high half of the
    # 64-bit u * low from 16-bit halves, without the low halves' product and carries (under 3 units
    # of 2**-32 turn, 4.4e-9 rad); a negative p is u - 2**32: less low
    sixteen = np.uint32(16)
    l1 = columns(low >> np.uint32(16))
    if 0 <= lowest and highest < 1 << 16:  # u's high half u1 is 0: its two products are 0
        top = lax.add(lax.mul(u, columns(high)), lax.shift_right_logical(lax.mul(u, l1), sixteen))
    else:
        u0, u1 = lax.bitwise_and(u, np.uint32(0xFFFF)), lax.shift_right_logical(u, sixteen)
        l0 = columns(low & np.uint32(0xFFFF))
        cross = lax.add(
            lax.shift_right_logical(lax.mul(u1, l0), sixteen), lax.shift_right_logical(lax.mul(u0, l1), sixteen)
        )
        top = lax.add(lax.mul(u, columns(high)), lax.add(lax.mul(u1, l1), cross))
    if lowest < 0:  # the two's complement correction; 0 for non-negative positions
        sign_mask = lax.bitcast_convert_type(
            lax.shift_right_arithmetic(lax.bitcast_convert_type(u, jnp.int32), np.int32(31)), jnp.uint32
        )
        top = lax.sub(top, lax.bitwise_and(columns(low), sign_mask))
    # q: the turn (plus the phase) in 2**-32 units; its top two bits are the quadrant, the other 30
    # the angle r into it, reflected (2**30 - r) in quadrants 1 and 3, so that the result is
    # sin(+-x) for a float32 x in [0, pi/2]: sin(k pi/2 + y) is sin y, cos y = sin(pi/2 - y), -sin y, -cos y
    phase = (quarters.astype(np.uint32) << np.uint32(30)).astype(np.uint32)
    q = lax.add(top, columns(phase)) if phase.any() else top
    r = lax.bitwise_and(q, np.uint32(0x3FFFFFFF))
    odd = lax.ne(lax.bitwise_and(q, np.uint32(1 << 30)), np.uint32(0))
    r = lax.bitcast_convert_type(lax.select(odd, lax.sub(np.uint32(1 << 30), r), r), jnp.int32)
    coarse = lax.convert_element_type(r, jnp.float32)  # r <= 2**30: rounded to 24 bits
    fine = lax.convert_element_type(lax.sub(r, lax.convert_element_type(coarse, jnp.int32)), jnp.float32)
    # radians in [0, pi/2], one rounding; sin of it is XLA's own (cheap to compile, ~3e-8 there)
    x = lax.add(lax.mul(coarse, _RAD_HI), lax.add(lax.mul(coarse, _RAD_LO), lax.mul(fine, _RAD_HI)))
    sign = lax.bitwise_and(q, np.uint32(1 << 31))  # quadrants 2 and 3: negative
    bits = lax.bitwise_xor(lax.bitcast_convert_type(lax.sin(x), jnp.uint32), sign)
    # materialized once: a reduction over two lanes, the values and a lane of zeros, or-ed together.
    # XLA does not fuse a reduction into its consumers, so the values are computed once and read
    # from memory, not computed again for every head, half or batch row that reads them (without
    # it a RoPE prefill with 16 heads ran 4-5x slower; an optimization barrier does not do it: XLA
    # CPU removes barriers before fusion). A bitwise or, not a float add: XLA CPU hands float sums
    # to its YNNPACK fusion; this stays an XLA loop. The zero lane is padded onto the result (the
    # values are computed once, not once more on zero frequencies as until issue 38)
    lanes = lax.pad(bits[..., None, :], np.uint32(0), ((0, 0, 0),) * p.ndim + ((0, 1, 0), (0, 0, 0)))
    return lax.bitcast_convert_type(lax.reduce(lanes, np.uint32(0), lax.bitwise_or, (p.ndim,)), jnp.float32)


def turn_cos_sin(
    positions: jax.Array, frequencies: np.ndarray, *, bounds: tuple[int, int] = INT32_RANGE
) -> tuple[jax.Array, jax.Array]:
    """``(cos(p * w), sin(p * w))`` in float32 from :func:`turn_sin` (``cos`` is a quarter turn
    ahead; ``bounds`` as there): the static-position path of
    :func:`flax_posenc.rope.rotary_cos_sin` (traced positions use :func:`exact_cos_sin`).

    >>> import numpy as np, jax.numpy as jnp
    >>> cos, sin = turn_cos_sin(jnp.array([0, 3]), np.array([1.0, 0.5]))
    >>> cos.shape, round(float(sin[1, 0]), 6), round(float(cos[1, 1]), 6)
    ((2, 2), 0.14112, 0.070737)
    """
    return turn_sin(positions, frequencies, 1, bounds=bounds), turn_sin(positions, frequencies, 0, bounds=bounds)


def sinusoidal_encoding(
    positions: jax.typing.ArrayLike,
    dim: int,
    *,
    base: float = 10000.0,
    layout: Layout = "interleaved",
    endpoint: bool = False,
    min_timescale: float = 1.0,
    odd_dim: OddDim | None = None,
    dtype: jax.typing.DTypeLike = jnp.float32,
    num_positions: int | None = None,
    on_overflow: overflow.OverflowPolicy = "error",
    name: str = "sinusoidal encoding",
) -> jax.Array:
    """Encode integer ``positions`` of any shape; works on traced values under ``jit``.

    Exact-angle arithmetic: results are within 2e-6 of the float64 value (then rounded once to
    ``dtype``) for every ``|position| < 2**24``, and within ~1e-6 up to ``2**31``. Negative
    positions are allowed (``sin`` is odd, ``cos`` even): relative offsets encode as well. With
    a ``num_positions`` limit whose table has at most :data:`TABLE_GATHER_ELEMENTS` entries the
    rows are gathered from that table (a compile-time constant): each value is then the float64
    value rounded once to ``dtype``, the same bits as :func:`sinusoidal_table`. Known (not
    traced) positions are checked while tracing; an encoding of at most
    :data:`HOST_CONSTANT_BYTES` is then the float64 value rounded once (a constant), a larger one
    comes from :func:`turn_sin` (within 1e-7 of float64 below ``2**24``) on an iota when the
    positions form runs, so the program does not grow with them.

    Args:
      positions: integer array, any shape and integer dtype (offsets while decoding, packed
        sequences, ...); values must lie in the int32 range (checked before any cast).
      dim: encoding width: even, or odd with ``odd_dim``.
      base, layout, endpoint, min_timescale, odd_dim: the convention (see
        :func:`sinusoidal_table`).
      dtype: output dtype; computed in float32 and rounded once at the end.
      num_positions: an optional limit: positions must lie in ``0 .. num_positions - 1``.
      on_overflow: the policy for traced positions outside the limit (``"error"``, ``"clip"``,
        ``"fill"``; see :mod:`flax_posenc.overflow`); known positions outside it always raise.
      name: the encoding's name in error messages.

    Returns:
      Array of shape ``positions.shape + (dim,)``.

    Raises:
      TypeError: ``positions`` is not an integer array.
      PositionLimitError: known positions outside the limit (or the int32 range).

    >>> import jax, jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> enc = jax.jit(lambda p: fp.sinusoidal_encoding(p, 4))(jnp.array([[0, 1], [2, 3]]))
    >>> enc.shape
    (2, 2, 4)
    >>> fp.sinusoidal_encoding(jnp.array([8]), 4, num_positions=8)
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: sinusoidal encoding holds 8 positions (0..7); asked for position 8, 1 past the end
    """
    check_sinusoid_options(dim, base, layout, odd_dim, min_timescale)
    if num_positions is None:
        limit = overflow.Limit(2**31, name=f"{name} (int32 positions)", signed=True)
    else:
        limit = overflow.Limit(int(num_positions), name=name)
    host = None if overflow.is_traced(positions) else np.asarray(positions)
    positions, invalid = overflow.guard_positions(positions, limit, on_overflow)
    if host is not None:  # known positions, checked while tracing
        return _known_encoding(host, positions, dim, base, layout, endpoint, min_timescale, odd_dim, dtype)
    if num_positions is not None and int(num_positions) * dim <= TABLE_GATHER_ELEMENTS:
        # a small table: gather its rows (positions are inside it now), like a learned table
        options = (float(base), layout, bool(endpoint), float(min_timescale), odd_dim, jnp.dtype(dtype).name)
        table = jnp.asarray(_limited_table(int(num_positions), dim, *options))
        return overflow.fill_invalid(table.at[positions].get(mode="promise_in_bounds"), invalid)
    w = sinusoidal_frequencies(
        dim, base=float(base), endpoint=bool(endpoint), min_timescale=float(min_timescale), odd_dim=odd_dim
    )
    cos, sin = exact_cos_sin(positions, w, bounds=(limit.lowest, limit.highest))  # the guard's range
    return overflow.fill_invalid(arrange_sin_cos(sin, cos, layout, dim, xp=jnp).astype(dtype), invalid)


def _known_encoding(host, positions, dim, base, layout, endpoint, min_timescale, odd_dim, dtype) -> jax.Array:
    """Known positions: float64 on the host, rounded once, when the result is at most
    :data:`HOST_CONSTANT_BYTES`; otherwise :func:`turn_sin` over the columns on the guard's int32 positions
    (an iota for runs), so the program does not grow with the positions."""
    options = dict(base=float(base), endpoint=bool(endpoint), min_timescale=float(min_timescale), odd_dim=odd_dim)
    if host.size * dim * jnp.dtype(dtype).itemsize <= HOST_CONSTANT_BYTES:
        return jnp.asarray(round_once(sinusoidal_values(host, dim, layout=layout, **options), jnp.dtype(dtype)))
    w = sinusoidal_frequencies(dim, **options)  # each column: sin of w (0 quarter turns) or cos (1)
    columns = arrange_sin_cos(w, w, layout, dim)  # the zero column of odd_dim="zero": sin(0 p) = 0
    quarters = arrange_sin_cos(np.zeros(w.shape, np.int64), np.ones(w.shape, np.int64), layout, dim)
    bounds = (int(host.min()), int(host.max()))  # known: the program drops what they do not need
    return turn_sin(positions, columns, quarters, bounds=bounds).astype(dtype)

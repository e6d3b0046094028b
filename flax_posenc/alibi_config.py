"""ALiBi as data: the validated config record and its float64 slopes (numpy only).

:class:`AlibiConfig` (head count, ``max_bias``, an optional configured limit) and
:func:`alibi_slopes`, Press et al.'s per-head slopes for any head count (BLOOM's recipe, equal to
MPT's with ``max_bias=8``). Shared by :mod:`flax_posenc.alibi` (the bias on device) and the
checkpoint reader :mod:`flax_posenc.conversion.relative_config`; it imports no jax.

ALiBi itself has no length limit; a configured one (MPT's ``max_seq_len``) is kept as
:attr:`AlibiConfig.max_positions`.

>>> cfg = AlibiConfig(num_heads=4)
>>> alibi_slopes(cfg.num_heads).tolist(), cfg.limit
([0.25, 0.0625, 0.015625, 0.00390625], None)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from flax_posenc.bounds import MAX_HEADS, MAX_POSITIONS, check_bound


def _is_positive_int(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, np.integer)) and bool(x >= 1)


@dataclasses.dataclass(frozen=True)
class AlibiConfig:
    """Attention with linear biases (Press et al., 2022): one slope per head; frozen and hashable.

    Attributes:
      num_heads: attention heads (any positive count; non-powers of two per the paper's recipe).
      max_bias: the slopes are ``2 ** (-max_bias * k / n)``; 8 in the paper, BLOOM and MPT
        (MPT's ``alibi_bias_max``).
      max_positions: a configured limit (MPT's ``max_seq_len``), or ``None``: ALiBi itself has none.

    Raises:
      ValueError: one line naming the field (a head count < 1 or above
        :data:`~flax_posenc.bounds.MAX_HEADS`, ``max_bias <= 0``, ...).

    >>> AlibiConfig(num_heads=8, max_positions=2048).limit
    2048
    >>> AlibiConfig(num_heads=0)
    Traceback (most recent call last):
    ...
    ValueError: num_heads: expected a positive integer, got 0
    """

    num_heads: int
    max_bias: float = 8.0
    max_positions: int | None = None

    def __post_init__(self):
        if not _is_positive_int(self.num_heads):
            raise ValueError(f"num_heads: expected a positive integer, got {self.num_heads!r}")
        check_bound("num_heads", int(self.num_heads), MAX_HEADS, "ALiBi heads (one slope each)")
        b = self.max_bias
        if isinstance(b, bool) or not isinstance(b, (int, float, np.number)) or not math.isfinite(b) or b <= 0:
            raise ValueError(f"max_bias: expected a finite number > 0, got {b!r}")
        if self.max_positions is not None and not _is_positive_int(self.max_positions):
            raise ValueError(f"max_positions: expected a positive integer or None, got {self.max_positions!r}")
        if self.max_positions is not None:
            check_bound("max_positions", int(self.max_positions), MAX_POSITIONS, "positions")

    @classmethod
    def coerce(cls, config: AlibiConfig | int) -> AlibiConfig:
        """``config`` itself, or ``AlibiConfig(num_heads=config)`` for a head count.

        What every ALiBi function and module accepts as ``config``.

        Raises:
          TypeError: neither an :class:`AlibiConfig` nor an integer.

        >>> AlibiConfig.coerce(12).num_heads
        12
        >>> AlibiConfig.coerce("12")
        Traceback (most recent call last):
        ...
        TypeError: config: expected an AlibiConfig or a head count (int), got str
        """
        if isinstance(config, cls):
            return config
        if isinstance(config, (int, np.integer)) and not isinstance(config, bool):
            return cls(num_heads=int(config))
        raise TypeError(f"config: expected an AlibiConfig or a head count (int), got {type(config).__name__}")

    @property
    def limit(self) -> int | None:
        """Usable positions ``0 .. limit - 1``: :attr:`max_positions` (``None``: no limit).

        >>> AlibiConfig(4).limit is None
        True
        """
        return self.max_positions

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields plus ``limit`` and the float64 ``slopes``.

        >>> AlibiConfig(2).to_dict()
        {'num_heads': 2, 'max_bias': 8.0, 'max_positions': None, 'limit': None, 'slopes': [0.0625, 0.00390625]}
        """
        return {
            **dataclasses.asdict(self),
            "limit": self.limit,
            "slopes": alibi_slopes(self.num_heads, max_bias=self.max_bias).tolist(),
        }


def alibi_slopes(num_heads: int, *, max_bias: float = 8.0) -> np.ndarray:
    """Per-head ALiBi slopes in float64, shape ``(num_heads,)``.

    For ``n`` a power of two: ``2 ** (-max_bias * k / n)`` for ``k = 1 .. n`` (the geometric
    sequence starting at ``2 ** (-8 / n)``). Otherwise the paper's recipe, as BLOOM and MPT
    build it: the slopes of the closest lower power of two ``c``, then every other slope of
    ``2c`` (the odd ``k``) until there are ``n``.

    Raises:
      ValueError: as :class:`AlibiConfig` (``num_heads < 1``, ``max_bias <= 0``).

    >>> alibi_slopes(8).tolist()
    [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
    >>> [round(x, 4) for x in alibi_slopes(6).tolist()]
    [0.25, 0.0625, 0.0156, 0.0039, 0.5, 0.125]
    """
    AlibiConfig(num_heads, max_bias)  # validates
    n2 = 1 << (int(num_heads) - 1).bit_length()  # 2 ** ceil(log2 n)
    slopes = 2.0 ** (-float(max_bias) * np.arange(1, n2 + 1, dtype=np.float64) / n2)
    if n2 != num_heads:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:num_heads]
    return slopes


__all__ = ["AlibiConfig", "alibi_slopes"]

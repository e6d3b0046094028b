"""T5-style relative position buckets as data: a validated record and its host math (numpy only).

T5 (Raffel et al. 2020), mT5, UMT5, LongT5 and MPNet add a *learned* scalar per head to every
attention logit, looked up by the *bucket* of the relative position ``key - query``:

- bidirectional (encoders): half of the ``num_buckets`` buckets are for keys after the query
  (``relative_position > 0``), half for the rest; causal (T5 decoders): all buckets are for
  ``relative_position <= 0`` and keys after the query land in bucket 0 (they are masked anyway).
- Within a direction of ``B`` buckets (``B = num_buckets // 2`` bidirectional, else
  ``num_buckets``), distances ``0 .. B//2 - 1`` each get their own bucket ("exact"); larger
  distances ``n`` get ``B//2 + floor(log(n / (B//2)) / log(max_distance / (B//2)) * (B - B//2))``,
  capped at ``B - 1``: logarithmically wider bins. Every distance from the first distance of the
  last bucket on is indistinguishable -- the limit of this encoding. It is *below*
  ``max_distance``: T5's defaults (32 buckets, max_distance 128) resolve distances 0..7 exactly
  and put every distance >= 91 (encoder; >= 113 causal) in one bucket.

Hugging Face computes the log bucket in float32 (``torch.log(n.float() / max_exact) /
math.log(max_distance / max_exact) * (B - max_exact)``, truncated to an integer). Where the exact
value is an integer, float32 rounding may land on either side of it. :class:`BucketConfig`
reproduces the float32 pipeline, so its buckets equal transformers' for every integer: it finds
once, on the host, the first distance of each log bucket (:meth:`BucketConfig.log_edges`); a
device then needs only integer comparisons. :meth:`BucketConfig.exact_buckets` gives the
exact-arithmetic answer for comparison. The two agree for T5's configurations (32 or 128 buckets,
max_distance 128 or 256, both directions); a scan of 32/64/128 buckets and every max_distance up
to 1024 finds them apart only at max_distance 939 with 32 buckets per direction, where distance
728 is bucket 31 in float32 (and in transformers) but 30 in exact arithmetic
(``benchmarks/relative_bias_parity.py`` runs that scan).

>>> cfg = BucketConfig(num_buckets=32, max_distance=128, bidirectional=True)
>>> cfg.max_exact, cfg.exact_limit, cfg.saturation_distance
(8, 7, 91)
>>> cfg.buckets(np.array([-200, -91, -90, -1, 0, 1, 7, 8, 200])).tolist()
[15, 15, 14, 1, 0, 17, 23, 24, 31]
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np

from flax_posenc.bounds import MAX_BUCKETS, MAX_DISTANCE, MAX_HEADS, check_bound

#: T5's (and MPNet's) defaults.
DEFAULT_NUM_BUCKETS = 32
DEFAULT_MAX_DISTANCE = 128


@functools.lru_cache(maxsize=64)
def _log_edges(per_direction: int, max_distance: int) -> tuple[int, ...]:
    """First distance of each log bucket ``max_exact + 1 .. per_direction - 1`` (float32 pipeline)."""
    max_exact = per_direction // 2
    n = np.arange(max_exact, max_distance + 2, dtype=np.int64)
    # transformers: torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (B - max_exact)
    # every step in float32 (a Python scalar meets a float32 tensor as float32); log correctly rounded.
    ratio = n.astype(np.float32) / np.float32(max_exact)
    log = np.log(ratio.astype(np.float64)).astype(np.float32)
    scaled = (log / np.float32(math.log(max_distance / max_exact))) * np.float32(per_direction - max_exact)
    bucket = np.minimum(max_exact + np.trunc(scaled).astype(np.int64), per_direction - 1)
    if np.any(np.diff(bucket) < 0) or bucket[-1] != per_direction - 1:  # pragma: no cover - math guard
        raise AssertionError("relative position buckets are not monotone in the distance")
    # monotone: the first distance of bucket b is found by bisection (one pass, not one per bucket)
    first = np.searchsorted(bucket, np.arange(max_exact + 1, per_direction), side="left")
    return tuple(int(d) for d in n[first])


@dataclasses.dataclass(frozen=True)
class BucketConfig:
    """How relative positions map to ``num_buckets`` buckets (T5's ``_relative_position_bucket``).

    Attributes:
      num_buckets: buckets in all (rows of the bias table that are used); T5 and MPNet: 32.
      max_distance: distance at which the log bins would reach the last bucket; T5/MPNet: 128.
      bidirectional: encoder (both directions) or causal decoder (only ``key <= query``).

    Raises:
      ValueError: ``num_buckets`` above :data:`~flax_posenc.bounds.MAX_BUCKETS` or ``max_distance``
        above :data:`~flax_posenc.bounds.MAX_DISTANCE`, ``num_buckets`` leaves fewer than 2 buckets per direction, or
        ``max_distance <= max_exact`` (no room for the log bins).

    T5's defaults: distances 0..7 get a bucket each, the sign adds 16, and every distance from 91
    on shares the last bucket of its direction:

    >>> cfg = BucketConfig()
    >>> cfg.buckets([-1, 0, 1, 200]).tolist(), cfg.saturation_distance
    ([1, 0, 17, 31], 91)
    """

    num_buckets: int = DEFAULT_NUM_BUCKETS
    max_distance: int = DEFAULT_MAX_DISTANCE
    bidirectional: bool = True

    def __post_init__(self):
        for name in ("num_buckets", "max_distance"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise ValueError(f"BucketConfig: expected an integer {name}, found {value!r}")
            bound = MAX_BUCKETS if name == "num_buckets" else MAX_DISTANCE
            try:
                check_bound(name, int(value), bound, "(checked before the bucket edges are computed)")
            except ValueError as e:
                raise ValueError(f"BucketConfig: {e}") from None
        if self.per_direction < 2:
            least = 4 if self.bidirectional else 2
            raise ValueError(
                f"BucketConfig: expected num_buckets >= {least} "
                f"({'bidirectional' if self.bidirectional else 'causal'}), found {self.num_buckets}"
            )
        if self.max_distance <= self.max_exact:
            raise ValueError(
                f"BucketConfig: expected max_distance > {self.max_exact} (the exact buckets), found {self.max_distance}"
            )

    @property
    def per_direction(self) -> int:
        """Buckets for one direction: ``num_buckets // 2`` bidirectional, else ``num_buckets``."""
        return self.num_buckets // 2 if self.bidirectional else self.num_buckets

    @property
    def max_exact(self) -> int:
        """Distances ``0 .. max_exact - 1`` get one bucket each (``per_direction // 2``)."""
        return self.per_direction // 2

    def log_edges(self) -> np.ndarray:
        """``(per_direction - max_exact - 1,)`` int64: the first distance of each log bucket after the first.

        The bucket of a distance ``n >= max_exact`` is ``max_exact + count(edges <= n)``.
        """
        return np.asarray(_log_edges(self.per_direction, self.max_distance), dtype=np.int64)

    @property
    def saturation_distance(self) -> int:
        """The first distance of the last bucket: every larger distance is indistinguishable from it."""
        edges = self.log_edges()
        return int(edges[-1]) if edges.size else self.max_exact

    def _distance_buckets(self) -> np.ndarray:
        """Buckets of distances ``0 .. saturation_distance`` in the keys-before-the-query direction."""
        return self.buckets(-np.arange(self.saturation_distance + 1))

    @property
    def exact_limit(self) -> int:
        """The largest ``d`` such that distances ``0..d`` each have a bucket of their own."""
        b = self._distance_buckets()
        shared = np.nonzero(b[1:] == b[:-1])[0]
        return int(shared[0]) - 1 if shared.size else self.saturation_distance

    def bucket_ranges(self) -> list[tuple[int, int, int | None]]:
        """``(bucket, first distance, last distance or None)`` of every bucket used, for the direction
        of keys before the query (``None``: open-ended). Bidirectional: bucket ``per_direction + b``
        holds keys *after* the query at the same distances. With many buckets and a small
        ``max_distance`` some log buckets hold no integer distance (causal 128/128: bucket 67) and
        are not listed.
        """
        b = self._distance_buckets()
        used, first = np.unique(b, return_index=True)
        last = [int(f) - 1 for f in first[1:]] + [None]
        return [(int(u), int(f), end) for u, f, end in zip(used, first, last)]

    def buckets(self, relative_position: Any) -> np.ndarray:
        """Bucket of each ``relative_position = key - query`` (numpy, any integer shape) -> int64."""
        rp = np.asarray(relative_position)
        if not np.issubdtype(rp.dtype, np.integer):
            raise ValueError(f"buckets: expected integer relative positions, found dtype {rp.dtype}")
        rp = rp.astype(np.int64)
        if self.bidirectional:
            base = np.where(rp > 0, self.per_direction, 0)
            n = np.abs(rp)
        else:
            base = np.zeros_like(rp)
            n = np.maximum(-rp, 0)
        large = self.max_exact + np.searchsorted(self.log_edges(), n, side="right")
        return base + np.where(n < self.max_exact, n, large)

    def exact_buckets(self, relative_position: Any) -> np.ndarray:
        """:meth:`buckets` in exact arithmetic (integer comparisons, no rounding) -- for comparison.

        ``floor(log(n/e)/log(m/e) * H) >= k``  <=>  ``n**H * e**k >= m**k * e**H`` (``e = max_exact``,
        ``m = max_distance``, ``H = per_direction - e``), decided with Python integers.
        """
        rp = np.asarray(relative_position).astype(np.int64)
        e, m, h = self.max_exact, self.max_distance, self.per_direction - self.max_exact
        edges = []
        for k in range(1, h):
            lo, hi = e, m  # smallest n with n**h * e**k >= m**k * e**h; it is <= m
            while lo < hi:
                mid = (lo + hi) // 2
                if mid**h * e**k >= m**k * e**h:
                    hi = mid
                else:
                    lo = mid + 1
            edges.append(lo)
        if self.bidirectional:
            base, n = np.where(rp > 0, self.per_direction, 0), np.abs(rp)
        else:
            base, n = np.zeros_like(rp), np.maximum(-rp, 0)
        large = e + np.searchsorted(np.asarray(edges, np.int64), n, side="right")
        return base + np.where(n < e, n, large)

    def beyond(self, length: int) -> dict[str, Any]:
        """How much of a sequence of ``length`` tokens lies past :attr:`saturation_distance`.

        Returns ``distances`` (how many of the distances ``0..length-1`` share the last bucket) and
        ``pair_fraction`` (the fraction of attended (query, key) pairs -- all ``length**2``
        bidirectional, the ``length*(length+1)/2`` with ``key <= query`` causal -- at such a distance).
        """
        s = self.saturation_distance
        far = max(0, length - s)  # distances s..length-1
        pairs_far = far * (far + 1) // 2  # pairs (q, k) with q - k >= s, one direction
        if self.bidirectional:
            total, far_pairs = length * length, 2 * pairs_far
        else:
            total, far_pairs = length * (length + 1) // 2, pairs_far
        return {"distances": far, "pair_fraction": far_pairs / total if total else 0.0}

    def describe(self) -> str:
        """One line: buckets, exact range, saturation."""
        kind = "bidirectional" if self.bidirectional else "causal"
        return (
            f"{self.num_buckets} buckets ({kind}, {self.per_direction} per direction), "
            f"distances 0..{self.exact_limit} exact, every distance >= {self.saturation_distance} in one bucket "
            f"(max_distance {self.max_distance})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_buckets": self.num_buckets,
            "max_distance": self.max_distance,
            "bidirectional": self.bidirectional,
            "per_direction": self.per_direction,
            "max_exact": self.max_exact,
            "exact_limit": self.exact_limit,
            "saturation_distance": self.saturation_distance,
        }


@dataclasses.dataclass(frozen=True)
class RelativeBiasSpec:
    """What a T5-style relative position bias module holds: heads, buckets and table rows (static, hashable).

    The spec of :class:`flax_posenc.nnx.RelativePositionBias` and its Linen twin; the table is
    ``(num_rows, num_heads)``.

    Attributes:
      num_heads: attention heads (columns of the table), ``1 ..`` :data:`~flax_posenc.bounds.MAX_HEADS`.
      buckets: the :class:`BucketConfig` (T5/MPNet: 32 buckets, max_distance 128).
      num_rows: table rows, at least ``buckets.num_buckets`` (an MPNet config asking for 64
        rows uses 32 buckets); ``None`` (the default) means ``buckets.num_buckets`` and is stored so.

    Raises:
      ValueError: one line naming the field, what was expected and what was found.

    >>> spec = RelativeBiasSpec(8, BucketConfig(32, 128, bidirectional=False))
    >>> spec.num_rows, spec.table_shape
    (32, (32, 8))
    >>> RelativeBiasSpec(8, BucketConfig(), num_rows=16)
    Traceback (most recent call last):
    ...
    ValueError: RelativeBiasSpec: expected num_rows >= num_buckets (32), found 16
    """

    num_heads: int
    buckets: BucketConfig = BucketConfig()
    num_rows: int | None = None

    def __post_init__(self):
        heads = self.num_heads
        if not isinstance(heads, (int, np.integer)) or isinstance(heads, bool) or heads < 1:
            raise ValueError(f"RelativeBiasSpec: expected a positive integer num_heads, found {heads!r}")
        try:
            check_bound("num_heads", int(heads), MAX_HEADS)
        except ValueError as e:
            raise ValueError(f"RelativeBiasSpec: {e}") from None
        if not isinstance(self.buckets, BucketConfig):
            raise ValueError(f"RelativeBiasSpec: expected buckets a BucketConfig, found {type(self.buckets).__name__}")
        rows = self.buckets.num_buckets if self.num_rows is None else self.num_rows
        if not isinstance(rows, (int, np.integer)) or isinstance(rows, bool):
            raise ValueError(f"RelativeBiasSpec: expected an integer num_rows or None, found {rows!r}")
        if rows < self.buckets.num_buckets:
            raise ValueError(
                f"RelativeBiasSpec: expected num_rows >= num_buckets ({self.buckets.num_buckets}), found {rows}"
            )
        try:
            check_bound("num_rows", int(rows), MAX_BUCKETS)
        except ValueError as e:
            raise ValueError(f"RelativeBiasSpec: {e}") from None
        object.__setattr__(self, "num_heads", int(heads))
        object.__setattr__(self, "num_rows", int(rows))

    @classmethod
    def from_arguments(
        cls,
        num_heads: int,
        *,
        num_buckets: int = DEFAULT_NUM_BUCKETS,
        max_distance: int = DEFAULT_MAX_DISTANCE,
        bidirectional: bool = True,
        num_rows: int | None = None,
    ) -> RelativeBiasSpec:
        """The spec from the modules' flat arguments.

        >>> RelativeBiasSpec.from_arguments(8, num_buckets=32) == RelativeBiasSpec(8, BucketConfig(32))
        True
        """
        return cls(num_heads, BucketConfig(num_buckets, max_distance, bidirectional), num_rows)

    @property
    def table_shape(self) -> tuple[int, int]:
        """``(num_rows, num_heads)``: the shape of the bias table."""
        return (int(self.num_rows or 0), self.num_heads)


__all__ = ["BucketConfig", "DEFAULT_MAX_DISTANCE", "DEFAULT_NUM_BUCKETS", "RelativeBiasSpec"]

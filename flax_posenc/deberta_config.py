"""DeBERTa's relative positions as data: a validated record and its host math (numpy only).

DeBERTa (He et al. 2021) and DeBERTa-v2/v3 attend with *disentangled* attention: besides
content-to-content scores, every query-key pair ``(i, j)`` gets content-to-position and
position-to-content scores read from a learned table of ``2 * span`` relative embeddings, at row
``clamp(r + span, 0, 2 * span - 1)`` where ``r`` is the relative position ``i - j`` (query minus
key: the opposite sign of T5's ``key - query``). Hugging Face's ``build_relative_position`` makes
``r``; with DeBERTa-v2's ``position_buckets > 0`` it is first put through
``make_log_bucket_position``: with ``mid = position_buckets // 2``,

- ``|i - j| <= mid``: ``r = i - j`` (each distance its own row);
- farther: ``r = sign(i - j) * (mid + ceil(log(|i - j| / mid) / log((M - 1) / mid) * (mid - 1)))``
  with ``M = max_relative_positions`` -- logarithmically wider bins. ``|r|`` reaches
  ``position_buckets - 1`` at distance ``M - 1`` and keeps growing past it (there is no cap);
  the attention's clamp then sends every ``r >= span`` to the last row and every ``r < -span``
  to the first.

The config fields mirror transformers' ``DebertaConfig`` / ``DebertaV2Config``:

- ``max_relative_positions < 1`` falls back to ``max_position_embeddings`` (``DebertaV2Encoder``
  and ``DisentangledSelfAttention`` both do so before calling ``build_relative_position``), so
  DeBERTa-v3's ``position_buckets=256, max_relative_positions=-1`` buckets with ``M = 512``.
- The span (``att_span``/``pos_ebd_size``) is ``position_buckets`` if ``> 0``, else the
  (fallen-back) ``max_relative_positions``; the encoder's ``rel_embeddings`` has ``2 * span`` rows.
- DeBERTa-v1 (``model_type="deberta"``) has no buckets: ``r = i - j`` and ``2 * M`` rows.

**Limit.** Relative positions never fail: every ``r`` lands on a row (clamped). The hard limit
of a DeBERTa model is its *absolute* table: with ``position_biased_input=True`` (transformers'
default) the embeddings add a learned ``(max_position_embeddings, hidden)`` table, and a longer
input fails in transformers (its ``position_ids`` buffer holds ``max_position_embeddings``
positions); with ``position_biased_input=False`` (the released DeBERTa-v3 checkpoints, for one)
there is no absolute table and no hard limit, only the saturation of the relative rows.

**float32.** transformers computes the log bucket in float32 (``torch.log`` of a float32 ratio,
the constant ``log((M - 1) / mid)`` through a float32 tensor). :func:`log_bucket_table` reproduces
that pipeline with a correctly rounded float32 log, once per configuration on the host, as a table
of the first distance of each bucket value; a device then needs only integer comparisons.
torch's own float32 log (MKL or SLEEF on CPU, CUDA's on GPU) is not correctly rounded, so where
the float32 quotient sits within an ulp of an integer, transformers itself may answer differently
on different hardware. Against torch 2.13 on x86 CPU, for ``(position_buckets,
max_relative_positions)`` in (256, 512), (256, 1024), (128, 256), (64, 128), (32, 64), (8, 16),
(8, 64), (512, 1024), the table equals transformers at every distance below ``2**18`` (first
differences: 403269 for (256, 512), 340585 for (128, 256), 740312 for (512, 1024); none below
``2**20`` for the others). Float64 arithmetic (``exact=True``) is further off: from distance
65317 for (256, 512), 10128 for (512, 1024). Pairs with ``max_relative_positions`` barely above
``position_buckets // 2`` (a tiny log denominator) are fragile in any arithmetic: (512, 289)
differs from torch at distance 324, (64, 34) at 2943.

>>> cfg = DebertaRelativeConfig(position_buckets=256, max_position_embeddings=512,
...                             position_biased_input=False)       # DeBERTa-v3
>>> cfg.max_position, cfg.span, cfg.rows, cfg.limit
(512, 256, 512, None)
>>> cfg.relative_positions_np(1, 4096)[0, [0, 1, 128, 129, 511, 4095]].tolist()
[0, -1, -128, -129, -255, -446]
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

#: the largest count (lengths, buckets, positions) accepted; distances stay below it.
MAX_COUNT = 2**20


def _check_int(where: str, name: str, value: Any, lowest: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{where}: expected an integer {name}, found {value!r}")
    if not lowest <= value <= MAX_COUNT:
        raise ValueError(f"{where}: expected {lowest} <= {name} <= {MAX_COUNT}, found {value}")
    return int(value)


def check_log_buckets(position_buckets: int, max_relative_positions: int, where: str = "deberta") -> bool:
    """Validate a ``build_relative_position(bucket_size, max_position)`` pair; True if it log-buckets.

    Either value ``< 1`` (transformers writes ``-1``) means "no buckets": ``r = i - j``; values
    must be integers in ``-1 .. 2**20``. Log buckets (both ``> 0``) also need
    ``position_buckets >= 2`` (transformers divides by ``position_buckets // 2``) and
    ``max_relative_positions >= position_buckets // 2 + 2`` (``log((M - 1) / mid) > 0``);
    otherwise transformers' own answer is infinite or reversed.

    Raises:
      ValueError: one line naming the field, what was expected and what was found.

    >>> check_log_buckets(256, 512), check_log_buckets(-1, 512), check_log_buckets(256, -1)
    (True, False, False)
    >>> check_log_buckets(256, 129)
    Traceback (most recent call last):
    ...
    ValueError: deberta: expected max_relative_positions >= 130 (position_buckets // 2 + 2) for log buckets, found 129
    """
    buckets = _check_int(where, "position_buckets", position_buckets, -1)
    max_position = _check_int(where, "max_relative_positions", max_relative_positions, -1)
    if buckets < 1 or max_position < 1:
        return False
    if buckets < 2:
        raise ValueError(f"{where}: expected position_buckets >= 2 (or < 1: no buckets), found {buckets}")
    mid = buckets // 2
    if max_position < mid + 2:
        raise ValueError(
            f"{where}: expected max_relative_positions >= {mid + 2} (position_buckets // 2 + 2) "
            f"for log buckets, found {max_position}"
        )
    largest = _log_buckets_f32(np.array([MAX_COUNT - 1]), buckets, max_position)[0]
    if largest >= 2**24:
        raise ValueError(
            f"{where}: expected log buckets below 2**24 (float32's integers) for distances < {MAX_COUNT}, "
            f"found {int(largest)} with position_buckets={buckets}, max_relative_positions={max_position}"
        )
    return True


def _log_buckets_f32(distance: np.ndarray, buckets: int, max_position: int) -> np.ndarray:
    """``mid + ceil(log(d / mid) / log((M - 1) / mid) * (mid - 1))`` for distances ``d > mid``, float32 steps."""
    mid = buckets // 2
    ratio = distance.astype(np.float32) / np.float32(mid)  # torch: long tensor / int -> float32
    log = np.log(ratio.astype(np.float64)).astype(np.float32)  # correctly rounded float32 log
    # torch.log(torch.tensor((max_position - 1) / mid)): a Python float rounded to float32, then its log
    denominator = np.float32(math.log(float(np.float32((max_position - 1) / mid))))
    scaled = (log / denominator) * np.float32(mid - 1)
    return (np.ceil(scaled) + np.float32(mid)).astype(np.int64)


@functools.lru_cache(maxsize=32)
def _table(buckets: int, max_position: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    mid = buckets // 2
    d = np.arange(mid + 1, MAX_COUNT, dtype=np.int64)
    value = _log_buckets_f32(d, buckets, max_position)
    if np.any(np.diff(value) < 0):  # pragma: no cover - math guard
        raise AssertionError("DeBERTa log buckets are not monotone in the distance")
    first = np.concatenate([[0], np.nonzero(np.diff(value))[0] + 1])
    return tuple(int(x) for x in d[first]), tuple(int(x) for x in value[first])


def log_bucket_table(position_buckets: int, max_relative_positions: int) -> tuple[np.ndarray, np.ndarray]:
    """``(edges, values)``, int64: the log bucket of distance ``d`` (``mid < d < 2**20``) is
    ``values[k]`` for the last ``k`` with ``edges[k] <= d`` (``edges[0] = mid + 1``).

    transformers' float32 pipeline, computed once per pair on the host (see the module docstring).
    ``|r|`` for ``d <= mid`` is ``d`` itself and is not in the table.

    Raises:
      ValueError: the pair does not log-bucket or is rejected by :func:`check_log_buckets`.

    >>> edges, values = log_bucket_table(8, 16)
    >>> edges[:4].tolist(), values[:4].tolist()
    ([5, 7, 10, 16], [5, 6, 7, 8])
    """
    if not check_log_buckets(position_buckets, max_relative_positions, "log_bucket_table"):
        raise ValueError(
            "log_bucket_table: expected position_buckets > 0 and max_relative_positions > 0, "
            f"found {position_buckets}, {max_relative_positions}"
        )
    edges, values = _table(int(position_buckets), int(max_relative_positions))
    return np.asarray(edges, np.int64), np.asarray(values, np.int64)


def relative_positions_reference(
    query_positions: Any, key_positions: Any, position_buckets: int, max_relative_positions: int, *, exact: bool = False
) -> np.ndarray:
    """Host (numpy) twin of ``build_relative_position``: ``(len(query_positions), len(key_positions))`` int64.

    ``exact=True`` computes the log buckets in float64 instead of transformers' float32 steps
    (for comparison; it differs from transformers at rare distances, see the module docstring).
    """
    q = np.asarray(query_positions, np.int64).reshape(-1)
    k = np.asarray(key_positions, np.int64).reshape(-1)
    rel = q[:, None] - k[None, :]
    if not check_log_buckets(position_buckets, max_relative_positions, "relative_positions_reference"):
        return rel
    mid = position_buckets // 2
    d = np.abs(rel)
    if exact:
        beyond = np.maximum(d, mid + 1)  # (d <= mid is r itself: no log of 0)
        far = np.ceil(np.log(beyond / mid) / math.log((max_relative_positions - 1) / mid) * (mid - 1)) + mid
    else:
        if d.size and d.max() >= MAX_COUNT:
            raise ValueError(f"relative_positions_reference: expected distances below {MAX_COUNT}, found {d.max()}")
        edges, values = log_bucket_table(position_buckets, max_relative_positions)
        far = values[np.maximum(np.searchsorted(edges, d, side="right") - 1, 0)]
    return np.where(d <= mid, rel, np.sign(rel) * far.astype(np.int64))


@dataclasses.dataclass(frozen=True)
class DebertaRelativeConfig:
    """A DeBERTa / DeBERTa-v2/v3 model's relative-position settings (transformers' config fields).

    Attributes:
      position_buckets: ``> 0`` (v2/v3: 256) turns on ``make_log_bucket_position`` and is the
        span; ``< 1`` (``-1``, DeBERTa-v1): no buckets.
      max_relative_positions: ``M`` of the log buckets and, without buckets, the span; ``< 1``
        (``-1``) falls back to ``max_position_embeddings``, as transformers does.
      position_biased_input: the embeddings add an absolute learned table (then
        ``max_position_embeddings`` is a hard limit); DeBERTa-v3: False.
      max_position_embeddings: rows of that absolute table (512).

    Raises:
      ValueError: one line naming the field: a non-integer or out-of-range count (at most
        ``2**20``), a non-bool ``position_biased_input``, or a bucket pair transformers cannot
        compute (:func:`check_log_buckets`).

    >>> cfg = DebertaRelativeConfig(position_buckets=8, max_relative_positions=16, max_position_embeddings=64)
    >>> cfg.span, cfg.rows, cfg.limit
    (8, 16, 64)
    >>> cfg.relative_positions_np(3, 3).tolist()
    [[0, -1, -2], [1, 0, -1], [2, 1, 0]]
    """

    position_buckets: int = -1
    max_relative_positions: int = -1
    position_biased_input: bool = True
    max_position_embeddings: int = 512

    def __post_init__(self):
        where = "DebertaRelativeConfig"
        _check_int(where, "position_buckets", self.position_buckets, -1)
        _check_int(where, "max_relative_positions", self.max_relative_positions, -1)
        _check_int(where, "max_position_embeddings", self.max_position_embeddings, 1)
        if not isinstance(self.position_biased_input, (bool, np.bool_)):
            raise ValueError(f"{where}: expected a bool position_biased_input, found {self.position_biased_input!r}")
        check_log_buckets(self.position_buckets, self.max_position, where)

    @classmethod
    def from_config_dict(cls, config: Mapping[str, Any]) -> DebertaRelativeConfig:
        """From a transformers ``config.json`` / ``config.to_dict()`` of a DeBERTa or DeBERTa-v2 model.

        Missing fields take transformers' defaults; a DeBERTa-v1 config (``model_type="deberta"``)
        has no buckets (``position_buckets=-1`` whatever the dict says: v1 never reads it).

        Raises:
          ValueError: ``relative_attention`` is not true (the model has no relative positions),
            or a field the constructor rejects.

        >>> DebertaRelativeConfig.from_config_dict(
        ...     {"model_type": "deberta-v2", "relative_attention": True, "position_buckets": 256,
        ...      "max_relative_positions": -1, "position_biased_input": False}).rows
        512
        """
        if not isinstance(config, Mapping):
            raise ValueError(f"DebertaRelativeConfig.from_config_dict: expected a dict, found {type(config).__name__}")
        if config.get("relative_attention", False) is not True:
            raise ValueError(
                "DebertaRelativeConfig.from_config_dict: expected relative_attention true (no relative "
                f"positions otherwise), found {config.get('relative_attention', 'no relative_attention')!r}"
            )
        v1 = str(config.get("model_type", "")).lower() == "deberta"
        return cls(
            position_buckets=-1 if v1 else config.get("position_buckets", -1),
            max_relative_positions=config.get("max_relative_positions", -1),
            position_biased_input=config.get("position_biased_input", True),
            max_position_embeddings=config.get("max_position_embeddings", 512),
        )

    @property
    def max_position(self) -> int:
        """``max_relative_positions``, or ``max_position_embeddings`` when it is ``< 1`` (what
        transformers passes to ``build_relative_position`` as ``max_position``)."""
        return self.max_relative_positions if self.max_relative_positions >= 1 else self.max_position_embeddings

    @property
    def log_buckets(self) -> bool:
        """Whether relative positions go through ``make_log_bucket_position`` (``position_buckets > 0``)."""
        return self.position_buckets > 0

    @property
    def span(self) -> int:
        """transformers' ``att_span`` / ``pos_ebd_size``: ``position_buckets`` if ``> 0``, else :attr:`max_position`."""
        return self.position_buckets if self.log_buckets else self.max_position

    @property
    def rows(self) -> int:
        """Rows of the relative embedding table (``encoder.rel_embeddings``): ``2 * span``."""
        return 2 * self.span

    @property
    def limit(self) -> int | None:
        """The hard position limit: ``max_position_embeddings`` when ``position_biased_input``
        (an absolute learned table is added), else ``None`` (relative only: no hard limit)."""
        return self.max_position_embeddings if self.position_biased_input else None

    def relative_positions_np(self, query_len: int, key_len: int, *, exact: bool = False) -> np.ndarray:
        """``(query_len, key_len)`` int64 relative positions, equal to the encoder's ``get_rel_pos``.

        Values are unclamped (log buckets keep growing past ``span``); the attention reads row
        ``clamp(r + span, 0, rows - 1)``. ``exact=True``: float64 log buckets (for comparison).

        Raises:
          ValueError: lengths that are not integers in ``0 .. 2**20``.
        """
        q = _check_int("relative_positions_np", "query_len", query_len, 0)
        k = _check_int("relative_positions_np", "key_len", key_len, 0)
        buckets = self.position_buckets if self.log_buckets else -1
        return relative_positions_reference(np.arange(q), np.arange(k), buckets, self.max_position, exact=exact)

    def describe(self) -> str:
        """One line: the span, the rows, the buckets and the limit."""
        kind = (
            f"log buckets (position_buckets {self.position_buckets}, max_relative_positions {self.max_position})"
            if self.log_buckets
            else f"no buckets (max_relative_positions {self.max_position})"
        )
        limit = (
            f"absolute table of {self.max_position_embeddings} positions"
            if self.limit
            else "no absolute table (no hard limit)"
        )
        return f"DeBERTa relative positions: span {self.span}, {self.rows} rows, {kind}; {limit}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "position_buckets": self.position_buckets,
            "max_relative_positions": self.max_relative_positions,
            "position_biased_input": bool(self.position_biased_input),
            "max_position_embeddings": self.max_position_embeddings,
            "max_position": self.max_position,
            "span": self.span,
            "rows": self.rows,
            "limit": self.limit,
        }


__all__ = [
    "MAX_COUNT",
    "DebertaRelativeConfig",
    "check_log_buckets",
    "log_bucket_table",
    "relative_positions_reference",
]

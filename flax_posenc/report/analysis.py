"""Properties of any position table: similarity, offset invariance, uniqueness, spectrum; RoPE's decay.

The table properties are computed in :mod:`flax_posenc.table_properties` (numpy only, below
the conversion layer, whose inspection records carry a :class:`TableReport`) and re-exported
here with the same objects; this module adds RoPE's (:func:`rope_decay`,
:func:`rope_offset_invariance`).

Everything is float64 numpy on the host; each function returns a small frozen dataclass
(``str()``: a one-line summary, ``to_dict()``: JSON-serialisable).

>>> rope_decay(RopeConfig(head_dim=64), max_distance=1024).distances[:3].tolist()  # positions
[0, 1, 2]
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from flax_posenc import table_properties
from flax_posenc.rope_config import RopeConfig, rope_inverse_frequencies
from flax_posenc.table_properties import *  # noqa: F403 (re-exported: the same objects)
from flax_posenc.table_properties import OffsetProfile

__all__ = [*table_properties.__all__, "RopeDecay", "rope_decay", "rope_offset_invariance"]


# --------------------------------------------------------------------------- RoPE


def rope_offset_invariance(
    config: Any,
    *,
    length: int = 512,
    max_offset: int | None = None,
    start: int = 0,
    seed: int = 0,
    naive: bool = False,
) -> OffsetProfile:
    """Measure that RoPE attention scores depend only on the offset ``s - p``.

    A random unit query ``q`` and key ``k`` (one head) are rotated at every position
    ``start .. start + length - 1`` by :func:`flax_posenc.rope.rotary_cos_sin` (float32 on device,
    jax imported here), and ``score(p, s) = R_p q . R_s k`` is gathered for each offset
    ``s - p = 0 .. max_offset``: ``mean`` is the score at that offset, ``std`` its spread over
    ``p``, which is 0 in exact arithmetic. Exact angles keep it at float32 rounding (~1e-7) even at
    ``start = 2**20``; ``naive=True`` uses the float32 angle ``p * w`` instead, whose spread
    grows with ``start`` (~7e-4 at ``2**20`` for head_dim 16).

    Args:
      config: a :class:`~flax_posenc.RopeConfig` or a ``head_dim``.
      length: positions rotated (the spread runs over ``length - offset`` pairs).
      max_offset: largest offset reported (default ``length - 1``).
      start: first position.
      seed: seed of ``q`` and ``k``.
      naive: rotate with float32 angles instead of the exact ones.

    Returns:
      :class:`OffsetProfile` with ``metric="dot"`` (scores of unit vectors, in ``[-1, 1]``
      times the squared attention factor).

    >>> prof = rope_offset_invariance(8, length=64)
    >>> bool(prof.max_spread < 1e-6)
    True
    """
    import jax.numpy as jnp

    from flax_posenc import rope

    cfg = RopeConfig.coerce(config)
    if cfg.limit is not None:
        length = max(1, min(length, cfg.limit - start))
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, cfg.head_dim))
    q, k = (v / np.linalg.norm(v) for v in (q, k))
    positions = np.arange(start, start + length, dtype=np.int64)
    if naive:
        inv, attention = rope_inverse_frequencies(cfg, seq_len=start + length)
        angle = positions[:, None].astype(np.float32) * inv.astype(np.float32)
        cos, sin = np.cos(angle) * np.float32(attention), np.sin(angle) * np.float32(attention)
    else:
        cos, sin = rope.rotary_cos_sin(jnp.asarray(positions, jnp.int32), cfg, seq_len=start + length)
    rq = np.asarray(
        rope.apply_rotary(jnp.asarray(np.tile(q, (length, 1)), jnp.float32), cos, sin, layout=cfg.layout), np.float64
    )
    rk = np.asarray(
        rope.apply_rotary(jnp.asarray(np.tile(k, (length, 1)), jnp.float32), cos, sin, layout=cfg.layout), np.float64
    )
    scores = rq @ rk.T
    last = length - 1 if max_offset is None else min(length - 1, max(0, int(max_offset)))
    stats = np.empty((last + 1, 5))
    for j in range(last + 1):
        diag = np.diagonal(scores, j)
        stats[j] = (diag.mean(), diag.std(), diag.min(), diag.max(), diag.size)
    return OffsetProfile(
        offsets=np.arange(last + 1),
        mean=stats[:, 0],
        std=stats[:, 1],
        min=stats[:, 2],
        max=stats[:, 3],
        count=stats[:, 4].astype(np.int64),
        metric="dot",
        note=f"RoPE scores of random unit q, k from position {start}" + (" (naive float32 angles)" if naive else ""),
    )


@dataclasses.dataclass(frozen=True)
class RopeDecay:
    """RoPE's long-range decay (Su et al., section 3.4.3) at sampled distances.

    Attributes:
      distances: ``(n,)`` offsets in positions, ``0`` first, then roughly log-spaced.
      ones_score: ``(n,)`` the score of ``q = k = 1`` at each distance, relative to distance 0:
        ``mean_i cos(d * w_i)``.
      upper_bound: ``(n,)`` the paper's relative bound ``mean_j |sum_{i<j} exp(i d w_i)|``.
    """

    distances: np.ndarray
    ones_score: np.ndarray
    upper_bound: np.ndarray

    def __str__(self) -> str:
        picks = [d for d in (1, 16, 256, 4096, 65536) if d <= self.distances[-1]]
        parts = [f"d={d}: {self.upper_bound[np.searchsorted(self.distances, d)]:.3g}" for d in picks]
        return "RoPE relative upper bound vs distance (" + ", ".join(parts) + ")"


def rope_decay(config: Any, *, max_distance: int | None = None, num: int = 512) -> RopeDecay:
    """RoPE's long-range decay curves up to ``max_distance`` (default: the limit, else 65536).

    Float64 from :func:`~flax_posenc.rope_config.rope_inverse_frequencies` (numpy only).

    >>> d = rope_decay(RopeConfig(head_dim=64), max_distance=1024)
    >>> float(d.upper_bound[0]), bool(d.upper_bound[-1] < 0.5 * d.upper_bound[0])
    (16.5, True)
    """
    cfg = RopeConfig.coerce(config)
    top = int(max_distance or cfg.limit or 65536)
    distances = np.unique(np.concatenate([[0], np.round(np.geomspace(1, max(top, 1), num))])).astype(np.int64)
    inv, _ = rope_inverse_frequencies(cfg, seq_len=top)
    angle = distances[:, None].astype(np.float64) * inv
    ones = np.cos(angle).mean(-1)
    partial = np.cumsum(np.exp(1j * angle), axis=-1)
    bound = np.abs(partial).mean(-1)
    return RopeDecay(distances=distances, ones_score=ones, upper_bound=bound)

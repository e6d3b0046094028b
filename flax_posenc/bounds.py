"""THE bounds on sizes a file or an argument can supply, checked before anything is allocated.

Every size read from a ``config.json``, a tensor header or an argument that decides how much
memory or CPU a computation takes (a head count, a head width, a bucket count, a distance, a
position limit, lines in a figure) is compared with its bound here, by the numpy-only config
classes (:class:`~flax_posenc.AlibiConfig`, :class:`~flax_posenc.RopeConfig`,
:class:`~flax_posenc.relative_bias_config.BucketConfig`), so every reader of a file (the API,
the CLI's ``inspect``, ``check`` and ``plot``) refuses the same values with the same line, and
no public function raises ``MemoryError``. Each bound is far above any published model.

No jax or numpy import: usable from any layer.

>>> check_bound("num_heads", 12, MAX_HEADS)
12
>>> check_bound("num_heads", 10**12, MAX_HEADS, "ALiBi heads")
Traceback (most recent call last):
...
ValueError: num_heads: expected at most 65536 ALiBi heads, got 1000000000000
"""

from __future__ import annotations

#: attention heads of ALiBi (one slope each; BLOOM-176B has 112).
MAX_HEADS = 1 << 16
#: width of one RoPE head (Llama: 128; the widest published: 512).
MAX_HEAD_DIM = 1 << 16
#: relative-position buckets (T5/MPNet: 32, LongT5 and mT5 variants: up to 128).
MAX_BUCKETS = 1 << 16
#: a relative-bias ``max_distance`` (T5/MPNet: 128); the bucket edges cost one pass over it.
MAX_DISTANCE = 1 << 20
#: any position limit, declared or scaled (``factor * original_max_position_embeddings``);
#: 2**40 is 256 times Llama 4's 10M context and keeps every product far from int64's range.
MAX_POSITIONS = 1 << 40
#: curves drawn in one figure (one per head); more heads are sampled evenly, the first and last kept.
MAX_PLOT_LINES = 64

__all__ = ["MAX_BUCKETS", "MAX_DISTANCE", "MAX_HEADS", "MAX_HEAD_DIM", "MAX_PLOT_LINES", "MAX_POSITIONS", "check_bound"]


def check_bound(name: str, value, bound: int, what: str = "") -> int:
    """``value`` if it is at most ``bound``; else ``ValueError``: ``"<name>: expected at most <bound> <what>, got <value>"``.

    Python integers and floats of any size are compared exactly (no cast), so ``10**30`` and
    ``1e300`` are refused before any arithmetic on them.
    """
    if value > bound:
        unit = f" {what}" if what else ""
        raise ValueError(f"{name}: expected at most {bound}{unit}, got {value!r}")
    return value

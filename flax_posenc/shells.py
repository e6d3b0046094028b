"""What the NNX and Linen shells share: the calls of the parameter-free modules.

:class:`RotaryCalls` and :class:`ALiBiCalls` are plain mixins (not modules): each shell's
``RotaryEmbedding`` / ``ALiBiBias`` inherits its ``__call__`` (and ``rotate_qk``) from them, so
the two frameworks' modules run the same lines over :mod:`flax_posenc.rope` and
:mod:`flax_posenc.alibi`. A module supplies the attributes named in each class; the call's
``on_overflow`` overrides the module's.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from flax_posenc import alibi, rope
from flax_posenc.alibi_config import AlibiConfig
from flax_posenc.overflow import OverflowPolicy
from flax_posenc.rope_config import RopeConfig

__all__ = ["ALiBiCalls", "RotaryCalls"]


class RotaryCalls:
    """``__call__`` and ``rotate_qk`` of ``RotaryEmbedding`` (attributes ``config``, ``on_overflow``, ``seq_axis``)."""

    config: Any
    on_overflow: OverflowPolicy
    seq_axis: int

    def __call__(
        self,
        x: jax.typing.ArrayLike,
        positions: jax.typing.ArrayLike | None = None,
        *,
        start: int | jax.Array = 0,
        seq_len: int | None = None,
        on_overflow: OverflowPolicy | None = None,
    ) -> jax.Array:
        """Rotate ``x`` of shape ``(..., seq, heads, head_dim)``; positions default to ``start + arange(seq)``.

        Raises :class:`~flax_posenc.PositionLimitError` for a known position past ``config.limit``
        (traced ones follow ``on_overflow``: this call's, else the module's). With ``config``
        ``None`` (NoPE), ``x`` unchanged.
        """
        if self.config is None:
            return jnp.asarray(x)
        policy = on_overflow or self.on_overflow
        config = RopeConfig.coerce(self.config)
        return rope.apply_rope(
            x, config, positions, start=start, seq_len=seq_len, on_overflow=policy, seq_axis=self.seq_axis
        )

    def rotate_qk(
        self,
        q: jax.typing.ArrayLike,
        k: jax.typing.ArrayLike,
        positions: jax.typing.ArrayLike | None = None,
        *,
        start: int | jax.Array = 0,
        seq_len: int | None = None,
        on_overflow: OverflowPolicy | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """``(q, k)`` rotated at the same positions, one ``cos``/``sin`` (see :func:`flax_posenc.apply_rope_qk`).

        With ``config`` ``None`` (NoPE), ``(q, k)`` unchanged. In Linen: ``apply({}, q, k, method="rotate_qk")``.
        """
        if self.config is None:
            return jnp.asarray(q), jnp.asarray(k)
        policy = on_overflow or self.on_overflow
        config = RopeConfig.coerce(self.config)
        return rope.apply_rope_qk(
            q, k, config, positions, start=start, seq_len=seq_len, on_overflow=policy, seq_axis=self.seq_axis
        )


class ALiBiCalls:
    """``__call__`` of ``ALiBiBias`` (attributes ``config``, ``causal``, ``dtype``, ``on_overflow``)."""

    config: Any
    causal: bool
    dtype: Any
    on_overflow: OverflowPolicy

    def __call__(
        self,
        query_length: int | None = None,
        key_length: int | None = None,
        *,
        query_positions: jax.typing.ArrayLike | None = None,
        key_positions: jax.typing.ArrayLike | None = None,
        on_overflow: OverflowPolicy | None = None,
    ) -> jax.Array:
        """Bias for static lengths (queries are the last keys), or for explicit positions.

        Give ``query_length`` (and optionally ``key_length``), or both ``query_positions``
        ``(..., q)`` and ``key_positions`` ``(..., k)``; returns ``(..., heads, q, k)``.
        """
        return alibi.bias_for(
            AlibiConfig.coerce(self.config),
            query_length,
            key_length,
            query_positions=query_positions,
            key_positions=key_positions,
            causal=self.causal,
            dtype=self.dtype,
            on_overflow=on_overflow or self.on_overflow,
        )

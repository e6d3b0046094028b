"""Qwen2-VL / Qwen2.5-VL multimodal RoPE (M-RoPE) on device: ``cos``/``sin`` and the rotation.

transformers' ``Qwen2VLRotaryEmbedding`` computes ``cos``/``sin`` of every component's positions
``(3, batch, seq)`` and keeps, for rotary frequency ``j``, the component its ``mrope_section``
names (:func:`~flax_posenc.mrope_config.section_components`); the rotation is then Llama's
``apply_rotary_pos_emb`` (half layout). Here ``cos``/``sin`` come from the RoPE core
(:func:`flax_posenc.rotary_cos_sin`: float64 frequencies, exact angles, the one overflow guard),
so the limit is checked on every component at once, that is on the largest of the three. GLM-4V
pairs the rotated dims interleaved (``rotate_half_llm``): its config's ``rope.layout`` is
``"interleaved"`` and the same ``cos``/``sin`` apply.

>>> import numpy as np, jax.numpy as jnp
>>> import flax_posenc as fp
>>> cfg = fp.MRopeConfig(fp.RopeConfig(head_dim=8, max_position_embeddings=32), mrope_section=(2, 1, 1))
>>> positions = np.array([[[0, 1, 2]], [[0, 1, 5]], [[0, 1, 7]]])       # (3, batch, seq)
>>> cos, sin = fp.mrope_cos_sin(positions, cfg)
>>> cos.shape                                                           # (batch, seq, rotary_dim // 2)
(1, 3, 4)
>>> fp.apply_mrope(jnp.ones((1, 3, 2, 8)), cfg, positions).shape        # (batch, seq, heads, head_dim)
(1, 3, 2, 8)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc import overflow
from flax_posenc.mrope_config import MRopeConfig, mrope_positions, section_components
from flax_posenc.rope import apply_rotary, rotary_cos_sin

__all__ = ["MRopeConfig", "apply_mrope", "mrope_cos_sin", "mrope_decode_positions", "mrope_positions"]


def _check_positions(positions) -> None:
    shape = tuple(positions.shape)
    if len(shape) < 2 or shape[0] != 3:
        raise ValueError(
            f"positions: expected (3, ..., seq) M-RoPE positions (temporal, height, width), got shape {shape}"
        )


def mrope_cos_sin(
    positions: jax.typing.ArrayLike,
    config: MRopeConfig,
    *,
    on_overflow: overflow.OverflowPolicy = "error",
    dtype=jnp.float32,
) -> tuple[jax.Array, jax.Array]:
    """``cos`` and ``sin`` of M-RoPE: frequency ``j`` turns with the component its section names.

    Equal to transformers' ``Qwen2VLRotaryEmbedding`` / ``Qwen2_5_VLRotaryEmbedding`` output
    (before its ``torch.cat((freq, freq))`` doubling, which :func:`flax_posenc.apply_rotary` does
    for the half layout), but computed from float64 frequencies with exact angles (see
    :func:`flax_posenc.rotary_cos_sin`).

    Args:
      positions: ``(3, ..., seq)`` integer positions (:func:`flax_posenc.mrope_positions`), known
        or traced. Text alone: the same positions in all three rows.
      config: the :class:`~flax_posenc.MRopeConfig`.
      on_overflow: policy for traced positions past ``config.limit`` (``"error"``, ``"clip"``,
        ``"fill"``); known positions past it always raise while tracing.
      dtype: output dtype.

    Returns:
      ``(cos, sin)``, each ``positions.shape[1:] + (rotary_dim // 2,)``.

    Raises:
      PositionLimitError: a known position (in any of the three components) outside
        ``0 .. config.limit - 1``; the message names the largest one.
      ValueError: ``positions`` not shaped ``(3, ..., seq)``.
    """
    if not isinstance(config, MRopeConfig):
        raise TypeError(f"config: expected an MRopeConfig, got {type(config).__name__}")
    if not overflow.is_traced(positions) and not isinstance(positions, jax.Array):
        positions = np.asarray(positions)
    _check_positions(positions)
    cos3, sin3 = rotary_cos_sin(positions, config.rope, on_overflow=on_overflow, dtype=dtype)
    comp = section_components(
        config.mrope_section, interleaved=config.interleaved_sections, width=config.rope.rotary_dim // 2
    )

    def pick(values):  # frequency j from component comp[j]: an exact selection, no arithmetic
        return jnp.where(comp == 0, values[0], jnp.where(comp == 1, values[1], values[2]))

    return pick(cos3), pick(sin3)


def apply_mrope(
    x: jax.typing.ArrayLike,
    config: MRopeConfig,
    positions: jax.typing.ArrayLike,
    *,
    on_overflow: overflow.OverflowPolicy = "error",
    seq_axis: int = -3,
) -> jax.Array:
    """Rotate queries or keys by M-RoPE: ``(batch, seq, heads, head_dim)`` (Flax) or ``(batch, heads, seq, head_dim)``.

    Args:
      x: queries or keys; ``seq_axis=-3`` (default) for ``(batch, seq, heads, head_dim)``,
        ``-2`` for Hugging Face's ``(batch, heads, seq, head_dim)``.
      config: the :class:`~flax_posenc.MRopeConfig`.
      positions: ``(3, batch, seq)`` from :func:`flax_posenc.mrope_positions` (known or traced).
      on_overflow: see :func:`mrope_cos_sin`.

    Returns:
      An array like ``x``: transformers' ``apply_rotary_pos_emb(q, k, cos, sin)`` with the
      rotary module's M-RoPE ``cos``/``sin``.

    Raises:
      PositionLimitError: a known position past the limit (while tracing).
      ValueError: ``x`` or ``positions`` of the wrong shape.
    """
    if seq_axis not in (-3, -2):
        raise ValueError(f"seq_axis: expected -3 or -2, got {seq_axis!r}")
    x = jnp.asarray(x)
    if x.ndim < 3 or x.shape[-1] != config.rope.head_dim:
        raise ValueError(f"x: expected (..., head_dim {config.rope.head_dim}) queries or keys, got {tuple(x.shape)}")
    cos, sin = mrope_cos_sin(positions, config, on_overflow=on_overflow)
    if seq_axis == -3:
        cos, sin = cos[..., None, :], sin[..., None, :]
    elif cos.ndim > 2:
        cos, sin = cos[..., None, :, :], sin[..., None, :, :]
    return apply_rotary(x, cos, sin, layout=config.rope.layout)


def mrope_decode_positions(text_positions: jax.typing.ArrayLike, rope_deltas: jax.typing.ArrayLike) -> jax.Array:
    """The ``(3, batch, seq)`` M-RoPE positions of decoded tokens: ``text_positions + rope_deltas``.

    After the prompt, every new token is text: its three components are equal, at the row's
    padding-aware text position (the count of real tokens before it, as for plain RoPE:
    :func:`flax_posenc.padding_aware_positions`) plus the row's ``rope_deltas`` from
    :func:`flax_posenc.mrope_positions` (``max(prompt position) + 1 - real tokens``). This is what
    transformers' Qwen2-VL ``generate`` feeds its rotary module at each step
    (``tests/test_mrope_decoding.py`` compares every step's positions and ``cos``/``sin``); keep the
    prompt's ``rope_deltas`` for the whole generation (a stale or zero one shifts every new token).

    Args:
      text_positions: ``(batch, seq)`` integer positions (traced under ``jit``: a decoding step).
      rope_deltas: ``(batch, 1)`` integers (or ``(batch,)``), known or traced.

    Returns:
      int32 ``(3, batch, seq)``, for :func:`mrope_cos_sin` / :func:`apply_mrope` (which check the limit).

    Raises:
      ValueError: ``text_positions`` not ``(batch, seq)``, or deltas that are not one per row.

    >>> import numpy as np
    >>> mrope_decode_positions(np.array([[10], [13]]), np.array([[-3], [-3]]))[:, :, 0].tolist()
    [[7, 10], [7, 10], [7, 10]]
    """
    text = jnp.asarray(text_positions)
    deltas = jnp.asarray(rope_deltas)
    if text.ndim != 2 or not jnp.issubdtype(text.dtype, jnp.integer):
        raise ValueError(f"text_positions: expected (batch, seq) integers, got shape {tuple(text.shape)} {text.dtype}")
    if deltas.ndim == 1:
        deltas = deltas[:, None]
    if deltas.shape != (text.shape[0], 1) or not jnp.issubdtype(deltas.dtype, jnp.integer):
        raise ValueError(
            f"rope_deltas: expected ({text.shape[0]}, 1) integers (one per row), got shape {tuple(deltas.shape)} "
            f"{deltas.dtype}"
        )
    out = text.astype(jnp.int32) + deltas.astype(jnp.int32)
    return jnp.broadcast_to(out[None], (3, *out.shape))

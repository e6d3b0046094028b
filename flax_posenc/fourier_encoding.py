"""SAM's random Fourier positional encoding (``SamPositionalEmbedding``) on device (JAX), and its
float64 reference (numpy).

SAM, SAM-HQ, SAM 2 (and SAM 2 video), EdgeTAM and the SAM 3 tracker share one encoding of 2-D points
``(x, y)`` in ``[0, 1]`` (a prompt's points and boxes, and every cell of the image embedding): a
stored Gaussian matrix ``G`` of shape ``(2, F)`` (``positional_embedding``: ``scale * randn``, a
parameter in SAM/SAM-HQ, a buffer in the others) projects ``2 * (x, y) - 1``, and

    out = [sin(2 pi (2c - 1) @ G) | cos(2 pi (2c - 1) @ G)]        (..., 2F)

With ``input_shape = (height, width)`` the coordinates are pixels first divided by ``width`` (x) and
``height`` (y). :func:`image_wide_coordinates` are the cell centres SAM's
``get_image_wide_positional_embeddings`` encodes, ``((j + 0.5) / size, (i + 0.5) / size)``. Nothing
limits the coordinates (no table is indexed): points outside ``[0, 1]`` are encoded as well.

>>> import jax.numpy as jnp
>>> fourier_positions(jnp.array([[0.5, 0.5]]), jnp.ones((2, 3))).tolist()   # the centre: angle 0
[[0.0, 0.0, 0.0, 1.0, 1.0, 1.0]]
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["fourier_positions", "fourier_positions_float64", "image_wide_coordinates"]


def _check(coords_shape: tuple[int, ...], gaussian_shape: tuple[int, ...]) -> None:
    if len(coords_shape) < 1 or coords_shape[-1] != 2:
        raise ValueError(f"coords: expected (..., 2) points (x, y), found shape {tuple(coords_shape)}")
    if len(gaussian_shape) != 2 or gaussian_shape[0] != 2 or gaussian_shape[1] < 1:
        raise ValueError(
            f"gaussian: expected a (2, F) matrix (positional_embedding), found shape {tuple(gaussian_shape)}"
        )


def image_wide_coordinates(size: int) -> np.ndarray:
    """``(size, size, 2)`` float64 cell centres ``(x, y)`` of a ``size x size`` image embedding, as SAM's
    ``get_image_wide_positional_embeddings`` builds them (``(cumsum - 0.5) / size``).

    Raises:
      ValueError: ``size`` not a positive integer (one line).

    >>> image_wide_coordinates(2)[1, 0].tolist()   # row 1, column 0: x = 0.25, y = 0.75
    [0.25, 0.75]
    """
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not 1 <= size <= 1 << 15:
        raise ValueError(f"size: expected a side in 1..32768 cells, found {size!r}")
    centres = (np.arange(size, dtype=np.float64) + 0.5) / size
    x, y = np.meshgrid(centres, centres)
    return np.stack([x, y], axis=-1)


def fourier_positions_float64(coords: Any, gaussian: Any, input_shape: tuple[int, int] | None = None) -> np.ndarray:
    """float64 ``(..., 2F)``: the reference of :func:`fourier_positions` (numpy)."""
    c = np.asarray(coords, np.float64)
    g = np.asarray(gaussian, np.float64)
    _check(c.shape, g.shape)
    if input_shape is not None:
        c = c / np.array([input_shape[1], input_shape[0]], np.float64)
    angle = 2 * np.pi * ((2 * c - 1) @ g)
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)


def fourier_positions(coords: Any, gaussian: Any, *, input_shape: tuple[int, int] | None = None) -> jax.Array:
    """SAM's random Fourier encoding of 2-D points (``SamPositionalEmbedding.forward``).

    Args:
      coords: ``(..., 2)`` points ``(x, y)``, in ``[0, 1]`` (or pixels with ``input_shape``).
      gaussian: the stored ``(2, F)`` matrix (``shared_image_embedding.positional_embedding``).
      input_shape: ``(height, width)`` in pixels: divide x by width and y by height first.

    Returns:
      ``(..., 2F)`` in the result dtype of ``coords`` and ``gaussian`` (float32 for float32 input):
      ``[sin | cos]`` of ``2 pi (2c - 1) @ G``. Jittable and vmappable.

    Raises:
      ValueError: ``coords`` not ``(..., 2)`` or ``gaussian`` not ``(2, F)`` (one line).

    >>> import jax.numpy as jnp
    >>> fourier_positions(jnp.zeros((4, 4, 2)), jnp.ones((2, 8))).shape
    (4, 4, 16)
    """
    c = jnp.asarray(coords)
    g = jnp.asarray(gaussian)
    _check(tuple(c.shape), tuple(g.shape))
    dtype = jnp.result_type(c.dtype, g.dtype, jnp.float32)
    c, g = c.astype(dtype), g.astype(dtype)
    if input_shape is not None:
        c = c / jnp.asarray([input_shape[1], input_shape[0]], dtype)
    angle = (2 * np.pi) * jnp.matmul(2 * c - 1, g, precision=jax.lax.Precision.HIGHEST)
    return jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)

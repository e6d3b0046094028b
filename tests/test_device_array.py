"""pretrained.device_array: the aligned host copy gives jnp.asarray's values and never aliases the caller's array."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from flax_posenc.pretrained import HOST_ALIGNMENT, device_array


def _unaligned(shape, dtype=np.float32) -> np.ndarray:
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = np.empty(n + 2 * HOST_ALIGNMENT, np.uint8)
    start = (-buf.ctypes.data % HOST_ALIGNMENT) + 4  # 4 bytes past a boundary: never aligned
    out = buf[start : start + n].view(dtype).reshape(shape)
    out[...] = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    return out


def test_unaligned_large_array_equals_and_is_independent_of_the_source():
    value = _unaligned((512, 1024))  # 2 MiB: takes the aligned-copy path
    assert value.ctypes.data % HOST_ALIGNMENT
    expected = value.copy()
    out = device_array(value, jnp.float32)
    assert out.dtype == jnp.float32 and np.array_equal(np.asarray(out), expected)
    value[...] = 0.0  # the caller's buffer changes: the device array must not
    assert np.array_equal(np.asarray(out), expected)


def test_other_dtypes_and_small_arrays_go_through_asarray():
    value = _unaligned((512, 1024))
    out = device_array(value, jnp.bfloat16)  # a cast: jnp.asarray's rounding
    assert np.array_equal(np.asarray(out), np.asarray(jnp.asarray(value.copy(), jnp.bfloat16)))
    small = _unaligned((4, 8))
    assert np.array_equal(np.asarray(device_array(small, jnp.float32)), small)

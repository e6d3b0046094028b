"""Extending learned tables, against float64 references (PyTorch's interpolate in float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from flax_posenc.extend import extend_table

RNG = np.random.default_rng(0)
TABLE = RNG.standard_normal((2 + 16, 8)).astype(np.float32)  # 2 reserved rows, 16 positions


def torch_resample(trained: np.ndarray, new_length: int, mode: str) -> np.ndarray:
    x = torch.from_numpy(trained.astype(np.float64))
    if mode == "linear":
        out = F.interpolate(x.T[None], size=new_length, mode="linear", align_corners=True)[0].T
    else:  # bicubic over a (positions, dim) image, width unchanged
        out = F.interpolate(x[None, None], size=(new_length, x.shape[1]), mode="bicubic", align_corners=True)[0, 0]
    return out.numpy()


@pytest.mark.parametrize("method", ["linear", "cubic"])
@pytest.mark.parametrize("new_length", [17, 40, 64, 1000])
def test_interpolation_matches_pytorch_float64(method, new_length):
    got = extend_table(TABLE.astype(np.float64), new_length, method=method, offset=2)
    np.testing.assert_allclose(got[2:], torch_resample(TABLE[2:], new_length, method), atol=1e-12)
    np.testing.assert_array_equal(got[:2], TABLE[:2])  # reserved rows untouched
    np.testing.assert_array_equal(got[2], TABLE[2])  # endpoints kept (align_corners)
    np.testing.assert_allclose(got[-1], TABLE[-1], atol=1e-12)


def test_interpolate_is_linear():
    np.testing.assert_array_equal(
        extend_table(TABLE, 50, method="interpolate", offset=2), extend_table(TABLE, 50, method="linear", offset=2)
    )


@settings(max_examples=30, deadline=None)
@given(length=st.integers(1, 40), extra=st.integers(1, 100), offset=st.integers(0, 3))
def test_tile_keeps_trained_rows_and_repeats_them(length, extra, offset):
    table = RNG.standard_normal((offset + length, 4)).astype(np.float32)
    got = extend_table(table, length + extra, method="tile", offset=offset)
    assert got.shape == (offset + length + extra, 4) and got.dtype == np.float32
    np.testing.assert_array_equal(got[: offset + length], table)  # unchanged, in place
    for p in range(length + extra):
        np.testing.assert_array_equal(got[offset + p], table[offset + p % length])


def test_longformer_shape():
    roberta = np.zeros((514, 4), np.float32)
    assert extend_table(roberta, 4096, method="tile", offset=2).shape == (4098, 4)


def test_dtype_preserved_and_jax_input():
    import jax.numpy as jnp

    got = extend_table(jnp.asarray(TABLE, jnp.bfloat16), 20, method="cubic")
    assert got.dtype == jnp.bfloat16 and got.shape == (20, 8)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(new_length=16, offset=2), "new_length: expected an integer larger than the current 16 positions, got 16"),
        (dict(new_length=10, offset=2), "larger than the current 16 positions, got 10"),
        (
            dict(new_length=32, method="nearest"),
            r"method: expected one of \('tile', 'linear', 'cubic', 'interpolate'\), got 'nearest'",
        ),
        (dict(new_length=32, offset=18), r"offset: expected 0 <= offset < rows \(18\), got 18"),
    ],
)
def test_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        extend_table(TABLE, **kwargs)


def test_not_a_table():
    with pytest.raises(ValueError, match=r"table: expected a 2-D \(rows, dim\) array, got shape \(4,\)"):
        extend_table(np.zeros(4), 8)


def test_module_extend_positions_nnx_and_linen():
    import jax
    import jax.numpy as jnp
    from flax import nnx

    import flax_posenc as fp

    block = fp.nnx.TransformerInput.from_arguments(
        50, 8, num_positions=16, position_offset=2, positions_from="attention_mask", layer_norm=True, rngs=nnx.Rngs(0)
    )
    longer = block.extend_positions(40)
    old_table = np.asarray(block.position_embeddings[...])
    new_table = np.asarray(longer.position_embeddings[...])
    np.testing.assert_array_equal(new_table, extend_table(old_table, 40, method="tile", offset=2))
    assert block.spec.position.num_positions == 16 and longer.spec.position.num_positions == 40
    ids = jnp.arange(16)[None] % 50
    np.testing.assert_array_equal(longer(ids), block(ids))  # trained rows unchanged under tile
    assert longer(jnp.zeros((1, 40), jnp.int32)).shape == (1, 40, 8)
    with pytest.raises(fp.PositionLimitError, match="holds 40 positions"):
        longer(jnp.zeros((1, 41), jnp.int32))

    module = fp.linen.TransformerInput.from_arguments(
        50, 8, num_positions=16, position_offset=2, positions_from="attention_mask", layer_norm=True
    )
    variables = {"params": block.params()}
    module2, variables2 = module.extend_positions(variables, 40, method="linear")
    from flax import linen as nn

    grown = nn.unbox(variables2)["params"]["position_embeddings"]  # boxed with logical axes, as init
    np.testing.assert_array_equal(grown, extend_table(old_table, 40, method="linear", offset=2))
    assert nn.get_partition_spec(variables2)["params"]["position_embeddings"] == jax.sharding.PartitionSpec(
        None, "embed"
    )
    assert module2.apply(variables2, jnp.zeros((1, 40), jnp.int32)).shape == (1, 40, 8)
    np.testing.assert_array_equal(variables["params"]["position_embeddings"], old_table)  # input untouched
    with pytest.raises(ValueError, match="only a learned table can be extended"):
        fp.nnx.TransformerInput.from_arguments(50, 8, position="sinusoidal", rngs=nnx.Rngs(0)).extend_positions(40)

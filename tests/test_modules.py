"""NNX and Linen shells: same numbers, against a float64 numpy reference of the block."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from flax import nnx
from helpers import sinusoid

import flax_posenc as fp

VOCAB, DIM = 50, 16

CONFIGS = {
    "gpt2": dict(num_positions=32),
    "vaswani": dict(position="sinusoidal", embed_scale=DIM**0.5),
    "bert": dict(num_positions=32, type_vocab_size=2, layer_norm=True, layer_norm_eps=1e-12),
    "roberta": dict(
        num_positions=30,
        position_offset=2,
        positions_from="non_padding_ids",
        pad_token_id=1,
        type_vocab_size=1,
        layer_norm=True,
        layer_norm_eps=1e-5,
    ),
    "opt": dict(num_positions=30, position_offset=2, positions_from="attention_mask"),
    "none": dict(position="none"),
}


def numpy_reference(params, config, ids, types=None, mask=None):
    """The block written out in float64 numpy, independently of flax_posenc.block."""
    p = {
        k: (
            np.asarray(v, np.float64)
            if not isinstance(v, dict)
            else {a: np.asarray(b, np.float64) for a, b in v.items()}
        )
        for k, v in params.items()
    }
    x = p["word_embeddings"][ids] * config.get("embed_scale", 1.0)
    seq = ids.shape[-1]
    offset = config.get("position_offset", 0)
    kind = config.get("position", "learned")
    rule = config.get("positions_from", "index")
    if rule == "index":
        pos = np.broadcast_to(np.arange(seq), ids.shape)
    else:
        keep = (
            (ids != config["pad_token_id"])
            if rule == "non_padding_ids"
            else (np.ones(ids.shape, bool) if mask is None else mask.astype(bool))
        )
        pos = np.where(keep, np.cumsum(keep, -1) - 1, -1)
    if kind == "learned":
        x = x + p["position_embeddings"][pos + offset]
    elif kind == "sinusoidal":
        x = x + sinusoid(pos, DIM)
    if config.get("type_vocab_size"):
        x = x + p["token_type_embeddings"][np.zeros_like(ids) if types is None else types]
    if config.get("layer_norm"):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        x = (x - mean) / np.sqrt(var + config["layer_norm_eps"]) * p["layer_norm"]["scale"] + p["layer_norm"]["bias"]
    return x


def randomized(block):
    """Give every parameter (LayerNorm included) random values, so tests see all of them."""
    graphdef, state = nnx.split(block)
    leaves, treedef = jax.tree.flatten(state)
    keys = jax.random.split(jax.random.key(7), len(leaves))
    leaves = [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)]
    return nnx.merge(graphdef, jax.tree.unflatten(treedef, leaves))


def make_inputs(name):
    ids = np.array([[5, 6, 7, 8, 9, 10], [11, 12, 13, 1, 1, 1]])
    types = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]]) if name == "bert" else None
    mask = np.array([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]]) if name == "opt" else None
    return ids, types, mask


@pytest.mark.parametrize("name", CONFIGS)
def test_nnx_linen_and_reference_agree(name):
    config = CONFIGS[name]
    block = randomized(fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, **config, rngs=nnx.Rngs(0)))
    ids, types, mask = make_inputs(name)
    kwargs = dict(token_type_ids=types, attention_mask=mask)
    out_nnx = block(jnp.asarray(ids), **kwargs)

    linen_block = fp.linen.TransformerInput.from_arguments(VOCAB, DIM, **config)
    init_shapes = jax.tree.map(jnp.shape, nn.unbox(linen_block.init(jax.random.key(0), jnp.asarray(ids), **kwargs)))
    variables = {"params": block.params()}
    assert jax.tree.map(jnp.shape, variables) == init_shapes  # same names, same shapes
    out_linen = linen_block.apply(variables, jnp.asarray(ids), **kwargs)

    np.testing.assert_array_equal(out_nnx, out_linen)
    ref = numpy_reference(block.params(), config, ids, types, mask)
    np.testing.assert_allclose(np.asarray(out_nnx, np.float64), ref, atol=2e-5, rtol=1e-5)


def test_explicit_position_ids_and_start_agree():
    block = randomized(fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, num_positions=32, rngs=nnx.Rngs(0)))
    ids = jnp.arange(12).reshape(2, 6)
    full = block(ids)
    # incremental decoding: the last two tokens with start=4 equal the tail of the full pass
    np.testing.assert_allclose(block(ids[:, 4:], start=4), full[:, 4:], atol=1e-6)
    np.testing.assert_allclose(block(ids[:, 4:], position_ids=jnp.array([[4, 5], [4, 5]])), full[:, 4:], atol=1e-6)
    # traced start in a jitted decoding step (checkify functionalizes the limit check)
    from jax.experimental import checkify

    graphdef, state = nnx.split(block)
    step = jax.jit(checkify.checkify(lambda s, tok, t: nnx.merge(graphdef, s)(tok, start=t)))
    err, out = step(state, ids[:, 5:], 5)
    err.throw()
    np.testing.assert_allclose(out, full[:, 5:], atol=1e-6)


def test_sinusoidal_block_traced_positions_match_static():
    block = fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, position="sinusoidal", rngs=nnx.Rngs(0))
    ids = jnp.arange(10).reshape(1, 10)
    graphdef, state = nnx.split(block)
    traced = jax.jit(lambda s, i, p: nnx.merge(graphdef, s)(i, position_ids=p))(state, ids, jnp.arange(10)[None])
    np.testing.assert_allclose(traced, block(ids), atol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision(dtype):
    kwargs = dict(num_positions=32, layer_norm=True)
    full = randomized(fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, **kwargs, rngs=nnx.Rngs(0)))
    low = fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, **kwargs, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0))
    graphdef, _ = nnx.split(low)
    low = nnx.merge(graphdef, jax.tree.map(lambda x: x.astype(dtype), nnx.state(full)))
    ids = jnp.arange(16).reshape(2, 8)
    out = low(ids)
    assert out.dtype == dtype
    assert all(x.dtype == dtype for x in jax.tree.leaves(low.params()))
    # float32 on the same (rounded) parameters, then rounded once: the low-precision path
    # may differ by a few ulps of the output dtype, no more
    rounded = nnx.merge(
        nnx.split(full)[0], jax.tree.map(lambda x: x.astype(dtype).astype(jnp.float32), nnx.state(full))
    )
    ref = np.asarray(rounded(ids))
    ulp = float(jnp.finfo(dtype).eps) * np.maximum(np.abs(ref), 1.0)
    assert np.all(np.abs(np.asarray(out, np.float32) - ref) <= 4 * ulp)


def test_grad_reaches_used_rows_only():
    block = fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, num_positions=32, rngs=nnx.Rngs(0))
    ids = jnp.array([[3, 4, 5]])
    grads = nnx.grad(lambda m: m(ids).sum())(block)
    pos_grad = np.asarray(grads["position_embeddings"][...])
    np.testing.assert_array_equal(pos_grad[:3], np.ones((3, DIM)))
    np.testing.assert_array_equal(pos_grad[3:], 0)
    word_grad = np.asarray(grads["word_embeddings"][...])
    assert word_grad[[3, 4, 5]].sum() == 3 * DIM and word_grad.sum() == 3 * DIM


def test_dropout_is_random_in_training_and_identity_in_eval():
    block = fp.nnx.TransformerInput.from_arguments(
        VOCAB, DIM, num_positions=32, dropout_rate=0.5, rngs=nnx.Rngs(0, dropout=1)
    )
    ids = jnp.arange(8).reshape(1, 8)
    eval_out = block(ids)
    train_a, train_b = block(ids, deterministic=False), block(ids, deterministic=False)
    assert not np.allclose(train_a, train_b)
    zeros = np.asarray(train_a) == 0
    assert 0.3 < zeros.mean() < 0.7
    np.testing.assert_allclose(np.asarray(train_a)[~zeros], 2 * np.asarray(eval_out)[~zeros], rtol=1e-6)

    linen_block = fp.linen.TransformerInput.from_arguments(VOCAB, DIM, num_positions=32, dropout_rate=0.5)
    variables = {"params": block.params()}
    np.testing.assert_array_equal(linen_block.apply(variables, ids), eval_out)
    out = linen_block.apply(variables, ids, deterministic=False, rngs={"dropout": jax.random.key(3)})
    assert 0.3 < (np.asarray(out) == 0).mean() < 0.7


def test_learned_positions_read_row_offset_plus_position():
    """(NNX equals Linen for every module: tests/test_shell_contract.py.)"""
    wpe = randomized(fp.nnx.LearnedPositionalEmbedding.from_arguments(64, DIM, offset=2, rngs=nnx.Rngs(0)))
    positions = jnp.array([[0, 5, 63], [-1, -1, 1]])
    np.testing.assert_array_equal(wpe(positions), np.asarray(wpe.embedding[...])[np.asarray(positions) + 2])


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(position="rotary"), r"position: expected one of \('learned', 'sinusoidal', 'none'\), got 'rotary'"),
        (dict(), "num_positions: a learned table needs a positive integer, got None"),
        (
            dict(num_positions=8, positions_from="non_padding_ids", position_offset=2),
            "pad_token_id: positions_from='non_padding_ids' needs",
        ),
        (dict(num_positions=8, positions_from="attention_mask"), "needs offset >= 1, got 0"),
        (dict(num_positions=8, positions_from="left"), "positions_from: expected one of"),
        (dict(position="sinusoidal", on_overflow="wrap"), "on_overflow: expected one of"),
    ],
)
def test_bad_configuration(kwargs, message):
    with pytest.raises(ValueError, match=message):
        fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, **kwargs, rngs=nnx.Rngs(0))


def test_bad_call_arguments():
    block = fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, num_positions=32, rngs=nnx.Rngs(0))
    with pytest.raises(
        TypeError, match=r"input_ids: expected an integer array of shape \(\.\.\., seq_len\), got dtype float32"
    ):
        block(jnp.ones((1, 3)))
    with pytest.raises(ValueError, match="token_type_ids: this block has no token-type embedding"):
        block(jnp.ones((1, 3), jnp.int32), token_type_ids=jnp.zeros((1, 3), jnp.int32))
    with pytest.raises(ValueError, match="give exactly one of positions"):
        fp.nnx.SinusoidalPositionalEncoding.from_arguments(8)()

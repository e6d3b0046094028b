"""Silent wrong answers (issue 34): inputs that gave a plausible result instead of an error.

Grouped by surface: host integer arrays wider than int32 (the device core), the documented
functional path on numpy parameters. Every expected value comes from an independent reference
(the torch model, T5's own bucket function on int64 tensors, a float64 numpy sum), never from
the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest

import flax_posenc as fp
from flax_posenc import block
from flax_posenc.errors import PositionLimitError
from flax_posenc.pretrained import load_pretrained, save_converted

# --------------------------------------------------------------------------- host integers past int32
# With x64 off, jnp.asarray of an int64/uint64 array wraps 2**32 + 5 to 5: every index argument
# given on the host is compared with its limit before any cast, so a wrapped value never reads a row.

WIDE = [
    (np.int64, 2**32 + 5),  # wraps to 5: a valid row
    (np.int64, 2**31),  # just past int32: wraps to -2**31
    (np.int64, -(2**32) + 3),  # wraps to 3
    (np.uint64, 2**32 + 1),
    (np.uint64, 2**63 + 2),
    (np.uint32, 2**32 - 1),  # fits uint32, past every table
]


def _nnx_block(**extra):
    from flax import nnx

    spec = fp.InputSpec(10, fp.PositionSpec(dim=4, num_positions=8), **extra)
    return fp.nnx.TransformerInput(spec, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("dtype,value", WIDE, ids=lambda v: str(v))
@pytest.mark.parametrize("argument", ["input_ids", "position_ids", "token_type_ids"])
def test_wide_host_ids_are_refused_not_wrapped(dtype, value, argument):
    module = _nnx_block(type_vocab_size=2)
    ids = np.array([[1]], np.int64)
    wide = np.array([[value]], dtype)
    kwargs = {} if argument == "input_ids" else {argument: wide}
    with pytest.raises(PositionLimitError, match=str(value)):
        module(wide if argument == "input_ids" else ids, **kwargs)


@pytest.mark.parametrize("dtype,value", WIDE[:3], ids=lambda v: str(v))
def test_wide_host_ids_are_refused_by_the_functional_core_and_linen(dtype, value):
    import jax.numpy as jnp

    spec = fp.InputSpec(10, fp.PositionSpec(dim=4, num_positions=8))
    params = {"word_embeddings": jnp.ones((10, 4)), "position_embeddings": jnp.ones((8, 4))}
    with pytest.raises(PositionLimitError, match=str(value)):
        block.transformer_input(spec, params, np.array([[1]]), position_ids=np.array([[value]], dtype))
    module = fp.linen.TransformerInput(spec)
    with pytest.raises(PositionLimitError, match=str(value)):
        module.apply({"params": params}, np.array([[1]]), position_ids=np.array([[value]], dtype))


@pytest.mark.parametrize("value", [1, 7])
def test_wide_dtypes_inside_the_table_read_the_right_row(value):
    """The general case's other half: an int64/uint64 id inside the table still reads its row."""
    module = _nnx_block()
    want = np.asarray(module(np.array([[value]], np.int32), position_ids=np.array([[value]], np.int32)))
    for dtype in (np.int64, np.uint64):
        got = module(np.array([[value]], dtype), position_ids=np.array([[value]], dtype))
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("segments", [[2**32 + 1, 1], [1, 2**32 + 1], [-(2**32) + 7, 7], [2**31, -(2**31)]])
def test_packed_positions_never_merge_wrapped_segment_ids(segments):
    with pytest.raises(ValueError, match="segment_ids: expected integers that fit int32"):
        fp.packed_positions(np.array([segments], np.int64))


def test_packed_positions_of_wide_dtypes_in_range_match_a_reference():
    segments = np.array([[3, 3, 9, 9, 9, 0]], np.int64)
    want = [[0, 1, 0, 1, 2, 0]]  # index since the segment started, counted by hand
    assert np.asarray(fp.packed_positions(segments)).tolist() == want
    assert np.asarray(fp.packed_positions(segments.astype(np.uint64))).tolist() == want


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_bucket_of_wide_distances_matches_t5(bidirectional):
    """T5's own bucket function (torch, int64) is the reference; jnp.asarray would wrap these."""
    torch = pytest.importorskip("torch")
    from transformers.models.t5.modeling_t5 import T5Attention

    distances = np.array(
        [2**32 + 1, -(2**32) - 1, 2**31, -(2**31), -(2**31) + 1, 2**40, -(2**40), 5, -5, 0, 127, -128], np.int64
    )
    want = T5Attention._relative_position_bucket(
        torch.from_numpy(distances), bidirectional=bidirectional, num_buckets=32, max_distance=128
    ).numpy()
    got = fp.relative_position_bucket(distances, bidirectional=bidirectional, num_buckets=32, max_distance=128)
    np.testing.assert_array_equal(np.asarray(got), want)
    unsigned = np.array([2**32 + 1, 2**63, 3], np.uint64)
    want_u = T5Attention._relative_position_bucket(
        torch.tensor([2**40, 2**40, 3]), bidirectional=bidirectional, num_buckets=32, max_distance=128
    ).numpy()
    got_u = fp.relative_position_bucket(unsigned, bidirectional=bidirectional, num_buckets=32, max_distance=128)
    np.testing.assert_array_equal(np.asarray(got_u), want_u)


# --------------------------------------------------------------------------- the functional path on numpy
# docs/conversion.md: spec, params = load_pretrained(path); block.transformer_input(spec, params, ids).
# load_pretrained gives numpy arrays; the core takes array-likes as JAX functions do.


@pytest.fixture(scope="module")
def bert_sources(tiny_checkpoint, tmp_path_factory):
    ckpt = tiny_checkpoint("bert")
    out = tmp_path_factory.mktemp("numpy_path")
    return ckpt, {
        "directory": ckpt.path,
        "safetensors": ckpt.path / "model.safetensors",
        "converted.safetensors": save_converted(ckpt.path, out / "c.safetensors"),
        "converted.msgpack": save_converted(ckpt.path, out / "c.msgpack"),
    }


@pytest.mark.parametrize("kind", ["directory", "safetensors", "converted.safetensors", "converted.msgpack"])
def test_documented_functional_path_on_numpy_params(bert_sources, kind):
    torch = pytest.importorskip("torch")
    ckpt, sources = bert_sources
    spec, params = load_pretrained(sources[kind])
    assert any(isinstance(v, np.ndarray) for v in params.values())  # the case at hand: numpy parameters
    ids = np.array([[5, 17, 3, 99], [0, 1, 2, 3]])
    types = np.array([[0, 0, 1, 1], [1, 0, 1, 0]])
    got = np.asarray(block.transformer_input(spec, params, ids, token_type_ids=types))
    with torch.no_grad():
        want = ckpt.model.embeddings(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # positions from a length and a start, and the tied head, on the same numpy params
    tail = np.asarray(block.transformer_input(spec, params, ids[:, 2:], start=2, token_type_ids=types[:, 2:]))
    np.testing.assert_allclose(tail, want[:, 2:], rtol=1e-5, atol=1e-5)
    logits = np.asarray(block.attend(spec, params["word_embeddings"], got))
    word = np.asarray(params["word_embeddings"], np.float64)
    np.testing.assert_allclose(logits, got.astype(np.float64) @ word.T, rtol=1e-4, atol=1e-4)


def test_encode_positions_on_a_numpy_table():
    table = np.arange(12.0, dtype=np.float32).reshape(6, 2)
    spec = fp.PositionSpec(dim=2, num_positions=6)
    assert np.asarray(block.encode_positions(spec, table, length=2, start=3)).tolist() == [[6.0, 7.0], [8.0, 9.0]]
    assert np.asarray(block.encode_positions(spec, table, np.array([5, 0]))).tolist() == [[10.0, 11.0], [0.0, 1.0]]
    with pytest.raises(PositionLimitError):
        block.encode_positions(spec, table, np.array([6]))

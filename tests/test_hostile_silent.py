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


# --------------------------------------------------------------------------- config and GGUF readings


def _gguf_with(path, arch="llama", *, floats=None, uints=None, scaling=None):
    from test_gguf import write_rope

    gguf = pytest.importorskip("gguf")
    path = write_rope(path, arch, scaling=scaling)
    if not floats and not uints:
        return path
    # re-write with the extra keys (write_rope's extra_kv writes uint32 only)
    reader = gguf.GGUFReader(path)
    w = gguf.GGUFWriter(str(path) + ".tmp", arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = gguf.GGUFValueType(int(field.types[0]))
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = gguf.GGUFValueType(int(field.types[1]))
            w.add_array(
                field.name,
                [
                    field.parts[i].tolist()[0] if sub != gguf.GGUFValueType.STRING else bytes(field.parts[i])
                    for i in field.data
                ],
            )
        else:
            w.add_key_value(field.name, field.contents(), vtype)
    for key, value in (floats or {}).items():
        w.add_float32(key, value)
    for key, value in (uints or {}).items():
        w.add_int32(key, value)
    for t in reader.tensors:
        w.add_tensor(t.name, np.array(t.data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    import os

    os.replace(str(path) + ".tmp", path)
    return path


SCALE_LINEAR = [
    # (llama.rope.scale_linear, other scaling keys, the scaling llama.cpp applies)
    (4.0, None, {"rope_type": "linear", "factor": 4.0}),
    (2.5, None, {"rope_type": "linear", "factor": 2.5}),
    (
        4.0,
        {"type": "yarn", "original_context_length": 64},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    ),
    (4.0, {"type": "linear", "factor": 2.0}, {"rope_type": "linear", "factor": 2.0}),  # the newer key wins
    (0.0, None, None),  # llama.cpp: 0 means no scaling
    (1.0, None, None),
]


@pytest.mark.parametrize("legacy,scaling,applied", SCALE_LINEAR)
def test_gguf_older_scale_linear_key_is_read_as_llama_cpp_applies_it(tmp_path, legacy, scaling, applied):
    from test_gguf import CONTEXT, THETA, hf_inv_freq, transformers_config
    from transformers import LlamaConfig

    from flax_posenc.conversion import inspect_source
    from flax_posenc.rope_config import rope_inverse_frequencies

    path = _gguf_with(tmp_path / "old.gguf", floats={"llama.rope.scale_linear": legacy}, scaling=scaling)
    rope = inspect_source(path).mechanisms[0].rope
    loaded = transformers_config(path)  # transformers' loader: the unscaled part
    parameters = {"rope_theta": THETA, "rope_type": "default"} if applied is None else {"rope_theta": THETA, **applied}
    reference = LlamaConfig(**{**loaded.to_dict(), "rope_parameters": parameters})
    inv, scale = rope_inverse_frequencies(rope)
    inv_hf, scale_hf = hf_inv_freq(reference)
    np.testing.assert_allclose(inv, inv_hf, rtol=1e-6, atol=0)
    np.testing.assert_allclose(scale, scale_hf, rtol=1e-6)
    want_type = "default" if applied is None else applied["rope_type"]
    assert rope.rope_type == want_type
    if want_type == "linear":
        assert rope.limit == int(applied["factor"] * CONTEXT)


@pytest.mark.parametrize("count", [0, -1])
def test_gguf_block_count_not_positive_is_refused_naming_the_key(tmp_path, count, capsys):
    from flax_posenc.conversion import rope_for_layer
    from flax_posenc.errors import CheckpointError

    path = _gguf_with(tmp_path / "b.gguf", uints={"llama.block_count": count})
    with pytest.raises(CheckpointError) as info:
        rope_for_layer(path, 5)
    message = str(info.value)
    assert "\n" not in message and "llama.block_count" in message and str(count) in message, message


@pytest.mark.parametrize("count", [0, -1, "2", 2.0, True, [2], {"n": 2}])
def test_invalid_layer_count_is_refused_not_read_as_missing(tmp_path, count):
    import json

    from flax_posenc.conversion import rope_for_layer
    from flax_posenc.errors import CheckpointError

    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "max_position_embeddings": 64,
        "num_hidden_layers": count,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    for layer in (0, 5):
        with pytest.raises(CheckpointError) as info:
            rope_for_layer(tmp_path, layer)
        # the count itself refused (0 is not read as "no layers": then layer 0 would be "past the end")
        assert "expected num_hidden_layers as a positive integer" in str(info.value), str(info.value)
        assert "\n" not in str(info.value)


def test_valid_layer_count_bounds_the_layer(tmp_path):
    import json

    from flax_posenc.conversion import rope_for_layer
    from flax_posenc.errors import CheckpointError

    base = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 64}
    (tmp_path / "config.json").write_text(json.dumps({**base, "num_hidden_layers": 2}))
    assert rope_for_layer(tmp_path, 1).head_dim == 16
    with pytest.raises(CheckpointError, match="2 layers"):
        rope_for_layer(tmp_path, 2)


MPT_ATTN = [{}, {"alibi": False}, {"alibi_bias_max": 16}, {"alibi": False, "alibi_bias_max": 4}, {"alibi": True}]


@pytest.mark.parametrize("attn", MPT_ATTN, ids=lambda a: str(a))
def test_mpt_record_holds_the_alibi_mptmodel_applies(tmp_path, attn):
    """The reference is the position bias MptModel's forward passes to its blocks."""
    torch = pytest.importorskip("torch")
    from transformers import MptConfig, MptModel

    from flax_posenc.alibi_config import alibi_slopes
    from flax_posenc.conversion import inspect_source

    heads, seq = 6, 16
    config = MptConfig(n_heads=heads, d_model=48, n_layers=1, max_seq_len=seq, vocab_size=20, attn_config=attn)
    config.save_pretrained(tmp_path)
    record = inspect_source(tmp_path)
    assert [m.kind for m in record.mechanisms] == ["alibi"], record.mechanisms
    ours = record.mechanisms[0].alibi
    model = MptModel(config).eval()
    seen = {}
    model.blocks[0].register_forward_pre_hook(lambda m, a, kw: seen.update(bias=kw["position_bias"]), with_kwargs=True)
    with torch.no_grad():
        model(torch.zeros((1, 4), dtype=torch.long))
    bias = seen["bias"].double().numpy()  # (heads, 1, seq): slope * (j - (seq - 1))
    theirs = -bias[:, 0, seq - 2]
    np.testing.assert_allclose(alibi_slopes(heads, max_bias=ours.max_bias), theirs, rtol=1e-6)
    assert ours.num_heads == heads and record.limit == seq


@pytest.mark.parametrize("bad", [[8], "8", 1e308, True])
def test_mpt_mistyped_alibi_bias_max_is_still_refused(tmp_path, bad):
    import json

    from flax_posenc.conversion import inspect_source
    from flax_posenc.errors import CheckpointError

    config = {"model_type": "mpt", "n_heads": 4, "d_model": 64, "attn_config": {"alibi_bias_max": bad}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="alibi_bias_max"):
        inspect_source(tmp_path)


# --------------------------------------------------------------------------- on_overflow at construction


def _position_modules(on_overflow):
    from flax import nnx

    learned = fp.PositionSpec(dim=4, num_positions=8)
    sinusoid = fp.PositionSpec("sinusoidal", dim=4)
    return {
        "nnx.SinusoidalPositionalEncoding": lambda: fp.nnx.SinusoidalPositionalEncoding(
            sinusoid, on_overflow=on_overflow
        ),
        "nnx.LearnedPositionalEmbedding": lambda: fp.nnx.LearnedPositionalEmbedding(
            learned, on_overflow=on_overflow, rngs=nnx.Rngs(0)
        ),
        "nnx.RotaryEmbedding": lambda: fp.nnx.RotaryEmbedding(fp.RopeConfig(head_dim=4), on_overflow=on_overflow),
        "linen.SinusoidalPositionalEncoding": lambda: fp.linen.SinusoidalPositionalEncoding(
            sinusoid, on_overflow=on_overflow
        ),
        "linen.LearnedPositionalEmbedding": lambda: fp.linen.LearnedPositionalEmbedding(
            learned, on_overflow=on_overflow
        ),
    }


@pytest.mark.parametrize("value", [None, "clamp", "", 0, "ERROR"])
@pytest.mark.parametrize("module", sorted(_position_modules(None)))
def test_position_modules_refuse_a_non_policy_at_construction(module, value):
    with pytest.raises(ValueError) as info:
        _position_modules(value)[module]()
    assert str(info.value) == f"on_overflow: expected one of ('error', 'clip', 'fill'), got {value!r}"


def test_input_block_none_means_error_as_documented():
    import jax
    from flax import nnx

    spec = fp.InputSpec(10, fp.PositionSpec(dim=4, num_positions=8))
    module = fp.nnx.TransformerInput(spec, on_overflow=None, rngs=nnx.Rngs(0))
    assert module.on_overflow == "error"
    run_time = (PositionLimitError, jax.errors.JaxRuntimeError)  # plain jit: the limit's message at run time
    with pytest.raises(run_time, match="position table holds 8 positions"):  # not a clamp
        jax.jit(lambda p: module(np.array([[1]]), position_ids=p))(np.array([[8]], np.int32)).block_until_ready()
    linen = fp.linen.TransformerInput(spec, on_overflow=None)
    params = {"word_embeddings": np.ones((10, 4), np.float32), "position_embeddings": np.ones((8, 4), np.float32)}
    with pytest.raises(run_time, match="position table holds 8 positions"):
        jax.jit(lambda p: linen.apply({"params": params}, np.array([[1]]), position_ids=p))(
            np.array([[8]], np.int32)
        ).block_until_ready()
    for bad in ("clamp", 0):
        with pytest.raises(ValueError, match="on_overflow: expected one of"):
            fp.nnx.TransformerInput(spec, on_overflow=bad, rngs=nnx.Rngs(0))
        with pytest.raises(ValueError, match="on_overflow: expected one of"):
            fp.linen.TransformerInput(spec, on_overflow=bad)


# --------------------------------------------------------------------------- which tensors a GGUF's layout is for


def _llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf ``LlamaModel.permute`` (Q/K rows for its rotation)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_gguf_record_says_which_tensors_its_layout_is_for(tmp_path, arch, capsys):
    """Attention scores from the file's own Q/K rotated in the layout the record names for them
    equal those from transformers' un-permuted Q/K rotated in ``rope.layout``."""
    pytest.importorskip("gguf")
    from test_gguf import HEADS, HIDDEN, KV_HEADS, write_rope
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from flax_posenc.conversion import inspect_source
    from flax_posenc.conversion.gguf_source import GGUF_OWN_TENSOR_LAYOUT

    rng = np.random.default_rng(3)
    head_dim = HIDDEN // HEADS
    q_hf = rng.standard_normal((HEADS * head_dim, HIDDEN)).astype(np.float32)
    k_hf = rng.standard_normal((KV_HEADS * head_dim, HIDDEN)).astype(np.float32)
    stored = (_llama_cpp_permute(q_hf, HEADS), _llama_cpp_permute(k_hf, KV_HEADS)) if arch == "llama" else (q_hf, k_hf)
    path = write_rope(
        tmp_path / f"{arch}.gguf",
        arch,
        dims=None,
        extra={"blk.0.attn_q.weight": stored[0], "blk.0.attn_k.weight": stored[1]},
    )
    record = inspect_source(path)
    mech = record.mechanisms[0]
    rope = mech.rope
    own = GGUF_OWN_TENSOR_LAYOUT[arch]
    d = record.to_dict()["mechanisms"][0]
    sentence = d["tensors"]
    assert f"layout {rope.layout} is for the Hugging Face q_proj/k_proj" in sentence
    assert (f"rotate them in layout {own}" in sentence) == (own != rope.layout), sentence
    from flax_posenc.report.cli import main

    capsys.readouterr()
    assert main(["inspect", str(path)]) == 0
    assert f"tensors:     {sentence}" in capsys.readouterr().out.splitlines()
    from test_gguf import transformers_config
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(transformers_config(path))
    loaded = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    hf_q = np.asarray(loaded["model.layers.0.self_attn.q_proj.weight"], np.float32)
    np.testing.assert_array_equal(hf_q, q_hf)  # transformers un-permutes the file's rows
    x = rng.standard_normal((1, 5, HIDDEN)).astype(np.float32)

    def scores(wq, wk, layout):
        import dataclasses

        cfg = dataclasses.replace(rope, layout=layout)
        q = (x @ wq.T).reshape(1, 5, HEADS, head_dim)
        k = (x @ wk.T).reshape(1, 5, KV_HEADS, head_dim)
        q, k = np.asarray(fp.apply_rope(q, cfg), np.float64), np.asarray(fp.apply_rope(k, cfg), np.float64)
        k = np.repeat(k, HEADS // KV_HEADS, axis=2)
        return np.einsum("bqhd,bkhd->bhqk", q, k)

    want = scores(q_hf, k_hf, rope.layout)
    np.testing.assert_allclose(scores(*stored, own), want, rtol=1e-4, atol=1e-3)
    if own != rope.layout:  # the other layout on the file's own tensors is wrong: the statement matters
        assert not np.allclose(scores(*stored, rope.layout), want, rtol=1e-2, atol=1e-1)

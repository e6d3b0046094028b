"""TransformerInput built from an InputSpec; extend_input; the versioned ``.msgpack`` (v1 still read).

References are independent of the library: a float64 numpy tile/linear resampling written from
the definitions, a version-1 file written here by the old format's own writer (the flat
constructor arguments the old ``module_arguments`` produced for this checkpoint, typed out).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from flax import nnx, serialization
from safetensors.numpy import save_file

import flax_posenc as fp
from flax_posenc.block import InputSpec
from flax_posenc.conversion.source_record import inspect_source
from flax_posenc.errors import CheckpointError
from flax_posenc.extend import extend_input
from flax_posenc.pretrained import converted_position_table, load_pretrained, save_converted
from flax_posenc.report import cli

VOCAB, DIM, ROWS, OFFSET = 11, 4, 8, 2  # a RoBERTa-like block: 2 reserved rows, 6 positions
FLAT = dict(
    num_positions=6,
    position_offset=2,
    positions_from="attention_mask",
    type_vocab_size=2,
    layer_norm=True,
    layer_norm_eps=1e-5,
    embed_scale=2,
    position_name="my table",
)


def _ids(seed=0, shape=(2, 6)):
    return jnp.asarray(np.random.default_rng(seed).integers(2, VOCAB, shape), jnp.int32)


# --------------------------------------------------------------------------- spec == flat kwargs


def test_nnx_and_linen_from_spec_equal_from_flat_kwargs_under_jit():
    spec = InputSpec.from_arguments(VOCAB, DIM, **FLAT)
    assert spec.embed_scale == 2.0 and isinstance(spec.embed_scale, float)
    flat = fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, **FLAT, rngs=nnx.Rngs(3))
    keyword = fp.nnx.TransformerInput.from_arguments(vocab_size=VOCAB, dim=DIM, **FLAT, rngs=nnx.Rngs(3))
    from_spec = fp.nnx.TransformerInput(spec, rngs=nnx.Rngs(3))
    assert flat.spec == keyword.spec == from_spec.spec == spec
    ids, mask = _ids(), jnp.asarray([[1] * 6, [0, 0, 1, 1, 1, 1]])
    types = (ids % 2).astype(jnp.int32)
    call = nnx.jit(lambda m, i, t, a: m(i, token_type_ids=t, attention_mask=a))
    expected = np.asarray(call(flat, ids, types, mask))
    np.testing.assert_array_equal(np.asarray(call(from_spec, ids, types, mask)), expected)
    np.testing.assert_array_equal(np.asarray(call(keyword, ids, types, mask)), expected)

    linen_flat = fp.linen.TransformerInput.from_arguments(VOCAB, DIM, **FLAT, dropout_rate=0.1)
    linen_spec = fp.linen.TransformerInput(spec, dropout_rate=0.1)
    assert linen_flat == linen_spec and hash(linen_flat) == hash(linen_spec)
    assert (linen_spec.vocab_size, linen_spec.dim, linen_spec.num_positions) == (VOCAB, DIM, 6)
    variables = {"params": flat.params()}  # the NNX parameters: same names, same numbers
    apply = jax.jit(lambda m, v, i, t, a: m.apply(v, i, token_type_ids=t, attention_mask=a), static_argnums=0)
    for module in (linen_flat, linen_spec):
        np.testing.assert_array_equal(np.asarray(apply(module, variables, ids, types, mask)), expected)


def test_flat_calls_are_first_class_and_build_what_from_arguments_builds():
    """``TransformerInput(vocab_size, dim, ...)`` as ``nnx.Embed(num_embeddings, features, ...)``: no warning."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        old = fp.nnx.TransformerInput(VOCAB, DIM, **FLAT, dropout_rate=0.1, rngs=nnx.Rngs(3))
        linen_old = fp.linen.TransformerInput(vocab_size=VOCAB, dim=DIM, **FLAT, dropout_rate=0.1)
    assert [str(w.message) for w in seen] == []
    new = fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, **FLAT, dropout_rate=0.1, rngs=nnx.Rngs(3))
    assert old.spec == new.spec and old.dropout.rate == new.dropout.rate == 0.1
    jax.tree.map(np.testing.assert_array_equal, old.params(), new.params())
    linen_new = fp.linen.TransformerInput.from_arguments(VOCAB, DIM, **FLAT, dropout_rate=0.1)
    assert linen_old == linen_new and linen_new.spec == new.spec and linen_new.dropout_rate == 0.1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the spec forms, clone and Linen's own machinery do not warn
        ids = _ids()
        variables = linen_new.init(jax.random.key(0), ids)
        linen_new.clone(dropout_rate=0.0).apply(variables, ids)
        nn.jit(fp.linen.TransformerInput)(new.spec).init(jax.random.key(0), ids)
        fp.nnx.TransformerInput(new.spec, rngs=nnx.Rngs(0))


def test_spec_and_flat_arguments_together_are_refused():
    spec = InputSpec.from_arguments(VOCAB, DIM, num_positions=6)
    with pytest.raises(TypeError, match=r"expected an InputSpec or flat arguments .* found both: a spec and \['dim'\]"):
        fp.nnx.TransformerInput(spec, DIM, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"found both: a spec and \['num_positions'\]"):
        fp.linen.TransformerInput(spec, num_positions=7)
    with pytest.raises(TypeError, match="got vocab_size twice"):
        fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, vocab_size=VOCAB, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"InputSpec: unknown argument \['num_position'\], expected some of \["):
        fp.linen.TransformerInput.from_arguments(VOCAB, DIM, num_position=6)
    with pytest.raises(TypeError, match=r"unknown argument \['num_position'\]"):  # a typo is named, even beside a spec
        fp.nnx.TransformerInput(spec, num_position=6, rngs=nnx.Rngs(0))


def test_old_name_keywords_warn_and_still_name_the_table():
    with pytest.warns(DeprecationWarning, match="name: deprecated, use position_name"):
        wpe = fp.nnx.LearnedPositionalEmbedding.from_arguments(4, DIM, name="old wpe", rngs=nnx.Rngs(0))
    with pytest.raises(fp.PositionLimitError, match="^old wpe holds 4 positions"):
        wpe(length=5)
    with pytest.raises(fp.PositionLimitError, match="^new wpe holds 4 positions"):
        fp.nnx.LearnedPositionalEmbedding.from_arguments(4, DIM, position_name="new wpe", rngs=nnx.Rngs(0))(length=5)
    with pytest.warns(DeprecationWarning, match="table_name: deprecated"):
        sinusoid = fp.linen.SinusoidalPositionalEncoding.from_arguments(DIM, num_positions=4, table_name="old sin")
    with pytest.raises(fp.PositionLimitError, match="^old sin holds 4 positions"):
        sinusoid.apply({}, length=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new keyword: no warning
        with pytest.raises(fp.PositionLimitError, match="^new sin holds 4 positions"):
            fp.linen.SinusoidalPositionalEncoding.from_arguments(DIM, num_positions=4, position_name="new sin").apply(
                {}, length=5
            )


# --------------------------------------------------------------------------- extend_input


def _reference(table: np.ndarray, new_length: int, method: str, offset: int) -> np.ndarray:
    """float64 numpy, from the definitions: tile row p = trained row p mod L; linear = np.interp."""
    trained = table[offset:].astype(np.float64)
    length = trained.shape[0]
    if method == "tile":
        grown = np.stack([trained[p % length] for p in range(new_length)])
    else:
        x = np.linspace(0.0, length - 1, new_length)  # align_corners: first and last rows kept
        grown = np.stack([np.interp(x, np.arange(length), trained[:, d]) for d in range(trained.shape[1])], -1)
    return np.concatenate([table[:offset].astype(np.float64), grown])


@pytest.mark.parametrize("method", ["tile", "linear"])
def test_extend_input_and_both_shells_match_the_float64_reference(method):
    block = fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, **FLAT, rngs=nnx.Rngs(0))
    params = block.params()
    spec, grown = extend_input(block.spec, params, 15, method=method)
    reference = _reference(np.asarray(params["position_embeddings"]), 15, method, OFFSET)
    np.testing.assert_allclose(grown["position_embeddings"], reference, rtol=1e-6, atol=1e-7)  # float32 table
    assert grown["position_embeddings"].dtype == np.float32 and spec.position.num_positions == 15
    assert spec == block.spec.replace(num_positions=15)
    assert all(grown[k] is params[k] for k in params if k != "position_embeddings")  # shared, not copied

    # a float64 table: the reference to the last bit (tile) / to rounding (linear)
    table64 = np.random.default_rng(1).standard_normal((ROWS, DIM))
    _, grown64 = extend_input(block.spec, {**params, "position_embeddings": table64}, 15, method=method)
    np.testing.assert_allclose(grown64["position_embeddings"], _reference(table64, 15, method, OFFSET), rtol=1e-13)

    longer = block.extend_positions(15, method=method)
    module, variables = fp.linen.TransformerInput(block.spec).extend_positions({"params": params}, 15, method=method)
    assert longer.spec == module.spec == spec
    np.testing.assert_array_equal(np.asarray(longer.position_embeddings[...]), grown["position_embeddings"])
    np.testing.assert_array_equal(nn.unbox(variables)["params"]["position_embeddings"], grown["position_embeddings"])
    ids = _ids(2, (1, 15))
    out = nnx.jit(lambda m, i: m(i))(longer, ids)
    np.testing.assert_array_equal(np.asarray(jax.jit(module.apply)(variables, ids)), np.asarray(out))


def test_extend_input_refuses_what_it_cannot_grow():
    sinusoidal = InputSpec.from_arguments(VOCAB, DIM, position="sinusoidal")
    with pytest.raises(ValueError, match="only a learned table can be extended, this block's position is 'sinusoidal'"):
        extend_input(sinusoidal, {"word_embeddings": np.zeros((VOCAB, DIM))}, 10)
    spec = InputSpec.from_arguments(VOCAB, DIM, num_positions=6)
    with pytest.raises(
        ValueError, match=r"position_embeddings.*expected the spec's table of shape \(6, 4\), found \(5, 4\)"
    ):
        extend_input(spec, {"position_embeddings": np.zeros((5, DIM))}, 10)
    with pytest.raises(ValueError, match="new_length: expected an integer larger than the current 6 positions"):
        extend_input(spec, {"position_embeddings": np.zeros((6, DIM))}, 6)


# --------------------------------------------------------------------------- the .msgpack, v1 and v2

# what the old ``module_arguments`` (flat constructor arguments) returned for _roberta()
V1_CONFIG = {
    "vocab_size": VOCAB,
    "dim": DIM,
    "num_positions": ROWS - OFFSET,
    "position": "learned",
    "position_offset": OFFSET,
    "positions_from": "non_padding_ids",
    "pad_token_id": 1,
    "embed_scale": 1.0,
    "type_vocab_size": 1,
    "layer_norm": True,
    "layer_norm_eps": 1e-05,
    "position_name": "roberta position table (embeddings.position_embeddings.weight)",
}


def _roberta(folder: Path) -> tuple[Path, dict]:
    rng = np.random.default_rng(0)
    tensors = {
        "embeddings.word_embeddings.weight": rng.standard_normal((VOCAB, DIM)).astype(np.float32),
        "embeddings.position_embeddings.weight": rng.standard_normal((ROWS, DIM)).astype(np.float32),
        "embeddings.token_type_embeddings.weight": rng.standard_normal((1, DIM)).astype(np.float32),
        "embeddings.LayerNorm.weight": rng.standard_normal(DIM).astype(np.float32),
        "embeddings.LayerNorm.bias": rng.standard_normal(DIM).astype(np.float32),
    }
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    config = {"model_type": "roberta", "max_position_embeddings": ROWS, "pad_token_id": 1, "hidden_size": DIM}
    config.update(vocab_size=VOCAB, type_vocab_size=1, layer_norm_eps=1e-5)
    (folder / "config.json").write_text(json.dumps(config))
    params = {
        "word_embeddings": tensors["embeddings.word_embeddings.weight"],
        "position_embeddings": tensors["embeddings.position_embeddings.weight"],
        "token_type_embeddings": tensors["embeddings.token_type_embeddings.weight"],
        "layer_norm": {"scale": tensors["embeddings.LayerNorm.weight"], "bias": tensors["embeddings.LayerNorm.bias"]},
    }
    return folder, params


def _write_v1(path: Path, config: dict, params: dict) -> Path:
    """The version-1 writer (the old ``save_converted``'s blob): no format, no version."""
    path.write_bytes(serialization.msgpack_serialize({"config": config, "params": params}))
    return path


@pytest.fixture
def converted(tmp_path):
    src, params = _roberta(tmp_path / "roberta")
    v1 = _write_v1(tmp_path / "v1.msgpack", V1_CONFIG, params)
    v2 = save_converted(src, tmp_path / "v2.msgpack")
    return src, params, v1, v2


def test_msgpack_v1_and_v2_load_to_identical_specs_params_and_outputs(converted, capsys):
    src, params, v1, v2 = converted
    blob = serialization.msgpack_restore(v2.read_bytes())
    assert (blob["format"], blob["version"], sorted(blob)) == (
        "flax-posenc/input-spec",
        2,
        ["format", "params", "spec", "version"],
    )
    assert blob["spec"]["position"]["num_positions"] == ROWS - OFFSET and blob["spec"]["dtype"] is None

    (spec1, params1), (spec2, params2), (spec0, params0) = (load_pretrained(p) for p in (v1, v2, src))
    assert spec1 == spec2 == spec0 == InputSpec.from_arguments(**V1_CONFIG)
    for loaded in (params1, params2, params0):
        jax.tree.map(np.testing.assert_array_equal, loaded, params)

    ids = jnp.asarray([[0, 5, 7, 1, 1], [3, 4, 1, 9, 10]], jnp.int32)  # pad_token_id 1 inside
    call = nnx.jit(lambda m, i: m(i))
    outputs = [np.asarray(call(fp.nnx.TransformerInput.from_pretrained(p), ids)) for p in (src, v1, v2)]
    np.testing.assert_array_equal(outputs[1], outputs[0])
    np.testing.assert_array_equal(outputs[2], outputs[0])
    for p in (v1, v2):
        module, variables = fp.linen.TransformerInput.from_pretrained(p)
        np.testing.assert_array_equal(np.asarray(jax.jit(module.apply)(variables, ids)), outputs[0])

    tables = [converted_position_table(p) for p in (v1, v2)]  # what inspect/check read
    for t in tables:
        assert (t.family, t.key, t.offset, t.num_positions) == (
            "roberta",
            "embeddings.position_embeddings.weight",
            2,
            6,
        )
        np.testing.assert_array_equal(t.weights, params["position_embeddings"])
    records = [json.loads(json.dumps(inspect_source(p).to_dict()).replace(str(p), "SOURCE")) for p in (v1, v2)]
    assert records[0] == records[1]
    for p in (v1, v2):
        assert cli.main(["check", str(p), "--length", "7"]) == 1
        assert "holds 6 positions" in capsys.readouterr().err


def test_from_pretrained_overrides_go_to_the_spec_or_the_module(converted):
    _, _, _, v2 = converted
    block = fp.nnx.TransformerInput.from_pretrained(
        v2, on_overflow="clip", position_name="mine", dropout_rate=0.5, dtype=jnp.bfloat16
    )
    assert (block.on_overflow, block.spec.position.name, block.spec.dtype) == ("clip", "mine", "bfloat16")
    assert block.dropout.rate == 0.5
    module, _ = fp.linen.TransformerInput.from_pretrained(v2, on_overflow="clip", dropout_rate=0.5)
    assert (module.on_overflow, module.dropout_rate) == ("clip", 0.5)


@pytest.mark.parametrize(
    "patch, found",
    [
        ({"version": 3}, "found version 3"),
        ({"version": "2"}, "found version '2'"),
        ({"version": True}, "found version True"),
        ({"format": "other"}, "expected format 'flax-posenc/input-spec', found 'other'"),
        ({"spec": {"vocab_size": VOCAB}}, "expected a valid 'spec' (version 2)"),
    ],
)
def test_bad_version_or_spec_is_one_checkpoint_error_line(converted, capsys, patch, found):
    _, _, _, v2 = converted
    blob = serialization.msgpack_restore(v2.read_bytes())
    v2.write_bytes(serialization.msgpack_serialize({**blob, **patch}))
    with pytest.raises(CheckpointError) as info:
        load_pretrained(v2)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{v2}: expected ") and found in message
    if "version" in patch:
        assert "expected a flax-posenc msgpack of version 1 or 2" in message
    assert cli.main(["inspect", str(v2)]) == 2
    assert found in capsys.readouterr().err

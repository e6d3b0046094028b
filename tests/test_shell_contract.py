"""THE shell contract: every (spec, NNX class, Linen class) row obeys the same five rules.

For each module the library ships in both frameworks:

1. its parameters have the documented names and shapes (the same in NNX and Linen);
2. NNX and Linen give identical outputs for identical parameters;
3. a call under ``jit``, ``vmap`` and ``lax.scan`` equals the eager calls one example at a time
   (within float32 roundings: 1e-6; jitted NNX and jitted Linen exactly);
4. every parameter carries its documented logical axes (NNX ``out_sharding``, Linen boxes);
5. ``from_pretrained`` round-trips: the module written to its checkpoint format and read back
   has the same parameters and outputs (rows with a checkpoint format);
6. it is built from a spec plus module concerns: ``Module.from_arguments(*flat)`` builds what
   ``Module(spec)`` builds (same spec, parameter shapes and outputs), and so does the flat call
   ``Module(*flat)``, first-class as in ``nnx.Embed(num_embeddings, features, rngs=...)``: no
   warning (rows with flat arguments; RoPE and ALiBi take their config).

References are the row's own eager calls one example at a time (for 2 and 3) and the expected
names, shapes and axes written out below from the module docstrings (for 1 and 4). What each
module computes is checked against float64 numpy and transformers elsewhere.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from flax import nnx
from flax.traverse_util import flatten_dict
from safetensors.numpy import save_file

import flax_posenc as fp
from flax_posenc.block import InputSpec, PositionSpec

V, D, P, H = 11, 8, 6, 3  # vocabulary, width, positions, heads
B = 3  # examples stacked for vmap / scan


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    nnx: Callable[[], Any]  # the NNX module (random parameters)
    linen: Callable[[], Any]  # the Linen module
    call: Callable[..., tuple[tuple, dict]]  # one example -> (args, kwargs) of a call
    example: Callable[[int], Any]  # seed -> one example's array
    params: dict[str, tuple[tuple[int, ...], tuple]]  # "a/b" -> (shape, logical axes)
    pretrained: Callable[[Path, Any], Any] | None = None  # (folder, NNX module) -> SOURCE written from it
    flat: tuple[tuple, dict] | None = None  # the flat arguments of from_arguments building the same module


def _ints(high, shape):
    return lambda seed: jnp.asarray(np.random.default_rng(seed).integers(0, high, shape), jnp.int32)


def _floats(shape):
    return lambda seed: jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


BERT = InputSpec.from_arguments(V, D, num_positions=P, type_vocab_size=2, layer_norm=True)
SINUSOID = InputSpec.from_arguments(V, D, position="sinusoidal", embed_scale=D**0.5)
ROPE = fp.RopeConfig(head_dim=D, max_position_embeddings=P)
GRID = (2, 3)
LEARNED = PositionSpec("learned", dim=D, num_positions=P, offset=2)
SINUSOIDAL = PositionSpec("sinusoidal", dim=D, num_positions=P, layout="concatenated", name="sinusoidal encoding")
RELATIVE = fp.RelativeBiasSpec(H, fp.BucketConfig(32, 128, bidirectional=True))
GRID_SPEC = fp.GridSpec(GRID, D, patch_size=8)
CONV_SPEC = fp.ConvPositionSpec(D, 4, groups=2)  # OmniASR's: one layer, no weight norm, one frame cut


BBOX_SPEC = fp.BboxSpec(P, 2, 1, "concat")


def _boxes(seed: int):
    """Four boxes ``(x0, y0, x1, y1)`` with ``x0 <= x1``, ``y0 <= y1`` in ``0 .. P - 1``."""
    a, b = np.random.default_rng(seed).integers(0, P, (2, 4, 2))
    return jnp.asarray(np.concatenate([np.minimum(a, b), np.maximum(a, b)], -1), jnp.int32)


def _orbax(folder: Path, module) -> Path:
    return fp.save_orbax(folder / "block", module)


def _t5(folder: Path, module) -> Path:
    table = np.asarray(module.embedding[...])
    save_file(
        {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": table},
        str(folder / "model.safetensors"),
    )
    config = {"model_type": "t5", "num_heads": H, "d_model": D, "num_layers": 1, "d_kv": 2}
    config.update(relative_attention_num_buckets=32, relative_attention_max_distance=128, is_encoder_decoder=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _vit(folder: Path, module) -> Path:
    table = np.asarray(module.embedding[...])[None]
    save_file({"vit.embeddings.position_embeddings": table}, str(folder / "model.safetensors"))
    config = {"model_type": "vit", "hidden_size": D, "image_size": [16, 24], "patch_size": 8, "num_channels": 3}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _omniasr_audio(folder: Path, module) -> Path:
    kernel, bias = np.asarray(module.kernel[...]), np.asarray(module.bias[...])
    tensors = {
        "encode_positions.conv.weight": kernel[0].transpose(2, 1, 0).copy(),
        "encode_positions.conv.bias": bias[0],
    }
    save_file(tensors, str(folder / "model.safetensors"))
    config = {"model_type": "omniasr_audio", "hidden_size": D, "num_conv_pos_embeddings": 4, "hidden_act": "gelu"}
    config.update(num_conv_pos_embedding_groups=2, conv_kernel=[10, 3], conv_stride=[5, 2])
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _llama(folder: Path, module) -> Path:
    config = {"model_type": "llama", "hidden_size": 2 * D, "num_attention_heads": 2, "num_hidden_layers": 1}
    config.update(max_position_embeddings=P, rope_theta=10000.0, vocab_size=V, intermediate_size=4)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


ROWS = [
    Row(
        "TransformerInput/learned",
        lambda: fp.nnx.TransformerInput(BERT, rngs=nnx.Rngs(0)),
        lambda: fp.linen.TransformerInput(BERT),
        lambda ids: ((ids,), {}),
        _ints(V, (2, 5)),
        {
            "word_embeddings": ((V, D), ("vocab", "embed")),
            "position_embeddings": ((P, D), (None, "embed")),
            "token_type_embeddings": ((2, D), (None, "embed")),
            "layer_norm/scale": ((D,), ("embed",)),
            "layer_norm/bias": ((D,), ("embed",)),
        },
        _orbax,
        ((V, D), {"num_positions": P, "type_vocab_size": 2, "layer_norm": True}),
    ),
    Row(
        "TransformerInput/sinusoidal",
        lambda: fp.nnx.TransformerInput(SINUSOID, rngs=nnx.Rngs(0)),
        lambda: fp.linen.TransformerInput(SINUSOID),
        lambda ids: ((ids,), {}),
        _ints(V, (2, 5)),
        {"word_embeddings": ((V, D), ("vocab", "embed"))},
        flat=((V, D), {"position": "sinusoidal", "embed_scale": D**0.5}),
    ),
    Row(
        "LearnedPositionalEmbedding",
        lambda: fp.nnx.LearnedPositionalEmbedding(LEARNED, rngs=nnx.Rngs(0)),
        lambda: fp.linen.LearnedPositionalEmbedding(LEARNED),
        lambda positions: ((positions,), {}),
        _ints(P, (5,)),
        {"embedding": ((P + 2, D), (None, "embed"))},
        flat=((P, D), {"offset": 2}),
    ),
    Row(
        "SinusoidalPositionalEncoding",
        lambda: fp.nnx.SinusoidalPositionalEncoding(SINUSOIDAL),
        lambda: fp.linen.SinusoidalPositionalEncoding(SINUSOIDAL),
        lambda positions: ((positions,), {}),
        _ints(P, (5,)),
        {},
        flat=((D,), {"num_positions": P, "layout": "concatenated"}),
    ),
    Row(
        "RotaryEmbedding",
        lambda: fp.nnx.RotaryEmbedding(ROPE),
        lambda: fp.linen.RotaryEmbedding(ROPE),
        lambda x: ((x,), {}),
        _floats((4, 2, D)),
        {},
        _llama,
    ),
    Row(
        "ALiBiBias",
        lambda: fp.nnx.ALiBiBias(fp.AlibiConfig(H, max_positions=P), causal=False),
        lambda: fp.linen.ALiBiBias(fp.AlibiConfig(H, max_positions=P), causal=False),
        lambda positions: ((), {"query_positions": positions, "key_positions": positions}),
        _ints(P, (4,)),
        {},
    ),
    Row(
        "RelativePositionBias",
        lambda: fp.nnx.RelativePositionBias(RELATIVE, rngs=nnx.Rngs(0)),
        lambda: fp.linen.RelativePositionBias(RELATIVE),
        lambda start: ((2, 5), {"query_start": start}),
        _ints(4, ()),
        {"embedding": ((32, H), (None, "heads"))},
        _t5,
        ((H,), {"num_buckets": 32, "max_distance": 128}),
    ),
    Row(
        "PatchPositionalEmbedding",
        lambda: fp.nnx.PatchPositionalEmbedding(GRID_SPEC, rngs=nnx.Rngs(0)),
        lambda: fp.linen.PatchPositionalEmbedding(GRID_SPEC),
        lambda x: ((x,), {}),
        _floats((1 + GRID[0] * GRID[1], D)),
        {"embedding": ((1 + GRID[0] * GRID[1], D), (None, "embed"))},
        _vit,
        (([2, 3], D), {"patch_size": 8}),
    ),
    Row(
        "DetrSinePositionEmbedding",
        lambda: fp.nnx.DetrSinePositionEmbedding(fp.DetrSineConfig(D, offset=-0.5)),
        lambda: fp.linen.DetrSinePositionEmbedding(fp.DetrSineConfig(D, offset=-0.5)),
        lambda mask: ((mask,), {}),
        lambda seed: jnp.asarray(np.random.default_rng(seed).integers(0, 2, (1, 3, 4)), jnp.int32),
        {},
    ),
    Row(
        "DetrLearnedPositionEmbedding",
        lambda: fp.nnx.DetrLearnedPositionEmbedding(D, rngs=nnx.Rngs(0)),
        lambda: fp.linen.DetrLearnedPositionEmbedding(D),
        lambda mask: ((mask,), {}),
        lambda seed: jnp.asarray(np.random.default_rng(seed).integers(0, 2, (1, 3, 4)), jnp.int32),
        {"row_embeddings": ((50, D), (None, "embed")), "column_embeddings": ((50, D), (None, "embed"))},
    ),
    Row(
        "BoundingBoxEmbedding",
        lambda: fp.nnx.BoundingBoxEmbedding(BBOX_SPEC, rngs=nnx.Rngs(0)),
        lambda: fp.linen.BoundingBoxEmbedding(BBOX_SPEC),
        lambda boxes: ((boxes,), {}),
        _boxes,
        {f"{t}_embedding": ((P, 2 if t in "xy" else 1), (None, "embed")) for t in "xyhw"},
        None,
        ((P, 2), {"shape_dim": 1, "combine": "concat"}),
    ),
]

# window bias (issue 35): a Swin window of 2 x 2 patches; the call takes no array (the example is unused)
WINDOW = fp.WindowBiasSpec(H, 2)


def _swin(folder: Path, module) -> Path:
    table = np.asarray(module.embedding[...])
    save_file(
        {"swin.encoder.layers.0.blocks.0.attention.self.relative_position_bias_table": table},
        str(folder / "model.safetensors"),
    )
    config = {"model_type": "swin", "image_size": 8, "patch_size": 2, "depths": [1], "num_heads": [H], "window_size": 2}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


ROWS.append(
    Row(
        "WindowRelativeBias",
        lambda: fp.nnx.WindowRelativeBias(WINDOW, rngs=nnx.Rngs(0)),
        lambda: fp.linen.WindowRelativeBias(WINDOW),
        lambda unused: ((), {}),
        _ints(1, ()),
        {"embedding": ((9, H), (None, "heads"))},
        _swin,
        ((H, 2), {}),
    )
)
ROWS.append(
    Row(
        "ConvPositionalEmbedding",
        lambda: fp.nnx.ConvPositionalEmbedding(CONV_SPEC, rngs=nnx.Rngs(0)),
        lambda: fp.linen.ConvPositionalEmbedding(CONV_SPEC),
        lambda hidden: ((hidden,), {}),
        _floats((7, D)),
        {"kernel": ((1, 4, D // 2, D), (None, None, None, "embed")), "bias": ((1, D), (None, "embed"))},
        _omniasr_audio,
    )
)


def _random_rel_pos():
    """SAM's decomposed relative positions of a 3 x 3 window, its zero-initialised tables filled with N(0, 1)."""
    from flax_posenc.rel_pos_config import DecomposedRelPosSpec

    module = fp.nnx.DecomposedRelativePosition(DecomposedRelPosSpec((3, 3), D), rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    module.rel_pos_h[...] = jnp.asarray(rng.standard_normal((5, D)), jnp.float32)
    module.rel_pos_w[...] = jnp.asarray(rng.standard_normal((5, D)), jnp.float32)
    return module


def _linen_rel_pos():
    from flax_posenc.rel_pos_config import DecomposedRelPosSpec

    return fp.linen.DecomposedRelativePosition(DecomposedRelPosSpec((3, 3), D))


ROWS.append(  # issue 35 item 6: a query of the 3 x 3 window -> the (9, 9) bias
    Row(
        "DecomposedRelativePosition",
        _random_rel_pos,
        _linen_rel_pos,
        lambda query: ((query,), {}),
        _floats((9, D)),
        {"rel_pos_h": ((5, D), (None, "kv")), "rel_pos_w": ((5, D), (None, "kv"))},
    )
)

IDS = [row.name for row in ROWS]


def _nnx_params(module) -> dict[str, Any]:
    return {"/".join(map(str, p)): v for p, v in nnx.to_flat_state(nnx.state(module, nnx.Param))}


def _linen_variables(row: Row, module):
    args, kwargs = row.call(row.example(0))
    return module.init(jax.random.key(0), *args, **kwargs)


def _linen_from_nnx(row: Row, nnx_module, linen_module) -> dict:
    """The Linen variables holding the NNX module's parameters (the names must match)."""
    boxed = _linen_variables(row, linen_module)
    values = {k: v[...] for k, v in _nnx_params(nnx_module).items()}
    flat = {"/".join(k): v for k, v in flatten_dict(nn.unbox(boxed)).items()}
    assert {k.removeprefix("params/") for k in flat} == set(values)
    return {"params": _unflatten(values)} if values else {}


def _unflatten(flat: dict[str, Any]) -> dict:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *head, last = key.split("/")
        node = out
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return out


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_parameter_names_shapes_and_logical_axes(row):
    nnx_params = _nnx_params(row.nnx())
    assert {k: (tuple(v.shape), tuple(v.out_sharding)) for k, v in nnx_params.items()} == row.params
    boxed = _linen_variables(row, row.linen()).get("params", {})
    linen = {"/".join(k): (tuple(v.value.shape), tuple(v.names)) for k, v in flatten_dict(boxed).items()}
    assert linen == row.params
    specs = {"/".join(k): v for k, v in flatten_dict(nn.get_partition_spec(boxed)).items()}
    assert specs == {k: jax.sharding.PartitionSpec(*axes) for k, (_, axes) in row.params.items()}


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_nnx_equals_linen_under_jit_vmap_and_scan(row):
    module, linen = row.nnx(), row.linen()
    variables = _linen_from_nnx(row, module, linen)
    examples = [row.example(seed) for seed in range(B)]
    eager = np.stack([np.asarray(module(*row.call(e)[0], **row.call(e)[1])) for e in examples])
    stacked = jnp.stack(examples)

    def nnx_call(m, e):
        args, kwargs = row.call(e)
        return m(*args, **kwargs)

    def linen_call(v, e):
        args, kwargs = row.call(e)
        return linen.apply(v, *args, **kwargs)

    # NNX == Linen exactly; transformed calls within float32 roundings of the eager one (XLA fuses
    # differently under jit, e.g. LayerNorm, and computes sinusoids on device, within 1e-7)
    close = functools.partial(np.testing.assert_allclose, rtol=1e-6, atol=1e-6)
    for e, expected in zip(examples, eager):
        np.testing.assert_array_equal(np.asarray(linen_call(variables, e)), expected)
        jitted = np.asarray(nnx.jit(nnx_call)(module, e))
        close(jitted, expected)
        np.testing.assert_array_equal(np.asarray(jax.jit(linen_call)(variables, e)), jitted)
    close(np.asarray(nnx.vmap(nnx_call, in_axes=(None, 0))(module, stacked)), eager)
    close(np.asarray(jax.vmap(linen_call, in_axes=(None, 0))(variables, stacked)), eager)
    graphdef, state = nnx.split(module)
    scanned = jax.lax.scan(lambda c, e: (c, nnx_call(nnx.merge(graphdef, state), e)), None, stacked)[1]
    close(np.asarray(scanned), eager)
    scanned = jax.lax.scan(lambda c, e: (c, linen_call(variables, e)), None, stacked)[1]
    close(np.asarray(scanned), eager)


@pytest.mark.parametrize("row", [r for r in ROWS if r.pretrained], ids=[r.name for r in ROWS if r.pretrained])
def test_from_pretrained_round_trip(row, tmp_path):
    module = row.nnx()
    source = row.pretrained(tmp_path, module)
    nnx_type, linen_type = type(module), type(row.linen())
    loaded = nnx_type.from_pretrained(source)
    linen, variables = linen_type.from_pretrained(source)
    expected = {k: np.asarray(v[...]) for k, v in _nnx_params(module).items()}
    got = {k: np.asarray(v[...]) for k, v in _nnx_params(loaded).items()}
    assert got.keys() == expected.keys()
    for k in expected:
        np.testing.assert_array_equal(got[k], expected[k])
    linen_got = {"/".join(k): np.asarray(v) for k, v in flatten_dict(nn.unbox(variables).get("params", {})).items()}
    assert linen_got.keys() == expected.keys()
    for k in expected:
        np.testing.assert_array_equal(linen_got[k], expected[k])
    boxed = {"/".join(k): tuple(v.names) for k, v in flatten_dict(variables.get("params", {})).items()}
    assert boxed == {k: axes for k, (_, axes) in row.params.items()}  # loaded boxed as init
    e = row.example(1)
    args, kwargs = row.call(e)
    np.testing.assert_array_equal(np.asarray(loaded(*args, **kwargs)), np.asarray(module(*args, **kwargs)))
    np.testing.assert_array_equal(
        np.asarray(linen.apply(variables, *args, **kwargs)), np.asarray(module(*args, **kwargs))
    )


FLAT = [r for r in ROWS if r.flat]


@pytest.mark.parametrize("row", FLAT, ids=[r.name for r in FLAT])
def test_from_arguments_and_the_flat_call_build_the_spec_module_without_a_warning(row):
    args, kwargs = row.flat
    module, linen = row.nnx(), row.linen()
    nnx_type, linen_type = type(module), type(linen)
    rngs = (lambda: {"rngs": nnx.Rngs(0)}) if row.params else dict  # parameter-free modules take no rngs
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # the spec, from_arguments and flat forms do not warn
        built = nnx_type.from_arguments(*args, **kwargs, **rngs())
        linen_built = linen_type.from_arguments(*args, **kwargs)
        variables = _linen_variables(row, linen)
        flat = nnx_type(*args, **kwargs, **rngs())
        linen_flat = linen_type(*args, **kwargs)
    assert [str(w.message) for w in seen] == []
    assert built.spec == flat.spec == module.spec and linen_built == linen_flat == linen
    e = row.example(0)
    call_args, call_kwargs = row.call(e)
    expected = np.asarray(module(*call_args, **call_kwargs))
    for other in (built, flat):  # same spec, same seed: same parameters, same outputs
        shapes = {k: v.shape for k, v in _nnx_params(other).items()}
        assert shapes == {k: shape for k, (shape, _) in row.params.items()}
        np.testing.assert_array_equal(np.asarray(other(*call_args, **call_kwargs)), expected)
    for other in (linen_built, linen_flat):
        np.testing.assert_array_equal(
            np.asarray(other.apply(variables, *call_args, **call_kwargs)),
            np.asarray(linen.apply(variables, *call_args, **call_kwargs)),
        )


def _flat_names(row: Row) -> list[str]:
    """The names of the row's positional flat arguments: the NNX ``from_arguments``'s first parameters,
    or the constructor's where ``from_arguments`` is the constructor (``cls(*args, **kwargs)``)."""
    cls = type(row.nnx())
    names = list(inspect.signature(cls.from_arguments).parameters)
    if names == ["args", "kwargs"]:
        names = list(inspect.signature(cls.__init__).parameters)[1:]  # after self
    return names[: len(row.flat[0])]


@pytest.mark.parametrize("row", FLAT, ids=[r.name for r in FLAT])
def test_the_flat_call_by_keyword_and_a_spec_build_equal_modules(row):
    """``Module(num_positions=..., dim=...)`` as ``nnx.Embed(num_embeddings=..., features=...)``:
    the same spec as the positional flat call and the spec call, in NNX and Linen; Linen modules
    equal (a module holds its spec and its module fields, not the flat arguments)."""
    args, kwargs = row.flat
    module, linen = row.nnx(), row.linen()
    named = dict(zip(_flat_names(row), args, strict=True)) | kwargs
    rngs = {"rngs": nnx.Rngs(0)} if row.params else {}
    assert type(module)(**named, **rngs).spec == module.spec
    by_keyword = type(linen)(**named)
    assert by_keyword == type(linen)(*args, **kwargs) == linen and by_keyword.spec == linen.spec
    assert hash(by_keyword) == hash(linen)
    fields = {f.name for f in dataclasses.fields(linen)} - {"parent", "name"}
    assert fields.isdisjoint(named.keys() - {"spec"}), "the flat arguments are not stored"
    assert by_keyword.clone() == linen and by_keyword.clone().spec == linen.spec


@pytest.mark.parametrize("row", FLAT, ids=[r.name for r in FLAT])
def test_a_flat_built_linen_module_under_clone_vmap_and_scan(row):
    """A Linen module built by the flat call inside ``nn.vmap`` and ``nn.scan`` (which rebuild it
    from its fields) and the flat call on the lifted class itself equal the eager calls."""
    args, kwargs = row.flat
    module, linen = row.nnx(), row.linen()
    variables = _linen_from_nnx(row, module, linen)
    examples = [row.example(seed) for seed in range(B)]
    eager = np.stack([np.asarray(linen.apply(variables, *row.call(e)[0], **row.call(e)[1])) for e in examples])

    class Each(nn.Module):
        @nn.compact
        def __call__(self, e):
            call_args, call_kwargs = row.call(e)
            return type(linen)(*args, **kwargs, name="inner")(*call_args, **call_kwargs)

    class Step(nn.Module):
        @nn.compact
        def __call__(self, carry, e):
            return carry, Each(name="each")(e)

    inner = {"params": {"inner": variables["params"]}} if variables else {}
    mapped = nn.vmap(Each, variable_axes={"params": None}, split_rngs={"params": False}, in_axes=0)()
    close = functools.partial(np.testing.assert_allclose, rtol=1e-6, atol=1e-6)
    close(np.asarray(mapped.apply(inner, jnp.stack(examples))), eager)
    scanned = nn.scan(Step, variable_broadcast="params", split_rngs={"params": False}, in_axes=0, out_axes=0)()
    stepped = {"params": {"each": inner["params"]}} if variables else {}
    close(np.asarray(scanned.apply(stepped, None, jnp.stack(examples))[1]), eager)
    lifted = nn.vmap(type(linen), variable_axes={"params": None}, split_rngs={"params": False})
    built = lifted(*args, **kwargs)
    assert built.spec == linen.spec and built.clone().spec == linen.spec

    class Holder(nn.Module):  # the module as a parent's field (Linen adopts it: __post_init__ again)
        inner: nn.Module

        @nn.compact
        def __call__(self, e):
            call_args, call_kwargs = row.call(e)
            return self.inner(*call_args, **call_kwargs)

    held = Holder(type(linen)(*args, **kwargs))
    close(np.asarray(held.apply(inner, examples[0])), eager[0])
    assert held.clone().inner.spec == linen.spec


def test_position_spec_takes_dim_and_num_positions_by_keyword_only():
    """``PositionSpec("learned", 768, 1024)`` read ``dim`` first, the flat calls ``num_positions``
    first: the positional form is refused in one line, the keyword forms are equal."""
    message = (
        r"^PositionSpec: expected dim=, num_positions=, ... by keyword after the kind, "
        r"found 2 more positional arguments \(768, 1024\)$"
    )
    with pytest.raises(TypeError, match=message):
        PositionSpec("learned", 768, 1024)
    with pytest.raises(TypeError, match=r"found 1 more positional argument \(8,\)$"):
        PositionSpec("sinusoidal", 8)
    spec = PositionSpec("learned", dim=768, num_positions=1024)
    assert (
        spec
        == PositionSpec(num_positions=1024, dim=768)
        == fp.nnx.LearnedPositionalEmbedding(1024, 768, rngs=nnx.Rngs(0)).spec
    )
    assert (spec.num_positions, spec.dim) == (1024, 768)
    assert dataclasses.replace(spec, dim=8).dim == 8 and copy.deepcopy(spec) == spec


def test_a_spec_of_the_wrong_kind_or_beside_flat_arguments_is_refused():
    kind = r"^spec: expected a PositionSpec of kind 'learned' \(LearnedPositionalEmbedding\), found kind 'sinusoidal'$"
    with pytest.raises(ValueError, match=kind):
        fp.nnx.LearnedPositionalEmbedding(SINUSOIDAL, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=kind):
        fp.linen.LearnedPositionalEmbedding(SINUSOIDAL)
    kind = (
        r"^spec: expected a PositionSpec of kind 'sinusoidal' \(SinusoidalPositionalEncoding\), found kind 'learned'$"
    )
    with pytest.raises(ValueError, match=kind):
        fp.nnx.SinusoidalPositionalEncoding(LEARNED)
    with pytest.raises(ValueError, match=kind):
        fp.linen.SinusoidalPositionalEncoding(spec=LEARNED)
    both = r"^RelativePositionBias: expected a RelativeBiasSpec or flat arguments \(num_heads, num_buckets=..., ...\), found both: a spec and \['num_buckets'\]$"
    with pytest.raises(TypeError, match=both):
        fp.nnx.RelativePositionBias(RELATIVE, num_buckets=32, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=both):
        fp.linen.RelativePositionBias(RELATIVE, num_buckets=32)
    both = r"^PatchPositionalEmbedding: expected a GridSpec or flat arguments \(grid, dim, ...\), found both: a spec and \['dim'\]$"
    with pytest.raises(TypeError, match=both):
        fp.nnx.PatchPositionalEmbedding(GRID_SPEC, D, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=both):  # the second flat argument, where a module field once was
        fp.linen.PatchPositionalEmbedding(GRID_SPEC, True)
    with pytest.raises(TypeError, match=r"found both: a spec and \['offset', 'position_name'\]$"):
        fp.linen.LearnedPositionalEmbedding(LEARNED, offset=0, position_name="wpe")


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: fp.RelativeBiasSpec(0), "RelativeBiasSpec: expected a positive integer num_heads, found 0"),
        (lambda: fp.RelativeBiasSpec(True), "RelativeBiasSpec: expected a positive integer num_heads, found True"),
        (lambda: fp.RelativeBiasSpec(1 << 17), "RelativeBiasSpec: num_heads: expected at most 65536"),
        (lambda: fp.RelativeBiasSpec(8, 32), "RelativeBiasSpec: expected buckets a BucketConfig, found int"),
        (
            lambda: fp.RelativeBiasSpec(8, num_rows=16),
            r"RelativeBiasSpec: expected num_rows >= num_buckets \(32\), found 16",
        ),
        (
            lambda: fp.RelativeBiasSpec(8, num_rows=1.5),
            "RelativeBiasSpec: expected an integer num_rows or None, found 1.5",
        ),
        (lambda: fp.RelativeBiasSpec(8, num_rows=1 << 17), "RelativeBiasSpec: num_rows: expected at most 65536"),
        (
            lambda: fp.GridSpec((2, 0), D),
            r"GridSpec: expected grid \(height, width\) in patches, each 1..65536, found \(2, 0\)",
        ),
        (lambda: fp.GridSpec((2, 3, 4), D), r"GridSpec: expected grid \(height, width\) in patches"),
        (lambda: fp.GridSpec(2, 0), "GridSpec: expected a positive integer dim, found 0"),
        (
            lambda: fp.GridSpec(2, D, prefix_tokens=-1),
            r"GridSpec: expected prefix_tokens an integer in 0..65536, found -1",
        ),
        (lambda: fp.GridSpec(2, D, patch_size=0), r"GridSpec: expected patch_size \(height, width\) in pixels"),
        (lambda: fp.GridSpec(2, D, convention="nope"), "GridSpec: convention: expected one of big_vision, "),
        (lambda: fp.GridSpec(2, D, name=3), "GridSpec: expected a string name, found 3"),
    ],
)
def test_spec_errors_are_one_line_naming_the_field(build, message):
    with pytest.raises(ValueError, match=f"^{message}") as error:
        build()
    assert "\n" not in str(error.value)


def test_specs_normalise_what_the_modules_read():
    assert fp.RelativeBiasSpec(8) == fp.RelativeBiasSpec(8, fp.BucketConfig(), 32)  # num_rows stored
    spec = fp.GridSpec([4, 4], D, patch_size=(16, 16), convention="vit")
    assert (spec.grid, spec.patch_size, spec.convention, spec.rows) == ((4, 4), 16, "torch_bicubic", 17)
    assert hash(spec) == hash(fp.GridSpec(4, D, patch_size=16))

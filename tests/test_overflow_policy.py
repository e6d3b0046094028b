"""``on_overflow`` is a run-time policy: a module attribute and a call argument, never in a file.

Every module (NNX and Linen) takes it at construction (validated there, once) and per call (the
call's wins); specs and converted files carry none, and files written when the spec held one
still load (their policy is ignored: the loading module's governs). References are plain numpy
indexing of the same arrays (a clipped row is the last row, by definition of ``"clip"``).
"""

from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx, serialization

import flax_posenc as fp
from flax_posenc.block import InputSpec, PositionSpec, encode_positions
from flax_posenc.errors import PositionLimitError
from flax_posenc.orbax_io import read_orbax_metadata, save_orbax
from flax_posenc.pretrained import load_pretrained

LIMIT, DIM = 4, 4
ROPE = fp.RopeConfig(head_dim=DIM, max_position_embeddings=LIMIT)


def _nnx_modules(policy):
    return {
        "learned": fp.nnx.LearnedPositionalEmbedding.from_arguments(LIMIT, DIM, on_overflow=policy, rngs=nnx.Rngs(0)),
        "sinusoidal": fp.nnx.SinusoidalPositionalEncoding.from_arguments(DIM, num_positions=LIMIT, on_overflow=policy),
        "block": fp.nnx.TransformerInput.from_arguments(
            9, DIM, num_positions=LIMIT, on_overflow=policy, rngs=nnx.Rngs(0)
        ),
        "rope": fp.nnx.RotaryEmbedding(ROPE, on_overflow=policy),
        "alibi": fp.nnx.ALiBiBias(fp.AlibiConfig(2, max_positions=LIMIT), on_overflow=policy),
    }


def _linen_modules(policy):
    return {
        "learned": fp.linen.LearnedPositionalEmbedding.from_arguments(LIMIT, DIM, on_overflow=policy),
        "sinusoidal": fp.linen.SinusoidalPositionalEncoding.from_arguments(
            DIM, num_positions=LIMIT, on_overflow=policy
        ),
        "block": fp.linen.TransformerInput.from_arguments(9, DIM, num_positions=LIMIT, on_overflow=policy),
        "rope": fp.linen.RotaryEmbedding(ROPE, on_overflow=policy),
        "alibi": fp.linen.ALiBiBias(fp.AlibiConfig(2, max_positions=LIMIT), on_overflow=policy),
    }


@pytest.mark.parametrize("build", [_nnx_modules, _linen_modules], ids=["nnx", "linen"])
def test_a_bad_policy_is_refused_at_construction_by_every_module(build):
    with pytest.raises(ValueError, match=r"^on_overflow: expected one of \('error', 'clip', 'fill'\), got 'wrap'$"):
        build("wrap")
    for module in build("clip").values():  # a good one is kept as the module's attribute
        assert module.on_overflow == "clip"


def _positions_call(kind, module, positions, policy):
    """A call of ``module`` at traced ``positions`` under jit with the call's policy ``policy``."""
    if kind in ("learned", "sinusoidal"):
        return module(positions, on_overflow=policy)
    if kind == "block":
        return module(jnp.zeros(positions.shape, jnp.int32), position_ids=positions, on_overflow=policy)
    if kind == "rope":
        return module(jnp.ones((positions.shape[-1], 1, DIM)), positions, on_overflow=policy)
    return module(query_positions=positions, key_positions=positions, on_overflow=policy)


@pytest.mark.parametrize("kind", ["learned", "sinusoidal", "block", "rope", "alibi"])
def test_the_calls_policy_overrides_the_modules_under_jit(kind):
    """A module built with "error" clips when the call asks: equal to the call at the clipped positions."""
    module = _nnx_modules("error")[kind]
    past, clipped = jnp.array([0, 2, LIMIT + 3]), jnp.array([0, 2, LIMIT - 1])
    f = nnx.jit(lambda m, p: _positions_call(kind, m, p, "clip"))
    reference = nnx.jit(lambda m, p: _positions_call(kind, m, p, None))(module, clipped)
    np.testing.assert_array_equal(np.asarray(f(module, past)), np.asarray(reference))
    # the module's own policy when the call gives none: a run-time error naming the limit
    g = fp.position_errors(nnx.jit(lambda m, p: _positions_call(kind, m, p, None)))
    with pytest.raises(PositionLimitError, match="past the end"):
        g(module, past)


@pytest.mark.parametrize("kind", ["learned", "sinusoidal", "block", "rope", "alibi"])
def test_linen_modules_take_the_policy_per_call_too(kind):
    module = _linen_modules("error")[kind]
    past, clipped = jnp.array([0, 2, LIMIT + 3]), jnp.array([0, 2, LIMIT - 1])
    variables = module.init(jax.random.key(0), **_linen_args(kind, clipped, None))
    call = jax.jit(lambda v, p, policy: module.apply(v, **_linen_args(kind, p, policy)), static_argnums=2)
    np.testing.assert_array_equal(np.asarray(call(variables, past, "clip")), np.asarray(call(variables, clipped, None)))


def _linen_args(kind, positions, policy):
    if kind in ("learned", "sinusoidal"):
        return dict(positions=positions, on_overflow=policy)
    if kind == "block":
        return dict(input_ids=jnp.zeros(positions.shape, jnp.int32), position_ids=positions, on_overflow=policy)
    if kind == "rope":
        return dict(x=jnp.ones((positions.shape[-1], 1, DIM)), positions=positions, on_overflow=policy)
    return dict(query_positions=positions, key_positions=positions, on_overflow=policy)


def test_the_calls_policy_governs_token_types_and_word_ids_as_positions():
    """No silent override: the policy given to the call reaches every table lookup of the block."""
    block = fp.nnx.TransformerInput.from_arguments(
        5, DIM, num_positions=LIMIT, type_vocab_size=2, positions_from="attention_mask", position_offset=1,
        rngs=nnx.Rngs(0),
    )  # fmt: skip
    params = {k: np.asarray(v) for k, v in block.params().items()}
    ids, types = jnp.array([[1, 7, 2]]), jnp.array([[0, 1, 6]])
    out = nnx.jit(lambda m, i, t: m(i, token_type_ids=t, on_overflow="clip"))(block, ids, types)
    word = params["word_embeddings"][np.minimum(np.asarray(ids), 4)]
    typ = params["token_type_embeddings"][np.minimum(np.asarray(types), 1)]
    pos = params["position_embeddings"][1 + np.arange(3)]
    np.testing.assert_allclose(np.asarray(out), word + pos + typ, rtol=1e-6)
    filled = nnx.jit(lambda m, i, t: m(i, token_type_ids=t, on_overflow="fill"))(block, ids, types)
    assert np.isnan(np.asarray(filled)[0, 1:]).all() and not np.isnan(np.asarray(filled)[0, 0]).any()
    f = fp.position_errors(nnx.jit(lambda m, t: m(jnp.array([[1, 2, 3]]), token_type_ids=t)))
    with pytest.raises(PositionLimitError, match="^token type table holds 2 types"):
        f(block, types)


def test_the_policy_is_not_part_of_the_spec_nor_of_files(tmp_path):
    block = fp.nnx.TransformerInput.from_arguments(9, DIM, num_positions=LIMIT, on_overflow="clip", rngs=nnx.Rngs(0))
    assert block.spec == InputSpec.from_arguments(9, DIM, num_positions=LIMIT)
    assert "on_overflow" not in json.dumps(block.spec.to_dict())
    meta = save_orbax(tmp_path / "ckpt", block)
    assert "on_overflow" not in json.dumps(read_orbax_metadata(meta)[0].to_dict())
    assert "on_overflow" not in "".join(p.read_text(errors="ignore") for p in meta.rglob("*.json"))
    spec, _ = load_pretrained(meta)
    assert spec == block.spec


def test_files_that_hold_a_policy_still_load_and_it_is_ignored(tmp_path):
    rng = np.random.default_rng(0)
    params = {
        "word_embeddings": rng.standard_normal((9, DIM)).astype(np.float32),
        "position_embeddings": rng.standard_normal((LIMIT, DIM)).astype(np.float32),
    }
    spec = {
        "vocab_size": 9,
        "position": {"kind": "learned", "dim": DIM, "num_positions": LIMIT, "offset": 0, "base": 10000.0,
                     "layout": "interleaved", "endpoint": False, "on_overflow": "clip", "name": "position table"},
        "positions_from": "index", "pad_token_id": None, "embed_scale": 1.0, "type_vocab_size": 0,
        "layer_norm": False, "layer_norm_eps": 1e-12, "dtype": None,
    }  # fmt: skip
    v2 = tmp_path / "v2.msgpack"
    v2.write_bytes(
        serialization.msgpack_serialize(
            {"format": "flax-posenc/input-spec", "version": 2, "spec": spec, "params": params}
        )
    )
    v1 = tmp_path / "v1.msgpack"
    flat = {"vocab_size": 9, "dim": DIM, "num_positions": LIMIT, "on_overflow": "clip"}
    v1.write_bytes(serialization.msgpack_serialize({"config": flat, "params": params}))
    for path in (v1, v2):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # loading an old file is not the user's deprecated call
            block = fp.nnx.TransformerInput.from_pretrained(path)
        assert block.on_overflow == "error" and block.spec.position.on_overflow is None
        f = fp.position_errors(nnx.jit(lambda m, p: m(jnp.zeros((1, 2), jnp.int32), position_ids=p)))
        with pytest.raises(PositionLimitError, match="past the end"):
            f(block, jnp.array([[0, LIMIT]]))
        assert fp.nnx.TransformerInput.from_pretrained(path, on_overflow="clip").on_overflow == "clip"


def test_a_policy_in_the_spec_is_deprecated_but_still_the_default():
    with pytest.warns(DeprecationWarning, match=r"PositionSpec\(on_overflow=...\): deprecated"):
        old = PositionSpec(dim=2, num_positions=4, on_overflow="clip")
    assert old == PositionSpec(dim=2, num_positions=4) and hash(old) == hash(PositionSpec(dim=2, num_positions=4))
    table = jnp.arange(8.0).reshape(4, 2)
    f = jax.jit(lambda p: encode_positions(old, table, p))
    np.testing.assert_array_equal(np.asarray(f(jnp.array([1, 9]))), np.asarray(table)[[1, 3]])
    with pytest.warns(DeprecationWarning):
        spec = InputSpec.from_arguments(9, 2, num_positions=4, on_overflow="clip")
    block = fp.nnx.TransformerInput(spec, rngs=nnx.Rngs(0))
    assert block.on_overflow == "clip"  # the spec's policy, the module's default
    assert fp.nnx.TransformerInput(spec, on_overflow="fill", rngs=nnx.Rngs(0)).on_overflow == "fill"
    assert "on_overflow" not in spec.to_dict()["position"]


def test_the_policies_live_in_limits_and_overflow_re_exports_them():
    """Issue 25 item 1: the policy names sit on the numpy floor (``limits``, no jax)."""
    import subprocess
    import sys

    from flax_posenc import limits, overflow

    for name in ("OVERFLOW_POLICIES", "OverflowPolicy", "check_policy"):
        assert getattr(overflow, name) is getattr(limits, name) and name in limits.__all__
    assert limits.OVERFLOW_POLICIES == ("error", "clip", "fill")
    script = "import sys, flax_posenc.limits as l; l.check_policy('clip'); print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_a_tables_limit_is_num_positions_and_max_length_is_deprecated():
    """Issue 25 item 2: one public name for the usable positions (rows minus reserved rows)."""
    from flax_posenc.conversion import PositionTable

    table = PositionTable(np.zeros((514, 2)), family="roberta", key="pos", offset=2)
    assert table.num_positions == 512 and "num_positions=512" in repr(table)
    with pytest.warns(DeprecationWarning, match="^PositionTable.max_length: deprecated, use num_positions$"):
        assert table.max_length == 512

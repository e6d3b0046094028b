"""A RoPE scaling type is one row of ``flax_posenc.rope_config.ROPE_SCALINGS``.

A toy type ``"foo"`` (``w_i = theta ** (-2i / r) / factor ** 2``, scaled limit ``factor *
original_max_position_embeddings``) is registered in a monkeypatched copy of the registry and
must then work end to end: :class:`RopeConfig` (validation, limits), ``rope_inverse_frequencies``,
the device path under ``jax.jit`` and the ``config.json`` reader, all against a float64 reference
computed here from the formula. Nothing outside the registry is edited, which is the claim of
CONTRIBUTING.md ("Adding a RoPE scaling type").
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flax_posenc as fp
from flax_posenc import rope_config
from flax_posenc.conversion.relative_config import relative_config_from_dict
from flax_posenc.errors import CheckpointError
from flax_posenc.rope_config import ROPE_PARAMETERS, ROPE_SCALINGS, RopeConfig, RopeScaling


def _foo_frequencies(config: RopeConfig, seq_len: int | None) -> tuple[np.ndarray, float]:
    r = config.rotary_dim
    return float(config.rope_theta) ** (-np.arange(0, r, 2) / r) / config.factor**2, 1.0


FOO = RopeScaling(
    "foo",
    _foo_frequencies,
    ("factor", "original_max_position_embeddings"),
    trained_length_field="original_max_position_embeddings",
)


@pytest.fixture
def with_foo(monkeypatch):
    monkeypatch.setattr(rope_config, "ROPE_SCALINGS", MappingProxyType({**ROPE_SCALINGS, "foo": FOO}))


def reference(head_dim: int, theta: float, factor: float) -> np.ndarray:
    """The toy's inverse frequencies from its formula, float64, written out independently."""
    return np.array([theta ** (-2.0 * i / head_dim) for i in range(head_dim // 2)]) / factor / factor


def test_a_registered_scaling_type_works_end_to_end(with_foo):
    cfg = RopeConfig(head_dim=8, rope_theta=100.0, rope_type="foo", factor=4.0, max_position_embeddings=16)
    # the trained length defaults to max_position_embeddings; the scaled limit is factor x it
    assert (cfg.original_max_position_embeddings, cfg.scaled_limit, cfg.limit) == (16, 64, 64)
    inv, attention = fp.rope_inverse_frequencies(cfg)
    np.testing.assert_allclose(inv, reference(8, 100.0, 4.0), rtol=1e-15)
    assert attention == 1.0

    # device path: host (concrete) and traced positions, both within 2e-6 of float64
    positions = np.array([0, 1, 7, 63])
    angle = positions[:, None] * reference(8, 100.0, 4.0)
    for cos, sin in (
        fp.rotary_cos_sin(positions, cfg),
        jax.jit(lambda p: fp.rotary_cos_sin(p, cfg))(jnp.asarray(positions)),
    ):
        np.testing.assert_allclose(np.asarray(cos), np.cos(angle), atol=2e-6)
        np.testing.assert_allclose(np.asarray(sin), np.sin(angle), atol=2e-6)
    with pytest.raises(
        fp.PositionLimitError, match=r"^foo RoPE .* holds 64 positions \(0..63\); asked for position 64"
    ):
        fp.rotary_cos_sin(np.array([64]), cfg)

    # the config.json reader: 4.x rope_scaling, Phi-3's top-level original length wins
    raw = {
        "model_type": "llama",
        "hidden_size": 32,
        "num_attention_heads": 4,
        "max_position_embeddings": 128,
        "original_max_position_embeddings": 16,
        "rope_theta": 100.0,
        "rope_scaling": {"rope_type": "foo", "factor": 4.0},
    }
    rc = relative_config_from_dict(raw, source="toy.json")
    assert rc.rope == RopeConfig(
        head_dim=8,
        rope_theta=100.0,
        rope_type="foo",
        factor=4.0,
        max_position_embeddings=128,
        original_max_position_embeddings=16,
    )
    assert rc.limit == 128 and "the larger of max_position_embeddings 128 and scaled 4 x 16 = 64" in rc.describe_limit()
    np.testing.assert_allclose(fp.rope_inverse_frequencies(rc.rope)[0], reference(8, 100.0, 4.0), rtol=1e-15)


def test_the_registry_decides_what_is_required(with_foo):
    with pytest.raises(ValueError, match=r"^factor: rope_type 'foo' needs it \(a Hugging Face rope_parameters key\)"):
        RopeConfig(head_dim=8, rope_type="foo", max_position_embeddings=16)
    raw = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "rope_scaling": {"rope_type": "foo"}}
    with pytest.raises(CheckpointError) as info:
        relative_config_from_dict(raw, source="toy.json")
    assert str(info.value) == (
        "toy.json: expected factor in rope_parameters "
        "(rope_type 'foo' needs factor, original_max_position_embeddings), found none"
    )


def test_unregistered_type_is_rejected_with_the_known_ones():
    with pytest.raises(ValueError, match=r"^rope_type: unknown scaling type 'foo'; known types: default, linear, "):
        RopeConfig(head_dim=8, rope_type="foo", factor=2.0)


def test_registry_rows_name_only_config_fields():
    fields = {f.name for f in dataclasses.fields(RopeConfig)}
    assert set(ROPE_PARAMETERS) <= fields
    assert set(ROPE_PARAMETERS.values()) <= {"number", "count", "flag", "factors"}
    for name, row in ROPE_SCALINGS.items():
        assert row.name == name
        assert set(row.required) <= fields, name
        assert row.trained_length_field in (None, "max_position_embeddings", "original_max_position_embeddings")
    assert tuple(ROPE_SCALINGS) == fp.rope.ROPE_TYPES


def test_reader_checks_required_keys_from_the_registry():
    """A llama3 config missing a key the registry lists: one line naming it, before RopeConfig runs."""
    raw = {
        "model_type": "llama",
        "hidden_size": 32,
        "num_attention_heads": 4,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0},
    }
    with pytest.raises(CheckpointError) as info:
        relative_config_from_dict(raw, source="cfg.json")
    assert str(info.value) == (
        "cfg.json: expected high_freq_factor in rope_parameters (rope_type 'llama3' needs factor, "
        "low_freq_factor, high_freq_factor, original_max_position_embeddings), found none"
    )
    raw["rope_scaling"]["truncate"] = "yes"
    with pytest.raises(CheckpointError, match=r"^cfg.json: expected truncate as true or false, found 'yes'$"):
        relative_config_from_dict(raw, source="cfg.json")

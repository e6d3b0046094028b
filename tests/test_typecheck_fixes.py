"""Bugs the type checker (`make typecheck`) found, each pinned by a test."""

from __future__ import annotations

import pytest

from flax_posenc.conversion import SourceRecord, inspect_source
from flax_posenc.conversion.relative_config import RelativeConfig, relative_config_from_dict
from flax_posenc.errors import CheckpointError

SMOLLM3 = dict(
    model_type="smollm3",
    num_attention_heads=4,
    hidden_size=32,
    num_hidden_layers=2,
    max_position_embeddings=64,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)


def test_relative_config_of_a_model_without_any_rope_layer_is_one_line():
    # it returned a NoPositionLayers where a RelativeConfig is promised (no .rope: AttributeError later)
    with pytest.raises(CheckpointError) as e:
        relative_config_from_dict({**SMOLLM3, "no_rope_layers": [0, 0]}, source="smollm3")
    assert str(e.value) == (
        "smollm3: expected RoPE or ALiBi layers, found no position encoding in any layer (NoPE (layers 0, 1))"
    )
    assert "\n" not in str(e.value)


def test_relative_config_of_rope_layers_is_unchanged():
    rc = relative_config_from_dict({**SMOLLM3, "no_rope_layers": [1, 1]}, source="smollm3")
    assert isinstance(rc, RelativeConfig) and rc.rope is not None and rc.limit == 64


def test_inspect_source_returns_a_source_record():
    # inspect_source is annotated -> ModelRecord; the SourceRecord protocol's fields are read-only
    rec = inspect_source("sinusoidal:8:4")
    assert isinstance(rec, SourceRecord)
    assert (rec.limit, rec.check_length(9)[0], rec.check_length(8)[0]) == (8, False, True)

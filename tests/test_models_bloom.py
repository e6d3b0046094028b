"""examples/models/bloom.py against transformers' BloomForCausalLM (tiny random checkpoint, ALiBi)."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx
from model_checkpoints import IDS, example_fixtures, hf_generate, hf_logits, prefill_then_decode

bloom, checkpoint, model = example_fixtures("bloom")


def test_alibi_config_read_from_config_json(model):
    assert model.alibi.num_heads == 4 and model.alibi.max_positions is None and model.position_limit is None


def test_logits_equal_hugging_face(checkpoint, model):
    expected = hf_logits(checkpoint[1], IDS)
    graphdef, state = nnx.split(model)
    jitted = jax.jit(lambda s, ids: nnx.merge(graphdef, s)(ids))(state, IDS)
    assert np.abs(np.asarray(jitted) - expected).max() < 1e-4


def test_greedy_generate_equals_hugging_face(checkpoint, model):
    prompt = IDS[:, :5]
    np.testing.assert_array_equal(np.asarray(bloom.generate(model, prompt, 12)), hf_generate(checkpoint[1], prompt, 12))


def test_prefill_then_cached_decode_under_plain_jit_equals_full_forward(model):
    graphdef, state = nnx.split(model)
    full = np.asarray(jax.jit(lambda s, ids: nnx.merge(graphdef, s)(ids))(state, IDS))
    assert np.abs(prefill_then_decode(model, IDS, 20) - full).max() < 1e-5


def test_long_generation_needs_no_table(model):
    """ALiBi has no limit: 80 positions (past the 64 of the other tiny models) decode fine."""
    out = bloom.generate(model, IDS[:1, :8], 72)
    assert out.shape == (1, 80)

"""examples/models/llama.py against transformers' LlamaForCausalLM (tiny random checkpoint:
llama3 rope scaling, grouped-query attention 4 heads / 2 kv heads, untied head)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from model_checkpoints import IDS, decode_step, example_fixtures, hf_generate, hf_logits, jitted, prefill_then_decode

import flax_posenc as fp

llama, checkpoint, model = example_fixtures("llama")


def test_rope_config_read_from_config_json(model):
    assert model.rope.rope_type == "llama3" and model.rope.factor == 4.0
    assert model.rope.original_max_position_embeddings == 16 and model.position_limit == 64
    assert model.kv_heads == 2 and model.layers.self_attn.heads == 4


def test_logits_equal_hugging_face(checkpoint, model):
    assert np.abs(np.asarray(jitted(model)(IDS)) - hf_logits(checkpoint[1], IDS)).max() < 1e-4


def test_greedy_generate_equals_hugging_face(checkpoint, model):
    prompt = IDS[:, :5]
    np.testing.assert_array_equal(np.asarray(llama.generate(model, prompt, 12)), hf_generate(checkpoint[1], prompt, 12))


def test_prefill_then_cached_decode_with_traced_positions_equals_full_forward(model):
    full = np.asarray(jitted(model)(IDS))
    assert np.abs(prefill_then_decode(model, IDS, 20) - full).max() < 1e-5


def test_past_max_position_embeddings_raises(model):
    with pytest.raises(fp.PositionLimitError, match=r"llama llama3 RoPE holds 64 positions .* 1 past the end"):
        llama.generate(model, np.ones((1, 60), np.int32), 5)
    with pytest.raises(fp.PositionLimitError, match="holds 64 positions"):
        jitted(model)(np.zeros((1, 65), np.int32))  # a static length: while tracing
    step = decode_step(model, 64)
    assert bool(jnp.isfinite(step(63)).all())
    with pytest.raises(fp.PositionLimitError, match="RoPE .*holds 64 positions .*asked for position 64"):
        fp.position_errors(step)(64)  # traced start under plain jax.jit: a run-time error


def test_training_step(checkpoint):
    model = llama.from_pretrained(checkpoint[0])
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    losses = [float(llama.common.train_step(model, optimizer, jnp.asarray(IDS))) for _ in range(4)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]

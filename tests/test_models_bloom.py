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


def test_cache_bytes_equal_the_cache_generate_allocates(model):
    """The bound's arithmetic against the cache itself (its shapes, from ``jax.eval_shape``: nothing allocated)."""
    for batch, prompt_len, new in [(1, 5, 12), (2, 9, 100), (3, 1, 1)]:
        slots = bloom.common.bucket(prompt_len) + bloom.common.bucket(new)
        cache = jax.eval_shape(lambda: model.init_cache(batch, slots))
        expected = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(cache))
        assert bloom.cache_bytes(model, batch, prompt_len, new) == expected


def test_a_cache_past_the_bound_is_one_line_before_allocating(model):
    """``max_new_tokens=10**9`` sized a 1.8 TB cache for bloom-560m (a JAX traceback); now one ValueError line,
    before anything is allocated or compiled. The bound is the cache's bytes: the largest request under it
    passes the check, the next bucket is refused."""
    import pytest

    def never(*args, **kwargs):
        raise AssertionError("common.generate reached: the cache would have been allocated")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bloom.common, "generate", never)  # refused before anything is allocated or compiled
        with pytest.raises(ValueError) as e:
            bloom.generate(model, IDS[:2, :5], 10**9)
    message = str(e.value)
    need = bloom.cache_bytes(model, 2, 5, 10**9)
    assert "\n" not in message and message.startswith("max_new_tokens: expected at most a KV cache of 8589934592 bytes")
    assert f"found 1000000000 new tokens for a batch of 2 needing {need} bytes" in message
    per_slot = bloom.cache_bytes(model, 1, 8, 8) // 16
    largest = bloom.MAX_CACHE_BYTES // per_slot - 8  # slots = 8 (prompt bucket) + new bucket, a power of two
    fits = 1 << (largest.bit_length() - 1)
    assert bloom.cache_bytes(model, 1, 5, fits) <= bloom.MAX_CACHE_BYTES < bloom.cache_bytes(model, 1, 5, fits + 1)

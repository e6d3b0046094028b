"""examples/models/gpt2_linen.py: the Linen twin of gpt2.py, same checkpoint, same numbers."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest
from flax import linen as nn
from model_checkpoints import IDS, example_fixtures, hf_generate, hf_logits, jitted, load_example

import flax_posenc as fp

gpt2_linen, checkpoint, loaded = example_fixtures("gpt2_linen", "gpt2", model_name="loaded")
gpt2 = load_example("gpt2")


def test_logits_equal_hugging_face_and_the_nnx_model(checkpoint, loaded):
    module, variables = loaded
    ours = np.asarray(jax.jit(module.apply)(variables, IDS))
    assert np.abs(ours - hf_logits(checkpoint[1], IDS)).max() < 1e-4
    twin = np.asarray(jitted(gpt2.from_pretrained(checkpoint[0]))(IDS))  # plain jax.jit, as test_models_gpt2's
    assert np.abs(ours - twin).max() < 1e-5


def test_parameter_tree_of_init_is_the_loaded_one(loaded):
    module, variables = loaded
    fresh = jax.eval_shape(module.init, jax.random.key(0), IDS)  # boxed with logical axis names
    assert jax.tree.structure(fresh) == jax.tree.structure(variables)
    assert jax.tree.map(lambda a: a.shape, fresh) == jax.tree.map(lambda a: a.shape, variables)
    # the layers are one nn.scan: stacked (layers, ...) under "h", the layer axis never sharded
    assert nn.unbox(variables)["params"]["h"]["c_fc"]["kernel"].shape == (2, 64, 256)
    assert nn.get_partition_spec(variables)["params"]["h"]["c_fc"]["kernel"] == jax.sharding.PartitionSpec(
        None, "embed", "mlp"
    )


def test_greedy_generate_equals_hugging_face_and_limit(checkpoint, loaded):
    module, variables = loaded
    prompt = IDS[:, :5]
    np.testing.assert_array_equal(
        np.asarray(gpt2_linen.generate(module, variables, prompt, 12)), hf_generate(checkpoint[1], prompt, 12)
    )
    with pytest.raises(fp.PositionLimitError, match=r"holds 64 positions .* 1 past the end"):
        gpt2_linen.generate(module, variables, np.ones((1, 60), np.int32), 5)


def test_training_step_with_dropout(loaded):
    module, variables = loaded
    tx = optax.adam(1e-3)
    params, opt_state = variables["params"], tx.init(variables["params"])

    @jax.jit
    def train_step(params, opt_state, ids, key):
        def loss_fn(params):
            logits = module.apply({"params": params}, ids[:, :-1], deterministic=False, rngs={"dropout": key})
            return optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, 1:]).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    # dropout on: from the same parameters, two dropout keys give two losses (one compiled step)
    draws = [float(train_step(params, opt_state, IDS, jax.random.key(k))[2]) for k in (1, 0)]
    assert abs(draws[0] - draws[1]) > 1e-4, draws
    losses = []
    for step in range(4):
        params, opt_state, loss = train_step(params, opt_state, IDS, jax.random.key(step))
        losses.append(float(loss))
    assert losses[0] == draws[1]  # the same step as the draw with key 0
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]

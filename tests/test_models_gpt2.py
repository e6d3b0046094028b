"""examples/models/gpt2.py against transformers' GPT2LMHeadModel (tiny random checkpoint)."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from model_checkpoints import IDS, decode_step, example_fixtures, hf_generate, hf_logits, jitted, prefill_then_decode

import flax_posenc as fp

gpt2, checkpoint, model = example_fixtures("gpt2")
#: ``model(ids)`` under ``nnx.jit``: one function, so models of one structure share its programs
forward = nnx.jit(lambda m, ids: m(ids))


def test_logits_equal_hugging_face(checkpoint, model):
    expected = hf_logits(checkpoint[1], IDS)
    assert np.abs(np.asarray(jitted(model)(IDS)) - expected).max() < 1e-4  # jax.jit
    under_nnx_jit = forward(model, IDS)
    assert np.abs(np.asarray(under_nnx_jit) - expected).max() < 1e-4
    vmapped = jax.jit(jax.vmap(lambda ids: model(ids[None])[0]))(jnp.asarray(IDS))  # one sequence at a time
    assert np.abs(np.asarray(vmapped) - expected).max() < 1e-4


def test_padded_batch_equals_hugging_face(checkpoint, model):
    mask = np.ones_like(IDS)
    mask[1, 18:] = 0  # right padding: real tokens are unaffected
    expected = hf_logits(checkpoint[1], IDS, mask)
    ours = np.asarray(jitted(model)(IDS, mask))
    assert np.abs(ours[mask == 1] - expected[mask == 1]).max() < 1e-4


def test_greedy_generate_equals_hugging_face(checkpoint, model):
    prompt = IDS[:, :5]
    ours = np.asarray(gpt2.generate(model, prompt, 12))
    assert ours.shape == (2, 17)
    np.testing.assert_array_equal(ours, hf_generate(checkpoint[1], prompt, 12))


def test_prefill_then_cached_decode_equals_full_forward(model):
    full = np.asarray(jitted(model)(IDS))
    assert np.abs(prefill_then_decode(model, IDS, 20) - full).max() < 1e-5


def test_generate_past_n_positions_raises_before_running(model):
    with pytest.raises(fp.PositionLimitError, match=r"holds 64 positions .* needs 65, 1 past the end"):
        gpt2.generate(model, np.ones((2, 60), np.int32), 5)
    with pytest.raises(fp.PositionLimitError, match="holds 64 positions"):
        model(np.zeros((1, 65), np.int32))  # a static length past the table
    # exactly n_positions fits (2 rows: the program of test_models_generate's limit test, compiled once between them)
    assert gpt2.generate(model, np.ones((2, 60), np.int32), 4).shape == (2, 64)
    longer = nnx.clone(model)
    longer.extend_positions(128)  # the table grows (tile), the limit with it
    assert longer.position_limit == 128 and jitted(longer)(np.zeros((1, 65), np.int32)).shape == (1, 65, 1000)


def test_traced_start_past_n_positions_fails_under_plain_jit(model):
    step = decode_step(model, 64)
    assert bool(jnp.isfinite(step(63)).all())  # the last position is fine
    # plain jax.jit: a run-time error carrying our message, never NaN or a clamp (JAX raises a
    # JaxRuntimeError, or a ValueError from its CPU fast path)
    with pytest.raises(
        (jax.errors.JaxRuntimeError, ValueError), match=r"holds 64 positions \(0\.\.63\); asked for position 64"
    ):
        jax.block_until_ready(step(64))
    with pytest.raises(fp.PositionLimitError, match="asked for position 64, 1 past the end"):
        fp.position_errors(step)(64)


def test_training_step_with_dropout(checkpoint):
    model = gpt2.from_pretrained(checkpoint[0], seed=1)
    model.train()
    counts = np.asarray(model.h.dropout.rngs.count[...])  # the scanned layers' streams, one per layer
    a, b = forward(model, IDS), forward(model, IDS)  # dropout on: two draws differ
    assert np.abs(np.asarray(a) - np.asarray(b)).max() > 1e-3
    # each layer's dropout stream advanced through the scan (a fresh mask per call, not the same one)
    np.testing.assert_array_equal(np.asarray(model.h.dropout.rngs.count[...]), counts + 2)
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    losses = [float(gpt2.common.train_step(model, optimizer, jnp.asarray(IDS))) for _ in range(4)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    model.eval()  # dropout off again: deterministic
    np.testing.assert_array_equal(np.asarray(forward(model, IDS)), np.asarray(forward(model, IDS)))


def test_missing_tensor_is_one_line(checkpoint, tmp_path):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(checkpoint[0] / "model.safetensors")
    del tensors["transformer.h.1.mlp.c_fc.weight"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "config.json").write_text((checkpoint[0] / "config.json").read_text())
    with pytest.raises(fp.CheckpointError, match=r"expected tensor 'transformer.h.1.mlp.c_fc.weight'") as info:
        gpt2.from_pretrained(tmp_path)
    assert "\n" not in str(info.value)


def test_command_line_help():
    help_text = subprocess.run([sys.executable, gpt2.__file__, "--help"], capture_output=True, text=True, timeout=120)
    assert help_text.returncode == 0
    for word in ("GPT-2", "--prompt", "--max-new-tokens", "path"):
        assert word in help_text.stdout


def test_common_doctests():
    import doctest

    assert doctest.testmod(gpt2.common).failed == 0


def test_base_model_checkpoint_loads(tiny_checkpoint):
    """A GPT2Model checkpoint (keys without ``transformer.``) loads as well as a GPT2LMHeadModel one."""
    import torch

    tiny = tiny_checkpoint("gpt2")  # GPT2Model: n_positions 32, width 16, 1 layer
    model = gpt2.from_pretrained(tiny.path)
    ids = np.arange(8)[None]
    with torch.no_grad():
        hidden = tiny.model(torch.tensor(ids)).last_hidden_state.numpy()
    expected = hidden @ tiny.model.wte.weight.detach().numpy().T  # the tied head on HF's output
    assert np.abs(np.asarray(jitted(model)(ids)) - expected).max() < 1e-4

"""examples/models/serving.py: a context shift with attention sinks, against transformers.

The reference is transformers' own ``LlamaForCausalLM`` re-run on the kept tokens at their new
positions ``0 ..`` at every step (a new prefill of what the cache holds): for a one-layer model
the re-rotated cache must give the same logits (within 1e-5 of their scale) and the same greedy
ids. Past the model's own position limit, which the shifted cache never reaches.
"""

from __future__ import annotations

import numpy as np
import pytest
from model_checkpoints import build, load_example

import flax_posenc as fp

llama = load_example("llama")
serving = load_example("serving")

SINKS, WINDOW, STEPS = 4, 16, 40


@pytest.fixture(scope="module")
def one_layer(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama_1layer")
    torch_model = build("llama", path, num_hidden_layers=1, rope_scaling=None, max_position_embeddings=24)
    return torch_model, llama.from_pretrained(path)


def reprefill_reference(torch_model, prompt, steps, sinks, window):
    """Greedy ids and logits of transformers re-run on the kept tokens at every step."""
    import torch

    drop = (window - sinks) // 2
    ctx = list(prompt)
    ids, logits = [], []
    for _ in range(steps):
        with torch.no_grad():
            last = torch_model(torch.tensor([ctx])).logits[0, -1].double().numpy()
        token = int(np.argmax(last))
        ids.append(token)
        logits.append(last)
        if len(ctx) == window:  # the cache is full: keep the sinks and the newest tokens
            ctx = ctx[:sinks] + ctx[sinks + drop :]
        ctx.append(token)
    return np.array(ids), np.array(logits)


def test_context_shift_equals_reprefill_of_kept_tokens(one_layer):
    torch_model, model = one_layer
    prompt = np.random.default_rng(1).integers(0, 1000, (1, 10))
    ids, logits = serving.generate_with_sinks(
        model, prompt, STEPS, sink_tokens=SINKS, window=WINDOW, return_logits=True
    )
    want_ids, want_logits = reprefill_reference(torch_model, prompt[0], STEPS, SINKS, WINDOW)
    np.testing.assert_array_equal(np.asarray(ids)[0, 10:], want_ids)
    scale = np.abs(want_logits).max()
    assert np.abs(np.asarray(logits[0], np.float64) - want_logits).max() <= 1e-5 * scale
    # the same through llama.generate's opt-in keywords; 50 positions in all, past the limit of 24
    np.testing.assert_array_equal(llama.generate(model, prompt, STEPS, sink_tokens=SINKS, window=WINDOW), ids)


def test_without_rerotation_the_logits_differ(one_layer, monkeypatch):
    """The check is not vacuous: moving the keys without rotating them is caught."""
    torch_model, model = one_layer
    monkeypatch.setattr(serving.fp, "rotate_keys", lambda k, delta, rope, positions: k)
    prompt = np.random.default_rng(1).integers(0, 1000, (1, 10))
    _, logits = serving.generate_with_sinks(model, prompt, 20, sink_tokens=SINKS, window=WINDOW, return_logits=True)
    _, want = reprefill_reference(torch_model, prompt[0], 20, SINKS, WINDOW)
    assert np.abs(np.asarray(logits[0], np.float64) - want).max() > 1e-3 * np.abs(want).max()


def test_bad_sinks_and_window_one_line(one_layer):
    _, model = one_layer
    prompt = np.zeros((1, 10), np.int64)
    with pytest.raises(ValueError, match=r"^sink_tokens: expected at most window - 2 = 14 .* got 15$"):
        llama.generate(model, prompt, 5, sink_tokens=15, window=16)
    with pytest.raises(ValueError, match=r"^window: expected at least the prompt's 10 tokens, got 8$"):
        llama.generate(model, prompt, 5, sink_tokens=2, window=8)
    with pytest.raises(fp.PositionLimitError, match=r"^window: .*holds 24 positions.*needs 32, 8 past the end$"):
        llama.generate(model, prompt, 5, sink_tokens=2, window=32)
    with pytest.raises(ValueError, match=r"^sink_tokens: expected a Python int >= 0, got None$"):
        llama.generate(model, prompt, 5, window=16)

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
serving = llama.serving  # the module llama.generate calls: one jit cache

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
    try:
        _, logits = serving.generate_with_sinks(model, prompt, 20, sink_tokens=SINKS, window=WINDOW, return_logits=True)
    finally:
        serving._decode.clear_cache()  # no other test may reuse the program traced with the patch
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


# ----------------------------------------------------------------------------- LongRoPE's switch

ORIGINAL = 12  # original_max_position_embeddings: crossed a few tokens into decoding


def phi3_as_llama(path, layers: int):
    """A tiny Phi-3 (LongRoPE) and the same weights saved as a Llama checkpoint (fused qkv and
    gate_up split), for the example Llama to load; returns the Phi-3 torch model."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM

    rng = np.random.default_rng(0)
    rope = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "short_factor": list(1.0 + rng.random(8)),
        "long_factor": list(4.0 + 8 * rng.random(8)),
        "original_max_position_embeddings": ORIGINAL,
    }
    sizes = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=layers)
    sizes.update(num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=1e-6)
    sizes.update(bos_token_id=1, eos_token_id=None, pad_token_id=999)  # no eos: min_new_tokens would mask it
    phi3 = Phi3ForCausalLM(Phi3Config(**sizes, original_max_position_embeddings=ORIGINAL, rope_parameters=rope))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in phi3.parameters():
            p.copy_(torch.randn_like(p) * (0.1 if p.ndim == 1 else 0.2) + (1.0 if p.ndim == 1 else 0.0))
    state = {}
    for name, value in phi3.state_dict().items():
        if name.endswith("qkv_proj.weight"):
            q, k, v = value.split([64, 32, 32])
            for part, w in zip("qkv", (q, k, v), strict=True):
                state[name.replace("qkv_proj", f"{part}_proj")] = w
        elif name.endswith("gate_up_proj.weight"):
            gate, up = value.chunk(2)
            state[name.replace("gate_up_proj", "gate_proj")], state[name.replace("gate_up_proj", "up_proj")] = gate, up
        else:
            state[name] = value
    llama_model = LlamaForCausalLM(LlamaConfig(**sizes, rope_parameters=rope, tie_word_embeddings=False))
    llama_model.load_state_dict(state, strict=True)
    llama_model.save_pretrained(path)
    return phi3.eval()


def _switch_reference_logits(phi3, ids, prompt_len):
    """transformers' logits for every new token: short factors up to position ORIGINAL - 1 (a
    forward of the first ORIGINAL tokens), long ones after (a forward of them all)."""
    import torch

    with torch.no_grad():
        short = phi3(torch.tensor(ids[:, :ORIGINAL])).logits[:, prompt_len - 1 :].double().numpy()
        long = phi3(torch.tensor(ids[:, :-1])).logits[:, ORIGINAL:].double().numpy()
    return np.concatenate([short, long], axis=1)


def test_longrope_switch_without_prefill_equals_transformers_generate(tmp_path):
    """One layer: the re-rotated keys are exactly the keys transformers' new prefill makes."""
    from model_checkpoints import hf_generate

    phi3 = phi3_as_llama(tmp_path, 1)
    model = llama.from_pretrained(tmp_path)
    assert model.rope.rope_type == "longrope" and model.rope.original_max_position_embeddings == ORIGINAL
    prompt = np.random.default_rng(2).integers(0, 1000, (2, 8))
    steps = 14  # positions 8 .. 21: the switch at position 12
    ids, logits = serving.generate_longrope(model, prompt, steps, return_logits=True)
    # transformers' Phi-3 drops its cache at the switch and runs a new prefill with the long factors
    np.testing.assert_array_equal(np.asarray(ids), hf_generate(phi3, prompt, steps))
    want = _switch_reference_logits(phi3, np.asarray(ids), 8)
    assert np.abs(np.asarray(logits, np.float64) - want).max() <= 1e-5 * np.abs(want).max()


def test_longrope_switch_in_two_layers(tmp_path):
    """Two layers: a new prefill inside the program equals transformers (re-rotating only the keys
    leaves layer 1's cache computed with the short angles in view: docs/serving.md)."""
    from model_checkpoints import hf_generate

    phi3 = phi3_as_llama(tmp_path, 2)
    model = llama.from_pretrained(tmp_path)
    prompt = np.random.default_rng(2).integers(0, 1000, (2, 8))
    ids, logits = serving.generate_longrope(model, prompt, 14, at_switch="prefill", return_logits=True)
    np.testing.assert_array_equal(np.asarray(ids), hf_generate(phi3, prompt, 14))
    want = _switch_reference_logits(phi3, np.asarray(ids), 8)
    assert np.abs(np.asarray(logits, np.float64) - want).max() <= 1e-5 * np.abs(want).max()
    # at_switch="rotate" in two layers: benchmarks/serving.py measures it (4e-1 of the logits' scale)


def test_longrope_switch_needs_long_factors(one_layer):
    _, model = one_layer
    with pytest.raises(ValueError, match=r"^rope: a LongRoPE switch needs rope_type 'longrope' with long_factor, got"):
        serving.generate_longrope(model, np.zeros((1, 4), np.int64), 2)

"""``RotaryEmbedding.from_pretrained`` (NNX and Linen) and ``rope_for_layer``: each layer its own RoPE.

Tiny configs are written by transformers' own config classes (``save_pretrained``: config.json
only, RoPE needs no weights). Each layer's module is checked against the model's own rotary
module (``cos``/``sin`` for that layer's type) through the modeling file's
``apply_rotary_pos_emb``, within 1e-5: Gemma 3 (sliding layers theta 1e4, full layers 1e6),
SmolLM3 (``no_rope_layers``: layer 3 is NoPE, the identity) and DeepSeek-V3 (MLA: the rope head,
interleaved or not).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx
from transformers.models.deepseek_v3 import modeling_deepseek_v3
from transformers.models.gemma3 import modeling_gemma3
from transformers.models.smollm3 import modeling_smollm3

import flax_posenc as fp
from flax_posenc.conversion.layer_rope import rope_for_layer
from flax_posenc.errors import CheckpointError

SEQ, HEADS, START = 12, 2, 3

# the sizes and special token ids every tiny config shares
SIZES = dict(hidden_size=64, intermediate_size=64, num_attention_heads=4, vocab_size=128, max_position_embeddings=64)
TINY = dict(SIZES, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# DeepSeek-V3's multi-head latent attention and mixture of experts, tiny
MLA = dict(qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, head_dim=8, kv_lora_rank=16, q_lora_rank=16)
MOE = dict(moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1)

# name -> (config class, kwargs, modeling module, expected layer -> "rope"/"nope" per layer)
CASES = {
    "gemma3": (
        "Gemma3TextConfig",
        dict(
            TINY,
            num_key_value_heads=2,
            head_dim=16,
            num_hidden_layers=4,
            sliding_window=16,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        ),
        modeling_gemma3,
    ),
    "smollm3": (
        "SmolLM3Config",
        dict(TINY, num_key_value_heads=2, num_hidden_layers=4, no_rope_layers=[1, 1, 1, 0]),
        modeling_smollm3,
    ),
    "deepseek_v3": (
        "DeepseekV3Config",
        dict(TINY, **MLA, **MOE, num_key_value_heads=4, num_hidden_layers=2, first_k_dense_replace=1),
        modeling_deepseek_v3,
    ),
    "deepseek_v3_half": (
        "DeepseekV3Config",
        None,  # deepseek_v3's, with rope_interleave=False
        modeling_deepseek_v3,
    ),
}


def _config(name: str):
    cls, kwargs, _ = CASES[name]
    if kwargs is None:
        kwargs = dict(CASES["deepseek_v3"][1], rope_interleave=False)
    return getattr(transformers, cls)(**kwargs)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """``name -> (directory, transformers config)``; also a tiny GPT-2 (weights: a learned table)."""
    out = {}
    for name in CASES:
        d = tmp_path_factory.mktemp(name)
        config = _config(name)
        config.save_pretrained(d)
        out[name] = (d, config)
    d = tmp_path_factory.mktemp("gpt2")
    gpt2 = transformers.GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=2, n_head=2)
    torch.manual_seed(0)
    transformers.GPT2Model(gpt2).save_pretrained(d)
    out["gpt2"] = (d, gpt2)
    d = tmp_path_factory.mktemp("gpt2_config_only")
    gpt2.save_pretrained(d)
    out["gpt2_config_only"] = (d, gpt2)
    return out


LAYERS = [(name, layer) for name in CASES for layer in range(_config(name).num_hidden_layers)]


def _is_nope(config, layer: int) -> bool:
    flags = getattr(config, "no_rope_layers", None)
    return flags is not None and not flags[layer]


def _reference(name: str, config, layer: int, q: np.ndarray, k: np.ndarray, positions: np.ndarray):
    """transformers' rotation of ``q``, ``k`` ``(batch, heads, seq, head_dim)`` for layer ``layer``."""
    module = CASES[name][2]
    rotary_cls = next(getattr(module, n) for n in dir(module) if n.endswith("RotaryEmbedding"))
    rotary = rotary_cls(config)
    x = torch.zeros(1, q.shape[2], config.hidden_size)
    pos = torch.from_numpy(positions)[None]
    with torch.no_grad():
        if getattr(config, "layer_types", None) and name == "gemma3":
            cos, sin = rotary(x, pos, config.layer_types[layer])
        else:
            cos, sin = rotary(x, pos)
        apply = module.apply_rotary_pos_emb
        if getattr(config, "rope_interleave", False):
            apply = module.apply_rotary_pos_emb_interleave
        oq, ok = apply(torch.from_numpy(q), torch.from_numpy(k), cos, sin)
    return oq.numpy(), ok.numpy()


def _qk(head_dim: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    shape = (1, HEADS, SEQ, head_dim)
    return rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)


def _deinterleave(x: np.ndarray, config) -> np.ndarray:
    """DeepSeek's interleaved apply lists the pairs' first members, then the second ones."""
    if not getattr(config, "rope_interleave", False):
        return x
    r = x.shape[-1]
    return x[..., np.r_[np.arange(0, r, 2), np.arange(1, r, 2)]]


@pytest.mark.parametrize("name,layer", LAYERS, ids=[f"{n}-layer{i}" for n, i in LAYERS])
def test_each_layer_matches_transformers(checkpoints, name, layer):
    directory, config = checkpoints[name]
    rope = fp.nnx.RotaryEmbedding.from_pretrained(directory, layer=layer, seq_axis=-2)
    linen, variables = fp.linen.RotaryEmbedding.from_pretrained(directory, layer=layer, seq_axis=-2)
    assert variables == {}
    assert rope.config == linen.config == rope_for_layer(directory, layer)
    head_dim = rope.config.head_dim if rope.config is not None else config.hidden_size // config.num_attention_heads
    q, k = _qk(head_dim)
    positions = np.arange(START, START + SEQ)
    ours_q, ours_k = rope.rotate_qk(q, k, positions)
    lin_q, lin_k = linen.apply(variables, q, k, positions, method="rotate_qk")
    np.testing.assert_array_equal(np.asarray(rope(q, positions)), np.asarray(ours_q))
    np.testing.assert_array_equal(np.asarray(linen.apply(variables, q, positions)), np.asarray(ours_q))
    np.testing.assert_array_equal(np.asarray(lin_q), np.asarray(ours_q))  # Linen and NNX: the same numbers
    np.testing.assert_array_equal(np.asarray(lin_k), np.asarray(ours_k))
    if _is_nope(config, layer):
        assert rope.config is None and linen.config is None
        np.testing.assert_array_equal(np.asarray(ours_q), q)  # the identity
        np.testing.assert_array_equal(np.asarray(ours_k), k)
        return
    ref_q, ref_k = _reference(name, config, layer, q, k, positions)
    np.testing.assert_allclose(_deinterleave(np.asarray(ours_q), config), ref_q, rtol=0, atol=1e-5)
    np.testing.assert_allclose(_deinterleave(np.asarray(ours_k), config), ref_k, rtol=0, atol=1e-5)
    # Flax's layout (the default seq_axis=-3) gives the same rotation
    flax = fp.nnx.RotaryEmbedding.from_pretrained(directory, layer=layer)
    np.testing.assert_allclose(
        np.asarray(flax(q.transpose(0, 2, 1, 3), positions)).transpose(0, 2, 1, 3), np.asarray(ours_q), atol=1e-6
    )


def test_gemma3_layer_types_get_their_own_theta(checkpoints):
    directory, _ = checkpoints["gemma3"]
    thetas = [rope_for_layer(directory, i).rope_theta for i in range(4)]
    assert thetas == [10000.0, 1e6, 10000.0, 1e6]
    q, _ = _qk(16)
    sliding = fp.nnx.RotaryEmbedding.from_pretrained(directory, layer=0, seq_axis=-2)(q)
    full = fp.nnx.RotaryEmbedding.from_pretrained(directory, layer=1, seq_axis=-2)(q)
    assert float(jnp.max(jnp.abs(sliding - full))) > 1e-2


def test_deepseek_rope_head(checkpoints):
    for name, layout in (("deepseek_v3", "interleaved"), ("deepseek_v3_half", "half")):
        rope = rope_for_layer(checkpoints[name][0], 1)
        assert (rope.head_dim, rope.layout) == (8, layout)


def test_config_json_path_and_numpy_integer_layer(checkpoints):
    directory, _ = checkpoints["smollm3"]
    assert rope_for_layer(directory / "config.json", np.int64(2)) == rope_for_layer(directory, 2)
    assert rope_for_layer(directory / "config.json", 3) is None


@pytest.mark.parametrize("layer", [0, 3], ids=["rope", "nope"])
def test_under_transforms(checkpoints, layer):
    directory, _ = checkpoints["smollm3"]
    rope = fp.nnx.RotaryEmbedding.from_pretrained(directory, layer=layer)
    linen, variables = fp.linen.RotaryEmbedding.from_pretrained(directory, layer=layer)
    x = jnp.asarray(np.random.default_rng(1).standard_normal((3, SEQ, HEADS, 16)), jnp.float32)
    eager = rope(x, start=START)
    jitted = jax.jit(lambda x: rope(x, start=START))(x)
    nnx_jitted = nnx.jit(lambda m, x: m(x, start=START))(rope, x)
    vmapped = jax.vmap(lambda x: rope(x, start=START))(x)  # one sequence at a time
    linen_jitted = jax.jit(lambda x: linen.apply(variables, x, start=START))(x)
    traced_start = jax.jit(lambda x, s: rope(x, start=s))(x, START)
    for out in (jitted, nnx_jitted, vmapped, linen_jitted, traced_start):
        np.testing.assert_allclose(np.asarray(out), np.asarray(eager), rtol=0, atol=1e-6)
    if layer == 3:
        np.testing.assert_array_equal(np.asarray(vmapped), np.asarray(x))
        np.testing.assert_array_equal(np.asarray(nnx_jitted), np.asarray(x))


def test_one_rope_for_every_layer(tmp_path):
    transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=4, num_hidden_layers=3, max_position_embeddings=64, vocab_size=128
    ).save_pretrained(tmp_path)
    ropes = [rope_for_layer(tmp_path, i) for i in range(3)]
    assert ropes[0] is not None and ropes[0] == ropes[1] == ropes[2]
    with pytest.raises(CheckpointError, match=r"0\.\.2 \(3 layers"):
        rope_for_layer(tmp_path, 3)


def _one_line(excinfo, *fragments: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize(
    "layer,fragments",
    [
        (4, ("layer in 0..3 (4 layers, num_hidden_layers)", "layer=4")),
        (-1, ("layer in 0..3 (4 layers", "layer=-1")),
        (True, ("an integer layer", "True (bool)")),
        (1.0, ("an integer layer", "1.0 (float)")),
        ("1", ("an integer layer", "'1' (str)")),
    ],
    ids=["past-the-end", "negative", "bool", "float", "str"],
)
@pytest.mark.parametrize("shell", ["function", "nnx", "linen"])
def test_bad_layer_is_one_line(checkpoints, layer, fragments, shell):
    directory, _ = checkpoints["gemma3"]
    call = {
        "function": lambda: rope_for_layer(directory, layer),
        "nnx": lambda: fp.nnx.RotaryEmbedding.from_pretrained(directory, layer=layer),
        "linen": lambda: fp.linen.RotaryEmbedding.from_pretrained(directory, layer=layer),
    }[shell]
    with pytest.raises(CheckpointError) as excinfo:
        call()
    _one_line(excinfo, str(directory), *fragments)


@pytest.mark.parametrize("name", ["gpt2", "gpt2_config_only"])
def test_source_without_rope_is_one_line(checkpoints, name):
    directory, _ = checkpoints[name]
    for call in (
        lambda: rope_for_layer(directory, 0),
        lambda: fp.nnx.RotaryEmbedding.from_pretrained(directory),
        lambda: fp.linen.RotaryEmbedding.from_pretrained(directory),
    ):
        with pytest.raises(CheckpointError) as excinfo:
            call()
        _one_line(excinfo, str(directory), "a RoPE mechanism", "'gpt2'", "learned")


def test_alibi_source_has_no_rope(tmp_path):
    transformers.BloomConfig(vocab_size=32, hidden_size=16, n_layer=2, n_head=2).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError) as excinfo:
        rope_for_layer(tmp_path, 0)
    _one_line(excinfo, "a RoPE mechanism", "alibi")


def test_identity_module_directly():
    x = jnp.arange(2 * 4 * 3 * 8, dtype=jnp.float32).reshape(2, 4, 3, 8)
    assert fp.nnx.RotaryEmbedding(None).config is None
    np.testing.assert_array_equal(np.asarray(fp.nnx.RotaryEmbedding(None)(x, start=10_000)), np.asarray(x))
    q, k = fp.linen.RotaryEmbedding(None).apply({}, x, x + 1, method="rotate_qk")
    np.testing.assert_array_equal(np.asarray(q), np.asarray(x))
    np.testing.assert_array_equal(np.asarray(k), np.asarray(x + 1))


@pytest.mark.parametrize("layer", [0, 3], ids=["rope", "nope"])
def test_in_a_scanned_decoding_loop(checkpoints, layer):
    """One token per step under ``lax.scan`` (a traced position per step) equals the whole sequence at once."""
    directory, _ = checkpoints["smollm3"]
    rope = fp.nnx.RotaryEmbedding.from_pretrained(directory, layer=layer)
    x = jnp.asarray(np.random.default_rng(2).standard_normal((2, SEQ, HEADS, 16)), jnp.float32)

    def step(t, token):  # token: (batch, heads, head_dim) at position t
        return t + 1, rope(token[:, None], start=t)[:, 0]

    _, steps = jax.jit(lambda x: jax.lax.scan(step, jnp.int32(START), jnp.swapaxes(x, 0, 1)))(x)
    np.testing.assert_allclose(np.swapaxes(np.asarray(steps), 0, 1), np.asarray(rope(x, start=START)), atol=1e-6)

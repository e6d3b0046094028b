"""RoPE parity with Hugging Face (transformers' own PyTorch functions), precision, bad input.

References: ``ROPE_INIT_FUNCTIONS`` and the models' default (inverse frequencies and attention
factor), ``LlamaRotaryEmbedding`` (cos/sin, with dynamic and LongRoPE recomputation),
``apply_rotary_pos_emb`` of Llama (half layout), GPT-NeoX (partial rotary) and GPT-J
(interleaved). Max abs difference <= 1e-5 in float32 on random inputs. Positions stay below 64
in the cos/sin comparisons: transformers forms the float32 angle ``p * w`` whose own error grows
with ``p`` (see ``test_long_range_precision``, where the float64 reference decides).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from helpers import LLAMA31
from transformers import GPTNeoXConfig, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_apply
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_apply

import flax_posenc as fp
from flax_posenc import PositionLimitError, RopeConfig

TOL = 1e-5
HD = 64
RNG = np.random.default_rng(0)

#: one rope_parameters dict per scaling type (Hugging Face names); max_position_embeddings 16
#: so that dynamic / LongRoPE switch within the tested positions.
SCALINGS = {
    "default": {},
    "linear": {"factor": 4.0},
    "dynamic": {"factor": 2.5},
    "yarn": {"factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 16.0, "beta_slow": 2.0},
    "yarn-mscale": {"factor": 8.0, "original_max_position_embeddings": 16, "mscale": 0.707, "mscale_all_dim": 1.0},
    "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
    "longrope": {
        "short_factor": list(np.linspace(1.0, 2.0, HD // 2)),
        "long_factor": list(np.linspace(1.0, 8.0, HD // 2)),
        "original_max_position_embeddings": 16,
        "factor": 4.0,
    },
}
MAX_POS = 16


def hf_config(name: str, theta: float = 10000.0, max_pos: int = MAX_POS) -> tuple[LlamaConfig, dict]:
    params = {"rope_type": name.split("-")[0], "rope_theta": theta, **SCALINGS[name]}
    config = LlamaConfig(
        hidden_size=HD * 4,
        num_attention_heads=4,
        head_dim=HD,
        max_position_embeddings=max_pos,
        rope_parameters=dict(params),
    )
    return config, params


def ours(params: dict, max_pos: int = MAX_POS, **kw) -> RopeConfig:
    return RopeConfig.from_rope_parameters(params, head_dim=HD, max_position_embeddings=max_pos, **kw)


@pytest.mark.parametrize("name", list(SCALINGS))
@pytest.mark.parametrize("theta", [10000.0, 500000.0])
def test_inverse_frequencies_match_rope_init_functions(name, theta):
    config, params = hf_config(name, theta)
    kind = params["rope_type"]
    seq_lens = [None, 3 * MAX_POS] if kind in ("dynamic", "longrope") else [None]
    for seq_len in seq_lens:
        if kind == "default":
            inv_hf, att_hf = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
        else:
            inv_hf, att_hf = ROPE_INIT_FUNCTIONS[kind](config, None, seq_len=seq_len)
        inv, att = fp.rope_inverse_frequencies(ours(params), seq_len=seq_len)
        assert inv.shape == tuple(inv_hf.shape)
        assert np.abs(inv - inv_hf.double().numpy()).max() <= TOL * 1e-2  # float32 rounding of HF's
        assert att == pytest.approx(float(att_hf), rel=1e-12)


@pytest.mark.parametrize("name", list(SCALINGS))
def test_cos_sin_match_llama_rotary_embedding(name):
    config, params = hf_config(name)
    # no declared limit (dynamic has none anyway): dynamic/LongRoPE are exercised past MAX_POS
    cfg = ours(params, max_pos=MAX_POS if name == "dynamic" else None)
    assert cfg.limit is None or cfg.limit >= 4 * MAX_POS
    for high in (MAX_POS, 4 * MAX_POS):  # within and past the original length
        emb = LlamaRotaryEmbedding(config)  # fresh: HF's dynamic cache keeps the longest length seen
        pos = RNG.integers(0, high, (2, 24))
        pos[0, -1] = high - 1
        with torch.no_grad():
            cos_hf, sin_hf = emb(torch.zeros(1), torch.from_numpy(pos))
        cos, sin = fp.rotary_cos_sin(jnp.asarray(pos), cfg)
        half = HD // 2
        np.testing.assert_array_equal(cos_hf[..., :half].numpy(), cos_hf[..., half:].numpy())
        assert np.abs(np.asarray(cos) - cos_hf[..., :half].numpy()).max() <= TOL
        assert np.abs(np.asarray(sin) - sin_hf[..., :half].numpy()).max() <= TOL


@pytest.mark.parametrize("name", ["default", "yarn", "llama3"])
def test_apply_matches_llama_apply_rotary_pos_emb(name):
    config, params = hf_config(name, max_pos=64)
    emb = LlamaRotaryEmbedding(config)
    batch, heads, seq = 2, 3, 40
    q = RNG.standard_normal((batch, heads, seq, HD)).astype(np.float32)
    k = RNG.standard_normal((batch, heads, seq, HD)).astype(np.float32)
    pos = np.stack([np.arange(seq), RNG.permutation(64)[:seq]])
    with torch.no_grad():
        cos_hf, sin_hf = emb(torch.zeros(1), torch.from_numpy(pos))
        q_hf, k_hf = llama_apply(torch.from_numpy(q), torch.from_numpy(k), cos_hf, sin_hf)
    cfg = ours(params, max_pos=64)
    cos, sin = fp.rotary_cos_sin(jnp.asarray(pos), cfg)
    # ours is (batch, seq, heads, head_dim); transpose HF's (batch, heads, seq, head_dim)
    got_q = fp.apply_rotary(jnp.asarray(q), cos[:, None], sin[:, None])
    assert np.abs(np.asarray(got_q) - q_hf.numpy()).max() <= TOL
    got_k = fp.apply_rope(jnp.asarray(k.transpose(0, 2, 1, 3)), cfg, jnp.asarray(pos))
    assert np.abs(np.asarray(got_k).transpose(0, 2, 1, 3) - k_hf.numpy()).max() <= TOL
    # given HF's own cos/sin, the rotation itself agrees to rounding
    same = fp.apply_rotary(
        jnp.asarray(q), jnp.asarray(cos_hf[:, None, :, : HD // 2]), jnp.asarray(sin_hf[:, None, :, : HD // 2])
    )
    assert np.abs(np.asarray(same) - q_hf.numpy()).max() <= 1e-6


def test_partial_rotary_matches_gpt_neox():
    config = GPTNeoXConfig(
        hidden_size=256, num_attention_heads=4, max_position_embeddings=64, rotary_pct=0.25, rotary_emb_base=10000
    )
    emb = GPTNeoXRotaryEmbedding(config)
    q = RNG.standard_normal((2, 4, 32, 64)).astype(np.float32)
    pos = np.tile(np.arange(32), (2, 1))
    with torch.no_grad():
        cos_hf, sin_hf = emb(torch.zeros(1), torch.from_numpy(pos))
        q_hf, _ = neox_apply(torch.from_numpy(q), torch.from_numpy(q), cos_hf, sin_hf)
    cfg = RopeConfig(head_dim=64, partial_rotary_factor=0.25, max_position_embeddings=64)
    assert cfg.rotary_dim == 16 == cos_hf.shape[-1]
    got = fp.apply_rope(jnp.asarray(q.transpose(0, 2, 1, 3)), cfg)
    assert np.abs(np.asarray(got).transpose(0, 2, 1, 3) - q_hf.numpy()).max() <= TOL
    np.testing.assert_array_equal(np.asarray(got)[..., 16:], q.transpose(0, 2, 1, 3)[..., 16:])


def test_interleaved_matches_gptj():
    rotary_dim, head_dim, seq = 32, 48, 40
    table = create_sinusoidal_positions(64, rotary_dim)
    pos = np.stack([np.arange(seq), RNG.permutation(64)[:seq]])
    sincos = table[torch.from_numpy(pos)]
    sin_hf, cos_hf = torch.split(sincos, rotary_dim // 2, dim=-1)
    x = RNG.standard_normal((2, seq, 3, head_dim)).astype(np.float32)  # GPT-J: (batch, seq, heads, dim)
    with torch.no_grad():
        rot = gptj_apply(torch.from_numpy(x[..., :rotary_dim]), sin_hf, cos_hf)
    want = np.concatenate([rot.numpy(), x[..., rotary_dim:]], -1)
    cfg = RopeConfig(head_dim=head_dim, partial_rotary_factor=rotary_dim / head_dim, layout="interleaved")
    got = fp.apply_rope(jnp.asarray(x), cfg, jnp.asarray(pos))
    assert np.abs(np.asarray(got) - want).max() <= TOL


@pytest.mark.parametrize(
    "cfg",
    [RopeConfig(head_dim=128), RopeConfig(head_dim=128, rope_theta=500000.0, rope_type="linear", factor=4.0)],
    ids=["default", "linear"],
)
def test_long_range_precision_vs_float64_and_naive(cfg):
    """Angles within 2e-6 of float64 up to 2**24 (no limit declared); naive float32 is off by O(1)."""
    pos = np.concatenate([np.arange(2**24 - 512, 2**24), RNG.integers(0, 2**24, 512)]).astype(np.int64)
    inv, _ = fp.rope_inverse_frequencies(cfg)
    angle = pos[:, None].astype(np.float64) * inv
    cos, sin = jax.jit(lambda p: fp.rotary_cos_sin(p, cfg))(jnp.asarray(pos, jnp.int32))
    err = max(
        np.abs(np.asarray(cos, np.float64) - np.cos(angle)).max(),
        np.abs(np.asarray(sin, np.float64) - np.sin(angle)).max(),
    )
    naive = pos[:, None].astype(np.float32) * inv.astype(np.float32)
    err_naive = np.abs(np.cos(naive).astype(np.float64) - np.cos(angle)).max()
    assert err <= 2e-6
    assert err_naive > 0.1


def test_scores_depend_only_on_offset():
    from flax_posenc.report import analysis

    cfg = RopeConfig(head_dim=HD, rope_theta=10000.0)
    prof = analysis.rope_offset_invariance(cfg, length=256, max_offset=64, seed=0)
    assert prof.max_spread <= 1e-5, prof
    assert prof.mean.shape == (65,)


def test_jit_traced_positions_follow_overflow_rule():
    cfg = RopeConfig(head_dim=8, max_position_embeddings=32)
    f = fp.position_errors(jax.jit(lambda p: fp.rotary_cos_sin(p, cfg)))
    f(jnp.arange(32))
    with pytest.raises(
        PositionLimitError, match=r"default RoPE .* holds 32 positions \(0..31\); asked for position 32, 1 past the end"
    ):
        f(jnp.arange(33))
    clipped = jax.jit(lambda p: fp.rotary_cos_sin(p, cfg, on_overflow="clip"))(jnp.array([31, 40]))
    np.testing.assert_array_equal(np.asarray(clipped[0][0]), np.asarray(clipped[0][1]))
    filled = jax.jit(lambda p: fp.rotary_cos_sin(p, cfg, on_overflow="fill"))(jnp.array([31, 40]))
    assert np.isnan(np.asarray(filled[0][1])).all() and not np.isnan(np.asarray(filled[0][0])).any()


def test_dynamic_needs_static_length_when_traced():
    cfg = RopeConfig(head_dim=8, rope_type="dynamic", factor=2.0, max_position_embeddings=16)
    with pytest.raises(ValueError, match="seq_len: rope_type 'dynamic' depends on the sequence length"):
        jax.jit(lambda p: fp.rotary_cos_sin(p, cfg))(jnp.arange(4))
    a = jax.jit(lambda p: fp.rotary_cos_sin(p, cfg, seq_len=40))(jnp.arange(40))
    b = fp.rotary_cos_sin(jnp.arange(40), cfg)
    np.testing.assert_array_equal(np.asarray(a[0]), np.asarray(b[0]))


# --------------------------------------------------------------------------- bad input: one line each


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(head_dim=63), r"^head_dim: expected a positive even integer \(rotations act on pairs\), got 63$"),
        (
            dict(head_dim=64, partial_rotary_factor=0.3),
            r"^partial_rotary_factor: 0.3 of head_dim 64 rotates int\(19.2\) = 19 dims; rotations need a positive even number of dims$",
        ),
        (
            dict(head_dim=64, rope_type="ntk"),
            r"^rope_type: unknown scaling type 'ntk'; known types: default, linear, dynamic, yarn, llama3, longrope, proportional$",
        ),
        (
            dict(head_dim=64, rope_type="linear", factor=0.0),
            r"^factor: expected a scaling factor > 0 for rope_type 'linear', got 0.0$",
        ),
        (
            dict(head_dim=64, rope_type="yarn", factor=-2.0, max_position_embeddings=64),
            r"^factor: expected a scaling factor > 0 for rope_type 'yarn', got -2.0$",
        ),
        (dict(head_dim=64, rope_type="linear"), r"^factor: rope_type 'linear' needs it"),
        (
            dict(head_dim=64, rope_type="llama3", factor=8.0, max_position_embeddings=64),
            r"^low_freq_factor: rope_type 'llama3' needs it",
        ),
        (dict(head_dim=64, rope_theta=0.0), r"^rope_theta: expected a finite number > 0, got 0.0$"),
        (
            dict(head_dim=8, layout="split"),
            r"^layout: expected one of \('half', 'interleaved', 'half_reversed'\), got 'split'$",
        ),
    ],
)
def test_bad_config_is_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        RopeConfig(**kwargs)
    assert "\n" not in str(info.value)


def test_positions_past_the_limit_raise():
    cfg = RopeConfig(head_dim=8, rope_type="linear", factor=2.0, max_position_embeddings=16)
    assert cfg.limit == 32
    fp.rotary_cos_sin(jnp.arange(32), cfg)
    with pytest.raises(
        PositionLimitError,
        match=r"^linear RoPE \(the larger of max_position_embeddings 16 and scaled 2 x 16 = 32\) holds 32 positions \(0..31\); asked for position 32, 1 past the end$",
    ):
        fp.rotary_cos_sin(jnp.arange(33), cfg)
    with pytest.raises(TypeError, match="positions: expected an integer array"):
        fp.rotary_cos_sin(jnp.arange(3.0), cfg)


def test_limits_of_scaling_types():
    assert (LLAMA31.scaled_limit, LLAMA31.limit) == (65536, 131072)
    yarn = RopeConfig(
        head_dim=128,
        rope_type="yarn",
        factor=4.0,
        original_max_position_embeddings=32768,
        max_position_embeddings=32768,
    )
    assert yarn.limit == 131072
    assert RopeConfig(head_dim=8).limit is None
    dynamic = RopeConfig(head_dim=8, rope_type="dynamic", factor=2.0, max_position_embeddings=16)
    assert dynamic.limit is None  # NTK rescales for any length


# --------------------------------------------------------------------------- modules


def test_nnx_and_linen_rotary_modules_agree():
    cfg = RopeConfig(
        head_dim=16, rope_type="yarn", factor=2.0, original_max_position_embeddings=32, max_position_embeddings=64
    )
    x = jnp.asarray(RNG.standard_normal((2, 10, 3, 16)), jnp.float32)
    a = fp.nnx.RotaryEmbedding(cfg)(x, start=5)
    b = fp.linen.RotaryEmbedding(cfg).apply({}, x, start=5)
    c = fp.apply_rope(x, cfg, jnp.arange(5, 15))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
    with pytest.raises(PositionLimitError):
        fp.nnx.RotaryEmbedding(cfg)(x, start=60)
    assert isinstance(fp.nnx.RotaryEmbedding(16), nnx.Module)


def test_bfloat16_inputs_keep_their_dtype():
    x = jnp.ones((4, 2, 8), jnp.bfloat16)
    cos, sin = fp.rotary_cos_sin(jnp.arange(4), 8)
    assert fp.apply_rotary(x, cos[:, None], sin[:, None]).dtype == jnp.bfloat16


# ----------------------------------------------------------------------------- traced vs host, decoding


def _limited(name: str) -> RopeConfig:
    return ours(dict(hf_config(name)[1]))  # declared limit MAX_POS; scaled limits where the type has one


@pytest.mark.parametrize("name", list(SCALINGS))
def test_traced_and_host_cos_sin_agree_with_the_attention_factor(name):
    """The host path (known positions: float64, validated against transformers above) and the traced
    path (exact-angle arithmetic under jit) give the same cos/sin, attention factor included."""
    cfg = _limited(name)
    top = cfg.limit or 4 * MAX_POS
    for seq_len in sorted({MAX_POS // 2, top}):  # LongRoPE: short factors, then long ones
        positions = np.arange(seq_len)
        host = fp.rotary_cos_sin(positions, cfg, seq_len=seq_len)
        traced = jax.jit(lambda p, n=seq_len: fp.rotary_cos_sin(p, cfg, seq_len=n))(jnp.asarray(positions))
        attention = fp.rope_inverse_frequencies(cfg, seq_len=seq_len)[1]
        np.testing.assert_allclose(np.asarray(host[0][0]), attention, rtol=1e-6)  # cos(0) = 1, times the factor
        for h, t in zip(host, traced):
            assert np.abs(np.asarray(h) - np.asarray(t)).max() <= 4e-6 * attention, (name, seq_len)
    if name.startswith("yarn") or name == "longrope":
        assert attention != 1.0  # the factor is really exercised


@pytest.mark.parametrize("name", ["default", "dynamic", "longrope", "yarn", "llama3"])
def test_decoding_with_a_static_start_equals_transformers_step_by_step(name):
    """One token per step at a static start s: Hugging Face's step sees positions [s] and sequence
    length s + 1 (dynamic and LongRoPE recompute their frequencies from it)."""
    config, params = hf_config(name)
    cfg = ours(params, max_pos=MAX_POS if name == "dynamic" else None)
    x = jnp.asarray(RNG.standard_normal((1, 1, 2, HD)), jnp.float32)
    traced = jax.jit(lambda x, s, n: fp.apply_rope(x, cfg, start=s, seq_len=n), static_argnums=2)
    for s in (0, 3, MAX_POS - 1, MAX_POS, 3 * MAX_POS):  # dynamic and LongRoPE switch at MAX_POS
        emb = LlamaRotaryEmbedding(config)  # fresh: HF's dynamic cache keeps the longest length seen
        with torch.no_grad():
            cos_hf, sin_hf = emb(torch.zeros(1), torch.arange(s + 1)[None])
        q = torch.from_numpy(np.array(x).transpose(0, 2, 1, 3))  # HF: (batch, heads, seq, dim)
        expected, _ = llama_apply(q, q, cos_hf[:, -1:], sin_hf[:, -1:])
        expected = expected.numpy().transpose(0, 2, 1, 3)
        static = fp.apply_rope(x, cfg, start=s)
        assert np.abs(np.asarray(static) - expected).max() <= TOL, (name, s)
        assert np.abs(np.asarray(traced(x, s, s + 1)) - expected).max() <= TOL, (name, s)


@pytest.mark.parametrize("module", ["nnx", "linen"])
def test_rotate_qk_rotates_both_at_the_same_positions(module):
    cfg = RopeConfig(head_dim=16, max_position_embeddings=32)
    q = jnp.asarray(RNG.standard_normal((2, 5, 4, 16)), jnp.float32)
    k = jnp.asarray(RNG.standard_normal((2, 5, 2, 16)), jnp.float32)  # GQA: fewer key heads
    positions = jnp.array([[3, 4, 5, 6, 7], [0, 1, 2, 3, 4]])
    if module == "nnx":
        rope = fp.nnx.RotaryEmbedding(cfg)
        got = rope.rotate_qk(q, k, positions)
        at_start = rope.rotate_qk(q, k, start=7)
        jitted = nnx.jit(lambda m, q, k, s: m.rotate_qk(q, k, start=s))(rope, q, k, 7)
    else:
        rope = fp.linen.RotaryEmbedding(cfg)
        got = rope.apply({}, q, k, positions, method="rotate_qk")
        at_start = rope.apply({}, q, k, start=7, method="rotate_qk")
        jitted = jax.jit(lambda q, k, s: rope.apply({}, q, k, start=s, method="rotate_qk"))(q, k, 7)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(fp.apply_rope(q, cfg, positions)))
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(fp.apply_rope(k, cfg, positions)))
    for a, b in zip(at_start, (fp.apply_rope(q, cfg, start=7), fp.apply_rope(k, cfg, start=7))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(jitted, at_start):
        assert np.abs(np.asarray(a) - np.asarray(b)).max() <= 1e-5
    with pytest.raises(PositionLimitError, match="holds 32 positions"):
        rope.rotate_qk(q, k, start=28) if module == "nnx" else rope.apply({}, q, k, start=28, method="rotate_qk")

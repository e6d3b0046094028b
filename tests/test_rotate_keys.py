"""fp.rotate_keys: cached RoPE keys moved from p to p + delta equal RoPE applied at p + delta.

The reference is float64 numpy: the un-rotated keys, rotated at the new positions by the float64
inverse frequencies of the config (``rope_inverse_frequencies``, itself checked against
transformers' ``ROPE_INIT_FUNCTIONS`` in tests/test_rope_scalings.py) with ``np.cos``/``np.sin``
of the float64 angle, in each layout written out by hand here. The cache holds float32 keys
(the float64 rotation at the old positions, rounded once), as a serving engine's does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flax_posenc as fp
from flax_posenc.rope_config import rope_inverse_frequencies

#: float32 rounding of a rotation of O(1) keys: ~2 ulps of each product, plus the exact angle's
#: 2e-6 bound (measured: ~5e-7 at these sizes)
TOL = 2e-6


def rope64(x, positions, cfg: fp.RopeConfig, *, seq_len=None, mrope_comp=None):
    """float64 RoPE of ``x`` ``(..., seq, heads, head_dim)`` at integer ``positions`` ``(..., seq)``."""
    inv, att = rope_inverse_frequencies(cfg, seq_len=seq_len)
    if mrope_comp is None:
        angle = np.asarray(positions, np.float64)[..., None] * inv  # (..., seq, n)
    else:  # positions (3, ..., seq): frequency j from component comp[j]
        per = np.asarray(positions, np.float64)[..., None] * inv
        angle = np.choose(mrope_comp, per)  # broadcasts comp over (..., seq, n)
    cos, sin = np.cos(angle)[..., None, :] * att, np.sin(angle)[..., None, :] * att
    x = np.asarray(x, np.float64)
    r = cfg.rotary_dim
    out = x.copy()
    if cfg.layout == "half":
        x1, x2 = x[..., : r // 2], x[..., r // 2 : r]
        out[..., : r // 2] = x1 * cos - x2 * sin
        out[..., r // 2 : r] = x2 * cos + x1 * sin
    else:
        x1, x2 = x[..., 0:r:2], x[..., 1:r:2]
        out[..., 0:r:2] = x1 * cos - x2 * sin
        out[..., 1:r:2] = x2 * cos + x1 * sin
    return out


def keys(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def cached(raw, positions, cfg, **kw):
    return jnp.asarray(rope64(raw, positions, cfg, **kw).astype(np.float32))


def err(got, want):
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)))


LONG = dict(
    rope_type="longrope",
    original_max_position_embeddings=32,
    max_position_embeddings=128,
    short_factor=(1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0),
    long_factor=(1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 16.0, 20.0),
)

CONFIGS = {
    "default": fp.RopeConfig(head_dim=16, max_position_embeddings=4096),
    "linear": fp.RopeConfig(head_dim=16, rope_type="linear", factor=4.0, max_position_embeddings=1024),
    "yarn": fp.RopeConfig(
        head_dim=16, rope_type="yarn", factor=4.0, original_max_position_embeddings=1024, rope_theta=5e5
    ),
    "llama3": fp.RopeConfig(
        head_dim=16,
        rope_type="llama3",
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=512,
        rope_theta=5e5,
    ),
    "proportional": fp.RopeConfig(head_dim=16, rope_type="proportional", partial_rotary_factor=0.5),
    "partial_neox": fp.RopeConfig(head_dim=32, partial_rotary_factor=0.25, max_position_embeddings=2048),
    "interleaved_gptj": fp.RopeConfig(head_dim=16, partial_rotary_factor=0.5, layout="interleaved"),
    # DeepSeek V3's MLA rope head: qk_rope_head_dim wide, yarn with mscale/mscale_all_dim
    "mla_rope_head": fp.RopeConfig(
        head_dim=16,
        rope_type="yarn",
        factor=40.0,
        mscale=1.0,
        mscale_all_dim=1.0,
        beta_fast=32,
        beta_slow=1,
        original_max_position_embeddings=128,
        layout="interleaved",
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_shift_equals_rope_at_new_positions(name):
    cfg = CONFIGS[name]
    raw = keys((2, 12, 2, cfg.head_dim))
    old = np.arange(100, 112)
    k = cached(raw, old, cfg)
    for delta in (-100, -37, 5):  # static
        want = rope64(raw, old + delta, cfg)
        assert err(fp.rotate_keys(k, delta, cfg, positions=old), want) < TOL
    # traced delta and positions, under jit
    shift = jax.jit(lambda k, d, p: fp.rotate_keys(k, d, cfg, positions=p))
    assert err(shift(k, jnp.int32(-90), jnp.asarray(old)), rope64(raw, old - 90, cfg)) < TOL


def test_per_row_and_per_key_offsets_and_hf_layout():
    cfg = CONFIGS["llama3"]
    raw = keys((3, 10, 2, 16), seed=1)
    old = np.tile(np.arange(50, 60), (3, 1)) + np.array([[0], [7], [300]])  # per-row positions
    k = cached(raw, old, cfg)
    per_row = np.array([[-50], [-3], [100]])
    want = rope64(raw, old + per_row, cfg)
    assert err(jax.jit(lambda k, d: fp.rotate_keys(k, d, cfg, positions=old))(k, per_row), want) < TOL
    per_key = np.random.default_rng(2).integers(-50, 50, size=(3, 10))
    assert err(fp.rotate_keys(k, per_key, cfg, positions=old), rope64(raw, old + per_key, cfg)) < TOL
    # Hugging Face's (batch, heads, seq, head_dim)
    k_hf = jnp.swapaxes(k, 1, 2)
    got = fp.rotate_keys(k_hf, jnp.asarray(per_row), cfg, positions=jnp.asarray(old), seq_axis=-2)
    assert err(jnp.swapaxes(got, 1, 2), want) < TOL


def test_vmap_and_scan():
    cfg = CONFIGS["yarn"]
    raw = keys((4, 8, 2, 16), seed=3)
    old = np.arange(200, 208)
    k = cached(raw, old, cfg)
    deltas = jnp.array([-200, -1, 0, 17])
    got = jax.vmap(lambda kr, d: fp.rotate_keys(kr, d, cfg, positions=old))(k, deltas)
    want = rope64(raw, old[None] + np.asarray(deltas)[:, None], cfg)
    assert err(got, want) < TOL

    # scan: 20 shifts of -3 each, composed in float32, against one float64 rotation by -60
    def body(carry, _):
        k, p = carry
        return (fp.rotate_keys(k, -3, cfg, positions=p), p - 3), None

    (moved, p), _ = jax.lax.scan(body, (k[0], jnp.asarray(old)), None, length=20)
    np.testing.assert_array_equal(p, old - 60)
    assert err(moved, rope64(raw[0], old - 60, cfg)) < 20 * TOL  # each step rounds once


def test_long_shift_exact_where_float32_angle_is_not():
    cfg = fp.RopeConfig(head_dim=64, rope_theta=10000.0)  # no limit: int32 positions
    raw = keys((1, 4, 1, 64), seed=4)
    old = np.arange(3_000_000, 3_000_004)
    k = cached(raw, old, cfg)
    delta = -2_999_990
    want = rope64(raw, old + delta, cfg)
    got = jax.jit(lambda k, d: fp.rotate_keys(k, d, cfg, positions=old))(k, jnp.int32(delta))
    assert err(got, want) < TOL
    inv, _ = rope_inverse_frequencies(cfg)  # the float32 angle others use: d * w in float32
    angle = np.float32(delta) * inv.astype(np.float32)
    naive = fp.apply_rotary(k, np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32))
    assert err(naive, want) > 100 * TOL


def test_change_of_angles_longrope_switch_and_dynamic():
    cfg = fp.RopeConfig(head_dim=16, **LONG)
    raw = keys((1, 20, 2, 16), seed=5)
    old = np.arange(20)
    k = cached(raw, old, cfg, seq_len=20)  # short factors: the prompt fits 32
    # the switch: the same positions, now with the long factors (seq_len 40 > 32)
    want = rope64(raw, old, cfg, seq_len=40)
    assert err(fp.rotate_keys(k, 0, cfg, positions=old, seq_len=20, to_seq_len=40), want) < TOL
    traced = jax.jit(lambda k, p: fp.rotate_keys(k, 0, cfg, positions=p, seq_len=20, to_seq_len=40))
    assert err(traced(k, jnp.asarray(old)), want) < TOL
    # dynamic NTK: from the base at 16 (unscaled) to the base grown for 48
    dyn = fp.RopeConfig(head_dim=16, rope_type="dynamic", factor=2.0, max_position_embeddings=16)
    k = cached(raw[:, :10], old[:10], dyn, seq_len=10)
    want = rope64(raw[:, :10], old[:10] + 30, dyn, seq_len=48)
    assert err(fp.rotate_keys(k, 30, dyn, positions=old[:10], seq_len=10, to_seq_len=48), want) < TOL
    # another frequency set altogether (to_rope) with its own attention factor
    to = fp.RopeConfig(head_dim=16, rope_type="yarn", factor=4.0, original_max_position_embeddings=64)
    base = fp.RopeConfig(head_dim=16, max_position_embeddings=64)
    k = cached(raw, old, base)
    assert err(fp.rotate_keys(k, 7, base, positions=old, to_rope=to), rope64(raw, old + 7, to)) < TOL


def test_mrope_per_component():
    rope = fp.RopeConfig(head_dim=16, max_position_embeddings=256, rope_theta=1e6)
    cfg = fp.MRopeConfig(rope, mrope_section=(2, 3, 3))
    comp = np.repeat([0, 1, 2], [2, 3, 3])
    rng = np.random.default_rng(6)
    raw = keys((2, 9, 2, 16), seed=6)
    old = rng.integers(0, 100, size=(3, 2, 9))
    k = cached(raw, old, rope, mrope_comp=comp)
    delta = np.array([-5, 3, 11]).reshape(3, 1, 1)
    want = rope64(raw, old + delta, rope, mrope_comp=comp)
    assert err(jax.jit(lambda k, d: fp.rotate_keys(k, d, cfg, positions=old))(k, delta), want) < TOL
    # text-only shift: one scalar moves every component
    assert err(fp.rotate_keys(k, 40, cfg, positions=old), rope64(raw, old + 40, rope, mrope_comp=comp)) < TOL


def test_identity_for_nope_and_alibi_and_refusal_of_tables():
    k = jnp.asarray(keys((1, 3, 2, 8)), jnp.float32)
    np.testing.assert_array_equal(fp.rotate_keys(k, -2, None), k)
    np.testing.assert_array_equal(fp.rotate_keys(k, -2, fp.AlibiConfig(num_heads=2)), k)
    with pytest.raises(TypeError, match=r"^rope: expected a RopeConfig.*learned or absolute position table"):
        fp.rotate_keys(k, 1, fp.PositionSpec(kind="learned", num_positions=16, dim=8))


def test_bad_input_one_line():
    cfg = fp.RopeConfig(head_dim=8, max_position_embeddings=16)
    k = jnp.zeros((1, 4, 1, 8))
    with pytest.raises(fp.PositionLimitError, match=r"asked for position 16, 1 past the end$"):
        fp.rotate_keys(k, 13, cfg)  # 3 -> 16, before compiling
    with pytest.raises(fp.PositionLimitError, match=r"asked for position -1, below the first row$"):
        fp.rotate_keys(k, -1, cfg)
    with pytest.raises(fp.PositionLimitError, match=r"asked for position 17, 2 past the end$"):
        fp.position_errors(jax.jit(lambda k, d: fp.rotate_keys(k, d, cfg)))(k, jnp.int32(14))
    with pytest.raises(ValueError, match=r"^k: expected keys shaped \(\.\.\., seq, heads, 8\).*got \(1, 4, 1, 6\)$"):
        fp.rotate_keys(jnp.zeros((1, 4, 1, 6)), 1, cfg)
    other = fp.RopeConfig(head_dim=8, partial_rotary_factor=0.5)
    with pytest.raises(
        ValueError, match=r"^to_rope: expected the keys' shape of rotation .* \(8, 8, 'half'\), got \(8, 4"
    ):
        fp.rotate_keys(k, 1, cfg, to_rope=other)
    with pytest.raises(ValueError, match=r"^delta: expected a shape that broadcasts against positions \(4,\)"):
        fp.rotate_keys(k, np.zeros(3, int), cfg)
    with pytest.raises(TypeError, match=r"^delta: expected integer positions, got dtype float"):
        fp.rotate_keys(k, 1.5, cfg)
    dyn = fp.RopeConfig(head_dim=8, rope_type="dynamic", factor=2.0, max_position_embeddings=16)
    with pytest.raises(ValueError, match=r"^seq_len: rope_type 'dynamic' depends on the sequence length"):
        jax.jit(lambda k, p: fp.rotate_keys(k, 1, dyn, positions=p))(k, jnp.arange(4))


def test_fill_and_clip_policies_for_traced_offsets():
    cfg = fp.RopeConfig(head_dim=8, max_position_embeddings=16)
    raw = keys((1, 4, 1, 8), seed=7)
    k = cached(raw, np.arange(4), cfg)
    fill = jax.jit(lambda k, d: fp.rotate_keys(k, d, cfg, on_overflow="fill"))(k, jnp.array([[0, 0, 13, 14]]))
    assert np.isnan(np.asarray(fill)[0, 3]).all() and not np.isnan(np.asarray(fill)[0, :3]).any()
    assert err(fill[0, :3], rope64(raw[0, :3], np.array([0, 1, 15]), cfg)) < TOL
    clip = jax.jit(lambda k, d: fp.rotate_keys(k, d, cfg, on_overflow="clip"))(k, jnp.int32(20))
    assert err(clip, rope64(raw, np.full(4, 15), cfg)) < TOL  # every key clamped to the last position


def test_without_lengths_a_dynamic_rope_is_taken_one_past_the_largest_position():
    """No ``seq_len``/``to_seq_len``: the length is max(positions) + 1, as ``rotary_cos_sin``. Dynamic
    NTK with 16 positions: keys at 0..3 (length 4, unscaled) moved by 13 to 13..16 (length 17 > 16:
    the base grows) equal the float64 rotation at 13..16 with the frequencies of length 17."""
    dyn = fp.RopeConfig(head_dim=8, rope_type="dynamic", factor=2.0, max_position_embeddings=16)
    raw, old = keys((1, 4, 1, 8), seed=7), np.arange(4)
    k = cached(raw, old, dyn, seq_len=4)
    want = rope64(raw, old + 13, dyn, seq_len=17)
    assert err(fp.rotate_keys(k, 13, dyn, positions=old), want) < TOL
    assert err(rope64(raw, old + 13, dyn, seq_len=16), want) > 100 * TOL  # the length matters here

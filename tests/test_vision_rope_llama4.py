"""Llama 4's vision-tower RoPE (issue 35, item 2): ``split="axial_columns_first"``, ``index_base=1``,
``suffix_tokens=1`` and the interleaved layout against float64 numpy written from
``Llama4VisionRotaryEmbedding._compute_freqs_ci`` and ``vision_apply_rotary_emb`` (not our code),
the reader's limit (exactly ``image_size // patch_size`` patches per side) and the conformance
hook against wrong readings. The parity with the tower's own modules is
``tests/test_conformance.py``'s (``llama4_vision_model``, ``llama4``)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flax_posenc as fp

CFG = fp.VisionRopeConfig(
    head_dim=16,
    split="axial_columns_first",
    layout="interleaved",
    patches_per_side=4,
    suffix_tokens=1,
    index_base=1,
)


def llama4_freqs_float64(side: int, head_dim: int, theta: float = 10000.0) -> np.ndarray:
    """``freqs_ci`` ``(side**2 + 1, head_dim // 2)`` complex128, transformers' steps in float64:
    patch ``i`` at ``x = i % side``, ``y = i // side``, the class token last (index -2, then masked
    to angle 0); ``(x + 1) f`` and ``(y + 1) f`` each repeated twice, concatenated, every other kept."""
    idx = np.concatenate([np.arange(side * side), [-2]])
    fx, fy = np.mod(idx, side), np.floor_divide(idx, side)
    freq_dim = head_dim // 2
    rope_freq = 1.0 / theta ** (np.arange(0, freq_dim, 2)[: freq_dim // 2] / freq_dim)
    ax = np.repeat((fx + 1)[:, None] * rope_freq, 2, axis=-1)
    ay = np.repeat((fy + 1)[:, None] * rope_freq, 2, axis=-1)
    angle = np.concatenate([ax, ay], -1)[:, ::2]
    angle[idx < 0] = 0.0
    return np.exp(1j * angle)


def test_cos_sin_and_rotation_equal_float64():
    freqs = llama4_freqs_float64(4, 16)
    positions = CFG.positions([[1, 4, 4]])
    cos, sin = jax.jit(lambda: fp.vision_rope_cos_sin(positions, CFG))()
    assert np.abs(np.asarray(cos, np.float64) - freqs.real[:-1]).max() <= 2**-23
    assert np.abs(np.asarray(sin, np.float64) - freqs.imag[:-1]).max() <= 2**-23
    x = np.random.default_rng(0).normal(size=(2, 17, 3, 16))  # (batch, tokens, heads, head_dim)
    pairs = x.reshape(2, 17, 3, 8, 2)
    ref = pairs[..., 0] + 1j * pairs[..., 1]
    ref = ref * freqs[None, :, None, :]
    ref = np.stack([ref.real, ref.imag], -1).reshape(x.shape)
    out = jax.jit(lambda x: fp.apply_vision_rope(x, CFG, positions))(jnp.asarray(x, jnp.float32))
    assert np.abs(np.asarray(out, np.float64) - ref).max() <= 1e-5 * np.abs(ref).max()
    assert np.array_equal(np.asarray(out)[:, -1], np.asarray(x[:, -1], np.float32))  # the class token: not rotated
    # Hugging Face's (batch, heads, tokens, head_dim)
    hf = jax.jit(lambda x: fp.apply_vision_rope(x, CFG, positions, seq_axis=-2))(
        jnp.asarray(x, jnp.float32).swapaxes(1, 2)
    )
    assert np.array_equal(np.asarray(hf).swapaxes(1, 2), np.asarray(out))


def test_index_base_leaves_the_limit_counted_from_zero():
    assert CFG.limit == 4
    with pytest.raises(fp.PositionLimitError, match="holds 4 positions"):
        fp.vision_rope_cos_sin(np.array([[0, 4]]), CFG)
    cos, _ = fp.vision_rope_cos_sin(np.array([[0, 3]]), CFG)
    axis, inv = CFG.frequencies()
    assert np.allclose(np.asarray(cos, np.float64)[0], np.cos(np.where(axis == 1, 4, 1) * inv), atol=2**-23)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"suffix_tokens": -1}, "suffix_tokens: expected a non-negative integer, got -1"),
        ({"index_base": True}, "index_base: expected a non-negative integer, got True"),
        (
            {"index_base": 1, "coordinates": "normalized"},
            "index_base: expected 0 with coordinates 'normalized' (an offset of integer indices), got 1",
        ),
    ],
)
def test_bad_config_is_one_line(kwargs, message):
    with pytest.raises(ValueError) as info:
        fp.VisionRopeConfig(head_dim=16, **kwargs)
    assert str(info.value) == message


def test_token_count_names_the_suffix():
    with pytest.raises(ValueError) as info:
        fp.apply_vision_rope(jnp.ones((16, 2, 16)), CFG, CFG.positions([[1, 4, 4]]))
    assert str(info.value) == (
        "x: expected 17 tokens on axis -3 (0 prefix tokens + 16 patches + 1 suffix tokens), got shape (16, 2, 16)"
    )


def _llama4_config(tmp_path):
    vision = {"model_type": "llama4_vision_model", "hidden_size": 1408, "num_attention_heads": 16}
    vision.update(image_size=336, patch_size=14, rope_parameters={"rope_type": "default", "rope_theta": 10000})
    (tmp_path / "config.json").write_text(json.dumps(vision))
    return tmp_path


def test_reader_and_image_size_check(tmp_path, capsys):
    from flax_posenc.conversion import inspect_source
    from flax_posenc.report.cli import main

    record = inspect_source(_llama4_config(tmp_path)).mechanisms[0].record
    assert record.config == fp.VisionRopeConfig(
        head_dim=88,
        split="axial_columns_first",
        layout="interleaved",
        patches_per_side=24,
        suffix_tokens=1,
        index_base=1,
    )
    assert (record.grid_side, record.grid_key, record.grid_convention) == (24, "positional_embedding_vlm", "fixed")
    assert record.check_image_size(336)[0]
    fits, line = record.check_image_size(322)
    assert not fits and line.endswith(
        "a 322 x 322 px image is 23 x 23 patches, not 24 x 24 (its processor tiles an image to 336 px tiles)"
    )
    assert main(["check", str(tmp_path), "--image-size", "336"]) == 0
    assert capsys.readouterr().out.strip().endswith("a 336 x 336 px image fits (24 x 24 patches)")
    assert main(["check", str(tmp_path), "--image-size", "350x336"]) == 1
    assert "not 24 x 24" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("row", "model_type", "change", "starts"),
    [
        ("llama4", "llama4_vision_model", {"split": "axial"}, "vision RoPE cos differs from freqs_ci"),
        ("llama4", "llama4_vision_model", {"index_base": 0}, "vision RoPE cos differs from freqs_ci"),
        ("llama4", "llama4_vision_model", {"layout": "half"}, "vision_apply_rotary_emb(q) differs"),
        ("step3p5", "step3p5_vision", {"split": "axial"}, "vision RoPE cos differs from the rotary module's"),
        ("step3p5", "step3p5_vision", {"grid_convention": "big_vision"}, "vision learned grid differs"),
    ],
)
def test_conformance_notices_a_wrong_reading(tmp_path, monkeypatch, row, model_type, change, starts):
    """The hook is not vacuous: Llama 4's tower read with rows first, 0-based indices or rotate_half
    pairs, and Step 3.5's with rows first or its grid resampled with the corners aligned, disagree
    with their own rotary module, apply function or grid."""
    import dataclasses

    from conformance.reference import conformance_problems

    from flax_posenc.conversion import vision_rope
    from flax_posenc.conversion.mechanisms import MECHANISMS

    rows = dict(vision_rope.VISION_ROPE_FAMILIES)
    rows[row] = dataclasses.replace(rows[row], **change)
    kind = dataclasses.replace(MECHANISMS["vision_rope"], registries=(("test", rows),))
    monkeypatch.setattr(MECHANISMS, "_kinds", {**MECHANISMS._kinds, "vision_rope": kind})
    monkeypatch.setattr(MECHANISMS, "_derived", {})
    problems = conformance_problems(model_type, tmp_path)
    assert problems and any(p.startswith(starts) for p in problems), problems
